//! One slot's life: run a job, finish it (taking the next one in the same call
//! when allowed), and go on until no job comes back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, error, info_span, warn, Instrument};

use super::backoff::{self, RetryDecision};
use super::core::{SlotPermit, WorkerCore, CANCEL_LOCK_LOST};
use super::job::{ActiveJob, FinishOutcome, Transition};
use super::processor::{JobContext, ProcessError};
use super::WorkerEvent;

/// Connection errors on a finishing call are retried this many times, with a
/// doubling pause, while the lock is kept renewed.
const FINISH_RETRIES: u32 = 5;
const FINISH_RETRY_PAUSE: Duration = Duration::from_millis(200);

pub(crate) async fn run_slot(core: Arc<WorkerCore>, permit: SlotPermit, first: ActiveJob) {
    let mut job = first;
    loop {
        let span = info_span!(
            "job",
            queue = %core.keys.name(),
            job_id = %job.id(),
            attempt = job.attempt(),
            worker = ?core.name.as_deref(),
        );
        match process_one(&core, job).instrument(span).await {
            Some(next) => job = next,
            None => break,
        }
    }
    drop(permit);
}

fn fetch_next(core: &WorkerCore) -> bool {
    core.gate.may_fetch_next() && core.alive()
}

/// Runs one job to its transition; returns the job fetch-next brought.
async fn process_one(core: &Arc<WorkerCore>, job: ActiveJob) -> Option<ActiveJob> {
    let record = job.job_arc();
    if record.repeat_job_key.is_some() {
        // As BullMQ does: whoever takes a scheduler iteration produces the
        // next one, under a deterministic id, so racing workers (Node ones
        // included) create no duplicate. A failure here must not cost this
        // iteration its run: the JobScheduler's sweep re-creates a missing
        // next iteration.
        match crate::job_scheduler::create_next_iteration(&core.conn, &core.keys, &record).await {
            Ok(next) => debug!(next = ?next, "next scheduler iteration"),
            Err(e) => {
                warn!(error = %e, "could not create the next scheduler iteration; the sweep will")
            }
        }
    }
    if let Some(reason) = record.deferred_failure.clone() {
        // Marked by the stalled checker: fail without running.
        return fail_job(core, job, ProcessError::unrecoverable(reason)).await;
    }
    if let Some(max) = core.opts.max_started_attempts {
        if record.attempts_started > max {
            return fail_job(
                core,
                job,
                ProcessError::unrecoverable("job started more than allowable limit"),
            )
            .await;
        }
    }
    let ctx = JobContext {
        job: record.clone(),
        queue: core.queue.clone(),
        token: job.token_arc(),
        cancel: job.cancellation_token(),
        worker: core.name.clone(),
    };
    let cancel = job.cancellation_token();
    let mut task = tokio::spawn(core.processor.process(ctx));
    let result = tokio::select! {
        r = &mut task => Some(r),
        _ = cancel.cancelled() => None,
    };
    // A processor that saw the cancellation may return before the select
    // notices it: what it returns after a cancellation is ignored all the
    // same, so the job is never finished with a value it produced then.
    if cancel.is_cancelled() {
        // Still running: a grace period to see the cancellation and stop
        // cleanly. The slot stays taken meanwhile, since the code still runs.
        if result.is_none()
            && tokio::time::timeout(core.opts.cancel_grace, &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
        return give_up(core, job).await;
    }
    let Some(result) = result else {
        return give_up(core, job).await;
    };
    match result {
        Ok(Ok(value)) => finish(core, job, Transition::Complete(value)).await,
        Ok(Err(e)) => match e {
            ProcessError::RateLimited => finish(core, job, Transition::ToWait).await,
            ProcessError::Delay { delay } => {
                let t = Transition::Delay {
                    delay_ms: delay.as_millis() as u64,
                    skip_attempt: true,
                    fields: Vec::new(),
                };
                finish(core, job, t).await
            }
            other => fail_job(core, job, other).await,
        },
        Err(join) => {
            let message = if join.is_panic() {
                let p = join.into_panic();
                let text = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                format!("processor panicked: {text}")
            } else {
                "processor task was cancelled".to_string()
            };
            error!(%message, "processor failed abnormally");
            fail_job(core, job, ProcessError::failed(message)).await
        }
    }
}

/// A cancelled job: after a lost lock it is not ours any more, so nothing is
/// written; after the close deadline it goes back to `wait`.
async fn give_up(core: &Arc<WorkerCore>, job: ActiveJob) -> Option<ActiveJob> {
    if job.cancel_reason() == CANCEL_LOCK_LOST {
        debug!("lock lost: processor cancelled, job left to its new owner");
        job.abandon();
        return None;
    }
    let id = job.id().to_owned();
    match job.move_to_wait().await {
        Ok(FinishOutcome::Done { .. }) => {
            core.emit(WorkerEvent::MovedBack { job_id: id });
        }
        Ok(other) => report_rejection(core, other),
        Err(f) => {
            warn!(error = %f.error, "could not move the job back to wait; left to the stalled checker");
            f.job.abandon();
        }
    }
    None
}

async fn fail_job(core: &Arc<WorkerCore>, job: ActiveJob, e: ProcessError) -> Option<ActiveJob> {
    let record = job.job_arc();
    let (message, stack, unrecoverable) = match &e {
        // Node stores `err.stack`, whose first line names the error class.
        ProcessError::Unrecoverable { message } => (
            message.clone(),
            Some(format!("UnrecoverableError: {message}")),
            true,
        ),
        ProcessError::Failed { message, stack } => (message.clone(), stack.clone(), false),
        _ => (e.to_string(), None, false),
    };
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
        let keep = limit as usize;
        let drop_n = traces.len().saturating_sub(keep);
        traces.drain(..drop_n);
    }
    let fields = vec![
        ("failedReason".to_owned(), message.clone()),
        ("stacktrace".to_owned(), Value::Array(traces).to_string()),
    ];
    let decision = backoff::decide(
        record.attempts_made,
        record.opts.attempts.unwrap_or(0),
        record.opts.backoff.as_ref(),
        unrecoverable,
        rand::random::<f64>(),
    );
    let retrying = matches!(decision, RetryDecision::Now | RetryDecision::After(_));
    let t = match decision {
        RetryDecision::Now => Transition::Retry { fields },
        RetryDecision::After(ms) => Transition::Delay {
            delay_ms: ms,
            skip_attempt: false,
            fields,
        },
        RetryDecision::Fail | RetryDecision::UnknownStrategy => Transition::Fail {
            reason: message.clone(),
            fields,
        },
    };
    warn!(reason = %message, retrying, "job failed");
    let id = job.id().to_owned();
    let next = finish(core, job, t).await;
    core.failed.fetch_add(1, Ordering::Relaxed);
    core.emit(WorkerEvent::Failed {
        job_id: id,
        reason: message,
        retrying,
    });
    next
}

/// Runs a transition, retrying connection failures; interprets the verdict.
async fn finish(core: &Arc<WorkerCore>, job: ActiveJob, t: Transition) -> Option<ActiveJob> {
    let mut job = job;
    let mut pause = FINISH_RETRY_PAUSE;
    let mut tries = 0;
    let completing = matches!(t, Transition::Complete(_));
    loop {
        let id = job.id().to_owned();
        match job.apply(&t, fetch_next(core)).await {
            Ok(FinishOutcome::Done { next }) => {
                core.processed.fetch_add(1, Ordering::Relaxed);
                if completing {
                    core.emit(WorkerEvent::Completed { job_id: id });
                }
                return next;
            }
            Ok(FinishOutcome::Refused { job: j, code }) => {
                // Node turns "failed children" into an UnrecoverableError and
                // other refusals into an ordinary failure.
                let e = if code == echomq_protocol::ScriptErrorCode::JobHasFailedChildren {
                    ProcessError::unrecoverable(format!(
                        "Cannot complete job {id} because it has at least one failed child."
                    ))
                } else {
                    ProcessError::failed(format!("Cannot complete job {id}: {code}"))
                };
                return Box::pin(fail_job(core, j, e)).await;
            }
            Ok(other) => {
                report_rejection(core, other);
                return None;
            }
            Err(f) if f.error.is_connection() && tries < FINISH_RETRIES => {
                warn!(error = %f.error, "finishing call failed on the connection; retrying");
                job = f.job;
                tokio::time::sleep(pause).await;
                pause *= 2;
                tries += 1;
            }
            Err(f) => {
                error!(error = %f.error, "finishing call failed; job left to the stalled checker");
                f.job.abandon();
                return None;
            }
        }
    }
}

fn report_rejection(core: &WorkerCore, outcome: FinishOutcome) {
    match outcome {
        FinishOutcome::LockLost { job_id, code } => {
            warn!(%code, "transition refused: lock lost");
            core.emit(WorkerEvent::LockLost { job_id });
        }
        FinishOutcome::NotActive { job_id } | FinishOutcome::Missing { job_id } => {
            warn!(%job_id, "transition refused: job not active any more");
            core.emit(WorkerEvent::FinishRejected { job_id });
        }
        FinishOutcome::Done { .. } | FinishOutcome::Refused { .. } => {}
    }
}
