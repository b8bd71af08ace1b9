//! One slot's life: run a job, finish it (taking the next one in the same call
//! when allowed), and go on until no job comes back.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use echomq_protocol::call::lifecycle::DelayKind;
use echomq_protocol::ScriptErrorCode;
use serde_json::Value;
use tracing::{debug, debug_span, error, warn, Instrument};

use super::processor::{ProcessError, ProcessFuture};
use crate::locks::seam::CancelReason;
use crate::telemetry::trace::{self, Outcome};
use crate::worker::fetch::gate::SlotPermit;
use crate::worker::finish::backoff;
use crate::worker::finish::job::{ActiveJob, FinishOutcome};
use crate::worker::finish::transition::{failed_attempt, Transition};
use crate::worker::messages::WorkerEvent;
use crate::worker::options::WorkerProcessor;
use crate::worker::shared::WorkerShared;
use echomq_protocol::Job;

/// Connection errors on a finishing call are retried this many times, with a
/// doubling pause, while the lock is kept renewed.
const FINISH_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// The longest pause between two sends of a finish whose connection failed.
const FINISH_RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

pub(crate) async fn run_slot(core: Arc<WorkerShared>, permit: SlotPermit, first: ActiveJob) {
    let mut job = first;
    loop {
        let name = core.name().map(|n| &**n);
        let span = trace::job_span(core.keys().name(), job.job(), job.attempt(), name);
        match process_one(&core, job).instrument(span).await {
            Some(next) => job = next,
            None => break,
        }
    }
    drop(permit);
}

fn fetch_next(core: &WorkerShared) -> bool {
    core.gate().may_fetch_next() && core.alive()
}

/// Runs one job to its transition; returns the job fetch-next brought.
async fn process_one(core: &Arc<WorkerShared>, job: ActiveJob) -> Option<ActiveJob> {
    // The slot's task lives as long as its processor runs, and a future is
    // as large as its largest state: the steps before and after the run
    // (successor, finish with its retries, failure, give-up) are boxed, so
    // a held job's task keeps only what the run itself needs (docs/scale.md
    // §Memory per held job).
    let repeats = job.job().repeat_job_key.is_some();
    if repeats && !Box::pin(schedule_successor(core, job.job())).await {
        trace::outcome(Outcome::Abandoned);
        job.abandon();
        return None;
    }
    if let Some(refusal) = refuse_to_run(core, job.job()) {
        return Box::pin(fail_job(core, job, refusal)).await;
    }
    #[cfg(feature = "codec")]
    let job = {
        let mut job = job;
        if let Err(unreadable) = super::payload::open(core, &mut job).await {
            return Box::pin(fail_job(core, job, unreadable)).await;
        }
        job
    };
    let started = std::time::Instant::now();
    let ran = run_processor(core, &job)
        .instrument(debug_span!("process"))
        .await;
    core.telemetry().job_ran(started.elapsed());
    Box::pin(after_run(core, job, ran)).await
}

/// What follows the processor's run: the job's transition.
async fn after_run(core: &Arc<WorkerShared>, job: ActiveJob, ran: Ran) -> Option<ActiveJob> {
    match ran {
        Ran::Cancelled => give_up(core, job).await,
        Ran::TimedOut(still_running) => {
            let e = timed_out(job.job(), job_timeout(core, job.job()));
            fail_job_then(core, job, e, false).await;
            // What a thread kill would do is out of reach of async code: the
            // processor stops at its next await once the grace is over and
            // its future is dropped (docs/worker.md §Job timeouts).
            let _ = tokio::time::timeout(core.opts().cancel_grace, still_running).await;
            None
        }
        Ran::Returned(Ok(value)) => {
            #[cfg(feature = "codec")]
            let value = match super::payload::seal(core, job.id(), value).await {
                Ok(value) => value,
                Err(e) => return fail_job(core, job, e).await,
            };
            finish(core, job, Transition::complete(&value)).await
        }
        Ran::Returned(Err(ProcessError::RateLimited)) => {
            finish(core, job, Transition::ToWait).await
        }
        Ran::Returned(Err(ProcessError::Delay { delay })) => {
            let t = Transition::Delay {
                delay,
                kind: DelayKind::Requested,
                fields: Vec::new(),
            };
            finish(core, job, t).await
        }
        Ran::Returned(Err(ProcessError::WaitingChildren)) => {
            trace::outcome(Outcome::WaitingChildren);
            crate::flows::children::parked(job)
        }
        Ran::Returned(Err(e)) => fail_job(core, job, e).await,
    }
}

/// As BullMQ does: whoever takes a scheduler iteration produces the next
/// one, under a deterministic id, so racing workers (Node ones included)
/// create no duplicate; and the iteration never runs without its successor.
/// Connection errors are retried (every `run_retry_delay`) while the worker
/// runs; any other error leaves the iteration unprocessed, to the stalled
/// checker. False when the job must not run.
async fn schedule_successor(core: &WorkerShared, record: &Job) -> bool {
    if record.repeat_job_key.is_none() {
        return true;
    }
    loop {
        let now = core.hints().clock().now_ms();
        match crate::scheduler::iteration::create_next_iteration_at(
            core.conn(),
            core.keys(),
            record,
            now,
        )
        .await
        {
            Ok(next) => {
                debug!(next = ?next, "next scheduler iteration");
                if next.is_some() {
                    core.telemetry().iteration_created();
                }
                return true;
            }
            Err(e) if e.is_connection() && core.alive() && !core.gate().snapshot().closing => {
                warn!(error = %e, "could not create the next scheduler iteration; retrying");
                tokio::time::sleep(core.opts().run_retry_delay).await;
            }
            Err(e) => {
                error!(error = %e, "could not create the next scheduler iteration; the iteration is not run and is left to the stalled checker");
                return false;
            }
        }
    }
}

/// Jobs failed without running: marked by the stalled checker, or started
/// too often (`max_started_attempts`, 0 = no limit as in BullMQ).
fn refuse_to_run(core: &WorkerShared, record: &Job) -> Option<ProcessError> {
    if let Some(reason) = record.deferred_failure.clone() {
        return Some(ProcessError::unrecoverable(reason));
    }
    match core.opts().max_started_attempts {
        Some(max) if max > 0 && record.attempts_started > max => Some(ProcessError::unrecoverable(
            "job started more than allowable limit",
        )),
        _ => None,
    }
}

/// How the processor's run ended.
enum Ran {
    /// The worker gave the job up meanwhile; whatever it returned is ignored.
    Cancelled,
    /// It ran past its timeout; the run, still going, is ignored from now on.
    TimedOut(CatchPanic<ProcessFuture>),
    /// It returned (a panic reads as a failure).
    Returned(Result<Value, ProcessError>),
}

async fn run_processor(core: &WorkerShared, job: &ActiveJob) -> Ran {
    let ctx = job.context();
    let cancel = ctx.cancel.clone();
    let timeout = job_timeout(core, job.job());
    // Polled inside the slot's own task rather than a task of its own: one
    // spawn and one cross-task wake-up less per job, with a panic still caught
    // (and the job failed) as a spawned task's would be.
    let run = match core.processor() {
        WorkerProcessor::Jobs(p) => p.process(ctx),
        // The fetcher of a batch worker takes batches only (fetcher.rs).
        WorkerProcessor::Batches(..) => {
            Box::pin(async { Err(ProcessError::failed("a batch worker runs no single jobs")) })
        }
    };
    let mut run = CatchPanic(run);
    let result = tokio::select! {
        r = &mut run => Some(r),
        _ = cancel.cancelled() => None,
        _ = tokio::time::sleep(timeout.unwrap_or_default()), if timeout.is_some() => {
            job.cancel(CancelReason::Timeout);
            // The attempt fails now; the processor, told so by its token,
            // keeps the slot for the grace period after the failure.
            return Ran::TimedOut(run);
        }
    };
    // A processor that saw the cancellation may return before the select
    // notices it: what it returns after a cancellation is ignored all the
    // same, so the job is never finished with a value it produced then.
    if cancel.is_cancelled() {
        // Still running: a grace period to see the cancellation and stop
        // cleanly. The slot stays taken meanwhile, since the code still runs;
        // past it the future is dropped.
        if result.is_none() {
            let _ = tokio::time::timeout(core.opts().cancel_grace, &mut run).await;
        }
        return Ran::Cancelled;
    }
    match result {
        None => Ran::Cancelled,
        Some(Ok(r)) => Ran::Returned(r),
        Some(Err(panic)) => Ran::Returned(Err(abnormal_end(panic))),
    }
}

/// A failure as the job stores it: `failedReason`, the stack line (Node
/// stores `err.stack`, whose first line names the error class), and whether
/// it must not be retried.
pub(crate) fn failure_parts(e: &ProcessError) -> (String, Option<String>, bool) {
    match e {
        // Node stores `err.stack`, whose first line names the error class.
        ProcessError::Unrecoverable { message } => (
            message.clone(),
            Some(format!("UnrecoverableError: {message}")),
            true,
        ),
        ProcessError::Failed { message, stack } => (message.clone(), stack.clone(), false),
        _ => (e.to_string(), None, false),
    }
}

/// The job's own timeout (`timeout` option), else the worker's default.
fn job_timeout(core: &WorkerShared, record: &Job) -> Option<Duration> {
    record
        .opts
        .timeout
        .map(Duration::from_millis)
        .or(core.opts().default_timeout)
}

/// The failure of an attempt that ran past its timeout, as BullMQ Node shows
/// any failure (`failedReason`, a stack line naming the error class).
fn timed_out(record: &Job, timeout: Option<Duration>) -> ProcessError {
    let ms = timeout.map_or(0, |t| t.as_millis());
    let message = format!("job {} timed out after {ms} ms", record.id);
    ProcessError::Failed {
        stack: Some(format!("TimeoutError: {message}")),
        message,
    }
}

/// `f` with its panics caught, as a task boundary would.
pub(crate) fn catch_panic<F: Future + Unpin>(f: F) -> CatchPanic<F> {
    CatchPanic(f)
}

/// The processor's future with its panics caught, as a task boundary would.
pub(crate) struct CatchPanic<F>(F);

impl<F: Future + Unpin> Future for CatchPanic<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

pub(crate) fn abnormal_end(panic: Box<dyn Any + Send>) -> ProcessError {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let message = format!("processor panicked: {text}");
    error!(%message, "processor failed abnormally");
    ProcessError::failed(message)
}

/// A cancelled job: after a lost lock it is not ours any more, so nothing is
/// written; after the close deadline it goes back to `wait`.
async fn give_up(core: &Arc<WorkerShared>, job: ActiveJob) -> Option<ActiveJob> {
    match job.cancel_reason() {
        CancelReason::LockLost => {
            debug!("lock lost: processor cancelled, job left to its new owner");
            trace::outcome(Outcome::LockLost);
            job.abandon();
            return None;
        }
        CancelReason::Cancelled => {
            // The canceller ended the job in Redis with this lock's token.
            debug!("cancelled: processor stopped, the job was ended by its canceller");
            trace::outcome(Outcome::LockLost);
            core.emit(WorkerEvent::Cancelled {
                job_id: job.id().to_owned(),
            });
            job.abandon();
            return None;
        }
        CancelReason::Timeout | CancelReason::Shutdown | CancelReason::None => {}
    }
    let id = job.id().to_owned();
    match job.move_to_wait().await {
        Ok(FinishOutcome::Done { .. }) => {
            trace::outcome(Outcome::MovedBack);
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

async fn fail_job(core: &Arc<WorkerShared>, job: ActiveJob, e: ProcessError) -> Option<ActiveJob> {
    let fetch = fetch_next(core);
    fail_job_then(core, job, e, fetch).await
}

/// A failed attempt recorded, taking the next job in the same call when
/// `fetch` says so.
async fn fail_job_then(
    core: &Arc<WorkerShared>,
    job: ActiveJob,
    e: ProcessError,
    fetch: bool,
) -> Option<ActiveJob> {
    let record = job.job_arc();
    let (message, stack, unrecoverable) = failure_parts(&e);
    let strategy = core.opts().backoff_strategy.as_ref();
    let no_retry = unrecoverable
        || backoff::started_too_often(core.opts().max_started_attempts, record.attempts_started);
    trace::failed(
        &message,
        stack.as_deref(),
        unrecoverable,
        record.attempts_made + 1,
    );
    let (t, retrying) = failed_attempt(&record, &message, stack, no_retry, strategy);
    warn!(reason = %message, retrying, "job failed");
    let id = job.id().to_owned();
    let next = finish_then(core, job, t, fetch).await;
    core.counters().failure();
    core.telemetry().job_failed(retrying);
    core.emit(WorkerEvent::Failed {
        job_id: id,
        reason: message,
        retrying,
    });
    next
}

/// Runs a transition, retrying connection failures; interprets the verdict.
async fn finish(core: &Arc<WorkerShared>, job: ActiveJob, t: Transition) -> Option<ActiveJob> {
    let fetch = fetch_next(core);
    finish_then(core, job, t, fetch).await
}

/// Runs a transition, taking the next job in the same call when `fetch`
/// says so; retries connection failures; interprets the verdict.
async fn finish_then(
    core: &Arc<WorkerShared>,
    job: ActiveJob,
    t: Transition,
    fetch: bool,
) -> Option<ActiveJob> {
    let mut job = job;
    let mut pause = FINISH_RETRY_PAUSE;
    // A finish is sent again, however often its connection fails, for as
    // long as its lock could still be held: the lock duration from the first
    // failure (renewals go on meanwhile). Past it the job is the stalled
    // checker's, whatever happened.
    let mut retry_until = None;
    let completing = matches!(t, Transition::Complete(_));
    loop {
        let id = job.id().to_owned();
        // A fetch-next is a take: it reserves one of `max_jobs` first.
        let take = fetch && fetch_next(core) && core.reserve_takes(1) == 1;
        let applied = job.apply(&t, take).instrument(debug_span!("finish")).await;
        if take {
            if matches!(applied, Ok(FinishOutcome::Done { next: Some(_) })) {
                core.settle_takes(1);
            } else {
                core.return_takes(1);
            }
        }
        match applied {
            Ok(FinishOutcome::Done { next }) => {
                core.counters().transition();
                core.telemetry().job_transition(completing);
                trace::outcome(outcome_of(&t));
                if completing {
                    core.emit(WorkerEvent::Completed { job_id: id });
                }
                return next;
            }
            Ok(FinishOutcome::Refused { job: j, code }) => {
                return Box::pin(fail_job(core, j, refused_completion(&id, code))).await;
            }
            Ok(other) => {
                report_rejection(core, other);
                return None;
            }
            Err(f)
                if f.error.is_connection()
                    && *retry_until.get_or_insert_with(|| {
                        tokio::time::Instant::now() + core.opts().lock_duration
                    }) > tokio::time::Instant::now() =>
            {
                warn!(error = %f.error, "finishing call failed on the connection; retrying");
                job = f.job;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(FINISH_RETRY_PAUSE_MAX);
            }
            Err(f) => {
                error!(error = %f.error, "finishing call failed; job left to the stalled checker");
                f.job.abandon();
                return None;
            }
        }
    }
}

/// The error Node's `finishedErrors` makes of a refused completion, with its
/// text: "failed children" is an UnrecoverableError, the rest an ordinary
/// failure.
fn refused_completion(id: &str, code: ScriptErrorCode) -> ProcessError {
    const COMMAND: &str = "moveToFinished";
    match code {
        ScriptErrorCode::JobHasFailedChildren => ProcessError::unrecoverable(format!(
            "Cannot complete job {id} because it has at least one failed child. {COMMAND}"
        )),
        ScriptErrorCode::JobPendingChildren => {
            ProcessError::failed(format!("Job {id} has pending dependencies. {COMMAND}"))
        }
        other => ProcessError::failed(format!(
            "Unknown code {} error for {id}. {COMMAND}",
            other.code()
        )),
    }
}

/// What the `job` span says of a transition made.
fn outcome_of(t: &Transition) -> Outcome {
    match t {
        Transition::Complete(_) => Outcome::Completed,
        Transition::Fail { .. } => Outcome::Failed,
        Transition::Retry { .. } => Outcome::Retried,
        Transition::Delay {
            kind: DelayKind::Retry,
            ..
        } => Outcome::Retried,
        Transition::Delay { .. } => Outcome::Delayed,
        Transition::ToWait => Outcome::RateLimited,
    }
}

fn report_rejection(core: &WorkerShared, outcome: FinishOutcome) {
    match outcome {
        FinishOutcome::LockLost { job_id, code } => {
            warn!(%code, "transition refused: lock lost");
            trace::outcome(Outcome::LockLost);
            core.emit(WorkerEvent::LockLost { job_id });
        }
        FinishOutcome::NotActive { job_id } | FinishOutcome::Missing { job_id } => {
            warn!(%job_id, "transition refused: job not active any more");
            core.emit(WorkerEvent::FinishRejected { job_id });
        }
        FinishOutcome::Done { .. } | FinishOutcome::Refused { .. } => {}
    }
}
