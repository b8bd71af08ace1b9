//! A queue watched over time: readings (`Telemetry::capacity_reading`) fed to the planner
//! ([`super::plan`]), and the set of them a `/metrics` endpoint keeps.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use tracing::warn;

use super::plan::{instant_workers, Hysteresis, Reading};
use super::settings::{CapacityError, CapacitySettings};
use crate::error::Result;
use crate::queue::handle::Queue;

/// How long one scrape waits for a queue's reading before leaving it out.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One queue's capacity figures, as `/metrics` and `echomq stats --json`
/// show them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Capacity {
    /// The queue's name.
    pub queue: String,
    /// What was read.
    #[serde(flatten)]
    pub reading: Reading,
    /// Waiting + prioritized + due delayed jobs.
    pub backlog: u64,
    /// The workers this reading alone asks for ([`instant_workers`]).
    pub instant_workers: u64,
    /// The published figure: the instant one through the hysteresis (equal
    /// to it on a first reading, held while the queue is paused).
    pub desired_workers: u64,
    /// The target backlog age it was computed against, ms.
    pub target_age_ms: u64,
    /// The slots per worker it was computed with.
    pub concurrency: u32,
}

/// The figures of one queue over time: each [`observe`](Self::observe)
/// reads the queue and publishes through the same [`Hysteresis`].
#[derive(Clone, Debug)]
pub struct CapacityMonitor {
    settings: CapacitySettings,
    hysteresis: Hysteresis,
}

impl CapacityMonitor {
    /// A monitor with `settings`, refused when they make no sense.
    pub fn new(settings: CapacitySettings) -> std::result::Result<Self, CapacityError> {
        settings.validate()?;
        Ok(CapacityMonitor {
            settings,
            hysteresis: Hysteresis::default(),
        })
    }

    /// Its settings.
    pub fn settings(&self) -> &CapacitySettings {
        &self.settings
    }

    /// Reads `queue` and publishes its figure.
    pub async fn observe(&mut self, queue: &Queue) -> Result<Capacity> {
        let reading = queue.telemetry().capacity_reading().await?;
        Ok(self.publish(queue.name(), reading))
    }

    /// Publishes the figure of a reading (the pure half of
    /// [`observe`](Self::observe)).
    pub fn publish(&mut self, queue: &str, reading: Reading) -> Capacity {
        let instant = instant_workers(&reading, &self.settings);
        let desired = match (reading.paused, self.hysteresis.published()) {
            // Workers of a paused queue take nothing: no reason to move.
            (true, Some(held)) => held,
            _ => self
                .hysteresis
                .next(reading.at_ms, instant, self.settings.scale_down_delay),
        };
        Capacity {
            queue: queue.to_owned(),
            backlog: reading.backlog(),
            reading,
            instant_workers: instant,
            desired_workers: desired,
            target_age_ms: self.settings.target_age.as_millis() as u64,
            concurrency: self.settings.concurrency,
        }
    }
}

/// The monitors of the queues a `/metrics` endpoint watches, one per
/// queue name, all with the same settings (the defaults by `Default`).
#[derive(Debug, Default)]
pub struct CapacityBoard {
    settings: CapacitySettings,
    monitors: tokio::sync::Mutex<HashMap<String, CapacityMonitor>>,
}

impl CapacityBoard {
    /// A board whose monitors use `settings`.
    pub fn new(settings: CapacitySettings) -> std::result::Result<Self, CapacityError> {
        settings.validate()?;
        Ok(CapacityBoard {
            settings,
            monitors: Default::default(),
        })
    }

    /// The figures of `queues`; a queue whose read fails or is too slow is
    /// left out (and logged), the others are not held up by it.
    pub async fn observe(&self, queues: &[Queue]) -> Vec<Capacity> {
        // One scrape at a time: two at once would publish out of order.
        let mut monitors = self.monitors.lock().await;
        let mut out = Vec::with_capacity(queues.len());
        for q in queues {
            let monitor = monitors
                .entry(q.name().to_owned())
                .or_insert_with(|| CapacityMonitor {
                    settings: self.settings,
                    hysteresis: Hysteresis::default(),
                });
            match tokio::time::timeout(READ_TIMEOUT, monitor.observe(q)).await {
                Ok(Ok(c)) => out.push(c),
                Ok(Err(e)) => {
                    warn!(queue = %q.name(), error = %e, "capacity left out of the scrape")
                }
                Err(_) => {
                    warn!(queue = %q.name(), "capacity left out of the scrape: Redis too slow")
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_queue_holds_its_figure() {
        let mut m = CapacityMonitor::new(CapacitySettings::default()).unwrap();
        let mut r = Reading {
            at_ms: 1,
            waiting: 5,
            active: 1,
            arrival_rate: 10.0,
            service_time_ms: Some(100.0),
            ..Reading::default()
        };
        let first = m.publish("q", r.clone());
        assert_eq!(first.desired_workers, 2, "{first:?}");
        r.paused = true;
        r.waiting = 5_000;
        r.at_ms = 2;
        let held = m.publish("q", r);
        assert_eq!(held.desired_workers, 2);
        assert!(held.instant_workers > 2);
        assert!(CapacityMonitor::new(CapacitySettings::default().concurrency(0)).is_err());
    }
}
