//! `WorkerOptions::max_jobs`: the takes a worker has left. Every call that
//! may take jobs — `moveToActive`, a batch, a finishing call's fetch-next —
//! reserves its takes first and gives back what it did not use, so no job
//! is taken past the limit. A fetch loop that found none left waits for one
//! given back (a reserved fetch-next whose call brought no job) or its stop.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

pub(crate) struct Takes {
    left: AtomicU64,
    given_back: Notify,
}

impl Takes {
    pub fn new(max_jobs: u64) -> Self {
        Takes {
            left: AtomicU64::new(max_jobs),
            given_back: Notify::new(),
        }
    }

    /// Reserves up to `n`; answers how many were reserved.
    pub fn reserve(&self, n: u64) -> u64 {
        let mut got = 0;
        let _ = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| {
                got = l.min(n);
                Some(l - got)
            });
        got
    }

    /// Gives back `n` reserved takes that took no job.
    pub fn give_back(&self, n: u64) {
        if n > 0 {
            self.left.fetch_add(n, Ordering::SeqCst);
            // A permit is kept when no loop waits yet: the wake is not lost.
            self.given_back.notify_one();
        }
    }

    pub fn left(&self) -> u64 {
        self.left.load(Ordering::SeqCst)
    }

    /// Until some take is given back.
    pub async fn given_back(&self) {
        self.given_back.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_never_exceed_the_limit() {
        let t = Takes::new(5);
        assert_eq!(t.reserve(3), 3);
        assert_eq!(t.reserve(3), 2);
        assert_eq!(t.reserve(1), 0);
        t.give_back(1);
        assert_eq!(t.left(), 1);
        assert_eq!(t.reserve(4), 1);
    }

    #[tokio::test]
    async fn a_take_given_back_before_the_wait_still_wakes_it() {
        let t = Takes::new(0);
        t.give_back(1);
        tokio::time::timeout(std::time::Duration::from_secs(1), t.given_back())
            .await
            .expect("woken by the permit left behind");
    }
}
