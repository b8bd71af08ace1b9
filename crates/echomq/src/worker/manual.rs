//! Manual processing: taking and finishing jobs without the Worker loop, as
//! BullMQ's `worker.getNextJob(token)` with `job.moveToCompleted`,
//! `job.moveToFailed`, `job.moveToDelayed`, `job.moveToWaitingChildren` and
//! `job.extendLock` (docs/worker.md §Manual processing).
//!
//! The caller owns the token and the lock: nothing renews it, so a job held
//! longer than the lock duration must be extended with
//! [`ManualJob::extend_lock`], or the stalled checker takes it back.

use std::time::Duration;

use echomq_protocol::call::flow::{MoveToWaitingChildren, WaitOutcome};
use echomq_protocol::call::lifecycle::{
    DelayKind, EpochMs, ExtendLock, MoveToActive, NextJob, Refusal, Verdict,
};
use echomq_protocol::packing::FetchOpts;
use serde_json::Value;

use super::finish::backoff;
use super::finish::transition::{self, failed_attempt, Finishing, Ran, Transition};
use super::options::WorkerOptions;
use crate::error::{Error, Result};
use crate::queue::handle::Queue;
use echomq_protocol::Job;

/// Takes jobs of one queue for a caller that runs its own loop.
#[derive(Debug, Clone)]
pub struct ManualWorker {
    queue: Queue,
    options: WorkerOptions,
}

/// What [`ManualWorker::get_next_job`] found.
#[derive(Debug)]
pub enum Fetched {
    /// A job, now active and locked with the caller's token.
    Job(Box<ManualJob>),
    /// The rate limiter allows no start for this long.
    RateLimited(Duration),
    /// Nothing ready (empty, paused, or at the global concurrency).
    Empty,
}

/// An active job held by a token: finish it, delay it, or extend its lock.
#[derive(Debug)]
pub struct ManualJob {
    worker: ManualWorker,
    job: Job,
    token: String,
}

/// What [`ManualJob::move_to_waiting_children`] did.
#[derive(Debug)]
pub enum ManualParking {
    /// The job waits in `waiting-children`; its lock is released, so the
    /// handle is gone. When its last child finishes it goes back to `wait`
    /// and is taken again like any job.
    Parked,
    /// No child is pending: the job stays active and the handle, with its
    /// token, comes back.
    StillHeld(Box<ManualJob>),
}

impl ManualWorker {
    /// A manual worker; of `options` it uses the lock duration, name,
    /// limiter, retention, metrics, backoff strategy and max started attempts.
    pub fn new(queue: Queue, options: WorkerOptions) -> Result<Self> {
        if options.lock_duration.is_zero() {
            return Err(Error::Config("lock_duration must be positive".into()));
        }
        if let Some(limit) = &options.limiter {
            limit.validate()?;
        }
        Ok(Self { queue, options })
    }

    fn fetch_opts<'a>(&'a self, token: &'a str) -> FetchOpts<'a> {
        transition::fetch_opts(&self.options, token)
    }

    /// Takes the next ready job and locks it with `token` (moveToActive);
    /// does not block when there is none.
    pub async fn get_next_job(&self, token: &str) -> Result<Fetched> {
        if token.is_empty() || token == "0" {
            // "0" is the wire's "take without a lock".
            return Err(Error::Config("a manual job needs a lock token".into()));
        }
        let call = MoveToActive {
            keys: self.queue.keys(),
            now: EpochMs(crate::clock::now_ms()),
            fetch: self.fetch_opts(token),
        };
        let next = self.queue.connection().call(&call).await?;
        self.adopt(next, token)
    }

    fn adopt(&self, next: NextJob, token: &str) -> Result<Fetched> {
        Ok(match next {
            NextJob::Job { id, fields } => {
                let job = fields.to_job(&id)?;
                Fetched::Job(Box::new(ManualJob {
                    worker: self.clone(),
                    job,
                    token: token.to_owned(),
                }))
            }
            NextJob::RateLimited(d) => Fetched::RateLimited(d),
            NextJob::DelayedUntil(_) | NextJob::Nothing => Fetched::Empty,
        })
    }
}

impl ManualJob {
    /// The job as taken.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The token its lock holds.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Renews the lock for `duration`; false when the lock is no longer ours.
    pub async fn extend_lock(&self, duration: Duration) -> Result<bool> {
        let call = ExtendLock {
            keys: self.worker.queue.keys(),
            id: &self.job.id,
            token: &self.token,
            duration,
        };
        self.worker.queue.connection().call(&call).await
    }

    /// Runs `t` on this job, the way the Worker's slots do.
    async fn run(&self, t: &Transition, fetch_next: bool) -> Result<Ran> {
        let finishing = Finishing {
            keys: self.worker.queue.keys(),
            job: &self.job,
            token: &self.token,
            options: &self.worker.options,
            now: EpochMs(crate::clock::now_ms()),
            fetch_next,
        };
        finishing.run(self.worker.queue.connection(), t).await
    }

    fn next_of(&self, script: &'static str, ran: Ran) -> Result<Option<Fetched>> {
        match ran.verdict {
            Verdict::Done(Some(next)) => self.worker.adopt(next, &self.token).map(Some),
            Verdict::Done(None) => Ok(None),
            Verdict::Refused(r) => Err(refused(script, r)),
        }
    }

    /// Completes the job with `value` as its return value (moveToFinished);
    /// with `fetch_next` the next job is taken with the same token in the same
    /// call. A lock no longer ours is an error, and nothing changes.
    pub async fn move_to_completed(
        self,
        value: &Value,
        fetch_next: bool,
    ) -> Result<Option<Fetched>> {
        let ran = self.run(&Transition::complete(value), fetch_next).await?;
        self.next_of("moveToFinished", ran)
    }

    /// Records a failed attempt as BullMQ's `job.moveToFailed`: retried at
    /// once or after its backoff while attempts remain (custom types through
    /// the worker's backoff strategy), else failed for good with `reason`.
    /// Answers the next job only when it failed for good with `fetch_next`.
    pub async fn move_to_failed(self, reason: &str, fetch_next: bool) -> Result<Option<Fetched>> {
        let strategy = self.worker.options.backoff_strategy.as_ref();
        let no_retry = backoff::started_too_often(
            self.worker.options.max_started_attempts,
            self.job.attempts_started,
        );
        let (t, _) = failed_attempt(&self.job, reason, None, no_retry, strategy);
        let (script, fetch_next) = match &t {
            Transition::Retry { .. } => ("retryJob", false),
            Transition::Delay { .. } => ("moveToDelayed", false),
            _ => ("moveToFinished", fetch_next),
        };
        let ran = self.run(&t, fetch_next).await?;
        self.next_of(script, ran)
    }

    /// Parks the job in `delayed` until `timestamp_ms` without counting an
    /// attempt (BullMQ's `job.moveToDelayed(timestamp, token)`).
    pub async fn move_to_delayed(self, timestamp_ms: u64) -> Result<()> {
        let now = crate::clock::now_ms();
        let t = Transition::Delay {
            delay: Duration::from_millis(timestamp_ms.saturating_sub(now)),
            kind: DelayKind::Requested,
            fields: Vec::new(),
        };
        let ran = self.run(&t, false).await?;
        self.next_of("moveToDelayed", ran).map(|_| ())
    }
}

impl ManualJob {
    /// Puts the job back at the head of `wait` (of its priority when it has
    /// one) without counting an attempt, as BullMQ's `job.moveToWait(token)`
    /// after a manual rate limit (moveJobFromActiveToWait). Answers the rate
    /// limiter's remaining window (zero when there is none): fetch nothing
    /// before it ends.
    pub async fn move_to_wait(self) -> Result<Duration> {
        let ran = self.run(&Transition::ToWait, false).await?;
        match ran.verdict {
            Verdict::Done(_) => Ok(ran.limited_for.unwrap_or(Duration::ZERO)),
            Verdict::Refused(r) => Err(refused("moveJobFromActiveToWait", r)),
        }
    }

    /// Parks the job in `waiting-children` while it has pending children (or
    /// while the child with full key `child_key` is pending), as BullMQ's
    /// `job.moveToWaitingChildren(token, { child })`: BullMQ's `true` is
    /// [`ManualParking::Parked`], its `false` is
    /// [`ManualParking::StillHeld`]. A lock no longer ours, or a child that
    /// failed its parent (`JobHasFailedChildren`), is an error, and nothing
    /// changes.
    pub async fn move_to_waiting_children(self, child_key: Option<&str>) -> Result<ManualParking> {
        let call = MoveToWaitingChildren {
            keys: self.worker.queue.keys(),
            id: &self.job.id,
            token: &self.token,
            child_key,
            timestamp: crate::clock::now_ms(),
        };
        Ok(match self.worker.queue.connection().call(&call).await? {
            WaitOutcome::Parked => ManualParking::Parked,
            WaitOutcome::NothingPending => ManualParking::StillHeld(Box::new(self)),
        })
    }
}

fn refused(script: &'static str, r: Refusal) -> Error {
    Error::Script {
        script,
        code: r.code(),
    }
}
