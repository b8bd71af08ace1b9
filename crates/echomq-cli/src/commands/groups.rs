//! `echomq groups <queue> [list|show|set-concurrency|set-rate-limit|set-max-size|pause|resume|remove]`:
//! the groups of a queue (docs/groups.md). Bad values are refused by the
//! argument parser, before anything connects or writes.

use std::time::Duration;

use clap::Subcommand;
use echomq::groups::GroupInfo;
use echomq::Queue;

use super::limiter::parse_rate_limit;
use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    #[command(subcommand)]
    action: Option<Action>,
}

/// `groups <queue> …`
#[derive(Debug, Clone, Subcommand)]
enum Action {
    /// The groups with their counts and settings, busiest first (the default).
    List {
        /// First group (in id order) of the page read.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Groups read (at most 1000).
        #[arg(long, default_value_t = 100)]
        count: u64,
        /// Instead of a page: the N busiest groups of the whole queue (at
        /// most 1000; waiting + delayed + released-and-unfinished jobs).
        #[arg(long, value_name = "N", conflicts_with = "start")]
        busiest: Option<u64>,
    },
    /// One group's counts and settings.
    Show { id: String },
    /// At most N of the group's jobs released and unfinished at once.
    SetConcurrency {
        id: String,
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        concurrency: u64,
    },
    /// At most MAX releases per DURATION_MS (`MAX/DURATION_MS`, e.g. `10/1000`).
    SetRateLimit {
        id: String,
        #[arg(value_parser = parse_rate_limit)]
        limit: echomq::RateLimit,
    },
    /// Refuse adds while the group holds N unreleased jobs.
    SetMaxSize {
        id: String,
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        max_size: u64,
    },
    /// Stop releasing the group's jobs.
    Pause { id: String },
    /// Release the group's jobs again.
    Resume { id: String },
    /// Remove the group's unreleased jobs and the group.
    Remove { id: String },
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let access = match a.action {
        None | Some(Action::List { .. } | Action::Show { .. }) => Access::Read,
        Some(_) => Access::Write,
    };
    super::queue(t, &a.queue)?
        .run(access, async |_, q| groups(q, a.action).await)
        .await
}

fn row(g: &GroupInfo) {
    let limit = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let rate = g
        .rate_limit
        .map_or_else(|| "-".to_owned(), |(m, d)| format!("{m}/{d} ms"));
    let paused = if g.paused {
        paint(style::WARN, "paused")
    } else {
        String::new()
    };
    anstream::println!(
        "{:<24} {:>9} {:>7} {:>7} {:>6} {:>12} {:>8} {}",
        g.id,
        g.waiting,
        g.active,
        g.delayed,
        limit(g.concurrency),
        rate,
        limit(g.max_size),
        paused
    );
}

fn header() {
    anstream::println!(
        "{}",
        paint(
            style::DIM,
            format!(
                "{:<24} {:>9} {:>7} {:>7} {:>6} {:>12} {:>8}",
                "group", "waiting", "active", "delayed", "conc", "rate", "max size"
            )
        )
    );
}

async fn groups(q: &Queue, action: Option<Action>) -> Res {
    match action.unwrap_or(Action::List {
        start: 0,
        count: 100,
        busiest: None,
    }) {
        Action::List {
            start,
            count,
            busiest,
        } => {
            let mut page = match busiest {
                Some(n) => q.groups().busiest(n).await?,
                None => q.groups().page(start, count).await?,
            };
            page.groups.sort_by(|a, b| {
                (b.waiting + b.delayed + b.active)
                    .cmp(&(a.waiting + a.delayed + a.active))
                    .then_with(|| a.id.cmp(&b.id))
            });
            header();
            for g in &page.groups {
                row(g);
            }
            anstream::println!("{} of {} groups", page.groups.len(), page.total);
            let d = q.groups().defaults().await?;
            anstream::println!(
                "defaults (groups without their own): conc {}, rate {}",
                d.concurrency
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                d.limit
                    .map_or_else(|| "-".to_owned(), |(m, ms)| format!("{m}/{ms} ms"))
            );
        }
        Action::Show { id } => {
            header();
            row(&q.groups().counts(&id).await?);
        }
        Action::SetConcurrency { id, concurrency } => {
            q.groups().set_concurrency(&id, concurrency).await?;
            anstream::println!("group {id}: concurrency {concurrency}");
        }
        Action::SetRateLimit { id, limit } => {
            q.groups()
                .set_rate_limit(&id, limit.max, Duration::from_millis(limit.duration_ms()))
                .await?;
            anstream::println!(
                "group {id}: at most {}/{} ms",
                limit.max,
                limit.duration_ms()
            );
        }
        Action::SetMaxSize { id, max_size } => {
            q.groups().set_max_size(&id, max_size).await?;
            anstream::println!("group {id}: max size {max_size}");
        }
        Action::Pause { id } => {
            let changed = q.groups().pause(&id).await?;
            anstream::println!(
                "group {id}: {}",
                if changed {
                    "paused"
                } else {
                    "was paused already"
                }
            );
        }
        Action::Resume { id } => {
            let changed = q.groups().resume(&id).await?;
            anstream::println!(
                "group {id}: {}",
                if changed { "resumed" } else { "was not paused" }
            );
        }
        Action::Remove { id } => {
            let n = q.groups().remove(&id).await?;
            anstream::println!("group {id}: removed with {n} unreleased jobs");
        }
    }
    Ok(())
}
