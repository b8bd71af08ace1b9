//! The handle on a job this worker holds: it owns the lock token, and every
//! way of letting the job go consumes it, so a job cannot be finished twice.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::lifecycle::{
    DelayKind, EpochMs, FinishTarget, JobFields, MoveToFinished, NextJob, Refusal, Verdict,
};
use echomq_protocol::job::field;
use echomq_protocol::packing::FinishOpts;
use echomq_protocol::{KeepJobs, ScriptErrorCode};
use fred::prelude::{HashesInterface, KeysInterface};
use tokio_util::sync::CancellationToken;

use super::transition::{Finishing, Transition, TransitionCall};
use crate::error::{Error, Result};
use crate::locks::seam::{CancelReason, Held};
use crate::worker::process::processor::{attempt_number, JobContext};
use crate::worker::shared::WorkerShared;
use echomq_protocol::Job;

/// A job taken by this worker, locked with the token the handle owns.
///
/// Each finishing method takes `self`: once called, the handle is gone, and
/// the token with it. Dropping the handle without finishing abandons the job:
/// its lock stops being renewed, nothing is written, and the stalled checker
/// recovers it once the lock expires.
pub struct ActiveJob {
    core: Arc<WorkerShared>,
    job: Arc<Job>,
    held: Held,
    done: bool,
    /// The `finishedOn` a finish was first sent with (0: none sent yet): a
    /// resend after a lost reply carries it again, so the job hash tells
    /// whether the first send was applied (docs/decisions.md §16).
    finish_sent_at: AtomicU64,
}

impl fmt::Debug for ActiveJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveJob")
            .field("queue", &self.core.keys().name())
            .field("id", &self.job.id)
            .field("attempt", &self.attempt())
            .finish()
    }
}

/// What a finishing call did.
#[derive(Debug)]
#[non_exhaustive]
pub enum FinishOutcome {
    /// The job left `active` as asked. `next` is the job the same call took
    /// for this slot (fetch-next), already locked and tracked.
    Done {
        /// The next job, when one was fetched.
        next: Option<ActiveJob>,
    },
    /// The lock was missing (`-2`, expired) or held by another token (`-6`):
    /// this worker no longer owns the job and changed nothing. Never retried.
    LockLost {
        /// The job.
        job_id: String,
        /// `JobLockNotExist` or `JobLockMismatch`.
        code: ScriptErrorCode,
    },
    /// The job was not in `active` (`-3`); its lock was already released by
    /// this call (the script checks the list after the lock).
    NotActive {
        /// The job.
        job_id: String,
    },
    /// The job hash no longer exists (`-1`).
    Missing {
        /// The job.
        job_id: String,
    },
    /// Completion refused before the lock was touched (`-4` pending children,
    /// `-9` failed children): the job is still held, and handed back.
    Refused {
        /// The handle, still owning the lock.
        job: ActiveJob,
        /// The refusal.
        code: ScriptErrorCode,
    },
}

/// A finishing call that failed before a verdict (connection or Redis
/// error): whether it ran is unknown, so the handle comes back for a retry.
#[derive(Debug)]
pub struct FinishFailed {
    /// The handle, still owning the token.
    pub job: ActiveJob,
    /// What went wrong.
    pub error: Error,
}

impl ActiveJob {
    /// A next-job reply (from moveToActive or fetch-next): the job it carries
    /// as a tracked handle, or its hints given to the fetcher.
    pub(crate) fn take(core: &Arc<WorkerShared>, reply: NextJob, token: Arc<str>) -> Option<Self> {
        match reply {
            NextJob::Job { id, fields } => match Self::adopt(core, &id, fields, token.clone()) {
                Ok(job) => Some(job),
                Err(e) => {
                    fail_undecodable(core, id, token, e.to_string());
                    None
                }
            },
            other => {
                core.hints().no_job(&other);
                None
            }
        }
    }

    /// The job is tracked before it is decoded, so no renewal is missed.
    fn adopt(
        core: &Arc<WorkerShared>,
        id: &str,
        fields: JobFields,
        token: Arc<str>,
    ) -> Result<Self> {
        let held = core.seam().track(id, token.clone());
        core.counters().fetched();
        match fields.to_job(id) {
            Ok(job) => {
                core.telemetry().job_started(&job);
                Ok(ActiveJob {
                    core: core.clone(),
                    job: Arc::new(job),
                    held,
                    done: false,
                    finish_sent_at: AtomicU64::new(0),
                })
            }
            Err(e) => {
                core.seam().untrack(id, &token);
                Err(Error::Decode(e))
            }
        }
    }

    /// The job as read when it was taken.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// Replaces the data the processor will see (a decoded payload).
    #[cfg(feature = "codec")]
    pub(crate) fn replace_data(&mut self, data: serde_json::Value) {
        Arc::make_mut(&mut self.job).data = data;
    }

    pub(crate) fn job_arc(&self) -> Arc<Job> {
        self.job.clone()
    }

    /// The job id.
    pub fn id(&self) -> &str {
        &self.job.id
    }

    /// The lock token.
    pub fn token(&self) -> &str {
        self.held.token()
    }

    pub(crate) fn core(&self) -> &Arc<WorkerShared> {
        &self.core
    }

    pub(crate) fn token_arc(&self) -> Arc<str> {
        self.held.token().clone()
    }

    /// This attempt's number, from 1 (as [`JobContext::attempt`](crate::worker::JobContext::attempt)).
    pub fn attempt(&self) -> u64 {
        attempt_number(&self.job)
    }

    /// Cancelled when the worker gives the job up (lock lost, close deadline).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.held.cancellation_token().clone()
    }

    /// What the processor sees of this job.
    pub(crate) fn context(&self) -> JobContext {
        JobContext {
            job: self.job_arc(),
            queue: self.core.queue_arc(),
            token: self.token_arc(),
            cancel: self.cancellation_token(),
            worker: self.core.name().cloned(),
        }
    }

    /// Cancels the processor with `reason` (the first reason given stays).
    pub(crate) fn cancel(&self, reason: CancelReason) {
        self.held.cancel(reason);
    }

    pub(crate) fn cancel_reason(&self) -> CancelReason {
        self.held.cancel_reason()
    }

    /// Completes the job with `value` as its return value (moveToFinished,
    /// `completed`), optionally taking the next job in the same call.
    pub async fn complete(
        self,
        value: serde_json::Value,
        fetch_next: bool,
    ) -> Result<FinishOutcome, Box<FinishFailed>> {
        self.apply(&Transition::complete(&value), fetch_next).await
    }

    /// Fails the job for good (moveToFinished, `failed`) with `reason` as
    /// `failedReason`.
    pub async fn fail(
        self,
        reason: &str,
        fetch_next: bool,
    ) -> Result<FinishOutcome, Box<FinishFailed>> {
        let fields = vec![(field::FAILED_REASON, reason.to_owned())];
        self.apply(
            &Transition::Fail {
                reason: reason.to_owned(),
                fields,
            },
            fetch_next,
        )
        .await
    }

    /// Moves the job to `delayed` for `delay_ms` (moveToDelayed). With
    /// `skip_attempt` no attempt is counted (a processor-requested delay).
    pub async fn delay(
        self,
        delay_ms: u64,
        skip_attempt: bool,
        fetch_next: bool,
    ) -> Result<FinishOutcome, Box<FinishFailed>> {
        let kind = if skip_attempt {
            DelayKind::Requested
        } else {
            DelayKind::Retry
        };
        let t = Transition::Delay {
            delay: Duration::from_millis(delay_ms),
            kind,
            fields: Vec::new(),
        };
        self.apply(&t, fetch_next).await
    }

    /// Puts the job back in `wait` counting an attempt (retryJob).
    pub async fn retry(self) -> Result<FinishOutcome, Box<FinishFailed>> {
        self.apply(&Transition::Retry { fields: Vec::new() }, false)
            .await
    }

    /// Puts the job back at the front of `wait` without counting an attempt
    /// (moveJobFromActiveToWait).
    pub async fn move_to_wait(self) -> Result<FinishOutcome, Box<FinishFailed>> {
        self.apply(&Transition::ToWait, false).await
    }

    /// Lets the job go without writing anything; the stalled checker
    /// recovers it once its lock expires.
    pub fn abandon(self) {}

    pub(crate) async fn apply(
        self,
        t: &Transition,
        fetch_next: bool,
    ) -> Result<FinishOutcome, Box<FinishFailed>> {
        // Renewal stops before the call, as in BullMQ: a renewal racing with
        // the transition would report a lock the transition just released.
        let seam = self.core.seam();
        seam.untrack(&self.job.id, self.held.token());
        match self.call(t, fetch_next).await {
            Ok(verdict) => Ok(self.interpret(t, verdict)),
            Err(error) => {
                if self.finish_sent_at.load(Ordering::Relaxed) != 0 {
                    self.held.set_finish_unknown();
                }
                seam.retrack(&self.job.id, &self.held);
                Err(Box::new(FinishFailed { job: self, error }))
            }
        }
    }

    /// Runs the transitions of several held jobs in one pipelined round trip
    /// (no fetch-next), with the effects of one call per job; each answer is
    /// the job's own, as [`apply`](Self::apply) gives it.
    pub(crate) async fn apply_batch(
        items: Vec<(ActiveJob, Transition)>,
    ) -> Vec<Result<FinishOutcome, Box<FinishFailed>>> {
        let Some(core) = items.first().map(|(j, _)| j.core.clone()) else {
            return Vec::new();
        };
        let now = now(&core);
        let replies = {
            let finishing: Vec<Finishing> = items
                .iter()
                .map(|(job, _)| {
                    core.seam().untrack(&job.job.id, job.held.token());
                    Finishing {
                        keys: core.keys(),
                        job: &job.job,
                        token: job.token(),
                        options: core.opts(),
                        now,
                        fetch_next: false,
                    }
                })
                .collect();
            let calls: Vec<TransitionCall> = finishing
                .iter()
                .zip(&items)
                .map(|(f, (_, t))| f.call(t))
                .collect();
            core.conn().call_batch(&calls).await
        };
        items
            .into_iter()
            .zip(replies)
            .map(|((job, t), reply)| match reply {
                Ok((verdict, _)) => Ok(job.interpret(&t, verdict)),
                Err(error) => {
                    core.seam().retrack(&job.job.id, &job.held);
                    Err(Box::new(FinishFailed { job, error }))
                }
            })
            .collect()
    }

    async fn call(&self, t: &Transition, fetch_next: bool) -> Result<Verdict<Option<NextJob>>> {
        let first_sent = self.finish_sent_at.load(Ordering::Relaxed);
        let now = match (t.finishes(), first_sent) {
            (true, 0) => {
                let now = now(&self.core);
                self.finish_sent_at.store(now.0, Ordering::Relaxed);
                now
            }
            (true, at) => EpochMs(at),
            (false, _) => now(&self.core),
        };
        let finishing = Finishing {
            keys: self.core.keys(),
            job: &self.job,
            token: self.token(),
            options: self.core.opts(),
            now,
            fetch_next,
        };
        let mut grouped = false;
        let verdict = match (self.core.finisher(), finishing.finish_of(t)) {
            (Some(finisher), Some(call)) => {
                grouped = true;
                let dag = self
                    .job
                    .opts
                    .extra
                    .contains_key(echomq_protocol::call::dag::DAG_NODE_OPTION);
                finisher.finish(self.core.conn(), &call, dag).await?
            }
            _ => {
                let ran = finishing.run(self.core.conn(), t).await?;
                if let (Transition::ToWait, Some(window)) = (t, ran.limited_for) {
                    if !window.is_zero() {
                        // The limiter's remaining window: no fetching before it ends.
                        self.core.hints().rate_limited_for(window);
                    }
                }
                ran.verdict
            }
        };
        let lock_missing = Verdict::Refused(Refusal::LockLost(ScriptErrorCode::JobLockNotExist));
        // A resend refused because the lock or the whole job is gone: the
        // first send may have finished it (and retention removed the hash).
        // So may a group call that Redis failed part-way (foreign data in a
        // later entry: a script's writes stay), whose entries the finisher
        // then sent again one by one.
        let gone = verdict == lock_missing || verdict == Verdict::Refused(Refusal::Missing);
        // The first send's time is kept until that check has answered: were
        // its read to fail on the connection, the retry must still look for
        // the first send's `finishedOn`, not for a time of its own.
        if (first_sent != 0 || grouped) && gone && Box::pin(self.applied_before(t, now)).await? {
            self.finish_sent_at.store(0, Ordering::Relaxed);
            // The send whose reply was lost did it (and released the lock).
            return Ok(Verdict::Done(None));
        }
        // A reply came: a later finish of this handle (a completion refused
        // for its children, then failed) is a send of its own.
        self.finish_sent_at.store(0, Ordering::Relaxed);
        Ok(verdict)
    }

    /// After a resend answered "lock missing" or "job missing": whether the
    /// first send applied this very finish, rather than the lock having
    /// expired. The job hash answers when it is still there (its
    /// `finishedOn` and value, one HMGET); when retention removed it, the
    /// events stream does (a rare path, bounded: see [`Self::finished_in_stream`]).
    async fn applied_before(&self, t: &Transition, sent_at: EpochMs) -> Result<bool> {
        let (field, value) = match t {
            Transition::Complete(value) => (field::RETURN_VALUE, value.as_str()),
            Transition::Fail { reason, .. } => (field::FAILED_REASON, reason.as_str()),
            _ => return Ok(false),
        };
        let finished_here = self.finished_in_hash(field, value, sent_at).await?;
        match finished_here {
            Some(answer) => Ok(answer),
            None => self.finished_in_stream(t, value, sent_at).await,
        }
    }

    /// `Some(answer)` from the job hash, `None` when the hash is gone.
    async fn finished_in_hash(
        &self,
        field: &str,
        value: &str,
        sent_at: EpochMs,
    ) -> Result<Option<bool>> {
        let found: Vec<Option<String>> = self
            .core
            .conn()
            .pool()
            .next()
            .hmget(
                self.core.keys().job(&self.job.id),
                vec![field::FINISHED_ON, field],
            )
            .await?;
        if found.iter().all(Option::is_none) {
            let exists: bool = self
                .core
                .conn()
                .pool()
                .next()
                .exists(self.core.keys().job(&self.job.id))
                .await?;
            if !exists {
                return Ok(None);
            }
        }
        let sent = sent_at.0.to_string();
        Ok(Some(
            found.first().and_then(Option::as_deref) == Some(sent.as_str())
                && found.get(1).and_then(Option::as_deref) == Some(value),
        ))
    }

    /// Whether the events stream holds this finish's `completed` (or
    /// `failed`) entry for this job with this value, written at or after the
    /// first send. Read forward from just before the first send in pages of
    /// [`STREAM_PAGE`], at most [`STREAM_PAGES`] of them and no further than
    /// [`STREAM_WINDOW`] past it: a resend follows its lost reply within a
    /// reconnect, so the entry is near the start. Not found (the stream was
    /// trimmed past it, or a flood of events pushed it beyond the bound) is
    /// "not applied": the worker then reports the lock lost, as it did
    /// before this check existed.
    async fn finished_in_stream(
        &self,
        t: &Transition,
        value: &str,
        sent_at: EpochMs,
    ) -> Result<bool> {
        use fred::prelude::StreamsInterface;
        let (event, value_field) = match t {
            Transition::Complete(_) => ("completed", "returnvalue"),
            _ => ("failed", "failedReason"),
        };
        let stream = self.core.keys().events();
        let end = format!(
            "{}",
            sent_at.0.saturating_add(STREAM_WINDOW.as_millis() as u64)
        );
        let mut start = format!(
            "{}",
            sent_at.0.saturating_sub(STREAM_SLACK.as_millis() as u64)
        );
        for _ in 0..STREAM_PAGES {
            let page: Vec<(String, std::collections::HashMap<String, String>)> = self
                .core
                .conn()
                .pool()
                .next()
                .xrange(&stream, start.as_str(), end.as_str(), Some(STREAM_PAGE))
                .await?;
            let full = page.len() as u64 == STREAM_PAGE;
            for (_, fields) in &page {
                if fields.get("event").map(String::as_str) == Some(event)
                    && fields.get("jobId") == Some(&self.job.id)
                    && fields.get(value_field).map(String::as_str) == Some(value)
                {
                    return Ok(true);
                }
            }
            match page.last() {
                Some((id, _)) if full => start = format!("({id}"),
                _ => break,
            }
        }
        Ok(false)
    }

    fn interpret(mut self, t: &Transition, verdict: Verdict<Option<NextJob>>) -> FinishOutcome {
        let refusal = match verdict {
            Verdict::Done(next) => return self.done_with(t, next),
            Verdict::Refused(r) => r,
        };
        if refusal.keeps_lock() {
            // Refused before the lock was touched: still ours.
            self.core.seam().retrack(&self.job.id, &self.held);
            return FinishOutcome::Refused {
                job: self,
                code: refusal.code(),
            };
        }
        self.done = true;
        // Only a refusal reports the id: the usual path (done) copies nothing.
        let job_id = self.job.id.clone();
        match refusal {
            Refusal::LockLost(code) => FinishOutcome::LockLost { job_id, code },
            Refusal::NotActive => FinishOutcome::NotActive { job_id },
            _ => FinishOutcome::Missing { job_id },
        }
    }

    /// The job left `active`; the reply of fetch-next (if any) becomes the
    /// next handle or hints for the fetcher.
    fn done_with(mut self, t: &Transition, next: Option<NextJob>) -> FinishOutcome {
        self.done = true;
        let core = self.core.clone();
        let token = self.held.token().clone();
        drop(self);
        let next = match next {
            Some(reply) => ActiveJob::take(&core, reply, token),
            None => {
                if t.finishes() {
                    core.hints().finished_without_next();
                }
                None
            }
        };
        FinishOutcome::Done { next }
    }
}

/// Redis's time as the worker measured it: a fetch-next promotes what the due
/// timer would, and a delay counts from the same clock.
/// A taken job whose hash cannot be decoded (data or opts not JSON, a
/// missing field: foreign or corrupted data) can never run. It is failed at
/// once, under the lock just taken, with the decode error as its reason.
/// Abandoning it would loop it forever: the stalled checker moves it back
/// to wait, the next fetch fails to decode it again, and the deferred
/// "stalled too often" failure is never reached (docs/reliability.md).
fn fail_undecodable(core: &Arc<WorkerShared>, id: String, token: Arc<str>, error: String) {
    let core = core.clone();
    tokio::spawn(async move {
        let reason = format!("job {id} cannot be decoded: {error}");
        let fields = vec![(field::FAILED_REASON, reason.clone())];
        let opts = core.opts();
        let call = MoveToFinished {
            keys: core.keys(),
            id: &id,
            now: now(&core),
            target: FinishTarget::Failed,
            value: &reason,
            fetch_next: false,
            opts: FinishOpts {
                token: &token,
                name: core.name().map(|n| &**n),
                keep_jobs: KeepJobs::to_finish_keep_jobs(opts.remove_on_fail.as_ref()),
                limiter: crate::worker::fetch::limiter::wire(opts),
                lock_duration: opts.lock_duration.as_millis() as u64,
                attempts: 0,
                max_metrics_size: super::transition::metrics_size(core.opts()),
            },
            fields: &fields,
        };
        match core.conn().call(&call).await {
            Ok(Verdict::Done(_)) => {
                tracing::error!(job_id = %id, %error, "taken job cannot be decoded; failed it")
            }
            Ok(Verdict::Refused(r)) => {
                tracing::error!(job_id = %id, %error, refusal = ?r, "taken job cannot be decoded; failing it was refused, left to the stalled checker")
            }
            Err(e) => {
                tracing::error!(job_id = %id, %error, call_error = %e, "taken job cannot be decoded; failing it failed, left to the stalled checker")
            }
        }
    });
}

/// Entries read per call when the events stream decides a resend (see
/// `finished_in_stream`).
const STREAM_PAGE: u64 = 500;
/// Calls at most, so a flood of events bounds the search: together as many
/// entries as the stream keeps by default (`maxLenEvents` 10 000).
const STREAM_PAGES: usize = 20;
/// How far before the first send the search starts (the clock is Redis's,
/// corrected by the measured offset; this covers what the offset misses).
const STREAM_SLACK: Duration = Duration::from_millis(1000);
/// How far past the first send the entry may be.
const STREAM_WINDOW: Duration = Duration::from_secs(60);

fn now(core: &WorkerShared) -> EpochMs {
    EpochMs(core.hints().clock().now_ms())
}

impl Drop for ActiveJob {
    fn drop(&mut self) {
        if !self.done {
            self.core.seam().untrack(&self.job.id, self.held.token());
        }
    }
}
