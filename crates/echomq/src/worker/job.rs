//! The handle on a job this worker holds: it owns the lock token, and every
//! way of letting the job go consumes it, so a job cannot be finished twice.

use echomq_protocol::FinishTarget;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use echomq_protocol::packing::{pack_fields, FinishOpts};
use echomq_protocol::{KeepJobs, ScriptErrorCode, ScriptId};
use fred::prelude::Value;
use tokio_util::sync::CancellationToken;

use super::core::{parse_next, Held, NextReply, WorkerCore};
use crate::error::{Error, Result};
use crate::reply::{as_i64, bytes, text};
use crate::Job;

/// A job taken by this worker, locked with the token the handle owns.
///
/// Each finishing method takes `self`: once called, the handle is gone, and
/// the token with it. Dropping the handle without finishing abandons the job:
/// its lock stops being renewed, nothing is written, and the stalled checker
/// recovers it once the lock expires.
pub struct ActiveJob {
    core: Arc<WorkerCore>,
    job: Arc<Job>,
    held: Held,
    done: bool,
}

impl fmt::Debug for ActiveJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveJob")
            .field("queue", &self.core.keys.name())
            .field("id", &self.job.id)
            .field("attempt", &self.held.attempt)
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

/// The transitions out of `active`.
#[derive(Debug, Clone)]
pub(crate) enum Transition {
    Complete(serde_json::Value),
    Fail {
        reason: String,
        fields: Vec<(String, String)>,
    },
    Retry {
        fields: Vec<(String, String)>,
    },
    Delay {
        delay_ms: u64,
        skip_attempt: bool,
        fields: Vec<(String, String)>,
    },
    ToWait,
}

impl ActiveJob {
    pub(crate) fn new(core: Arc<WorkerCore>, job: Arc<Job>, held: Held) -> Self {
        ActiveJob {
            core,
            job,
            held,
            done: false,
        }
    }

    /// The job as read when it was taken.
    pub fn job(&self) -> &Job {
        &self.job
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
        &self.held.token
    }

    pub(crate) fn token_arc(&self) -> Arc<str> {
        self.held.token.clone()
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u64 {
        self.held.attempt
    }

    /// Cancelled when the worker gives the job up (lock lost, close deadline).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.held.cancel.clone()
    }

    pub(crate) fn cancel_reason(&self) -> u8 {
        self.held.reason.load(Ordering::Acquire)
    }

    /// Completes the job with `value` as its return value (moveToFinished,
    /// `completed`), optionally taking the next job in the same call.
    pub async fn complete(
        self,
        value: serde_json::Value,
        fetch_next: bool,
    ) -> Result<FinishOutcome, Box<FinishFailed>> {
        self.apply(&Transition::Complete(value), fetch_next).await
    }

    /// Fails the job for good (moveToFinished, `failed`) with `reason` as
    /// `failedReason`.
    pub async fn fail(
        self,
        reason: &str,
        fetch_next: bool,
    ) -> Result<FinishOutcome, Box<FinishFailed>> {
        let fields = vec![("failedReason".to_owned(), reason.to_owned())];
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
        let t = Transition::Delay {
            delay_ms,
            skip_attempt,
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
        mut self,
        t: &Transition,
        fetch_next: bool,
    ) -> Result<FinishOutcome, Box<FinishFailed>> {
        // Renewal stops before the call, as in BullMQ: a renewal racing with
        // the transition would report a lock the transition just released.
        self.core.untrack(&self.job.id, &self.held.token);
        let result = self.call(t, fetch_next).await;
        match result {
            Ok(v) => {
                self.done = true;
                self.interpret(t, v)
            }
            Err(error) => {
                self.core.retrack(&self.job.id, &self.held);
                Err(Box::new(FinishFailed { job: self, error }))
            }
        }
    }

    async fn call(&self, t: &Transition, fetch_next: bool) -> Result<Value> {
        let core = &self.core;
        let k = &core.keys;
        let id = self.job.id.as_str();
        let token: &str = &self.held.token;
        let now = crate::clock::now_ms();
        let packed_fields = |fields: &[(String, String)]| {
            let refs: Vec<(&str, &str)> = fields
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            pack_fields(&refs).map(bytes).unwrap_or_else(|| text(""))
        };
        match t {
            Transition::Complete(_) | Transition::Fail { .. } => {
                let (target, field, value, keep) = match t {
                    Transition::Complete(v) => (
                        FinishTarget::Completed,
                        "returnvalue",
                        serde_json::to_string(v).unwrap_or_else(|_| "null".into()),
                        keep_jobs(
                            self.job.opts.remove_on_complete.as_ref(),
                            core.opts.remove_on_complete.as_ref(),
                        ),
                    ),
                    Transition::Fail { reason, .. } => (
                        FinishTarget::Failed,
                        "failedReason",
                        reason.clone(),
                        keep_jobs(
                            self.job.opts.remove_on_fail.as_ref(),
                            core.opts.remove_on_fail.as_ref(),
                        ),
                    ),
                    _ => unreachable!("matched above"),
                };
                let fields = match t {
                    Transition::Fail { fields, .. } => packed_fields(fields),
                    _ => text(""),
                };
                let opts = FinishOpts {
                    token,
                    name: core.name.as_deref(),
                    keep_jobs: keep,
                    limiter: None,
                    lock_duration: core.opts.lock_duration.as_millis() as u64,
                    attempts: self.job.opts.attempts.unwrap_or(0),
                    max_metrics_size: core.metrics(),
                }
                .pack();
                let keys = k.move_to_finished_keys(id, target);
                let args = vec![
                    text(id),
                    text(now),
                    text(field),
                    text(value),
                    text(target.as_str()),
                    text(if fetch_next { "1" } else { "0" }),
                    text(k.prefix_key()),
                    bytes(opts),
                    fields,
                ];
                core.conn
                    .run_script(ScriptId::MoveToFinished, keys, args)
                    .await
            }
            Transition::Delay {
                delay_ms,
                skip_attempt,
                fields,
            } => {
                let keys = k.move_to_delayed_keys(id);
                let fetch = if fetch_next {
                    bytes(core.fetch_opts_packed(token))
                } else {
                    text("")
                };
                let args = vec![
                    text(k.prefix_key()),
                    text(now),
                    text(id),
                    text(token),
                    text(delay_ms),
                    text(if *skip_attempt { "1" } else { "0" }),
                    packed_fields(fields),
                    text(if fetch_next { "1" } else { "0" }),
                    fetch,
                ];
                core.conn
                    .run_script(ScriptId::MoveToDelayed, keys, args)
                    .await
            }
            Transition::Retry { fields } => {
                let keys = k.retry_job_keys(id);
                let push = if self.job.opts.lifo { "RPUSH" } else { "LPUSH" };
                let args = vec![
                    text(k.prefix_key()),
                    text(now),
                    text(push),
                    text(id),
                    text(token),
                    packed_fields(fields),
                ];
                core.conn.run_script(ScriptId::RetryJob, keys, args).await
            }
            Transition::ToWait => {
                let keys = k.move_job_from_active_to_wait_keys();
                let args = vec![text(id), text(token), text(k.job(id))];
                core.conn
                    .run_script(ScriptId::MoveJobFromActiveToWait, keys, args)
                    .await
            }
        }
    }

    fn interpret(self, t: &Transition, v: Value) -> Result<FinishOutcome, Box<FinishFailed>> {
        let script = match t {
            Transition::Complete(_) | Transition::Fail { .. } => "moveToFinished",
            Transition::Delay { .. } => "moveToDelayed",
            Transition::Retry { .. } => "retryJob",
            Transition::ToWait => "moveJobFromActiveToWait",
        };
        let job_id = self.job.id.clone();
        if let Value::Array(_) = v {
            let next = match parse_next(script, v) {
                Ok(r) => r,
                Err(error) => return Err(Box::new(FinishFailed { job: self, error })),
            };
            let core = self.core.clone();
            let token = self.held.token.clone();
            drop(self);
            return Ok(match next {
                NextReply::Job { id, fields } => match core.adopt(id.clone(), fields, token) {
                    Ok(job) => FinishOutcome::Done { next: Some(job) },
                    Err(e) => {
                        // Unreadable next job: it stays locked by nobody
                        // tracking it and is recovered as stalled.
                        tracing::error!(job_id = %id, error = %e, "fetched job cannot be decoded");
                        FinishOutcome::Done { next: None }
                    }
                },
                other => {
                    core.note_no_job(&other);
                    FinishOutcome::Done { next: None }
                }
            });
        }
        let n = match as_i64(&v) {
            Some(n) => n,
            None if matches!(v, Value::Null) => 0,
            None => {
                let error = Error::protocol(script, format!("unexpected reply {v:?}"));
                return Err(Box::new(FinishFailed { job: self, error }));
            }
        };
        if n >= 0 {
            if let Transition::ToWait = t {
                // The reply is the limiter's remaining window: no fetching
                // before it ends.
                if n > 0 {
                    let until = crate::clock::now_ms() as i64 + n;
                    self.core.limit_until.store(until, Ordering::Relaxed);
                }
            }
            if let Transition::Complete(_) | Transition::Fail { .. } = t {
                // fetch-next found nothing (or was not asked): the slot
                // frees up and the fetcher blocks on the marker.
                self.core.drained.store(true, Ordering::Relaxed);
            }
            return Ok(FinishOutcome::Done { next: None });
        }
        let code = match ScriptErrorCode::from_code(n) {
            Some(c) => c,
            None => {
                let error = Error::protocol(script, format!("unknown error code {n}"));
                return Err(Box::new(FinishFailed { job: self, error }));
            }
        };
        Ok(match code {
            ScriptErrorCode::JobLockNotExist | ScriptErrorCode::JobLockMismatch => {
                FinishOutcome::LockLost { job_id, code }
            }
            ScriptErrorCode::JobNotInState => FinishOutcome::NotActive { job_id },
            ScriptErrorCode::JobNotExist => FinishOutcome::Missing { job_id },
            ScriptErrorCode::JobPendingChildren | ScriptErrorCode::JobHasFailedChildren => {
                let mut job = self;
                job.done = false;
                job.core.retrack(&job.job.id, &job.held);
                FinishOutcome::Refused { job, code }
            }
            other => {
                let error = Error::Script {
                    script,
                    code: other,
                };
                let mut job = self;
                job.done = false;
                job.core.retrack(&job.job.id, &job.held);
                return Err(Box::new(FinishFailed { job, error }));
            }
        })
    }
}

impl Drop for ActiveJob {
    fn drop(&mut self) {
        if !self.done {
            self.core.untrack(&self.job.id, &self.held.token);
        }
    }
}

fn keep_jobs(
    job: Option<&KeepJobs>,
    worker: Option<&KeepJobs>,
) -> serde_json::Map<String, serde_json::Value> {
    KeepJobs::to_keep_jobs(job.or(worker))
}
