//! `echomq jobs <queue> <state>`: job ids and names in a state, or with
//! `--name/--search` a filtered scan of it.

use echomq::{JobState, Queue};

use super::{truncate, Access, Res, StateArg};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    state: StateArg,
    #[arg(long, default_value_t = 0)]
    start: i64,
    #[arg(long, default_value_t = 19)]
    end: i64,
    /// Oldest first.
    #[arg(long)]
    asc: bool,
    /// Only jobs with this name (`--start`/`--end` then count matches).
    #[arg(long)]
    name: Option<String>,
    /// Only jobs whose data (JSON text) contains TEXT.
    #[arg(long)]
    search: Option<String>,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Read, async |_, q| {
            if a.name.is_none() && a.search.is_none() {
                list_jobs(q, a.state, a.start, a.end, a.asc).await
            } else {
                search_jobs(q, a.state.into(), a.start, a.end, a.asc, a.name, a.search).await
            }
        })
        .await
}

async fn list_jobs(q: &Queue, state: StateArg, start: i64, end: i64, asc: bool) -> Res {
    for job in q.get_jobs(&[state.into()], start, end, order(asc)).await? {
        anstream::println!(
            "{}  {}  {}",
            paint(style::BOLD, &job.id),
            job.name,
            paint(style::DIM, truncate(&job.data.to_string(), 80))
        );
    }
    Ok(())
}

/// `jobs --name/--search`: matches `start..=end` of a filtered scan.
async fn search_jobs(
    q: &Queue,
    state: JobState,
    start: i64,
    end: i64,
    asc: bool,
    name: Option<String>,
    search: Option<String>,
) -> Res {
    let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
        return Err("--name/--search take --start and --end of 0 or more".into());
    };
    let filter = echomq::queue::JobFilter {
        name,
        data_contains: search,
    };
    for job in q.find_jobs(state, &filter, start, end, order(asc)).await? {
        let data = job.data.to_string();
        let shown: String = data.chars().take(80).collect();
        anstream::println!(
            "{}  {}  {}",
            paint(style::BOLD, &job.id),
            job.name,
            paint(style::DIM, shown)
        );
    }
    Ok(())
}

/// `--asc` as the runtime's range order (newest first without it, as BullMQ).
fn order(asc: bool) -> echomq::RangeOrder {
    if asc {
        echomq::RangeOrder::Ascending
    } else {
        echomq::RangeOrder::Descending
    }
}
