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
    DelayKind, EpochMs, ExtendLock, FinishTarget, MoveJobFromActiveToWait, MoveToActive,
    MoveToDelayed, MoveToFinished, NextJob, PushEnd, Refusal, RetryJob, Verdict,
};
use echomq_protocol::job::field;
use echomq_protocol::packing::{FetchOpts, FinishOpts, MetricsSize};
use echomq_protocol::KeepJobs;
use serde_json::Value;

use super::backoff::{self, RetryDecision};
use super::backoff_strategy;
use super::{limiter, WorkerOptions};
use crate::error::{Error, Result};
use crate::{Job, Queue};

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
        FetchOpts {
            token,
            lock_duration: ms(self.options.lock_duration),
            limiter: limiter::wire(&self.options),
            name: self.options.name.as_deref(),
        }
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
                let job = Job::from_fields(&id, fields.iter())?;
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

    fn finish_opts<'a>(&'a self, target: FinishTarget) -> FinishOpts<'a> {
        let o = &self.worker.options;
        let (job_keep, worker_keep) = match target {
            FinishTarget::Completed => (&self.job.opts.remove_on_complete, &o.remove_on_complete),
            FinishTarget::Failed => (&self.job.opts.remove_on_fail, &o.remove_on_fail),
        };
        FinishOpts {
            token: &self.token,
            name: o.name.as_deref(),
            keep_jobs: KeepJobs::to_finish_keep_jobs(job_keep.as_ref().or(worker_keep.as_ref())),
            limiter: limiter::wire(o),
            lock_duration: ms(o.lock_duration),
            attempts: self.job.opts.attempts.unwrap_or(0),
            max_metrics_size: match o.max_metrics_size {
                Some(n) => MetricsSize::Points(n),
                None => MetricsSize::Off,
            },
        }
    }

    async fn finish(
        self,
        target: FinishTarget,
        value: &str,
        fields: &[(&str, String)],
        fetch_next: bool,
    ) -> Result<Option<Fetched>> {
        let call = MoveToFinished {
            keys: self.worker.queue.keys(),
            id: &self.job.id,
            now: EpochMs(crate::clock::now_ms()),
            target,
            value,
            fetch_next,
            opts: self.finish_opts(target),
            fields,
        };
        let verdict = self.worker.queue.connection().call(&call).await?;
        self.next_of("moveToFinished", verdict)
    }

    fn next_of(
        &self,
        script: &'static str,
        v: Verdict<Option<NextJob>>,
    ) -> Result<Option<Fetched>> {
        match v {
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
        let value = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
        self.finish(FinishTarget::Completed, &value, &[], fetch_next)
            .await
    }

    /// Records a failed attempt as BullMQ's `job.moveToFailed`: retried at
    /// once or after its backoff while attempts remain (custom types through
    /// the worker's backoff strategy), else failed for good with `reason`.
    /// Answers the next job only when it failed for good with `fetch_next`.
    pub async fn move_to_failed(self, reason: &str, fetch_next: bool) -> Result<Option<Fetched>> {
        let mut traces: Vec<Value> = self
            .job
            .stacktrace
            .iter()
            .cloned()
            .map(Value::String)
            .collect();
        traces.push(Value::String(format!("Error: {reason}")));
        if let Some(limit) = self.job.opts.stack_trace_limit {
            let drop_n = traces.len().saturating_sub(limit as usize);
            traces.drain(..drop_n);
        }
        let fields = vec![
            (field::FAILED_REASON, reason.to_owned()),
            (field::STACKTRACE, Value::Array(traces).to_string()),
        ];
        let decision = backoff::decide(
            self.job.attempts_made,
            self.job.opts.attempts.unwrap_or(0),
            self.job.opts.backoff.as_ref(),
            backoff::started_too_often(
                self.worker.options.max_started_attempts,
                self.job.attempts_started,
            ),
            rand::random::<f64>(),
        );
        let strategy = self.worker.options.backoff_strategy.as_ref();
        let conn = self.worker.queue.connection().clone();
        let keys = self.worker.queue.keys();
        let now = EpochMs(crate::clock::now_ms());
        match backoff_strategy::apply(decision, strategy, &self.job, reason) {
            RetryDecision::Now => {
                let call = RetryJob {
                    keys,
                    now,
                    push: if self.job.opts.lifo {
                        PushEnd::Front
                    } else {
                        PushEnd::Back
                    },
                    id: &self.job.id,
                    token: &self.token,
                    fields: &fields,
                };
                match conn.call(&call).await? {
                    Verdict::Done(()) => Ok(None),
                    Verdict::Refused(r) => Err(refused("retryJob", r)),
                }
            }
            RetryDecision::After(delay) => {
                let call = MoveToDelayed {
                    keys,
                    now,
                    id: &self.job.id,
                    token: &self.token,
                    delay: Duration::from_millis(delay),
                    kind: DelayKind::Retry,
                    fields: &fields,
                    fetch_next: None,
                };
                let v = conn.call(&call).await?;
                self.next_of("moveToDelayed", v)
            }
            RetryDecision::Fail | RetryDecision::UnknownStrategy => {
                self.finish(FinishTarget::Failed, reason, &fields, fetch_next)
                    .await
            }
        }
    }

    /// Parks the job in `delayed` until `timestamp_ms` without counting an
    /// attempt (BullMQ's `job.moveToDelayed(timestamp, token)`).
    pub async fn move_to_delayed(self, timestamp_ms: u64) -> Result<()> {
        let now = crate::clock::now_ms();
        let call = MoveToDelayed {
            keys: self.worker.queue.keys(),
            now: EpochMs(now),
            id: &self.job.id,
            token: &self.token,
            delay: Duration::from_millis(timestamp_ms.saturating_sub(now)),
            kind: DelayKind::Requested,
            fields: &[],
            fetch_next: None,
        };
        let v = self.worker.queue.connection().call(&call).await?;
        self.next_of("moveToDelayed", v).map(|_| ())
    }
}

impl ManualJob {
    /// Puts the job back at the head of `wait` (of its priority when it has
    /// one) without counting an attempt, as BullMQ's `job.moveToWait(token)`
    /// after a manual rate limit (moveJobFromActiveToWait). Answers the rate
    /// limiter's remaining window (zero when there is none): fetch nothing
    /// before it ends.
    pub async fn move_to_wait(self) -> Result<Duration> {
        let call = MoveJobFromActiveToWait {
            keys: self.worker.queue.keys(),
            id: &self.job.id,
            token: &self.token,
        };
        match self.worker.queue.connection().call(&call).await? {
            Verdict::Done(window) => Ok(window.unwrap_or(Duration::ZERO)),
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

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
