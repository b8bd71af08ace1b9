//! Throughput and failures over time: a ring buffer per queue, filled by a
//! sampler task every few seconds from the live feed's tallies, with the
//! counts read at the same time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use echomq::{JobCounts, Queue, QueueOptions};
use serde::Serialize;

use crate::discover;
use crate::state::App;

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
    fn push(&self, queue: &str, sample: Sample, keep: usize) {
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

/// Samples every queue of the prefix until the app is cancelled; a queue
/// that appears is watched by the live feed from then on.
pub(crate) async fn run_sampler(app: Arc<App>) {
    let mut tick = tokio::time::interval(app.config.sample_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = app.cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let elapsed = last.elapsed().as_secs_f64().max(0.001);
        last = std::time::Instant::now();
        let names = match discover::queue_names(&app.conn).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "sampler: queue discovery failed");
                continue;
            }
        };
        for name in names {
            app.live.watch(&app.conn, &name).await;
            let counts = match open(&app, &name).await {
                Ok(q) => q.counts().await.unwrap_or_default(),
                Err(_) => JobCounts::default(),
            };
            let tally = app.live.take_tally(&name);
            let sample = Sample {
                at: echomq::clock::now_ms(),
                completed_per_s: tally.completed as f64 / elapsed,
                failed_per_s: tally.failed as f64 / elapsed,
                waiting: counts.waiting + counts.prioritized,
            };
            app.series.push(&name, sample, app.config.samples);
        }
    }
}

async fn open(app: &App, name: &str) -> echomq::Result<Queue> {
    Queue::with_options(
        &app.conn,
        name,
        QueueOptions::default().skip_meta_update(true),
    )
    .await
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
