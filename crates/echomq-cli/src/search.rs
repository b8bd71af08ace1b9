//! `echomq jobs --name/--search`: a filtered scan of one state.

use echomq::{JobState, Queue};

use crate::style::{self, paint};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// `jobs --name/--search`: matches `start..=end` of a filtered scan.
pub async fn search_jobs(
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
    for job in q.find_jobs(state, &filter, start, end, asc).await? {
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
