//! Byte budgets for a scrape: `echomq_budget_bytes{queue}` and
//! `echomq_budget_used_bytes{queue}` (docs/operations.md §Memory), for the
//! queues that have a budget. One `HGET` per queue, and for a queue with a
//! budget one bounded read-only `enforceBudget` (a sample of each finished
//! set), read at each scrape like [`super::queue_state`].

use fred::prelude::HashesInterface;

use crate::error::Result;
use crate::queue::Queue;
use crate::telemetry::queue_state::escape;

/// One queue's budget and the bytes it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetSample {
    /// The queue's name.
    pub queue: String,
    /// The budget in bytes.
    pub max: u64,
    /// The bytes it keeps (estimate).
    pub used: u64,
}

/// Reads the numbers [`render`] writes; `None` for a queue without a
/// budget (one `HGET`).
pub async fn sample(q: &Queue) -> Result<Option<BudgetSample>> {
    let max: Option<u64> = q.connection().pool().hget(q.keys().budget(), "max").await?;
    if max.is_none_or(|m| m == 0) {
        return Ok(None);
    }
    let b = q.byte_budget().await?;
    Ok(b.max.map(|max| BudgetSample {
        queue: q.name().to_owned(),
        max,
        used: b.used,
    }))
}

/// The two gauges; nothing when no queue has a budget.
pub fn render(samples: &[BudgetSample]) -> String {
    if samples.is_empty() {
        return String::new();
    }
    let mut lines = vec![
        "# HELP echomq_budget_bytes The queue's byte budget for what it keeps after work is done"
            .to_owned(),
        "# TYPE echomq_budget_bytes gauge".to_owned(),
    ];
    for s in samples {
        lines.push(format!(
            "echomq_budget_bytes{{queue=\"{}\"}} {}",
            escape(&s.queue),
            s.max
        ));
    }
    lines.push(
        "# HELP echomq_budget_used_bytes Bytes the queue keeps after work is done (finished jobs and events, estimated)"
            .to_owned(),
    );
    lines.push("# TYPE echomq_budget_used_bytes gauge".to_owned());
    for s in samples {
        lines.push(format!(
            "echomq_budget_used_bytes{{queue=\"{}\"}} {}",
            escape(&s.queue),
            s.used
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_gauges_per_queue() {
        let s = BudgetSample {
            queue: "q".into(),
            max: 1024,
            used: 512,
        };
        let text = render(&[s]);
        assert!(text.contains("echomq_budget_bytes{queue=\"q\"} 1024"));
        assert!(text.contains("echomq_budget_used_bytes{queue=\"q\"} 512"));
        assert!(text.contains("# TYPE echomq_budget_used_bytes gauge"));
        assert_eq!(render(&[]), "");
    }
}
