//! The worker path: producing the iteration after the one just taken.

use echomq_protocol::call::scheduler::{
    field as sched_field, json_u64, opt, IterationOptions, RepeatOptions, UpdateJobScheduler,
};
use echomq_protocol::{Job, QueueKeys};
use fred::prelude::HashesInterface;
use serde_json::{Map, Value as Json};
use tracing::{debug, warn};

use echomq_protocol::call::scheduler::SchedulerInfo;

use super::cron::CronSchedule;
use super::spec::has_legacy_repeat_key_shape;
use crate::connection::pool::Connection;
use crate::error::{Error, Result};

/// Creates the iteration that follows `job`, the scheduler iteration a worker
/// has just taken (moveToActive returned it with `rjk`). Call it before running
/// the processor, as BullMQ Node does; if it fails, do not process the job (it
/// stays active and the stalled checker recovers it, and the retry creates the
/// successor).
///
/// Returns the new iteration's id, or `None` when there is nothing to create:
/// not a scheduler job, the scheduler was removed or re-upserted, its limit or
/// end date is reached, or another worker created the successor already.
pub async fn create_next_iteration(
    conn: &Connection,
    keys: &QueueKeys,
    job: &Job,
) -> Result<Option<String>> {
    create_next_iteration_at(conn, keys, job, crate::clock::now_ms()).await
}

/// [`create_next_iteration`] with `now` (ms) given: a worker passes Redis's
/// time, so a host clock running ahead does not make an `every` scheduler
/// look behind schedule and skip slots (docs/worker.md §Due timer).
pub(crate) async fn create_next_iteration_at(
    conn: &Connection,
    keys: &QueueKeys,
    job: &Job,
    now: u64,
) -> Result<Option<String>> {
    let Some(scheduler_id) = job.repeat_job_key.as_deref() else {
        return Ok(None);
    };
    if has_legacy_repeat_key_shape(scheduler_id) {
        // v5 repeatable jobs share the `repeat` index; only a hash with `ic`
        // marks a scheduler (BullMQ 6 does the same probe).
        let is_scheduler: bool = conn
            .pool()
            .hexists(keys.scheduler(scheduler_id), sched_field::ITERATION_COUNT)
            .await?;
        if !is_scheduler {
            warn!(queue = %keys.name(), job_id = %job.id, rjk = %scheduler_id, "legacy repeatable job: no next iteration");
            return Ok(None);
        }
    }
    // Node's Job constructor drops `repeatJobKey` from the options (it is
    // re-added with the iteration keys) and defaults `attempts`; `to_stored`
    // does the same.
    let mut opts = job.opts.to_stored();
    opts.remove(opt::REPEAT_JOB_KEY);
    let repeat = match opts.remove(opt::REPEAT) {
        Some(Json::Object(m)) => RepeatOptions::from_map(m),
        _ => {
            // A foreign iteration without `repeat` options: Node throws here
            // and the job is retried for ever; the stored definition says
            // the same.
            let hash: std::collections::HashMap<String, String> =
                conn.pool().hgetall(keys.scheduler(scheduler_id)).await?;
            if hash.is_empty() {
                return Ok(None);
            }
            SchedulerInfo::from_hash(scheduler_id, 0, hash).repeat_options()
        }
    };
    next_iteration(conn, keys, scheduler_id, &job.id, opts, repeat, now).await
}

/// Node's `upsertJobScheduler` on the worker path (docs/job-scheduler.md):
/// re-check limit and end date from the producing job's `repeat`, compute
/// the next cron time, call updateJobScheduler.
pub(crate) async fn next_iteration(
    conn: &Connection,
    keys: &QueueKeys,
    scheduler_id: &str,
    producer_id: &str,
    opts: Map<String, Json>,
    repeat: RepeatOptions,
    wall: u64,
) -> Result<Option<String>> {
    let prev_millis = opts.get(opt::PREV_MILLIS).and_then(json_u64).unwrap_or(0);
    let Some((repeat, next_millis)) = plan(producer_id, repeat, wall, prev_millis)? else {
        return Ok(None);
    };
    let next = IterationOptions {
        base: opts,
        repeat,
        scheduler_id,
        next_millis,
        now: wall,
    };
    let created = conn
        .call(&UpdateJobScheduler {
            keys,
            producer_id,
            next: &next,
        })
        .await?;
    if let Some(id) = &created {
        debug!(queue = %keys.name(), scheduler = %scheduler_id, job_id = %id, "next iteration created");
    }
    Ok(created)
}

/// The next iteration's `repeat` options and cron millis, or `None` when the
/// limit or the end date is reached (or the pattern has no further
/// occurrence). `wall` is now; a cron walk starts at the later of `wall` and
/// the producing iteration's own millis.
fn plan(
    producer_id: &str,
    mut repeat: RepeatOptions,
    wall: u64,
    prev_millis: u64,
) -> Result<Option<(RepeatOptions, Option<u64>)>> {
    if repeat.every.is_some() == repeat.pattern.is_some() {
        return Err(Error::protocol(
            "scheduler iteration",
            format!("job {producer_id}: exactly one of `every` and `pattern` must be set"),
        ));
    }
    let iteration = repeat.count.saturating_add(1);
    if let Some(limit) = repeat.limit {
        if iteration > limit {
            debug!(job_id = %producer_id, limit, "scheduler limit reached");
            return Ok(None);
        }
    }
    if matches!(repeat.end_date, Some(end) if wall > end) {
        return Ok(None);
    }
    let now = wall.max(prev_millis);
    let next_millis = match &repeat.pattern {
        Some(p) => {
            let schedule = CronSchedule::new(p, repeat.tz.as_deref())?;
            match schedule.next_after(
                now as i64,
                repeat.start_date.map(|s| s as i64),
                repeat.end_date.map(|e| e as i64),
            ) {
                Some(n) => Some((n.max(0) as u64).max(now)),
                None => return Ok(None),
            }
        }
        None => None,
    };
    // The options Node's getNextJobOpts builds.
    repeat.extra.remove(sched_field::IMMEDIATELY);
    if repeat.every.is_none() || repeat.offset == Some(0) {
        repeat.offset = None;
    }
    repeat.count = iteration;
    Ok(Some((repeat, next_millis)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_counts_and_stops() {
        let every = RepeatOptions {
            every: Some(1000),
            count: 2,
            limit: Some(3),
            offset: Some(0),
            ..Default::default()
        };
        let (r, next) = plan("j", every.clone(), 10, 0).unwrap().unwrap();
        assert_eq!((r.count, r.offset, next), (3, None, None));
        let done = RepeatOptions { count: 3, ..every };
        assert!(plan("j", done, 10, 0).unwrap().is_none());
        let neither = RepeatOptions::default();
        assert!(plan("j", neither, 10, 0).is_err());
    }
}
