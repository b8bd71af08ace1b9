//! The fetch hints: what the last replies said about when to look for a job
//! again. [`FetchHints`] is their only writer; the fetch loop reads them.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use echomq_protocol::call::lifecycle::NextJob;

/// Drained flag, next delayed due time and end of a rate-limit window.
#[derive(Default)]
pub(crate) struct FetchHints {
    /// The queue looked empty: block on the marker before fetching.
    drained: AtomicBool,
    /// ms when the earliest delayed job is due; 0 when unknown.
    block_until: AtomicI64,
    /// ms before which nothing may be fetched (rate limit).
    limit_until: AtomicI64,
}

fn now() -> i64 {
    crate::clock::now_ms() as i64
}

impl FetchHints {
    /// Look at the queue directly, without waiting for a marker (a job was
    /// just taken, or a marker popped while paused is gone).
    pub fn wake(&self) {
        self.drained.store(false, Ordering::Relaxed);
    }

    /// A reply that carried no job: what it says about the queue.
    pub fn no_job(&self, reply: &NextJob) {
        match reply {
            NextJob::RateLimited(d) => self.rate_limited_for(*d),
            NextJob::DelayedUntil(at) => {
                self.block_until.store(at.0 as i64, Ordering::Relaxed);
                self.drained.store(true, Ordering::Relaxed);
            }
            NextJob::Nothing => {
                self.block_until.store(0, Ordering::Relaxed);
                self.drained.store(true, Ordering::Relaxed);
            }
            NextJob::Job { .. } => {}
        }
    }

    /// A finishing call that did not fetch (or found nothing): the slot frees
    /// up and the fetcher blocks on the marker.
    pub fn finished_without_next(&self) {
        self.drained.store(true, Ordering::Relaxed);
    }

    /// No fetching before `d` from now.
    pub fn rate_limited_for(&self, d: Duration) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        self.limit_until
            .store(now().saturating_add(ms), Ordering::Relaxed);
    }

    /// The marker read answered: a score is the due time of a delayed job
    /// (kept when earlier than the one known), nil a timeout.
    pub fn marker_popped(&self, score: Option<f64>) {
        match score {
            None => self.block_until.store(0, Ordering::Relaxed),
            Some(score) => {
                let score = score as i64;
                let known = self.block_until.load(Ordering::Relaxed);
                if known <= 0 || score < known {
                    self.block_until.store(score, Ordering::Relaxed);
                }
            }
        }
    }

    /// The blocking read went overdue: the due time it waited for is unknown.
    pub fn forget_due_time(&self) {
        self.block_until.store(0, Ordering::Relaxed);
    }

    /// Whether to block on the marker before fetching.
    pub fn drained(&self) -> bool {
        self.drained.load(Ordering::Relaxed)
    }

    /// ms when the earliest delayed job is due, 0 when unknown.
    pub fn block_until(&self) -> i64 {
        self.block_until.load(Ordering::Relaxed)
    }

    /// Whether a known delayed job is still at least 1 ms away.
    pub fn delayed_job_pending(&self) -> bool {
        let bu = self.block_until();
        bu > 0 && bu - now() >= 1
    }

    /// How long a rate limit still forbids fetching, if it does.
    pub fn rate_limit_left(&self) -> Option<Duration> {
        let left = self.limit_until.load(Ordering::Relaxed) - now();
        (left > 0).then(|| Duration::from_millis(left as u64))
    }
}
