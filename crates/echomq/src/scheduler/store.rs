//! The Redis side of job schedulers, on BullMQ 6.7.0's wire format
//! (docs/protocol.md): the [`JobSchedulers`] handle (upsert, remove, get,
//! list, repair sweep); the next iteration, which a Worker creates right
//! after moveToActive returned a job with `rjk`, is `iteration.rs`.
//!
//! BullMQ has no scheduler process, and neither does EchoMQ: an upsert writes
//! the scheduler and its first iteration `repeat:<id>:<millis>`, and each
//! further iteration is created by whichever worker *takes* the current one.
//! Iteration ids are deterministic, so any number of racing workers, Node or
//! Rust, create each iteration once. The sweep is EchoMQ's addition: it
//! re-creates the pending iteration of a scheduler whose next run is past and
//! whose iteration has gone missing, so a scheduler cannot silently stop.
//! Contract: `docs/job-scheduler.md`.

use std::collections::HashMap;
use std::time::Duration;

use echomq_protocol::call::scheduler::{
    field as sched_field, opt, GetJobScheduler, RemoveJobScheduler,
};
use echomq_protocol::job::field;
use echomq_protocol::{JobOptions, QueueKeys};
use fred::prelude::{HashesInterface, KeysInterface, SortedSetsInterface};
use tracing::warn;

use super::spec::SchedulerSpec;
use super::{iteration, upsert};
use crate::connection::pool::Connection;
use crate::error::Result;

use echomq_protocol::call::scheduler::{Iteration, SchedulerInfo};

/// A sweep's notice: a scheduler's pending iteration was missing and has been
/// re-created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterationRestored {
    /// The queue.
    pub queue: String,
    /// The scheduler.
    pub scheduler_id: String,
    /// The iteration that was missing (or had finished without a successor).
    pub missing_job_id: String,
    /// The iteration created in its place.
    pub new_job_id: String,
}

/// Schedulers read per call by [`JobSchedulers::list`] and the sweep.
pub const SCHEDULER_PAGE: u64 = 1000;

/// What one sweep found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerSweep {
    /// Schedulers looked at (up to the first one not overdue).
    pub schedulers: usize,
    /// Iterations re-created.
    pub restored: Vec<IterationRestored>,
}

/// The plain async API of the job schedulers of one queue. Cheap to clone.
///
/// Concurrent upserts of the same id from different handles are each atomic
/// in Redis, and the last one wins; route them through one
/// [`JobScheduler`](super::actor::JobScheduler) actor to have them
/// applied in order.
#[derive(Clone, Debug)]
pub struct JobSchedulers {
    conn: Connection,
    keys: QueueKeys,
    default_job_options: JobOptions,
}

impl JobSchedulers {
    /// The schedulers of `queue`.
    pub fn new(conn: &Connection, queue: &str) -> Result<Self> {
        Ok(JobSchedulers {
            conn: conn.clone(),
            keys: QueueKeys::new(conn.prefix(), queue)?,
            default_job_options: JobOptions::default(),
        })
    }

    /// Options merged under every template's own (the template's win), like a
    /// Node Queue's `defaultJobOptions`.
    pub fn with_default_job_options(mut self, options: JobOptions) -> Self {
        self.default_job_options = options;
        self
    }

    /// The queue's keys.
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// Creates or replaces scheduler `spec.id` and its pending iteration
    /// (`addJobScheduler`). `Ok(None)`: the definition is valid but yields no
    /// iteration (a cron pattern with no occurrence before the end date).
    pub async fn upsert(&self, spec: &SchedulerSpec) -> Result<Option<Iteration>> {
        upsert::upsert(&self.conn, &self.keys, &self.default_job_options, spec).await
    }

    /// Removes a scheduler and its delayed iteration. `true` when it existed.
    pub async fn remove(&self, id: &str) -> Result<bool> {
        self.conn
            .call(&RemoveJobScheduler {
                keys: &self.keys,
                id,
            })
            .await
    }

    /// One scheduler, `None` when there is none with this id.
    pub async fn get(&self, id: &str) -> Result<Option<SchedulerInfo>> {
        self.conn
            .call(&GetJobScheduler {
                keys: &self.keys,
                id,
            })
            .await
    }

    /// Every scheduler, by next run (earliest first). Schedulers whose hash is
    /// missing are skipped. Read [`SCHEDULER_PAGE`] at a time
    /// ([`JobSchedulers::list_page`]).
    pub async fn list(&self) -> Result<Vec<SchedulerInfo>> {
        let mut out = Vec::new();
        let mut start = 0;
        loop {
            let (page, seen) = self.list_page_raw(start, SCHEDULER_PAGE).await?;
            out.extend(page);
            if seen < SCHEDULER_PAGE {
                return Ok(out);
            }
            start += seen;
        }
    }

    /// Schedulers `start..start + count` by next run (earliest first), their
    /// hashes read in one pipelined round trip; those whose hash is missing
    /// are skipped.
    pub async fn list_page(&self, start: u64, count: u64) -> Result<Vec<SchedulerInfo>> {
        Ok(self.list_page_raw(start, count).await?.0)
    }

    /// A page and the number of index entries it covered.
    async fn list_page_raw(&self, start: u64, count: u64) -> Result<(Vec<SchedulerInfo>, u64)> {
        let entries = self.index(start, count).await?;
        let seen = entries.len() as u64;
        if entries.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let pipe = self.conn.pool().next().pipeline();
        for (id, _) in &entries {
            pipe.hgetall::<(), _>(self.keys.scheduler(id)).await?;
        }
        let hashes: Vec<HashMap<String, String>> = pipe.all().await?;
        let out = entries
            .into_iter()
            .zip(hashes)
            .filter(|(_, hash)| !hash.is_empty())
            .map(|((id, next), hash)| SchedulerInfo::from_hash(&id, next, hash))
            .collect();
        Ok((out, seen))
    }

    /// Entries `start..start + count` of `{P}repeat`, lowest score first.
    async fn index(&self, start: u64, count: u64) -> Result<Vec<(String, u64)>> {
        let last = (start + count.max(1) - 1) as i64;
        let raw: Vec<(String, f64)> = self
            .conn
            .pool()
            .zrange(
                self.keys.repeat(),
                start as i64,
                last,
                None,
                false,
                None,
                true,
            )
            .await?;
        Ok(raw
            .into_iter()
            .map(|(id, score)| (id, score.max(0.0) as u64))
            .collect())
    }

    /// Runs one reconciliation pass now: re-creates the pending iteration of
    /// every scheduler whose next run is more than `grace` in the past and
    /// whose iteration is missing or already finished.
    pub async fn sweep(&self, grace: Duration) -> Result<SchedulerSweep> {
        let now = crate::clock::now_ms();
        let mut report = SchedulerSweep::default();
        let grace = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        // Page by page, earliest first, up to the first one not overdue: a
        // sweep of 10 000 schedulers is ten reads, each bounded, and stops
        // early when (as usual) few are late. A restored scheduler moves to
        // a later score, so a page may skip one entry; the next sweep has it.
        let mut overdue = Vec::new();
        let mut start = 0;
        'pages: loop {
            let page = self.index(start, SCHEDULER_PAGE).await?;
            let n = page.len() as u64;
            for (id, next) in page {
                report.schedulers += 1;
                if next.saturating_add(grace) >= now {
                    break 'pages;
                }
                overdue.push((id, next));
            }
            if n < SCHEDULER_PAGE {
                break;
            }
            start += n;
        }
        for (id, next) in overdue {
            let current = format!("repeat:{id}:{next}");
            match self.restore(&id, &current).await {
                Ok(Some(new_job_id)) => report.restored.push(IterationRestored {
                    queue: self.keys.name().to_owned(),
                    scheduler_id: id,
                    missing_job_id: current,
                    new_job_id,
                }),
                Ok(None) => {}
                // One broken scheduler must not stop the others' repair.
                Err(e) => {
                    warn!(queue = %self.keys.name(), scheduler = %id, error = %e, "sweep could not restore iteration")
                }
            }
        }
        Ok(report)
    }

    /// Produces the successor of `current` when `current` is gone or finished.
    async fn restore(&self, id: &str, current: &str) -> Result<Option<String>> {
        let pool = self.conn.pool();
        let job_key = self.keys.job(current);
        let (exists, finished): (i64, Option<String>) = (
            pool.exists(&job_key).await?,
            pool.hget(&job_key, field::FINISHED_ON).await?,
        );
        if exists == 1 && finished.is_none() {
            // Pending or running: the normal path will produce its successor.
            return Ok(None);
        }
        let hash: HashMap<String, String> = pool.hgetall(self.keys.scheduler(id)).await?;
        if !hash.contains_key(sched_field::ITERATION_COUNT) {
            // Not a scheduler: a v5 repeatable job shares the index.
            return Ok(None);
        }
        let info = SchedulerInfo::from_hash(id, 0, hash);
        // The lost iteration's options are rebuilt from the definition; its
        // iteration number is the scheduler's count.
        let mut opts = info.options.clone().unwrap_or_default();
        if info.pattern.is_some() {
            if let Some(millis) = current
                .rsplit(':')
                .next()
                .and_then(echomq_protocol::call::scheduler::parse_millis)
            {
                opts.insert(opt::PREV_MILLIS.into(), millis.into());
            }
        }
        let repeat = info.repeat_options();
        iteration::next_iteration(
            &self.conn,
            &self.keys,
            id,
            current,
            opts,
            repeat,
            crate::clock::now_ms(),
        )
        .await
    }
}
