//! Per-group gauges for a scrape, bounded in cardinality: the queue's
//! [`TOP_GROUPS`] busiest groups of all (one bounded read of `{P}gr:busy`),
//! never one series per tenant (docs/groups.md §Metrics). Read from Redis
//! at each scrape, like [`super::queue_state`], so a group that leaves the
//! top has no series left behind.

use echomq_protocol::call::groups::GroupInfo;

use crate::error::Result;
use crate::queue::Groups;
use crate::telemetry::queue_state::escape;

/// Groups exported per queue and scrape (one getGroups call).
pub const TOP_GROUPS: usize = 10;

/// One queue's group numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSample {
    /// The queue's name.
    pub queue: String,
    /// Groups the queue knows.
    pub total: u64,
    /// `(group, waiting, active, paused)` of the busiest, busiest first.
    top: Vec<(String, u64, u64, bool)>,
}

impl Groups<'_> {
    /// Reads the numbers [`render`] writes: one bounded call.
    pub async fn sample(self) -> Result<GroupSample> {
        let page = self.busiest(TOP_GROUPS as u64).await?;
        Ok(GroupSample {
            queue: self.queue.name().to_owned(),
            total: page.total,
            top: top(page.groups),
        })
    }
}

fn top(mut groups: Vec<GroupInfo>) -> Vec<(String, u64, u64, bool)> {
    groups.sort_by(|a, b| {
        // The score of `{P}gr:busy`; ties by id, for a stable order.
        (b.waiting + b.delayed + b.active)
            .cmp(&(a.waiting + a.delayed + a.active))
            .then_with(|| a.id.cmp(&b.id))
    });
    groups
        .into_iter()
        .take(TOP_GROUPS)
        .map(|g| (g.id, g.waiting, g.active, g.paused))
        .collect()
}

/// `echomq_groups{queue}` (groups known) and, for the busiest groups only,
/// `echomq_group_jobs{queue, group, state}` (`waiting`: not released yet,
/// `active`: released and unfinished) and `echomq_group_paused`. Queues
/// without groups write nothing.
pub fn render(samples: &[GroupSample]) -> String {
    let samples: Vec<&GroupSample> = samples.iter().filter(|s| s.total > 0).collect();
    if samples.is_empty() {
        return String::new();
    }
    let mut lines = vec![
        "# HELP echomq_groups Groups known to the queue".to_owned(),
        "# TYPE echomq_groups gauge".to_owned(),
    ];
    for s in &samples {
        lines.push(format!(
            "echomq_groups{{queue=\"{}\"}} {}",
            escape(&s.queue),
            s.total
        ));
    }
    lines.push(format!(
        "# HELP echomq_group_jobs Jobs of the queue's {TOP_GROUPS} busiest groups by state"
    ));
    lines.push("# TYPE echomq_group_jobs gauge".to_owned());
    for s in &samples {
        let q = escape(&s.queue);
        for (g, waiting, active, _) in &s.top {
            let g = escape(g);
            lines.push(format!(
                "echomq_group_jobs{{queue=\"{q}\", group=\"{g}\", state=\"waiting\"}} {waiting}"
            ));
            lines.push(format!(
                "echomq_group_jobs{{queue=\"{q}\", group=\"{g}\", state=\"active\"}} {active}"
            ));
        }
    }
    lines.push(
        "# HELP echomq_group_paused 1 when the group is paused (busiest groups only)".to_owned(),
    );
    lines.push("# TYPE echomq_group_paused gauge".to_owned());
    for s in &samples {
        let q = escape(&s.queue);
        for (g, _, _, paused) in &s.top {
            lines.push(format!(
                "echomq_group_paused{{queue=\"{q}\", group=\"{}\"}} {}",
                escape(g),
                u8::from(*paused)
            ));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, waiting: u64, active: u64) -> GroupInfo {
        let mut g = GroupInfo::default();
        g.id = id.into();
        g.waiting = waiting;
        g.active = active;
        g
    }

    #[test]
    fn only_the_busiest_groups_are_exported() {
        let groups: Vec<GroupInfo> = (0..50).map(|i| info(&format!("t{i}"), i, 0)).collect();
        let s = GroupSample {
            queue: "q".into(),
            total: 50,
            top: top(groups),
        };
        let text = render(&[s]);
        let series = text
            .lines()
            .filter(|l| l.starts_with("echomq_group_jobs{"))
            .count();
        assert_eq!(series, 2 * TOP_GROUPS);
        assert!(text.contains(r#"echomq_group_jobs{queue="q", group="t49", state="waiting"} 49"#));
        assert!(!text.contains(r#"group="t0""#));
        assert!(text.contains(r#"echomq_groups{queue="q"} 50"#));
        let none = GroupSample {
            queue: "plain".into(),
            total: 0,
            top: Vec::new(),
        };
        assert_eq!(render(&[none]), "");
    }
}
