//! `echomq dlq <dead-letter-queue> [list|show|replay]`: the dead letters of a
//! dead-letter queue (docs/operations.md §Dead letters), by filter, and their
//! replay to the queues they came from, one atomic call per job.

use clap::Subcommand;
use echomq::dead_letter::{DeadLetter, DeadLetterFilter, ReplayOptions};
use echomq::Queue;

use super::{truncate, Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The dead-letter queue.
    queue: String,
    #[command(subcommand)]
    action: Option<Action>,
}

/// Which dead letters: every filter given must match.
#[derive(Debug, Clone, Default, clap::Args)]
struct Filter {
    /// The job's name, exactly.
    #[arg(long)]
    name: Option<String>,
    /// A text the failure reason contains.
    #[arg(long)]
    reason: Option<String>,
    /// Dead-lettered at or after: epoch ms, RFC 3339, or a time ago (`90s`, `15m`, `2h`, `1d`).
    #[arg(long, value_parser = parse_when)]
    since: Option<When>,
    /// Dead-lettered before: as --since.
    #[arg(long, value_parser = parse_when)]
    before: Option<When>,
    /// The queue the job came from.
    #[arg(long)]
    source: Option<String>,
    /// The reason class: unrecoverable, timeout, stalled, cancelled, error.
    #[arg(long, value_parser = ["unrecoverable", "timeout", "stalled", "cancelled", "error"])]
    class: Option<String>,
}

/// A point in time, absolute or some time before now (Redis's clock).
#[derive(Debug, Clone, Copy)]
enum When {
    At(u64),
    Ago(u64),
}

fn parse_when(s: &str) -> Result<When, String> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(When::At(ms));
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return u64::try_from(t.timestamp_millis())
            .map(When::At)
            .map_err(|_| format!("{s:?} is before 1970"));
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not epoch ms, RFC 3339 nor a time ago like 15m"))?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?}: the unit of a time ago is ms, s, m, h or d")),
    };
    Ok(When::Ago(n.saturating_mul(unit_ms)))
}

/// `dlq <queue> …`
#[derive(Debug, Clone, Subcommand)]
enum Action {
    /// Dead letters matching the filter, newest first (the default).
    List {
        #[command(flatten)]
        filter: Filter,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// One dead letter: where it came from, why it failed, its data and options.
    Show { id: String },
    /// Put the dead letters matching the filter back in their source queues as
    /// fresh jobs (same id, data and options; attempts reset), oldest first,
    /// one atomic call each: stopped anywhere and run again, it neither
    /// doubles nor loses a job.
    Replay {
        #[command(flatten)]
        filter: Filter,
        /// At most this many.
        #[arg(long)]
        limit: Option<u64>,
        /// At most this many jobs per second.
        #[arg(long)]
        rate: Option<f64>,
    },
    /// Dead letters by source queue and reason class.
    Counts,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let access = match a.action {
        Some(Action::Replay { .. }) => Access::Write,
        _ => Access::Read,
    };
    if let Some(Action::Replay { rate: Some(r), .. }) = &a.action {
        if !(r.is_finite() && *r > 0.0) {
            return Err("--rate must be a positive number of jobs per second".into());
        }
    }
    super::queue(t, &a.queue)?
        .run(access, async |conn, q| dlq(conn, q, a.action).await)
        .await
}

async fn redis_now(conn: &echomq::Connection) -> Res<u64> {
    use fred::prelude::ClientLike;
    use fred::types::{ClusterHash, CustomCommand};
    let reply: Vec<String> = conn
        .pool()
        .next()
        .custom(
            CustomCommand::new_static("TIME", ClusterHash::Random, false),
            Vec::<String>::new(),
        )
        .await?;
    let part = |i: usize| reply.get(i).and_then(|x| x.parse::<u64>().ok());
    match (part(0), part(1)) {
        (Some(s), Some(us)) => Ok(s * 1000 + us / 1000),
        _ => Err("Redis TIME answered an unexpected reply".into()),
    }
}

async fn filter_of(conn: &echomq::Connection, f: Filter) -> Res<DeadLetterFilter> {
    let mut out = DeadLetterFilter::all();
    out.name = f.name;
    out.reason = f.reason;
    out.source = f.source;
    out.class = f.class;
    let needs_now = matches!(f.since, Some(When::Ago(_))) || matches!(f.before, Some(When::Ago(_)));
    let now = if needs_now { redis_now(conn).await? } else { 0 };
    let at = |w: When| match w {
        When::At(ms) => ms,
        When::Ago(ms) => now.saturating_sub(ms),
    };
    out.since = f.since.map(at);
    out.before = f.before.map(at);
    Ok(out)
}

fn header() {
    anstream::println!(
        "{}",
        paint(
            style::DIM,
            format!(
                "{:<10} {:<20} {:<16} {:<10} {:<14} {:>4} {:<24} reason",
                "id", "dead-lettered", "source", "source id", "class", "att", "name"
            )
        )
    );
}

fn when(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn row(d: &DeadLetter) {
    anstream::println!(
        "{:<10} {:<20} {:<16} {:<10} {:<14} {:>4} {:<24} {}",
        d.id,
        when(d.dead_lettered_at),
        truncate(&d.source_queue, 16),
        truncate(&d.source_id, 10),
        d.class,
        d.job.attempts_made,
        truncate(&d.job.name, 24),
        truncate(d.job.failed_reason.as_deref().unwrap_or(""), 60)
    );
}

async fn dlq(conn: &echomq::Connection, q: &Queue, action: Option<Action>) -> Res {
    match action.unwrap_or(Action::List {
        filter: Filter::default(),
        limit: 50,
    }) {
        Action::List { filter, limit } => {
            let filter = filter_of(conn, filter).await?;
            let letters = q.dead_letters().list(&filter, limit).await?;
            header();
            for d in &letters {
                row(d);
            }
            let total = q.dead_letters().count().await?;
            anstream::println!("{} shown of {} dead letters", letters.len(), total);
        }
        Action::Show { id } => {
            let Some(d) = q.dead_letters().show(&id).await? else {
                return Err(echomq::dead_letter::DeadLetterError::NotFound {
                    dlq: q.name().to_owned(),
                    id,
                }
                .to_string()
                .into());
            };
            anstream::println!("id:             {}", d.id);
            anstream::println!("source:         {} (job {})", d.source_queue, d.source_id);
            anstream::println!(
                "dead-lettered:  {} ({} ms)",
                when(d.dead_lettered_at),
                d.dead_lettered_at
            );
            anstream::println!("class:          {}", d.class);
            anstream::println!("name:           {}", d.job.name);
            anstream::println!("attempts made:  {}", d.job.attempts_made);
            anstream::println!(
                "reason:         {}",
                d.job.failed_reason.as_deref().unwrap_or("")
            );
            anstream::println!("data:           {}", d.job.data);
            anstream::println!(
                "opts:           {}",
                serde_json::Value::Object(d.job.opts.to_public())
            );
            for (i, s) in d.job.stacktrace.iter().enumerate() {
                anstream::println!(
                    "stack[{i}]:       {}",
                    s.replace('\n', "\n                ")
                );
            }
        }
        Action::Replay {
            filter,
            limit,
            rate,
        } => {
            let filter = filter_of(conn, filter).await?;
            let mut options = ReplayOptions::default();
            options.limit = limit;
            options.rate = rate;
            let report = q.dead_letters().replay(&filter, options).await?;
            for (id, source, new_id) in &report.replayed {
                anstream::println!("replayed {id} -> {source} job {new_id}");
            }
            for s in &report.skipped {
                anstream::println!(
                    "{} {} ({}): {}",
                    paint(style::WARN, "left"),
                    s.id,
                    s.source_queue,
                    s.reason
                );
            }
            anstream::println!(
                "{} replayed, {} left in place",
                report.replayed.len(),
                report.skipped.len()
            );
        }
        Action::Counts => {
            for ((source, class), n) in q.dead_letters().counts().await? {
                anstream::println!("{source:<24} {class:<14} {n}");
            }
        }
    }
    Ok(())
}
