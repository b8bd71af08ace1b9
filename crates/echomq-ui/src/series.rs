//! Throughput and failures over time: a ring buffer per queue, filled by a
//! sampler task every few seconds from the live feed's tallies, with the
//! counts read at the same time.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;

/// One sample of one queue.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Sample {
    /// When it was taken, ms since the epoch.
    pub at: u64,
    /// Jobs completed per second over the interval.
    pub completed_per_s: f64,
    /// Jobs failed per second over the interval.
    pub failed_per_s: f64,
    /// Jobs waiting (wait + prioritized) at that time.
    pub waiting: u64,
}

/// The ring buffers of every queue.
#[derive(Default)]
pub(crate) struct Series {
    rings: Mutex<HashMap<String, VecDeque<Sample>>>,
}

impl Series {
    pub(crate) fn push(&self, queue: &str, sample: Sample, keep: usize) {
        let mut rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        let ring = rings.entry(queue.to_owned()).or_default();
        if ring.len() == keep {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    /// The samples of `queue`, oldest first.
    pub fn of(&self, queue: &str) -> Vec<Sample> {
        self.rings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(queue)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: u64) -> Sample {
        Sample {
            at,
            completed_per_s: 1.0,
            failed_per_s: 0.0,
            waiting: 0,
        }
    }

    #[test]
    fn a_ring_keeps_the_newest_samples() {
        let s = Series::default();
        for at in 0..10 {
            s.push("q", sample(at), 3);
        }
        let kept: Vec<u64> = s.of("q").iter().map(|x| x.at).collect();
        assert_eq!(kept, vec![7, 8, 9]);
        assert!(s.of("other").is_empty());
    }
}
