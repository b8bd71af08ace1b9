//! `WorkerOptions::max_jobs`: the takes a worker has left. Every call that
//! may take jobs — `moveToActive`, a batch, a finishing call's fetch-next —
//! reserves its takes first; when its reply is in, each reserved take is
//! either settled (its job is held) or given back, so no job is taken past
//! the limit. A fetch loop that found none left waits for one given back (a
//! reserved fetch-next whose call brought no job) or its stop.
//!
//! The takes still on their way are counted, so a reader can tell "all
//! taken" (none left, none on its way) from "the last take's reply is not in
//! yet": `echomq work --max-jobs` stops only on the first.

use std::sync::Mutex;

use tokio::sync::Notify;

/// What is left and what is on its way, read and changed together: a reader
/// never sees a take that has left one count and not reached the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TakesNow {
    /// Takes not reserved yet.
    pub left: u64,
    /// Takes reserved by calls whose reply is not in yet.
    pub in_flight: u64,
}

pub(crate) struct Takes {
    now: Mutex<TakesNow>,
    given_back: Notify,
}

impl Takes {
    pub fn new(max_jobs: u64) -> Self {
        Takes {
            now: Mutex::new(TakesNow {
                left: max_jobs,
                in_flight: 0,
            }),
            given_back: Notify::new(),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut TakesNow) -> R) -> R {
        // Every change below is whole before the guard drops, so a poisoned
        // lock still holds consistent counts.
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut now)
    }

    /// Reserves up to `n`; answers how many were reserved.
    pub fn reserve(&self, n: u64) -> u64 {
        self.with(|now| {
            let got = now.left.min(n);
            now.left -= got;
            now.in_flight += got;
            got
        })
    }

    /// `n` reserved takes brought jobs that are held now.
    pub fn settle(&self, n: u64) {
        self.with(|now| now.in_flight = now.in_flight.saturating_sub(n));
    }

    /// Gives back `n` reserved takes that took no job.
    pub fn give_back(&self, n: u64) {
        if n > 0 {
            self.with(|now| {
                now.in_flight = now.in_flight.saturating_sub(n);
                now.left += n;
            });
            // A permit is kept when no loop waits yet: the wake is not lost.
            self.given_back.notify_one();
        }
    }

    /// Both counts, read together.
    pub fn now(&self) -> TakesNow {
        self.with(|now| *now)
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
        assert_eq!(t.now().left, 1);
        assert_eq!(t.reserve(4), 1);
    }

    #[test]
    fn a_take_is_in_flight_until_settled_or_given_back() {
        let t = Takes::new(3);
        assert_eq!(t.reserve(3), 3);
        assert_eq!(
            t.now(),
            TakesNow {
                left: 0,
                in_flight: 3
            }
        );
        t.settle(2);
        assert_eq!(
            t.now(),
            TakesNow {
                left: 0,
                in_flight: 1
            }
        );
        t.give_back(1);
        assert_eq!(
            t.now(),
            TakesNow {
                left: 1,
                in_flight: 0
            }
        );
        assert_eq!(t.reserve(1), 1);
        t.settle(1);
        assert_eq!(
            t.now(),
            TakesNow {
                left: 0,
                in_flight: 0
            }
        );
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
