//! Flow and metrics commands: `add-flow`, `flow`, `metrics`, and the
//! dependencies part of `job`.

use echomq::protocol::call::metrics::{Metrics, MetricsKind};
use echomq::{queue::FlowNode, Connection, FlowJob, FlowProducer, JobNode, JobState, Queue};

use crate::style::{self, paint};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Reads a flow file (BullMQ's FlowJob JSON shape, or an array of them for a
/// bulk), validated before connecting.
pub fn read_flow_file(file: &std::path::Path) -> Res<Vec<FlowJob>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", file.display()))?;
    let flows = match v {
        serde_json::Value::Array(a) => a,
        one => vec![one],
    };
    Ok(flows
        .iter()
        .map(FlowJob::from_json)
        .collect::<Result<Vec<_>, _>>()?)
}

/// `add-flow <file>`: adds the flow(s) and prints the tree of ids.
pub async fn add_flow(conn: &Connection, flows: Vec<FlowJob>) -> Res {
    let trees = FlowProducer::new(conn).add_bulk(flows).await?;
    for t in &trees {
        print_ids(t, 0);
    }
    Ok(())
}

fn print_ids(n: &JobNode, depth: usize) {
    anstream::println!(
        "{}{} {} {}",
        "  ".repeat(depth),
        paint(style::BOLD, &n.id),
        n.name,
        paint(style::DIM, format!("({})", n.queue))
    );
    for c in &n.children {
        print_ids(c, depth + 1);
    }
}

/// `flow <queue> <id>`: the tree below a job, with states.
pub async fn show_flow(q: &Queue, id: &str, depth: u32, max_children: u64) -> Res {
    let Some(node) = q.get_flow(id, depth, max_children).await? else {
        return Err(format!("job {id} not found").into());
    };
    print_node(&node, 0);
    Ok(())
}

fn state_style(s: JobState) -> anstyle::Style {
    match s {
        JobState::Completed => style::GOOD,
        JobState::Failed => style::BAD,
        JobState::Active => style::INFO,
        JobState::WaitingChildren | JobState::Delayed => style::WARN,
        _ => style::DIM,
    }
}

/// The state as BullMQ names it (`waiting`, not the list's name `wait`).
fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Waiting => "waiting",
        other => other.key_suffix(),
    }
}

fn print_node(n: &FlowNode, depth: usize) {
    let value = n
        .job
        .return_value
        .as_ref()
        .map(|v| format!(" = {v}"))
        .unwrap_or_default();
    anstream::println!(
        "{}{} {} {} {}{}",
        "  ".repeat(depth),
        paint(style::BOLD, &n.job.id),
        n.job.name,
        paint(style::DIM, format!("({})", n.queue)),
        paint(state_style(n.state), state_name(n.state)),
        value
    );
    for c in &n.children {
        print_node(c, depth + 1);
    }
}

/// The dependencies section of `job`: counts and the first children of
/// each group (nothing for a job that never had children).
pub async fn show_dependencies(q: &Queue, id: &str) -> Res {
    let d = q.get_dependencies(id, 0, 20).await?;
    let c = d.counts;
    if c.processed + c.unprocessed + c.ignored + c.failed == 0 {
        return Ok(());
    }
    anstream::println!(
        "{}  processed {}  pending {}  ignored {}  failed {}",
        paint(style::BOLD, "dependencies"),
        c.processed,
        c.unprocessed,
        c.ignored,
        c.failed
    );
    for (k, v) in &d.processed {
        anstream::println!("  {} {k} = {v}", paint(style::GOOD, "done   "));
    }
    for k in &d.unprocessed {
        anstream::println!("  {} {k}", paint(style::DIM, "pending"));
    }
    for (k, why) in &d.ignored {
        anstream::println!("  {} {k}: {why}", paint(style::WARN, "ignored"));
    }
    for k in &d.failed {
        anstream::println!("  {} {k}", paint(style::BAD, "failed "));
    }
    Ok(())
}

/// `metrics <queue>`: both series and a chart of the last hour.
pub async fn metrics(q: &Queue) -> Res {
    for kind in [MetricsKind::Completed, MetricsKind::Failed] {
        let m = q.get_metrics(kind, 0, 59).await?;
        anstream::println!(
            "{}  total {}  points {}",
            paint(style::BOLD, kind.as_str()),
            m.count,
            m.total_points
        );
        if m.prev_ts.is_none() {
            anstream::println!(
                "  {}",
                paint(
                    style::DIM,
                    "no data (workers record with max_metrics_size / metrics.maxDataPoints)"
                )
            );
            continue;
        }
        anstream::println!("  {}", chart(&m));
    }
    Ok(())
}

/// One character per data point, oldest left, height by the largest point.
fn chart(m: &Metrics) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = m.data.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return paint(style::DIM, "▁".repeat(m.data.len().max(1)));
    }
    let bars: String = m
        .data
        .iter()
        .rev()
        .map(|&v| {
            if v == 0 {
                ' '
            } else {
                BARS[((v * 7) / max) as usize]
            }
        })
        .collect();
    format!("{bars} {}", paint(style::DIM, format!("max {max}/min")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_scales_to_the_largest_point() {
        let m = Metrics {
            data: vec![0, 7, 1],
            ..Default::default()
        };
        let c = chart(&m);
        assert!(c.starts_with("▂█ "), "oldest right, zero blank: {c}");
    }
}
