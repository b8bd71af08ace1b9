//! `echomq budget <queue> [--max-bytes N | --clear] [--json]`: show or set
//! the queue's byte budget (docs/operations.md §Memory). A bad byte count
//! (0, negative, not a number, too large) is refused by the argument parser
//! with the budget's typed error, before anything connects or writes.

use echomq::budget::{human_bytes, parse_max_bytes, ByteBudget};
use echomq::Queue;
use serde_json::json;

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    /// Set the budget: bytes, optionally with a unit (`64MiB`, `2GB`).
    #[arg(long, value_parser = parse_max_bytes, allow_hyphen_values = true, conflicts_with = "clear")]
    max_bytes: Option<u64>,
    /// Remove the budget.
    #[arg(long)]
    clear: bool,
    /// One JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let access = match (a.max_bytes, a.clear) {
        (None, false) => Access::Read,
        _ => Access::Write,
    };
    let (max_bytes, clear, json) = (a.max_bytes, a.clear, a.json);
    super::queue(t, &a.queue)?
        .run(access, async |_, q| budget(q, max_bytes, clear, json).await)
        .await
}

async fn budget(q: &Queue, max_bytes: Option<u64>, clear: bool, json: bool) -> Res {
    if let Some(max) = max_bytes {
        q.set_byte_budget(max).await?;
    } else if clear {
        q.clear_byte_budget().await?;
    }
    let b = q.byte_budget().await?;
    if json {
        anstream::println!("{}", to_json(q.name(), &b));
    } else {
        print(q.name(), &b);
    }
    Ok(())
}

/// The budget as `stats --json` and `budget --json` print it.
pub(crate) fn to_json(queue: &str, b: &ByteBudget) -> serde_json::Value {
    json!({
        "queue": queue,
        "max_bytes": b.max,
        "used_bytes": b.used,
        "jobs_bytes": b.jobs_bytes,
        "events_bytes": b.events_bytes,
        "completed": b.completed,
        "failed": b.failed,
        "removed": b.removed,
        "trimmed": b.trimmed,
    })
}

/// One line: used of max, as `stats` prints it.
pub(crate) fn line(b: &ByteBudget) -> String {
    match b.max {
        Some(max) => format!(
            "{} of {} ({:.0}%)",
            human_bytes(b.used),
            human_bytes(max),
            b.used as f64 * 100.0 / max as f64
        ),
        None => format!(
            "{} {}",
            human_bytes(b.used),
            paint(style::DIM, "(no budget)")
        ),
    }
}

fn print(queue: &str, b: &ByteBudget) {
    anstream::println!("{} {queue}", paint(style::BOLD, "budget"));
    anstream::println!("  {:<17}{}", "in use", line(b));
    anstream::println!(
        "  {:<17}{} {}",
        "finished jobs",
        human_bytes(b.jobs_bytes),
        paint(
            style::DIM,
            format!("{} completed, {} failed", b.completed, b.failed)
        )
    );
    anstream::println!("  {:<17}{}", "events", human_bytes(b.events_bytes));
    anstream::println!(
        "  {:<17}{} jobs removed, {} events trimmed",
        "by the budget",
        b.removed,
        b.trimmed
    );
}
