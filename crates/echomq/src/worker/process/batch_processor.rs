//! What a batched worker is given: [`BatchOptions`] and the
//! [`BatchProcessor`] it runs (docs/worker.md §Batches). Apart from the
//! batch runner (`batch.rs`) so that the worker's options can name them
//! without importing the runner, which imports the options back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::ValidationError;
use serde_json::Value;

use super::processor::{JobContext, ProcessError, Processor};

/// How a worker takes batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// At most this many jobs per batch (at least 1).
    pub size: usize,
    /// Wait for at least this many (1 ..= `size`), up to `timeout`. Default 1.
    pub min_size: usize,
    /// How long a batch may wait to reach `min_size`. Default 0: take what
    /// is there.
    pub timeout: Duration,
}

impl BatchOptions {
    /// Batches of up to `size` jobs, taken as soon as there is one.
    pub fn new(size: usize) -> Self {
        BatchOptions {
            size,
            min_size: 1,
            timeout: Duration::ZERO,
        }
    }

    /// Waits up to `timeout` for `min_size` jobs.
    pub fn min_size(mut self, min_size: usize, timeout: Duration) -> Self {
        self.min_size = min_size;
        self.timeout = timeout;
        self
    }

    /// Refuses sizes a batch cannot have.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let bad = |reason: String| {
            Err(ValidationError::Option {
                option: "batch",
                reason,
            })
        };
        if self.size == 0 {
            return bad("size must be at least 1".into());
        }
        if self.min_size == 0 || self.min_size > self.size {
            return bad(format!(
                "min_size must be within 1..={} (got {})",
                self.size, self.min_size
            ));
        }
        Ok(())
    }
}

/// What a [`BatchProcessor`] answers: one result per job, in the order of
/// the jobs it was given. `Ok` completes the job with the value; an error
/// ends it as it would end a single job (`Failed` retried per attempts,
/// `Unrecoverable` failed, `Delay` delayed without an attempt, `RateLimited`
/// back to `wait`).
pub type BatchResults = Vec<Result<Value, ProcessError>>;

/// The future a [`BatchProcessor`] returns.
pub type BatchFuture = Pin<Box<dyn Future<Output = BatchResults> + Send>>;

/// The code run on each batch. Each [`JobContext`] is the job's own
/// (progress, logs, its cancellation when its lock is lost).
pub trait BatchProcessor: Send + Sync + 'static {
    /// Processes the batch.
    fn process(&self, jobs: Vec<JobContext>) -> BatchFuture;
}

impl<F, Fut> BatchProcessor for F
where
    F: Fn(Vec<JobContext>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BatchResults> + Send + 'static,
{
    fn process(&self, jobs: Vec<JobContext>) -> BatchFuture {
        Box::pin(self(jobs))
    }
}

/// Wraps a closure as a shareable batch processor.
pub fn batch_processor_fn<F, Fut>(f: F) -> Arc<dyn BatchProcessor>
where
    F: Fn(Vec<JobContext>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BatchResults> + Send + 'static,
{
    Arc::new(f)
}

/// A batch processor that runs a one-job processor on every job of the
/// batch at once, in the batch's order: what batching then buys is the
/// pipelined take and finish, one round trip each per batch.
pub fn each_job(one: Arc<dyn Processor>) -> Arc<dyn BatchProcessor> {
    batch_processor_fn(move |jobs: Vec<JobContext>| {
        let runs: Vec<_> = jobs.into_iter().map(|job| one.process(job)).collect();
        futures_util::future::join_all(runs)
    })
}
