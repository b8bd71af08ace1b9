//! `echomq schedulers <queue> …`: list, create/replace or remove job
//! schedulers.

use std::time::Duration;

use clap::Subcommand;
use echomq::{JobSchedulers, SchedulerSpec};

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    #[command(subcommand)]
    action: Action,
}

/// `schedulers <queue> …`
#[derive(Debug, Subcommand)]
enum Action {
    /// Every scheduler, earliest next run first.
    List,
    /// Create or replace a scheduler (give `--every` or `--cron`).
    Upsert {
        /// Scheduler id (no `:`).
        id: String,
        /// Interval in ms.
        #[arg(long, conflicts_with = "cron")]
        every: Option<u64>,
        /// Cron pattern (5 fields, or 6 with seconds), as npm cron-parser reads it.
        #[arg(long)]
        cron: Option<String>,
        /// IANA time zone of the cron pattern (default: this process's zone).
        #[arg(long, requires = "cron")]
        tz: Option<String>,
        /// Job name of the iterations (default: the scheduler id).
        #[arg(long)]
        name: Option<String>,
        /// Job data of the iterations, JSON.
        #[arg(long)]
        data: Option<String>,
        /// At most this many iterations.
        #[arg(long)]
        limit: Option<u64>,
        /// No iteration before this time (ms since the epoch).
        #[arg(long)]
        start: Option<u64>,
        /// No iteration after this time (ms since the epoch).
        #[arg(long)]
        end: Option<u64>,
    },
    /// Remove a scheduler and its pending delayed iteration.
    Remove { id: String },
}

/// What a `schedulers` command does, checked before connecting so that a
/// bad spec never writes.
enum Plan {
    List,
    Upsert(Box<SchedulerSpec>),
    Remove(String),
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let queue = super::queue(t, &a.queue)?;
    let plan = plan(a.action)?;
    let access = match plan {
        Plan::List => Access::Read,
        _ => Access::Write,
    };
    queue
        .run(access, async |conn, q| {
            let schedulers = JobSchedulers::new(conn, q.name())?;
            match plan {
                Plan::List => list(&schedulers).await,
                Plan::Upsert(spec) => upsert(&schedulers, &spec).await,
                Plan::Remove(id) => {
                    if !schedulers.remove(&id).await? {
                        return Err(format!("no scheduler {id}").into());
                    }
                    anstream::println!("removed {id}");
                    Ok(())
                }
            }
        })
        .await
}

fn plan(action: Action) -> Res<Plan> {
    let (id, every, cron, tz, name, data, limit, start, end) = match action {
        Action::List => return Ok(Plan::List),
        Action::Remove { id } => return Ok(Plan::Remove(id)),
        Action::Upsert {
            id,
            every,
            cron,
            tz,
            name,
            data,
            limit,
            start,
            end,
        } => (id, every, cron, tz, name, data, limit, start, end),
    };
    let mut spec = match (every, cron) {
        (Some(ms), None) => SchedulerSpec::every(&id, Duration::from_millis(ms)),
        (None, Some(p)) => SchedulerSpec::cron(&id, &p, tz.as_deref()),
        _ => return Err("give --every MS or --cron PATTERN".into()),
    };
    spec.template.name = name;
    if let Some(d) = data {
        spec.template.data =
            serde_json::from_str(&d).map_err(|e| format!("--data is not valid JSON: {e}"))?;
    }
    spec.limit = limit;
    spec.start_date = start;
    spec.end_date = end;
    // The spec is checked again by upsert; checking here keeps
    // "bad arguments never write" independent of the order there.
    spec.validate(echomq::clock::now_ms())?;
    Ok(Plan::Upsert(Box::new(spec)))
}

async fn list(schedulers: &JobSchedulers) -> Res {
    for s in schedulers.list().await? {
        let how = match (&s.every, &s.pattern) {
            (Some(ms), _) => format!("every {ms} ms"),
            (None, Some(p)) => {
                format!("cron `{p}` {}", s.tz.as_deref().unwrap_or("(local zone)"))
            }
            _ => "?".into(),
        };
        anstream::println!(
            "{}  {}  next {}  iterations {}",
            paint(style::BOLD, &s.id),
            how,
            s.next,
            s.iteration_count
        );
    }
    Ok(())
}

async fn upsert(schedulers: &JobSchedulers, spec: &SchedulerSpec) -> Res {
    match schedulers.upsert(spec).await? {
        Some(it) => anstream::println!(
            "{} → next iteration {} in {} ms",
            spec.id,
            it.job_id,
            it.delay
        ),
        None => anstream::println!("{}: no iteration (limit or end date reached)", spec.id),
    }
    Ok(())
}
