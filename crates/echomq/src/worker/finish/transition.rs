//! The transitions out of `active` and the one path from a transition to its
//! script call, shared by the Worker's slots ([`ActiveJob`](super::job::ActiveJob))
//! and manual processing ([`ManualJob`](crate::worker::manual::ManualJob)): a failed
//! attempt becomes its stack trace and the backoff decision here
//! ([`failed_attempt`]), and every transition one script call ([`Finishing::run`]).

use std::time::Duration;

use echomq_protocol::call::dead_letter::{DeadLetterTarget, MoveToDeadLetter};
use echomq_protocol::call::lifecycle::{
    DelayKind, EpochMs, FinishTarget, MoveJobFromActiveToWait, MoveToDelayed, MoveToFinished,
    NextJob, PushEnd, RetryJob, Verdict,
};
use echomq_protocol::call::{Arg, Reply, ReplyError, ScriptCall};
use echomq_protocol::job::field;
use echomq_protocol::keys::Key;
use echomq_protocol::packing::{FetchOpts, FinishOpts, MetricsSize};
use echomq_protocol::{Job, KeepJobs, QueueKeys, ScriptId};
use serde_json::Value;

use super::backoff::{self, RetryDecision};
use super::backoff_strategy::{self, BackoffStrategy};
use crate::connection::pool::Connection;
use crate::error::Result;
use crate::worker::fetch::limiter;
use crate::worker::options::WorkerOptions;

/// Job-hash fields a transition writes first (`failedReason`, `stacktrace`).
pub(crate) type Fields = Vec<(&'static str, String)>;

/// The transitions out of `active`.
#[derive(Debug, Clone)]
pub(crate) enum Transition {
    /// Completed with this return value, as JSON text.
    Complete(String),
    Fail {
        reason: String,
        fields: Fields,
    },
    Retry {
        fields: Fields,
    },
    Delay {
        delay: Duration,
        kind: DelayKind,
        fields: Fields,
    },
    ToWait,
}

impl Transition {
    /// Completed with `value` as the return value.
    pub(crate) fn complete(value: &Value) -> Self {
        Transition::Complete(serde_json::to_string(value).unwrap_or_else(|_| "null".into()))
    }

    /// Whether the job leaves for good (completed or failed).
    pub(crate) fn finishes(&self) -> bool {
        matches!(self, Transition::Complete(_) | Transition::Fail { .. })
    }
}

/// A failed attempt of `record` as BullMQ records it: `failedReason`, the
/// job's `stacktrace` with this failure's appended (trimmed to its
/// `stackTraceLimit`), and the decision — retry now, retry after the backoff
/// (custom types through `strategy`), or fail for good. Answers the
/// transition and whether the job will run again.
pub(crate) fn failed_attempt(
    record: &Job,
    message: &str,
    stack: Option<String>,
    unrecoverable: bool,
    strategy: Option<&BackoffStrategy>,
) -> (Transition, bool) {
    let fields = vec![
        (field::FAILED_REASON, message.to_owned()),
        (field::STACKTRACE, stacktrace(record, stack, message)),
    ];
    let decision = backoff::decide(
        record.attempts_made,
        record.opts.attempts.unwrap_or(0),
        record.opts.backoff.as_ref(),
        unrecoverable,
        rand::random::<f64>(),
    );
    match backoff_strategy::apply(decision, strategy, record, message) {
        RetryDecision::Now => (Transition::Retry { fields }, true),
        RetryDecision::After(ms) => (
            Transition::Delay {
                delay: Duration::from_millis(ms),
                kind: DelayKind::Retry,
                fields,
            },
            true,
        ),
        RetryDecision::Fail | RetryDecision::UnknownStrategy => (
            Transition::Fail {
                reason: message.to_owned(),
                fields,
            },
            false,
        ),
    }
}

/// The job's `stacktrace` with this failure's appended, trimmed to the
/// job's `stackTraceLimit`, as JSON. Node stores `err.stack`, whose first
/// line names the error class; without one, `Error: <message>`.
fn stacktrace(record: &Job, stack: Option<String>, message: &str) -> String {
    let mut traces: Vec<Value> = record
        .stacktrace
        .iter()
        .cloned()
        .map(Value::String)
        .collect();
    traces.push(Value::String(
        stack.unwrap_or_else(|| format!("Error: {message}")),
    ));
    if let Some(limit) = record.opts.stack_trace_limit {
        let drop_n = traces.len().saturating_sub(limit as usize);
        traces.drain(..drop_n);
    }
    Value::Array(traces).to_string()
}

/// What a transition's call answered.
pub(crate) struct Ran {
    /// The script's verdict; `Done(Some(next))` when fetch-next took a job.
    pub verdict: Verdict<Option<NextJob>>,
    /// For [`Transition::ToWait`]: the rate limiter's remaining window.
    pub limited_for: Option<Duration>,
}

/// The one script call of a transition: a call type whose script depends on
/// the transition, so that transitions of every kind go out in one pipeline
/// ([`Connection::call_batch`] takes calls of one type).
pub(crate) enum TransitionCall<'a> {
    Finish(MoveToFinished<'a>),
    DeadLetter(MoveToDeadLetter<'a>),
    Delay(MoveToDelayed<'a>),
    Retry(RetryJob<'a>),
    ToWait(MoveJobFromActiveToWait<'a>),
}

/// A transition call's reply: the verdict, and the limiter window of a move
/// back to `wait`.
pub(crate) type TransitionReply = (Verdict<Option<NextJob>>, Option<Duration>);

impl ScriptCall for TransitionCall<'_> {
    type Output = TransitionReply;

    fn script(&self) -> ScriptId {
        match self {
            TransitionCall::Finish(c) => c.script(),
            TransitionCall::DeadLetter(c) => c.script(),
            TransitionCall::Delay(c) => c.script(),
            TransitionCall::Retry(c) => c.script(),
            TransitionCall::ToWait(c) => c.script(),
        }
    }

    fn keys(&self) -> Vec<Key> {
        match self {
            TransitionCall::Finish(c) => c.keys(),
            TransitionCall::DeadLetter(c) => c.keys(),
            TransitionCall::Delay(c) => c.keys(),
            TransitionCall::Retry(c) => c.keys(),
            TransitionCall::ToWait(c) => c.keys(),
        }
    }

    fn args(&self) -> Vec<Arg> {
        match self {
            TransitionCall::Finish(c) => c.args(),
            TransitionCall::DeadLetter(c) => c.args(),
            TransitionCall::Delay(c) => c.args(),
            TransitionCall::Retry(c) => c.args(),
            TransitionCall::ToWait(c) => c.args(),
        }
    }

    fn decode(&self, reply: Reply) -> std::result::Result<TransitionReply, ReplyError> {
        Ok(match self {
            TransitionCall::Finish(c) => (c.decode(reply)?, None),
            TransitionCall::DeadLetter(c) => (c.decode(reply)?, None),
            TransitionCall::Delay(c) => (c.decode(reply)?, None),
            TransitionCall::Retry(c) => (c.decode(reply)?.map(|()| None), None),
            TransitionCall::ToWait(c) => {
                let verdict = c.decode(reply)?;
                let window = match &verdict {
                    Verdict::Done(w) => Some(w.unwrap_or(Duration::ZERO)),
                    Verdict::Refused(_) => None,
                };
                (verdict.map(|_| None), window)
            }
        })
    }
}

/// One held job about to leave `active`: everything its script call is made
/// of besides the transition.
pub(crate) struct Finishing<'a> {
    pub keys: &'a QueueKeys,
    pub job: &'a Job,
    pub token: &'a str,
    pub options: &'a WorkerOptions,
    /// Redis's time as the caller measured it.
    pub now: EpochMs,
    /// Take the next job in the same call (completed, failed, delayed).
    pub fetch_next: bool,
}

impl<'a> Finishing<'a> {
    /// Runs `t` as its one script call.
    pub(crate) async fn run(&self, conn: &Connection, t: &'a Transition) -> Result<Ran> {
        let (verdict, limited_for) = conn.call(&self.call(t)).await?;
        Ok(Ran {
            verdict,
            limited_for,
        })
    }

    /// The script call of `t` for this job.
    pub(crate) fn call(&self, t: &'a Transition) -> TransitionCall<'_> {
        match t {
            Transition::Complete(value) => {
                TransitionCall::Finish(self.finish_call(FinishTarget::Completed, value, &[]))
            }
            Transition::Fail { reason, fields } => {
                let finish = self.finish_call(FinishTarget::Failed, reason, fields);
                match self.dead_letter() {
                    Some(target) => TransitionCall::DeadLetter(MoveToDeadLetter { finish, target }),
                    None => TransitionCall::Finish(finish),
                }
            }
            Transition::Delay {
                delay,
                kind,
                fields,
            } => TransitionCall::Delay(MoveToDelayed {
                keys: self.keys,
                now: self.now,
                id: &self.job.id,
                token: self.token,
                delay: *delay,
                kind: *kind,
                fields,
                fetch_next: self.fetch_next.then(|| self.fetch_opts()),
            }),
            Transition::Retry { fields } => TransitionCall::Retry(RetryJob {
                keys: self.keys,
                now: self.now,
                push: if self.job.opts.lifo {
                    PushEnd::Front
                } else {
                    PushEnd::Back
                },
                id: &self.job.id,
                token: self.token,
                fields,
            }),
            Transition::ToWait => TransitionCall::ToWait(MoveJobFromActiveToWait {
                keys: self.keys,
                id: &self.job.id,
                token: self.token,
            }),
        }
    }

    /// The moveToFinished of `t` when it completes or fails the job for
    /// good (what group commit may send with others), else `None`.
    pub(crate) fn finish_of(&self, t: &'a Transition) -> Option<MoveToFinished<'_>> {
        match t {
            Transition::Complete(value) => {
                Some(self.finish_call(FinishTarget::Completed, value, &[]))
            }
            // A dead-lettering failure is a script of its own, never grouped.
            Transition::Fail { .. } if self.dead_letter().is_some() => None,
            Transition::Fail { reason, fields } => {
                Some(self.finish_call(FinishTarget::Failed, reason, fields))
            }
            _ => None,
        }
    }

    /// Where a final failure goes, when the worker names a dead-letter queue.
    fn dead_letter(&self) -> Option<DeadLetterTarget<'a>> {
        let dlq = self.options.dead_letter.as_ref()?;
        Some(DeadLetterTarget {
            dlq: dlq.keys.as_ref()?,
            max_len: dlq.max_len,
        })
    }

    /// The fetch options of a fetch-next: this token, the worker's lock
    /// duration, limiter and name.
    pub(crate) fn fetch_opts(&self) -> FetchOpts<'_> {
        fetch_opts(self.options, self.token)
    }

    fn finish_call<'b>(
        &'b self,
        target: FinishTarget,
        value: &'b str,
        fields: &'b [(&'b str, String)],
    ) -> MoveToFinished<'b> {
        let o = self.options;
        let (job_keep, worker_keep) = match target {
            FinishTarget::Completed => (&self.job.opts.remove_on_complete, &o.remove_on_complete),
            FinishTarget::Failed => (&self.job.opts.remove_on_fail, &o.remove_on_fail),
        };
        MoveToFinished {
            keys: self.keys,
            id: &self.job.id,
            now: self.now,
            target,
            value,
            fetch_next: self.fetch_next,
            opts: FinishOpts {
                token: self.token,
                name: o.name.as_deref(),
                keep_jobs: KeepJobs::to_finish_keep_jobs(
                    job_keep.as_ref().or(worker_keep.as_ref()),
                ),
                limiter: limiter::wire(o),
                lock_duration: o.lock_duration.as_millis() as u64,
                attempts: self.job.opts.attempts.unwrap_or(0),
                max_metrics_size: metrics_size(o),
            },
            fields,
        }
    }
}

/// The fetch options of a worker with `options` taking jobs with `token`.
pub(crate) fn fetch_opts<'a>(options: &'a WorkerOptions, token: &'a str) -> FetchOpts<'a> {
    FetchOpts {
        token,
        lock_duration: options.lock_duration.as_millis() as u64,
        limiter: limiter::wire(options),
        name: options.name.as_deref(),
    }
}

/// The metrics data points a finish keeps (`Off` when metrics are off).
pub(crate) fn metrics_size(options: &WorkerOptions) -> MetricsSize {
    match options.max_metrics_size {
        Some(n) => MetricsSize::Points(n),
        None => MetricsSize::Off,
    }
}
