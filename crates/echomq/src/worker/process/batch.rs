//! Batches: a worker given a [`BatchProcessor`](super::batch_processor::BatchProcessor) and [`BatchOptions`] takes up
//! to `size` jobs in one round trip (their moveToActive calls pipelined),
//! waits up to `timeout` for `min_size` of them, hands them to the processor
//! at once, and finishes them in one round trip (their transitions
//! pipelined). Every job stays a normal BullMQ job: its own lock token,
//! renewed in the LockManager's one round trip per tick; recovered one by one by
//! the StalledChecker if the worker dies; its own events. A failure of one
//! job fails only that job (docs/worker.md §Batches).

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq_protocol::call::lifecycle::{DelayKind, EpochMs, MoveToActive, NextJob};
use serde_json::Value;
use tracing::{debug, warn};

use super::batch_processor::BatchOptions;
use super::processor::{JobContext, ProcessError};
use super::run::{abnormal_end, catch_panic, failure_parts};
use crate::locks::seam::CancelReason;
use crate::worker::fetch::gate::SlotPermit;
use crate::worker::finish::backoff;
use crate::worker::finish::job::{ActiveJob, FinishOutcome};
use crate::worker::finish::transition::{failed_attempt, Transition};
use crate::worker::messages::WorkerEvent;
use crate::worker::options::WorkerProcessor;
use crate::worker::shared::WorkerShared;

/// How often a batch short of `min_size` looks for more jobs.
const FILL_POLL: Duration = Duration::from_millis(20);

/// Takes a batch for the slot `permit`: up to `size` jobs per round trip,
/// again until `min_size` or the timeout; empty when nothing was taken.
pub(crate) async fn take(
    core: &Arc<WorkerShared>,
    batch: BatchOptions,
    cap: usize,
) -> Vec<ActiveJob> {
    let deadline = Instant::now() + batch.timeout;
    let size = batch.size.min(cap);
    let mut jobs = Vec::with_capacity(size);
    loop {
        let want = size - jobs.len();
        let tokens: Vec<Arc<str>> = (0..want)
            .map(|_| Arc::from(uuid::Uuid::new_v4().to_string()))
            .collect();
        let now = EpochMs(core.hints().clock().now_ms());
        let calls: Vec<MoveToActive> = tokens
            .iter()
            .map(|t| MoveToActive {
                keys: core.keys(),
                now,
                fetch: core.fetch_opts(t),
            })
            .collect();
        let mut empty = false;
        for (reply, token) in core.conn().call_batch(&calls).await.into_iter().zip(tokens) {
            match reply {
                Ok(reply) => {
                    if !matches!(reply, NextJob::Job { .. }) {
                        empty = true;
                    }
                    if let Some(job) = ActiveJob::take(core, reply, token) {
                        jobs.push(job);
                    }
                }
                Err(e) => {
                    warn!(error = %e, "moveToActive of a batch failed");
                    empty = true;
                }
            }
        }
        let full = jobs.len() == size;
        let closing = !core.alive() || core.gate().snapshot().closing;
        // Nothing there: the fetcher waits for a marker as for a single job.
        let nothing = jobs.is_empty() && empty;
        if full || nothing || closing || jobs.len() >= batch.min_size || Instant::now() >= deadline
        {
            return jobs;
        }
        if empty {
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(FILL_POLL)).await;
        }
    }
}

/// Runs one batch to its transitions, all finished in one round trip.
pub(crate) async fn run(core: Arc<WorkerShared>, permit: SlotPermit, jobs: Vec<ActiveJob>) {
    let WorkerProcessor::Batches(processor, _) = core.processor() else {
        return;
    };
    let processor = processor.clone();
    // Jobs whose payload cannot be decoded fail without reaching the
    // processor, as single jobs do (payload.rs).
    #[cfg(feature = "codec")]
    let (jobs, unreadable) = open_all(&core, jobs).await;
    let n = jobs.len();
    let contexts: Vec<JobContext> = jobs.iter().map(ActiveJob::context).collect();
    let started = Instant::now();
    let results = if contexts.is_empty() {
        Vec::new()
    } else {
        match catch_panic(processor.process(contexts)).await {
            Ok(results) => results,
            Err(panic) => {
                let e = abnormal_end(panic);
                (0..n).map(|_| Err(e.clone())).collect()
            }
        }
    };
    core.telemetry().job_ran(started.elapsed());
    let mut results = results.into_iter();
    let mut items = Vec::with_capacity(n);
    let mut reports = Vec::with_capacity(n);
    for job in jobs {
        let result = results.next().unwrap_or_else(|| {
            Err(ProcessError::failed(format!(
                "the batch processor answered fewer results than the {n} jobs it was given"
            )))
        });
        if matches!(
            job.cancel_reason(),
            CancelReason::LockLost | CancelReason::Cancelled
        ) {
            // Not ours any more: nothing is written for it.
            debug!(job_id = %job.id(), "batch job given up: not finished by this worker");
            job.abandon();
            continue;
        }
        // The return value is stored through the queue's codec.
        #[cfg(feature = "codec")]
        let result = match result {
            Ok(value) => super::payload::seal(&core, job.id(), value).await,
            Err(e) => Err(e),
        };
        let (t, report) = transition_of(&core, &job, result);
        reports.push((job.id().to_owned(), report));
        items.push((job, t));
    }
    #[cfg(feature = "codec")]
    for (job, e) in unreadable {
        let (t, report) = transition_of(&core, &job, Err(e));
        reports.push((job.id().to_owned(), report));
        items.push((job, t));
    }
    let outcomes = ActiveJob::apply_batch(items).await;
    for ((job_id, report), outcome) in reports.into_iter().zip(outcomes) {
        match outcome {
            Ok(FinishOutcome::Done { .. }) => {
                core.counters().transition();
                core.telemetry()
                    .job_transition(matches!(report, Report::Completed));
                match report {
                    Report::Completed => core.emit(WorkerEvent::Completed { job_id }),
                    Report::Failed { reason, retrying } => {
                        core.counters().failure();
                        core.telemetry().job_failed(retrying);
                        core.emit(WorkerEvent::Failed {
                            job_id,
                            reason,
                            retrying,
                        });
                    }
                    Report::Other => {}
                }
            }
            Ok(FinishOutcome::Refused { job, code }) => {
                warn!(%job_id, ?code, "batch job refused its transition; left to the stalled checker");
                job.abandon();
            }
            Ok(FinishOutcome::LockLost { .. }) => core.emit(WorkerEvent::LockLost { job_id }),
            Ok(_) => core.emit(WorkerEvent::FinishRejected { job_id }),
            Err(f) => {
                warn!(%job_id, error = %f.error, "batch finish failed; the job is left to the stalled checker");
                f.job.abandon();
            }
        }
    }
    drop(permit);
}

/// What the host hears of one job of a batch once it is finished.
enum Report {
    Completed,
    Failed { reason: String, retrying: bool },
    Other,
}

/// The jobs whose data decodes (decoded in place), and the others with the
/// failure to record for them.
#[cfg(feature = "codec")]
async fn open_all(
    core: &WorkerShared,
    jobs: Vec<ActiveJob>,
) -> (Vec<ActiveJob>, Vec<(ActiveJob, ProcessError)>) {
    let mut readable = Vec::with_capacity(jobs.len());
    let mut unreadable = Vec::new();
    for mut job in jobs {
        match super::payload::open(core, &mut job).await {
            Ok(()) => readable.push(job),
            Err(e) => unreadable.push((job, e)),
        }
    }
    (readable, unreadable)
}

fn transition_of(
    core: &WorkerShared,
    job: &ActiveJob,
    result: Result<Value, ProcessError>,
) -> (Transition, Report) {
    match result {
        Ok(value) => (Transition::complete(&value), Report::Completed),
        Err(ProcessError::RateLimited) => (Transition::ToWait, Report::Other),
        Err(ProcessError::Delay { delay }) => (
            Transition::Delay {
                delay,
                kind: DelayKind::Requested,
                fields: Vec::new(),
            },
            Report::Other,
        ),
        Err(e) => {
            let record = job.job();
            let (reason, stack, unrecoverable) = failure_parts(&e);
            let no_retry = unrecoverable
                || backoff::started_too_often(
                    core.opts().max_started_attempts,
                    record.attempts_started,
                );
            let strategy = core.opts().backoff_strategy.as_ref();
            let (t, retrying) = failed_attempt(record, &reason, stack, no_retry, strategy);
            (t, Report::Failed { reason, retrying })
        }
    }
}
