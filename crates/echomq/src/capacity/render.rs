//! The capacity gauges in Prometheus text, one series per queue
//! (docs/operations.md §Autoscaling lists them).

use super::monitor::Capacity;
use crate::telemetry::queue_state::escape;

/// `(name, help, value)` of each gauge; `None` writes no line (a service
/// time not measured yet is absent, not zero).
type Gauge = (&'static str, &'static str, fn(&Capacity) -> Option<f64>);

const GAUGES: [Gauge; 8] = [
    (
        "echomq_capacity_desired_workers",
        "Workers the queue needs to keep its oldest job under the target age (smoothed, no flapping)",
        |c| Some(c.desired_workers as f64),
    ),
    (
        "echomq_capacity_instant_workers",
        "Workers the last reading alone asks for, before smoothing",
        |c| Some(c.instant_workers as f64),
    ),
    (
        "echomq_capacity_backlog",
        "Jobs waiting, prioritized or delayed and due",
        |c| Some(c.backlog as f64),
    ),
    (
        "echomq_capacity_oldest_age_seconds",
        "Age of the oldest job of the backlog since it became ready",
        |c| Some(c.reading.oldest_age_ms as f64 / 1000.0),
    ),
    (
        "echomq_capacity_arrival_rate",
        "Jobs added per second over the events window",
        |c| Some(c.reading.arrival_rate),
    ),
    (
        "echomq_capacity_completion_rate",
        "Jobs finished (completed or failed) per second over the events window",
        |c| Some(c.reading.completion_rate),
    ),
    (
        "echomq_capacity_service_time_seconds",
        "Mean processing time of the jobs finished in the events window",
        |c| c.reading.service_time_ms.map(|ms| ms / 1000.0),
    ),
    (
        "echomq_capacity_target_age_seconds",
        "The target backlog age the desired figure is computed against",
        |c| Some(c.target_age_ms as f64 / 1000.0),
    ),
];

/// The gauges of every queue: HELP and TYPE once per metric. Empty when
/// there is no queue.
pub fn render(figures: &[Capacity]) -> String {
    if figures.is_empty() {
        return String::new();
    }
    let mut lines = Vec::new();
    for (name, help, value) in GAUGES {
        lines.push(format!("# HELP {name} {help}"));
        lines.push(format!("# TYPE {name} gauge"));
        for c in figures {
            if let Some(v) = value(c) {
                lines.push(format!("{name}{{queue=\"{}\"}} {v}", escape(&c.queue)));
            }
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::super::plan::Reading;
    use super::*;

    #[test]
    fn every_gauge_once_with_a_line_per_queue() {
        let c = |q: &str, service| Capacity {
            queue: q.into(),
            reading: Reading {
                oldest_age_ms: 1500,
                arrival_rate: 40.0,
                service_time_ms: service,
                ..Reading::default()
            },
            backlog: 7,
            instant_workers: 2,
            desired_workers: 3,
            target_age_ms: 10_000,
            concurrency: 1,
        };
        let text = render(&[c("a", Some(20.0)), c("b\"", None)]);
        assert_eq!(text.matches("# TYPE ").count(), GAUGES.len());
        assert!(text.contains("echomq_capacity_desired_workers{queue=\"a\"} 3\n"));
        assert!(text.contains("echomq_capacity_desired_workers{queue=\"b\\\"\"} 3\n"));
        assert!(text.contains("echomq_capacity_oldest_age_seconds{queue=\"a\"} 1.5\n"));
        assert!(text.contains("echomq_capacity_service_time_seconds{queue=\"a\"} 0.02\n"));
        assert!(!text.contains("echomq_capacity_service_time_seconds{queue=\"b"));
        assert!(text.contains("echomq_capacity_target_age_seconds{queue=\"b\\\"\"} 10"));
        assert_eq!(render(&[]), "");
    }
}
