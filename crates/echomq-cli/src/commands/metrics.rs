//! `echomq metrics <queue>`: completed/failed metrics and a chart of the
//! last hour.

use echomq::protocol::call::metrics::{Metrics, MetricsKind};
use echomq::Queue;

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Read, async |_, q| metrics(q).await)
        .await
}

/// Both series and a chart of the last hour.
async fn metrics(q: &Queue) -> Res {
    for kind in [MetricsKind::Completed, MetricsKind::Failed] {
        let m = q.telemetry().get_metrics(kind, 0, 59).await?;
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
