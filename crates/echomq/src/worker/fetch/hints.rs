//! The fetch hints: what the last replies said about when to look for a job
//! again. [`FetchHints`] is their only writer; the fetch loop reads them and
//! is told when they change while it waits.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use echomq_protocol::call::lifecycle::NextJob;
use tokio::sync::Notify;

use super::due_timer::ServerClock;

/// Drained flag, next delayed due time and end of a rate-limit window.
#[derive(Default)]
pub(crate) struct FetchHints {
    /// The queue looked empty: block on the marker before fetching.
    drained: AtomicBool,
    /// ms (Redis's clock) when the earliest delayed job is due; 0 when unknown.
    block_until: AtomicI64,
    /// ms (local clock) before which nothing may be fetched (rate limit).
    limit_until: AtomicI64,
    /// Redis's time, which due times are compared with.
    clock: ServerClock,
    /// Wakes a fetcher waiting on its due timer when a reply from elsewhere
    /// (a finishing slot, the actor) changed what it waits for.
    changed: Notify,
}

fn local_now() -> i64 {
    crate::clock::now_ms() as i64
}

impl FetchHints {
    /// Look at the queue directly, without waiting for a marker (a job was
    /// just taken, or a marker popped while paused is gone).
    pub fn wake(&self) {
        self.drained.store(false, Ordering::Relaxed);
        self.changed.notify_one();
    }

    /// A reply that carried no job: what it says about the queue.
    pub fn no_job(&self, reply: &NextJob) {
        match reply {
            NextJob::RateLimited(d) => self.rate_limited_for(*d),
            NextJob::DelayedUntil(at) => {
                self.block_until.store(at.0 as i64, Ordering::Relaxed);
                self.drained.store(true, Ordering::Relaxed);
                // A finishing slot may have learnt of an earlier due time
                // than the one the fetcher's timer is set for.
                self.changed.notify_one();
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
            .store(local_now().saturating_add(ms), Ordering::Relaxed);
        // Jobs are held back, not absent, and the markers that announced them
        // are consumed: once the window ends the fetcher must look at the
        // queue directly, not block on a marker that will never come (BullMQ
        // does not block while rate limited either).
        self.drained.store(false, Ordering::Relaxed);
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

    /// ms (Redis's clock) when the earliest delayed job is due, 0 when unknown.
    pub fn block_until(&self) -> i64 {
        self.block_until.load(Ordering::Relaxed)
    }

    /// Whether a known delayed job is not due yet on Redis's clock.
    pub fn delayed_job_pending(&self) -> bool {
        let bu = self.block_until();
        bu > 0 && self.clock.until(bu).is_some()
    }

    /// How long a rate limit still forbids fetching, if it does.
    pub fn rate_limit_left(&self) -> Option<Duration> {
        let left = self.limit_until.load(Ordering::Relaxed) - local_now();
        (left > 0).then(|| Duration::from_millis(left as u64))
    }

    /// Redis's time as this worker measured it.
    pub fn clock(&self) -> &ServerClock {
        &self.clock
    }

    /// Resolves when a hint changed from outside the fetch loop (or had
    /// changed since the loop last waited).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}
