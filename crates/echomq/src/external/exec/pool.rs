//! [`ExecProcessor`]: a pool of long-lived handler processes, one job at a
//! time each, as a [`Processor`].

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::warn;

use super::command::{ExecCommand, ExecOptions};
use super::handler::Handler;
use crate::worker::process::processor::{JobContext, ProcessError, ProcessFuture, Processor};

/// The first pause after a handler failed to start; it doubles.
const FIRST_RESTART_DELAY: Duration = Duration::from_millis(100);

/// A handler process could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The options cannot work.
    #[error("{0}")]
    Options(&'static str),
    /// The program could not be run (not found, not executable).
    #[error("cannot start the handler {program:?}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Runs each job in one of a pool of handler processes speaking the
/// JSON-lines protocol of docs/processors.md on their stdin and stdout: any
/// language, no Redis client in the handler. The worker keeps every guarantee
/// it gives a Rust processor: the lock is renewed while the handler works; a
/// cancelled job (lock lost, timeout, remote cancel, shutdown deadline) has its handler sent
/// SIGTERM, then SIGKILL after [`ExecOptions::kill_grace`]; a handler that
/// crashes or prints garbage fails that job (retried per its attempts) and is
/// replaced.
///
/// ```no_run
/// # async fn demo(queue: echomq::Queue) -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use echomq::external::{ExecCommand, ExecOptions, ExecProcessor};
/// let handlers = ExecProcessor::start(
///     ExecCommand::parse("python3 handler.py")?,
///     ExecOptions::default().processes(4),
/// )
/// .await?;
/// let mut args = echomq::WorkerArgs::new(queue, Arc::new(handlers));
/// args.options.concurrency = 4;
/// # Ok(()) }
/// ```
pub struct ExecProcessor {
    pool: Arc<Pool>,
}

impl fmt::Debug for ExecProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecProcessor")
            .field("command", &self.pool.command)
            .field("processes", &self.pool.opts.processes)
            .finish()
    }
}

struct Pool {
    command: ExecCommand,
    opts: ExecOptions,
    /// One permit per handler process.
    slots: Semaphore,
    idle: Mutex<Vec<Handler>>,
    /// Handlers that failed to start in a row.
    failed_starts: Mutex<u32>,
}

impl ExecProcessor {
    /// Starts `options.processes` handlers at once, so that a command that
    /// cannot run is an error here rather than a failure of every job.
    pub async fn start(command: ExecCommand, options: ExecOptions) -> Result<Self, ExecError> {
        if options.processes == 0 {
            return Err(ExecError::Options("processes must be at least 1"));
        }
        let mut idle = Vec::with_capacity(options.processes);
        for _ in 0..options.processes {
            idle.push(spawn(&command, &options)?);
        }
        Ok(ExecProcessor {
            pool: Arc::new(Pool {
                slots: Semaphore::new(options.processes),
                idle: Mutex::new(idle),
                failed_starts: Mutex::new(0),
                command,
                opts: options,
            }),
        })
    }

    /// The process ids of the handlers idle right now (for tests and
    /// diagnostics).
    pub fn idle_pids(&self) -> Vec<u32> {
        lock(&self.pool.idle).iter().map(Handler::pid).collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn spawn(command: &ExecCommand, opts: &ExecOptions) -> Result<Handler, ExecError> {
    Handler::spawn(command, opts).map_err(|source| ExecError::Spawn {
        program: command.program.to_string_lossy().into_owned(),
        source,
    })
}

impl Processor for ExecProcessor {
    fn process(&self, job: JobContext) -> ProcessFuture {
        let pool = self.pool.clone();
        Box::pin(async move { pool.run(job).await })
    }
}

impl Pool {
    async fn run(&self, ctx: JobContext) -> Result<Value, ProcessError> {
        let cancelled = || ProcessError::failed("cancelled");
        let _permit = tokio::select! {
            permit = self.slots.acquire() => permit.map_err(|_| cancelled())?,
            _ = ctx.cancelled() => return Err(cancelled()),
        };
        let mut handler = match self.take_idle() {
            Some(h) => h,
            None => self.start_one(&ctx).await?,
        };
        let outcome = handler.run(&ctx).await;
        if outcome.reusable {
            *lock(&self.failed_starts) = 0;
            lock(&self.idle).push(handler);
        } else if handler.failed_to_start(self.opts.early_exit) {
            *lock(&self.failed_starts) += 1;
        }
        outcome.result
    }

    fn take_idle(&self) -> Option<Handler> {
        loop {
            let mut h = lock(&self.idle).pop()?;
            if h.usable() {
                return Some(h);
            }
            // Exited while idle: dropped, and the next one tried.
            if h.failed_to_start(self.opts.early_exit) {
                *lock(&self.failed_starts) += 1;
            }
            warn!(
                pid = h.pid(),
                answered = h.answered(),
                "handler exited while idle; replaced"
            );
        }
    }

    /// A new handler, after a pause when the last ones died right after
    /// their start.
    async fn start_one(&self, ctx: &JobContext) -> Result<Handler, ProcessError> {
        let failures = *lock(&self.failed_starts);
        if failures > 0 {
            let delay = FIRST_RESTART_DELAY
                .saturating_mul(1 << (failures - 1).min(16))
                .min(self.opts.max_restart_delay);
            warn!(
                failures,
                delay_ms = delay.as_millis() as u64,
                "handlers exit right after their start; waiting before starting another"
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = ctx.cancelled() => return Err(ProcessError::failed("cancelled")),
            }
        }
        spawn(&self.command, &self.opts).map_err(|e| ProcessError::failed(e.to_string()))
    }
}
