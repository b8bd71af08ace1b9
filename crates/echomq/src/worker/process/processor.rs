//! The user's code: a [`Processor`] turns a job into a JSON result or a
//! [`ProcessError`], with a [`JobContext`] for progress, logs, data updates and
//! cancellation.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::queue::handle::Queue;
use echomq_protocol::Job;

/// The future a processor returns.
pub type ProcessFuture =
    Pin<Box<dyn Future<Output = Result<Value, ProcessError>> + Send + 'static>>;

/// Runs one job. Implemented for every `Fn(JobContext) -> impl Future<Output =
/// Result<Value, ProcessError>>`, so a closure is a processor:
///
/// ```
/// use echomq::worker::{processor_fn, JobContext, ProcessError};
/// let p = processor_fn(|job: JobContext| async move {
///     Ok::<_, ProcessError>(serde_json::json!({"echo": job.data().clone()}))
/// });
/// # let _ = p;
/// ```
///
/// The future is polled by the slot running the job, with its panics caught:
/// a panic fails the job (it does not bring the worker down). When the job is
/// cancelled ([`JobContext::cancelled`]
/// fires) the processor has [`WorkerOptions::cancel_grace`](crate::worker::WorkerOptions::cancel_grace)
/// to return; then its future is dropped. Its result is ignored either way.
pub trait Processor: Send + Sync + 'static {
    /// Processes `job`.
    fn process(&self, job: JobContext) -> ProcessFuture;
}

impl<F, Fut> Processor for F
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ProcessError>> + Send + 'static,
{
    fn process(&self, job: JobContext) -> ProcessFuture {
        Box::pin(self(job))
    }
}

/// Wraps a closure as a shareable processor (helps type inference).
pub fn processor_fn<F, Fut>(f: F) -> Arc<dyn Processor>
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ProcessError>> + Send + 'static,
{
    Arc::new(f)
}

/// Why a processor did not return a value. Anything implementing
/// `std::error::Error` converts into [`ProcessError::Failed`], so `?` works.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProcessError {
    /// An ordinary failure: retried while attempts remain (with the job's
    /// backoff), then failed for good.
    Failed {
        /// Stored as `failedReason`.
        message: String,
        /// Appended to the job's `stacktrace` (the message when `None`).
        stack: Option<String>,
    },
    /// Fails the job at once, whatever `attempts` says (BullMQ's
    /// `UnrecoverableError`).
    Unrecoverable {
        /// Stored as `failedReason`.
        message: String,
    },
    /// The processor hit a rate limit: the job goes back to the front of
    /// `wait` (moveJobFromActiveToWait) without counting an attempt.
    RateLimited,
    /// The processor asks to run the job again later: the job moves to
    /// `delayed` without counting an attempt (BullMQ's `moveToDelayed` +
    /// `DelayedError`).
    Delay {
        /// How long from now.
        delay: Duration,
    },
    /// The processor parked the job with
    /// [`JobContext::move_to_waiting_children`]: it no longer owns it, and
    /// nothing is written (BullMQ's `WaitingChildrenError`). Returned without
    /// a successful park, the job is simply abandoned: still active, its lock
    /// no longer renewed, it is recovered by the stalled checker.
    WaitingChildren,
}

impl ProcessError {
    /// An ordinary (retryable) failure.
    pub fn failed(message: impl Into<String>) -> Self {
        ProcessError::Failed {
            message: message.into(),
            stack: None,
        }
    }

    /// A failure that is never retried.
    pub fn unrecoverable(message: impl Into<String>) -> Self {
        ProcessError::Unrecoverable {
            message: message.into(),
        }
    }

    /// The message stored as `failedReason` (empty for the non-failures).
    pub fn message(&self) -> &str {
        match self {
            ProcessError::Failed { message, .. } | ProcessError::Unrecoverable { message } => {
                message
            }
            ProcessError::RateLimited
            | ProcessError::Delay { .. }
            | ProcessError::WaitingChildren => "",
        }
    }
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessError::Failed { message, .. } => write!(f, "{message}"),
            ProcessError::Unrecoverable { message } => write!(f, "unrecoverable: {message}"),
            ProcessError::RateLimited => write!(f, "rate limited"),
            ProcessError::Delay { delay } => write!(f, "delayed by {} ms", delay.as_millis()),
            ProcessError::WaitingChildren => write!(f, "waiting for children"),
        }
    }
}

// Not `impl Error for ProcessError`: that would make this blanket impl
// overlap with `From<T> for T`.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for ProcessError {
    fn from(e: E) -> Self {
        ProcessError::Failed {
            message: e.to_string(),
            stack: Some(format!("{e:?}")),
        }
    }
}

/// The number of the attempt a taken job is on, from 1: `attemptsMade + 1`
/// (the legacy `attemptsMade` field wins over `atm`, as the job decoder
/// reads it). The one place this is computed.
pub(crate) fn attempt_number(job: &Job) -> u64 {
    job.attempts_made + 1
}

/// What a processor sees of the job it runs: the decoded job, the worker's
/// queue for progress, logs and data updates, and the cancellation signal.
/// Cheap to clone. It cannot finish the job: only the worker, through the
/// [`ActiveJob`](crate::worker::ActiveJob) handle, does that.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) job: Arc<Job>,
    pub(crate) queue: Arc<Queue>,
    pub(crate) token: Arc<str>,
    pub(crate) cancel: CancellationToken,
    pub(crate) worker: Option<Arc<str>>,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("queue", &self.queue.name())
            .field("id", &self.job.id)
            .field("attempt", &self.attempt())
            .finish()
    }
}

impl JobContext {
    /// The job as read when it was taken.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The job id.
    pub fn id(&self) -> &str {
        &self.job.id
    }

    /// The job name.
    pub fn name(&self) -> &str {
        &self.job.name
    }

    /// The payload.
    pub fn data(&self) -> &Value {
        &self.job.data
    }

    /// This attempt's number, from 1 (`attemptsMade + 1`).
    pub fn attempt(&self) -> u64 {
        attempt_number(&self.job)
    }

    /// The lock token the worker holds the job with.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The worker's name, when it has one.
    pub fn worker_name(&self) -> Option<&str> {
        self.worker.as_deref()
    }

    /// The queue the job belongs to.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Stores progress and emits `progress` (updateProgress-3).
    pub async fn update_progress(&self, progress: &impl Serialize) -> Result<()> {
        self.queue.update_progress(&self.job.id, progress).await
    }

    /// Appends a log line, trimmed to the job's `keepLogs`; returns the count.
    pub async fn log(&self, line: &str) -> Result<u64> {
        self.queue
            .add_log(&self.job.id, line, self.job.opts.keep_logs)
            .await
    }

    /// Replaces the job's data (updateData-1). The context keeps the data read
    /// at pick-up.
    pub async fn update_data(&self, data: &impl Serialize) -> Result<()> {
        self.queue.update_data(&self.job.id, data).await
    }

    /// True once the worker gave up on this job (lock lost, or shutdown
    /// deadline passed). Whatever the processor returns afterwards is ignored.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the job is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// The cancellation token itself (for `select!` or child tokens).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}
