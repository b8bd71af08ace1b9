//! The budget enforcer: holds a queue's byte budget whoever finishes its
//! jobs — EchoMQ, BullMQ Node or Python workers — by calling
//! `enforceBudget-4` on a timer, not from a finish.
//!
//! Each tick is one call. A queue with no budget costs one `HGET` inside it
//! (dormant), every [`EnforcerSettings::idle_interval`]. With a budget, a
//! tick every [`EnforcerSettings::interval`] estimates what the queue keeps
//! from a sample and, over the budget, trims the events stream to its share
//! and removes at most [`EnforcerSettings::page`] of the oldest finished
//! jobs; while it answers "more", the next call follows at once. A failed
//! call is logged and tried again on the next tick: the budget is a bound
//! held over time, not per job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::connection::pool::Connection;
use crate::error::Result;
use crate::queue::{Queue, QueueOptions};

/// How an enforcer paces and bounds its calls.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnforcerSettings {
    /// Time between calls on a queue with a budget. Default 100 ms: at
    /// 10,000 finishes a second, a tick's overshoot is about a thousand
    /// jobs' bytes.
    pub interval: Duration,
    /// Time between calls on a queue without a budget (one `HGET` each).
    /// Default 1 s: a budget set by `echomq budget` holds within a second.
    pub idle_interval: Duration,
    /// Most finished jobs one call removes. Default 25 (well under a
    /// millisecond of Redis time on an idle server; a call that finds more
    /// to remove is followed by the next at once).
    pub page: u32,
    /// Jobs sampled per finished set for the estimate (consecutive calls
    /// sample other ranks). Default 8.
    pub samples: u32,
    /// Over the budget, a call removes down to this percent of it, so that
    /// the next ticks' finishes fit. Default 90.
    pub low_percent: u8,
    /// The events stream's share of the budget, in percent: over the
    /// budget, the stream is trimmed to it first. Default 25.
    pub events_percent: u8,
}

impl Default for EnforcerSettings {
    fn default() -> Self {
        EnforcerSettings {
            interval: Duration::from_millis(100),
            idle_interval: Duration::from_secs(1),
            page: 25,
            samples: 8,
            low_percent: 90,
            events_percent: 25,
        }
    }
}

impl EnforcerSettings {
    /// The same settings with another interval for a queue with a budget.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The same settings with another page (at least 1).
    pub fn page(mut self, page: u32) -> Self {
        self.page = page.max(1);
        self
    }
}

/// Counters of one enforcer since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnforcerStats {
    /// Calls made (dormant ones included).
    pub calls: u64,
    /// Finished jobs it removed.
    pub removed: u64,
    /// Events stream entries it trimmed.
    pub trimmed: u64,
    /// The budget the last call saw (0: none).
    pub max: u64,
    /// The bytes in use after the last call (0 when dormant).
    pub used: u64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    removed: AtomicU64,
    trimmed: AtomicU64,
    max: AtomicU64,
    used: AtomicU64,
}

/// A running enforcer; [`close`](Self::close) stops it (dropping it does
/// too).
pub struct BudgetEnforcer {
    counters: Arc<Counters>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for BudgetEnforcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetEnforcer")
            .field("stats", &self.stats())
            .finish()
    }
}

impl BudgetEnforcer {
    /// Starts enforcing `queue`'s budget (dormant while it has none).
    pub async fn start(conn: &Connection, queue: &str, settings: EnforcerSettings) -> Result<Self> {
        let options = QueueOptions::default().skip_meta_update(true);
        let queue = Queue::with_options(conn, queue, options).await?;
        let counters = Arc::new(Counters::default());
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(queue, settings, counters.clone(), stop.clone()));
        Ok(BudgetEnforcer {
            counters,
            stop,
            task: Some(task),
        })
    }

    /// Its counters.
    pub fn stats(&self) -> EnforcerStats {
        EnforcerStats {
            calls: self.counters.calls.load(Ordering::Relaxed),
            removed: self.counters.removed.load(Ordering::Relaxed),
            trimmed: self.counters.trimmed.load(Ordering::Relaxed),
            max: self.counters.max.load(Ordering::Relaxed),
            used: self.counters.used.load(Ordering::Relaxed),
        }
    }

    /// Stops it and waits for its task to end.
    pub async fn close(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for BudgetEnforcer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(
    queue: Queue,
    settings: EnforcerSettings,
    counters: Arc<Counters>,
    stop: CancellationToken,
) {
    let mut tick = 0u64;
    while !stop.is_cancelled() {
        // Consecutive calls sample other ranks (a golden-ratio stride).
        let offset = ((tick * 618) % 1000) as u16;
        tick += 1;
        let pause = match queue.budget_step(&settings, offset, true).await {
            Ok(step) => {
                counters.calls.fetch_add(1, Ordering::Relaxed);
                counters.removed.fetch_add(step.removed, Ordering::Relaxed);
                counters.trimmed.fetch_add(step.trimmed, Ordering::Relaxed);
                counters.max.store(step.max, Ordering::Relaxed);
                counters.used.store(step.used_after, Ordering::Relaxed);
                if step.removed > 0 || step.trimmed > 0 {
                    debug!(queue = %queue.name(), removed = step.removed, trimmed = step.trimmed,
                        used = step.used_after, max = step.max, "byte budget enforced");
                }
                if step.max == 0 {
                    settings.idle_interval
                } else if step.more {
                    Duration::ZERO
                } else {
                    settings.interval
                }
            }
            Err(e) => {
                warn!(queue = %queue.name(), error = %e, "byte budget step failed; retrying");
                settings.interval.max(Duration::from_millis(200))
            }
        };
        if pause.is_zero() {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
