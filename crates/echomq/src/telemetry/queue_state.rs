//! Queue state as BullMQ's `Queue.exportPrometheusMetrics` writes it: the
//! same metric names, HELP and TYPE lines, label order and spacing, so that
//! dashboards and alerts built on BullMQ's exporter read EchoMQ's queues
//! unchanged. Always compiled: it needs no metrics recorder.

use echomq_protocol::call::metrics::{GetMetrics, Metrics, MetricsKind};

use crate::error::Result;
use crate::queue::types::JobState;
use crate::queue::Telemetry;

/// The states BullMQ counts, in the order its `getJobCounts()` lists them
/// (which is the order of the exported lines).
const STATES: [(JobState, &str); 7] = [
    (JobState::Active, "active"),
    (JobState::Completed, "completed"),
    (JobState::Delayed, "delayed"),
    (JobState::Failed, "failed"),
    (JobState::Prioritized, "prioritized"),
    (JobState::Waiting, "waiting"),
    (JobState::WaitingChildren, "waiting-children"),
];

/// One queue's numbers, read in three round trips.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSample {
    /// The queue's name.
    pub queue: String,
    /// Jobs per state, in [`STATES`] order.
    counts: [u64; 7],
    /// The `count` of the per-minute metrics (BullMQ's `getMetrics`),
    /// completed then failed: 0 unless workers record metrics.
    completed_total: u64,
    failed_total: u64,
}

impl Telemetry<'_> {
    /// A metrics series (getMetrics-2): items `start..=end` (0 = the newest
    /// minute, -1 = the oldest). Recorded only while workers run with
    /// `max_metrics_size`.
    pub async fn get_metrics(self, kind: MetricsKind, start: i64, end: i64) -> Result<Metrics> {
        self.queue
            .conn
            .call(&GetMetrics {
                keys: &self.queue.keys,
                kind,
                start,
                end,
            })
            .await
    }

    /// Reads the numbers [`render`] writes for this queue.
    pub async fn prometheus_sample(self) -> Result<QueueSample> {
        let states: Vec<JobState> = STATES.iter().map(|(s, _)| *s).collect();
        let counts = self.queue.count_states(&states).await?;
        // One data point is enough: only the running count is exported.
        let completed = self.get_metrics(MetricsKind::Completed, 0, 0).await?;
        let failed = self.get_metrics(MetricsKind::Failed, 0, 0).await?;
        let mut c = [0u64; 7];
        for (slot, n) in c.iter_mut().zip(counts) {
            *slot = n;
        }
        Ok(QueueSample {
            queue: self.queue.name().to_owned(),
            counts: c,
            completed_total: completed.count,
            failed_total: failed.count,
        })
    }

    /// The queue's state in Prometheus text, exactly as BullMQ's
    /// `Queue.exportPrometheusMetrics(globalVariables)` writes it:
    /// `bullmq_job_count{queue, state}` per state, then
    /// `bullmq_job_completed_total` and `bullmq_job_failed_total` (the
    /// per-minute metrics' counts), with `global_variables` appended to every
    /// label set. No trailing newline, as BullMQ.
    pub async fn export_prometheus_metrics(
        &self,
        global_variables: &[(&str, &str)],
    ) -> Result<String> {
        Ok(render(&[self.prometheus_sample().await?], global_variables))
    }
}

/// The text of several queues: each metric's HELP and TYPE once, then its
/// lines for every queue (a scrape must not repeat a TYPE line). For one
/// queue it is BullMQ's text, byte for byte.
pub fn render(samples: &[QueueSample], global_variables: &[(&str, &str)]) -> String {
    let extra: String = global_variables
        .iter()
        .map(|(k, v)| format!(", {k}=\"{}\"", escape(v)))
        .collect();
    let mut lines = vec![
        "# HELP bullmq_job_count Number of jobs in the queue by state".to_owned(),
        "# TYPE bullmq_job_count gauge".to_owned(),
    ];
    for s in samples {
        let q = escape(&s.queue);
        for ((_, state), n) in STATES.iter().zip(s.counts) {
            lines.push(format!(
                "bullmq_job_count{{queue=\"{q}\", state=\"{state}\"{extra}}} {n}"
            ));
        }
    }
    let totals = [
        (
            "bullmq_job_completed_total",
            "Total number of completed jobs",
        ),
        ("bullmq_job_failed_total", "Total number of failed jobs"),
    ];
    for (i, (name, help)) in totals.iter().enumerate() {
        lines.push(format!("# HELP {name} {help}"));
        lines.push(format!("# TYPE {name} counter"));
        for s in samples {
            let n = if i == 0 {
                s.completed_total
            } else {
                s.failed_total
            };
            lines.push(format!(
                "{name}{{queue=\"{}\"{extra}}} {n}",
                escape(&s.queue)
            ));
        }
    }
    lines.join("\n")
}

/// A label value as the text format wants it (and BullMQ escapes it):
/// backslash, double quote and newline escaped. Every exporter of the crate
/// writes its labels through this one.
pub(crate) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_queue_reads_as_bullmq_writes_it() {
        let s = QueueSample {
            queue: "a\"b\\c\nd".into(),
            counts: [1, 2, 3, 4, 5, 6, 7],
            completed_total: 8,
            failed_total: 9,
        };
        let text = render(&[s], &[("env", "prod")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 15);
        assert_eq!(
            lines[2],
            r#"bullmq_job_count{queue="a\"b\\c\nd", state="active", env="prod"} 1"#
        );
        assert_eq!(
            lines[8],
            r#"bullmq_job_count{queue="a\"b\\c\nd", state="waiting-children", env="prod"} 7"#
        );
        assert_eq!(
            lines[9],
            "# HELP bullmq_job_completed_total Total number of completed jobs"
        );
        assert_eq!(
            lines[14],
            r#"bullmq_job_failed_total{queue="a\"b\\c\nd", env="prod"} 9"#
        );
        assert!(!text.ends_with('\n'));
    }
}
