//! Job schedulers: named factories that put one job into a queue per
//! interval (`every`) or per cron occurrence (`pattern`), on BullMQ 6.2.0's
//! wire format (processes.md §3, scripts.md §2.27–2.30, keys.md §4).
//!
//! BullMQ has no scheduler process, and neither does EchoMQ: an upsert writes
//! the scheduler and its first iteration `repeat:<id>:<millis>`, and each
//! further iteration is created by whichever worker *takes* the current one
//! ([`create_next_iteration`]). Iteration ids are deterministic, so any number
//! of racing workers, Node or Rust, create each iteration once.
//!
//! On top of that EchoMQ adds one thing Node lacks: the [`JobScheduler`]
//! actor's reconciliation sweep, which re-creates the pending iteration of a
//! scheduler whose next run is past and whose iteration has gone missing
//! (deleted, evicted, lost in a crash), so a scheduler cannot silently stop.
//!
//! Entry points:
//! * [`JobSchedulers`] — plain async handle (upsert, remove, get, list, sweep);
//! * [`JobScheduler`] — the actor: the same operations as messages, upserts
//!   serialised, plus the periodic sweep;
//! * [`create_next_iteration`] — what a Worker calls right after moveToActive
//!   returned a job with `rjk`.
//!
//! Contract: `docs/job-scheduler.md`.

mod next_run;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::packing::pack_map;
use echomq_protocol::{JobOptions, JobRecord, QueueKeys, ScriptId};
use fred::prelude::{HashesInterface, KeysInterface, SortedSetsInterface, Value};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Map, Value as Json};
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::reply::{as_array, as_i64, as_string, bytes, check_code, pairs, text};

pub use next_run::{CronSchedule, CronZone};

/// Why a scheduler definition was refused. Nothing is written when one of
/// these is returned.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The scheduler id is empty.
    #[error("job scheduler id must not be empty")]
    EmptyId,
    /// The cron pattern cannot be parsed (or uses syntax EchoMQ cannot
    /// evaluate exactly as BullMQ Node does).
    #[error("invalid cron pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not an IANA zone name.
    #[error("unknown time zone {0:?}")]
    InvalidTimeZone(String),
    /// `every` must be a positive number of milliseconds.
    #[error("`every` must be a positive number of milliseconds")]
    InvalidEvery,
    /// `limit` must be at least 1.
    #[error("`limit` must be at least 1")]
    InvalidLimit,
    /// The end date is not after the start date.
    #[error("end date {end} is not after start date {start}")]
    EndBeforeStart {
        /// Start, ms.
        start: u64,
        /// End, ms.
        end: u64,
    },
    /// The end date has passed already.
    #[error("end date {0} is in the past")]
    EndInPast(u64),
    /// `immediately` and a start date contradict each other.
    #[error("`immediately` and a start date cannot be combined")]
    ImmediatelyWithStartDate,
}

/// How a scheduler repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// Every `ms` milliseconds. Iterations fall on slots `k × ms + offset`;
    /// without an offset the first iteration runs at once and fixes the phase.
    Every {
        /// The interval, ms (> 0).
        ms: u64,
        /// Phase of the slots inside the interval, ms.
        offset: Option<u64>,
    },
    /// At the occurrences of a cron pattern (5 fields, or 6 with seconds).
    Cron {
        /// The pattern, as npm `cron-parser` reads it.
        pattern: String,
        /// IANA zone; `None` = the process's local zone (always set it).
        tz: Option<String>,
    },
}

/// The job every iteration is made from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobTemplate {
    /// Job name; defaults to the scheduler id, as in BullMQ.
    pub name: Option<String>,
    /// Job data; `Null` is stored as `{}`.
    pub data: Json,
    /// Options of every iteration.
    pub options: JobOptions,
}

/// A scheduler definition (the Upsert message, `queue.upsertJobScheduler`).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerSpec {
    /// Scheduler id: avoid `:` (job.md §4).
    pub id: String,
    /// How it repeats.
    pub repeat: Repeat,
    /// No iteration before this time (ms).
    pub start_date: Option<u64>,
    /// No iteration after this time (ms).
    pub end_date: Option<u64>,
    /// At most this many iterations (counted from this upsert).
    pub limit: Option<u64>,
    /// Cron only: the first iteration runs now instead of at the next occurrence.
    pub immediately: bool,
    /// The job to produce.
    pub template: JobTemplate,
}

impl SchedulerSpec {
    /// An `every` scheduler with an empty template.
    pub fn every(id: impl Into<String>, every: Duration) -> Self {
        Self::new(
            id,
            Repeat::Every {
                ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
                offset: None,
            },
        )
    }

    /// A cron scheduler with an empty template.
    pub fn cron(id: impl Into<String>, pattern: impl Into<String>, tz: Option<&str>) -> Self {
        Self::new(
            id,
            Repeat::Cron {
                pattern: pattern.into(),
                tz: tz.map(str::to_owned),
            },
        )
    }

    fn new(id: impl Into<String>, repeat: Repeat) -> Self {
        SchedulerSpec {
            id: id.into(),
            repeat,
            start_date: None,
            end_date: None,
            limit: None,
            immediately: false,
            template: JobTemplate::default(),
        }
    }

    /// Sets the template job.
    pub fn template(mut self, name: impl Into<String>, data: Json, options: JobOptions) -> Self {
        self.template = JobTemplate {
            name: Some(name.into()),
            data,
            options,
        };
        self
    }

    /// Sets `limit`.
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets the start date (ms).
    pub fn start_date(mut self, ms: u64) -> Self {
        self.start_date = Some(ms);
        self
    }

    /// Sets the end date (ms).
    pub fn end_date(mut self, ms: u64) -> Self {
        self.end_date = Some(ms);
        self
    }

    /// Checks the definition; `now` decides "end date in the past".
    pub fn validate(&self, now: u64) -> std::result::Result<(), SchedulerError> {
        if self.id.is_empty() {
            return Err(SchedulerError::EmptyId);
        }
        match &self.repeat {
            Repeat::Every { ms, .. } if *ms == 0 => return Err(SchedulerError::InvalidEvery),
            Repeat::Every { .. } => {}
            Repeat::Cron { pattern, tz } => {
                CronSchedule::new(pattern, tz.as_deref())?;
            }
        }
        if self.limit == Some(0) {
            return Err(SchedulerError::InvalidLimit);
        }
        if let (Some(start), Some(end)) = (self.start_date, self.end_date) {
            if end <= start {
                return Err(SchedulerError::EndBeforeStart { start, end });
            }
        }
        if let Some(end) = self.end_date {
            if end < now {
                return Err(SchedulerError::EndInPast(end));
            }
        }
        if self.immediately && self.start_date.is_some() {
            return Err(SchedulerError::ImmediatelyWithStartDate);
        }
        Ok(())
    }
}

/// The iteration an upsert (or a sweep) created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iteration {
    /// Its job id, `repeat:<schedulerId>:<millis>`.
    pub job_id: String,
    /// Its delay from the time of the call, ms (0 = ready now).
    pub delay: u64,
}

/// A scheduler as stored (getJobScheduler / list).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerInfo {
    /// Scheduler id.
    pub id: String,
    /// Name of the jobs it produces.
    pub name: String,
    /// Millis of its current iteration (`{P}repeat` score).
    pub next: u64,
    /// Interval, for every schedulers.
    pub every: Option<u64>,
    /// Pattern, for cron schedulers.
    pub pattern: Option<String>,
    /// Zone of the pattern.
    pub tz: Option<String>,
    /// Iteration limit.
    pub limit: Option<u64>,
    /// Start date, ms.
    pub start_date: Option<u64>,
    /// End date, ms.
    pub end_date: Option<u64>,
    /// Phase of every slots.
    pub offset: Option<u64>,
    /// Iterations produced (`ic`).
    pub iteration_count: u64,
    /// Template data (absent when `{}`).
    pub data: Option<Json>,
    /// Template options in stored form (absent when empty).
    pub options: Option<Map<String, Json>>,
}

impl SchedulerInfo {
    /// The `repeat` options of an iteration of this scheduler, its iteration
    /// number taken from `ic`.
    fn repeat_options(&self) -> Map<String, Json> {
        let mut repeat = Map::new();
        set_or_remove(&mut repeat, "every", self.every);
        if let Some(p) = &self.pattern {
            repeat.insert("pattern".into(), p.clone().into());
        }
        if let Some(tz) = &self.tz {
            repeat.insert("tz".into(), tz.clone().into());
        }
        set_or_remove(&mut repeat, "limit", self.limit);
        set_or_remove(&mut repeat, "startDate", self.start_date);
        set_or_remove(&mut repeat, "endDate", self.end_date);
        repeat.insert("count".into(), self.iteration_count.max(1).into());
        repeat
    }

    fn from_hash(id: &str, next: u64, mut h: HashMap<String, String>) -> Self {
        let num = |h: &mut HashMap<String, String>, f: &str| {
            h.remove(f).and_then(|s| {
                s.parse::<u64>()
                    .ok()
                    .or_else(|| s.parse::<f64>().ok().map(|f| f as u64))
            })
        };
        SchedulerInfo {
            id: id.to_owned(),
            name: h.remove("name").unwrap_or_default(),
            next,
            every: num(&mut h, "every"),
            pattern: h.remove("pattern"),
            tz: h.remove("tz"),
            limit: num(&mut h, "limit"),
            start_date: num(&mut h, "startDate"),
            end_date: num(&mut h, "endDate"),
            offset: num(&mut h, "offset"),
            iteration_count: num(&mut h, "ic").unwrap_or(0),
            data: h.remove("data").and_then(|s| serde_json::from_str(&s).ok()),
            options: h
                .remove("opts")
                .and_then(|s| serde_json::from_str::<Json>(&s).ok())
                .and_then(|v| match v {
                    Json::Object(m) => Some(m),
                    _ => None,
                }),
        }
    }
}

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

/// What one sweep found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerSweep {
    /// Schedulers looked at.
    pub schedulers: usize,
    /// Iterations re-created.
    pub restored: Vec<IterationRestored>,
}

/// The plain async API of the job schedulers of one queue. Cheap to clone.
///
/// Concurrent upserts of the same id from different handles are each atomic
/// in Redis, and the last one wins; route them through one [`JobScheduler`]
/// actor to have them applied in order.
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
        upsert(&self.conn, &self.keys, &self.default_job_options, spec).await
    }

    /// Removes a scheduler and its delayed iteration. `true` when it existed.
    pub async fn remove(&self, id: &str) -> Result<bool> {
        let k = &self.keys;
        let v = self
            .conn
            .run_script(
                ScriptId::RemoveJobScheduler,
                vec![k.repeat(), k.delayed(), k.events()],
                vec![text(id), text(k.prefix_key())],
            )
            .await?;
        let n =
            as_i64(&v).ok_or_else(|| Error::protocol("removeJobScheduler", format!("{v:?}")))?;
        Ok(n == 0)
    }

    /// One scheduler, `None` when there is none with this id.
    pub async fn get(&self, id: &str) -> Result<Option<SchedulerInfo>> {
        let v = self
            .conn
            .run_script(
                ScriptId::GetJobScheduler,
                vec![self.keys.repeat()],
                vec![text(id)],
            )
            .await?;
        let mut items =
            as_array(v).ok_or_else(|| Error::protocol("getJobScheduler", "not an array"))?;
        if items.len() < 2 {
            return Ok(None);
        }
        let score = items.pop().and_then(|s| as_string(&s));
        let next = score
            .as_deref()
            .and_then(parse_millis)
            .ok_or_else(|| Error::protocol("getJobScheduler", "score is not a number"))?;
        let hash: HashMap<String, String> = pairs("getJobScheduler", items.remove(0))?
            .into_iter()
            .collect();
        Ok(Some(SchedulerInfo::from_hash(id, next, hash)))
    }

    /// Every scheduler, by next run (earliest first). Schedulers whose hash is
    /// missing are skipped.
    pub async fn list(&self) -> Result<Vec<SchedulerInfo>> {
        let entries = self.index().await?;
        let mut out = Vec::with_capacity(entries.len());
        for (id, next) in entries {
            let hash: HashMap<String, String> =
                self.conn.pool().hgetall(self.keys.scheduler(&id)).await?;
            if hash.is_empty() {
                continue;
            }
            out.push(SchedulerInfo::from_hash(&id, next, hash));
        }
        Ok(out)
    }

    async fn index(&self) -> Result<Vec<(String, u64)>> {
        let raw: Vec<(String, f64)> = self
            .conn
            .pool()
            .zrange(self.keys.repeat(), 0, -1, None, false, None, true)
            .await?;
        Ok(raw
            .into_iter()
            .map(|(id, score)| (id, score.max(0.0) as u64))
            .collect())
    }

    /// Runs one reconciliation pass now (see [`JobScheduler`]): re-creates the
    /// pending iteration of every scheduler whose next run is more than `grace`
    /// in the past and whose iteration is missing or already finished.
    pub async fn sweep(&self, grace: Duration) -> Result<SchedulerSweep> {
        let now = crate::clock::now_ms();
        let entries = self.index().await?;
        let mut report = SchedulerSweep {
            schedulers: entries.len(),
            restored: Vec::new(),
        };
        let grace = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        for (id, next) in entries {
            if next.saturating_add(grace) >= now {
                continue;
            }
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
            pool.hget(&job_key, "finishedOn").await?,
        );
        if exists == 1 && finished.is_none() {
            // Pending or running: the normal path will produce its successor.
            return Ok(None);
        }
        let hash: HashMap<String, String> = pool.hgetall(self.keys.scheduler(id)).await?;
        if !hash.contains_key("ic") {
            // Not a scheduler: a v5 repeatable job shares the index.
            return Ok(None);
        }
        let info = SchedulerInfo::from_hash(id, 0, hash);
        // The lost iteration's options are rebuilt from the definition; its
        // iteration number is the scheduler's count.
        let mut opts = info.options.clone().unwrap_or_default();
        opts.insert("repeat".into(), Json::Object(info.repeat_options()));
        if let Some(millis) = current.rsplit(':').next().and_then(parse_millis) {
            if info.pattern.is_some() {
                opts.insert("prevMillis".into(), millis.into());
            }
        }
        next_iteration(&self.conn, &self.keys, id, current, opts).await
    }
}

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
    job: &JobRecord,
) -> Result<Option<String>> {
    let Some(scheduler_id) = job.repeat_job_key.as_deref() else {
        return Ok(None);
    };
    if has_legacy_repeat_key_shape(scheduler_id) {
        // v5 repeatable jobs share the `repeat` index; only a hash with `ic`
        // marks a scheduler (BullMQ 6 does the same probe).
        let is_scheduler: bool = conn
            .pool()
            .hexists(keys.scheduler(scheduler_id), "ic")
            .await?;
        if !is_scheduler {
            warn!(queue = %keys.name(), job_id = %job.id, rjk = %scheduler_id, "legacy repeatable job: no next iteration");
            return Ok(None);
        }
    }
    // Node's Job constructor drops `repeatJobKey` from the options (it is
    // re-added below) and defaults `attempts`; `to_stored` does the same.
    let mut opts = job.opts.to_stored();
    opts.remove("repeatJobKey");
    if !opts.get("repeat").is_some_and(Json::is_object) {
        // A foreign iteration without `repeat` options: Node throws here and
        // the job is retried for ever; the stored definition says the same.
        let hash: HashMap<String, String> =
            conn.pool().hgetall(keys.scheduler(scheduler_id)).await?;
        if hash.is_empty() {
            return Ok(None);
        }
        let info = SchedulerInfo::from_hash(scheduler_id, 0, hash);
        opts.insert("repeat".into(), Json::Object(info.repeat_options()));
    }
    next_iteration(conn, keys, scheduler_id, &job.id, opts).await
}

/// The worker path of `upsertJobScheduler` (processes.md §3, "Producing the
/// next iteration"): re-check limit and end date from the producing job's
/// `repeat`, compute the next cron time, call updateJobScheduler.
async fn next_iteration(
    conn: &Connection,
    keys: &QueueKeys,
    scheduler_id: &str,
    producer_id: &str,
    mut opts: Map<String, Json>,
) -> Result<Option<String>> {
    let Some(Json::Object(mut repeat)) = opts.remove("repeat") else {
        return Err(Error::protocol(
            "scheduler iteration",
            format!("job {producer_id} has no `repeat` options"),
        ));
    };
    let every = repeat.get("every").and_then(json_u64);
    let pattern = repeat
        .get("pattern")
        .and_then(Json::as_str)
        .map(str::to_owned);
    if every.is_some() == pattern.is_some() {
        return Err(Error::protocol(
            "scheduler iteration",
            format!("job {producer_id}: exactly one of `every` and `pattern` must be set"),
        ));
    }
    let count = repeat.get("count").and_then(json_u64).unwrap_or(0);
    let iteration = if count > 0 { count + 1 } else { 1 };
    if let Some(limit) = repeat.get("limit").and_then(json_u64) {
        if iteration > limit {
            debug!(scheduler = %scheduler_id, limit, "scheduler limit reached");
            return Ok(None);
        }
    }
    let wall = crate::clock::now_ms();
    let end_date = repeat.get("endDate").and_then(json_u64);
    if matches!(end_date, Some(end) if wall > end) {
        return Ok(None);
    }
    let prev_millis = opts.get("prevMillis").and_then(json_u64).unwrap_or(0);
    let now = wall.max(prev_millis);
    let start_date = repeat.get("startDate").and_then(json_u64);

    let next_millis = match &pattern {
        Some(p) => {
            let tz = repeat.get("tz").and_then(Json::as_str);
            let schedule = CronSchedule::new(p, tz)?;
            match schedule.next_after(
                now as i64,
                start_date.map(|s| s as i64),
                end_date.map(|e| e as i64),
            ) {
                Some(n) => Some((n.max(0) as u64).max(now)),
                None => return Ok(None),
            }
        }
        None => None,
    };

    // The options Node's getNextJobOpts builds.
    repeat.remove("immediately");
    let user_offset = repeat.get("offset").and_then(json_u64).filter(|o| *o > 0);
    match (every, user_offset) {
        (Some(_), Some(o)) => {
            repeat.insert("offset".into(), o.into());
        }
        _ => {
            repeat.remove("offset");
        }
    }
    repeat.insert("count".into(), iteration.into());
    set_or_remove(&mut repeat, "startDate", start_date);
    set_or_remove(&mut repeat, "endDate", end_date);
    opts.insert("repeat".into(), Json::Object(repeat));
    let stamp = crate::clock::now_ms();
    let millis_for_id = next_millis.map(|n| n.to_string()).unwrap_or_default();
    opts.insert(
        "jobId".into(),
        format!("repeat:{scheduler_id}:{millis_for_id}").into(),
    );
    opts.insert(
        "delay".into(),
        next_millis
            .map(|n| n.saturating_sub(stamp))
            .unwrap_or(0)
            .into(),
    );
    opts.insert("timestamp".into(), stamp.into());
    set_or_remove(&mut opts, "prevMillis", next_millis);
    opts.insert("repeatJobKey".into(), scheduler_id.into());

    let k = keys;
    let script_keys = k.update_job_scheduler_keys(producer_id);
    let args = vec![
        text(millis_for_id),
        text(scheduler_id),
        text("{}"),
        bytes(pack_map(&opts)),
        text(stamp),
        text(k.prefix_key()),
        text(producer_id),
    ];
    let v = conn
        .run_script(ScriptId::UpdateJobScheduler, script_keys, args)
        .await?;
    let created = match v {
        Value::Null => None,
        other => Some(
            as_string(&other)
                .ok_or_else(|| Error::protocol("updateJobScheduler", format!("{other:?}")))?,
        ),
    };
    if let Some(id) = &created {
        debug!(queue = %k.name(), scheduler = %scheduler_id, job_id = %id, "next iteration created");
    }
    Ok(created)
}

async fn upsert(
    conn: &Connection,
    keys: &QueueKeys,
    defaults: &JobOptions,
    spec: &SchedulerSpec,
) -> Result<Option<Iteration>> {
    let now = crate::clock::now_ms();
    spec.validate(now)?;

    // Template options as Node stores them: queue defaults under the
    // template's, and no implicit `attempts` (they skip the Job constructor).
    let mut template = defaults.to_stored();
    if defaults.attempts.is_none() {
        template.remove("attempts");
    }
    let own = spec.template.options.to_stored();
    for (k, v) in own {
        if k == "attempts" && spec.template.options.attempts.is_none() {
            continue;
        }
        template.insert(k, v);
    }
    JobOptions::from_stored(&template).validate()?;
    let data = match &spec.template.data {
        Json::Null => "{}".to_owned(),
        d => serde_json::to_string(d).map_err(|e| {
            Error::Validation(echomq_protocol::ValidationError::Data(e.to_string()))
        })?,
    };
    let name = spec
        .template
        .name
        .clone()
        .unwrap_or_else(|| spec.id.clone());
    if name.is_empty() {
        return Err(echomq_protocol::ValidationError::EmptyJobName.into());
    }

    let (every, offset, pattern, tz) = match &spec.repeat {
        Repeat::Every { ms, offset } => (Some(*ms), offset.filter(|o| *o > 0), None, None),
        Repeat::Cron { pattern, tz } => (None, None, Some(pattern.as_str()), tz.as_deref()),
    };

    let next_millis = match pattern {
        Some(p) => {
            let schedule = CronSchedule::new(p, tz)?;
            let next = if spec.immediately {
                Some(crate::clock::now_ms() as i64)
            } else {
                schedule.next_after(
                    now as i64,
                    spec.start_date.map(|s| s as i64),
                    spec.end_date.map(|e| e as i64),
                )
            };
            match next {
                Some(n) => Some((n.max(0) as u64).max(now)),
                None => return Ok(None),
            }
        }
        None => None,
    };

    let mut sched = Map::new();
    sched.insert("name".into(), name.clone().into());
    set_or_remove(&mut sched, "startDate", spec.start_date);
    set_or_remove(&mut sched, "endDate", spec.end_date);
    if let Some(tz) = tz {
        sched.insert("tz".into(), tz.into());
    }
    if let Some(p) = pattern {
        sched.insert("pattern".into(), p.into());
    }
    set_or_remove(&mut sched, "every", every);
    set_or_remove(&mut sched, "limit", spec.limit);
    set_or_remove(&mut sched, "offset", offset);

    let mut repeat = Map::new();
    set_or_remove(&mut repeat, "every", every);
    if let Some(p) = pattern {
        repeat.insert("pattern".into(), p.into());
    }
    if let Some(tz) = tz {
        repeat.insert("tz".into(), tz.into());
    }
    set_or_remove(&mut repeat, "limit", spec.limit);
    set_or_remove(&mut repeat, "offset", offset);
    repeat.insert("count".into(), 1.into());
    set_or_remove(&mut repeat, "startDate", spec.start_date);
    set_or_remove(&mut repeat, "endDate", spec.end_date);

    let mut first = template.clone();
    let stamp = crate::clock::now_ms();
    let millis_for_id = next_millis.map(|n| n.to_string()).unwrap_or_default();
    first.insert("repeat".into(), Json::Object(repeat));
    first.insert(
        "jobId".into(),
        format!("repeat:{}:{millis_for_id}", spec.id).into(),
    );
    first.insert(
        "delay".into(),
        next_millis
            .map(|n| n.saturating_sub(stamp))
            .unwrap_or(0)
            .into(),
    );
    first.insert("timestamp".into(), stamp.into());
    set_or_remove(&mut first, "prevMillis", next_millis);
    first.insert("repeatJobKey".into(), spec.id.clone().into());

    let k = keys;
    let script_keys = k.add_job_scheduler_keys();
    let args = vec![
        text(millis_for_id),
        bytes(pack_map(&sched)),
        text(&spec.id),
        text(data),
        bytes(pack_map(&template)),
        bytes(pack_map(&first)),
        text(now),
        text(k.prefix_key()),
        text(""),
    ];
    let v = conn
        .run_script(ScriptId::AddJobScheduler, script_keys, args)
        .await?;
    if let Some(n) = as_i64(&v) {
        check_code("addJobScheduler", n)?;
    }
    let items = as_array(v).ok_or_else(|| Error::protocol("addJobScheduler", "not an array"))?;
    let job_id = items
        .first()
        .and_then(as_string)
        .ok_or_else(|| Error::protocol("addJobScheduler", "no job id"))?;
    let delay = items.get(1).and_then(as_i64).unwrap_or(0).max(0) as u64;
    info!(queue = %k.name(), scheduler = %spec.id, job_id = %job_id, delay, "job scheduler upserted");
    Ok(Some(Iteration { job_id, delay }))
}

fn set_or_remove(m: &mut Map<String, Json>, key: &str, v: Option<u64>) {
    match v {
        Some(v) => {
            m.insert(key.into(), v.into());
        }
        None => {
            m.remove(key);
        }
    }
}

fn json_u64(v: &Json) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .or_else(|| v.as_str().and_then(parse_millis))
}

fn parse_millis(s: &str) -> Option<u64> {
    s.parse::<u64>().ok().or_else(|| {
        s.parse::<f64>()
            .ok()
            .filter(|f| *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// BullMQ 6's test for v5 repeat keys `name:id:endDate:tz:<cron|every>`.
fn has_legacy_repeat_key_shape(key: &str) -> bool {
    let parts: Vec<&str> = key.splitn(5, ':').collect();
    if parts.len() < 5 {
        return false;
    }
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !parts[2].is_empty() && !numeric(parts[2]) {
        return false;
    }
    let suffix = parts[4];
    !suffix.is_empty() && (suffix.contains(' ') || numeric(suffix))
}

// ------------------------------------------------------------------- actor

/// Arguments of a [`JobScheduler`].
#[derive(Clone)]
pub struct JobSchedulerArgs {
    /// The shared connection.
    pub connection: Connection,
    /// The queue.
    pub queue: String,
    /// Options merged under every template's (a Node Queue's `defaultJobOptions`).
    pub default_job_options: JobOptions,
    /// Time between reconciliation sweeps. Default 30 s. Zero disables them.
    pub sweep_interval: Duration,
    /// How far in the past a next run must be before the sweep treats a
    /// missing iteration as lost (it leaves workers time to take it). Default 5 s.
    pub sweep_grace: Duration,
    /// Told about every iteration a sweep re-created. Runs inside the actor:
    /// keep it short (a `cast`, a channel send).
    pub on_restored: Option<Arc<dyn Fn(IterationRestored) + Send + Sync>>,
}

impl JobSchedulerArgs {
    /// Defaults for `queue`: a sweep every 30 s with 5 s grace, no callback.
    pub fn new(connection: Connection, queue: impl Into<String>) -> Self {
        JobSchedulerArgs {
            connection,
            queue: queue.into(),
            default_job_options: JobOptions::default(),
            sweep_interval: Duration::from_secs(30),
            sweep_grace: Duration::from_secs(5),
            on_restored: None,
        }
    }
}

impl std::fmt::Debug for JobSchedulerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSchedulerArgs")
            .field("queue", &self.queue)
            .field("sweep_interval", &self.sweep_interval)
            .field("sweep_grace", &self.sweep_grace)
            .finish()
    }
}

/// Messages of the [`JobScheduler`]. Use `call_t!` with a timeout:
/// `call_t!(actor, JobSchedulerMsg::Upsert, 5000, spec)`.
#[derive(Debug)]
pub enum JobSchedulerMsg {
    /// Create or replace a scheduler; replies with its pending iteration.
    Upsert(Box<SchedulerSpec>, RpcReplyPort<Result<Option<Iteration>>>),
    /// Remove a scheduler; replies whether it existed.
    Remove(String, RpcReplyPort<Result<bool>>),
    /// Read one scheduler.
    Get(String, RpcReplyPort<Result<Option<SchedulerInfo>>>),
    /// Read every scheduler, earliest next run first.
    List(RpcReplyPort<Result<Vec<SchedulerInfo>>>),
    /// Run a reconciliation sweep now. Does not move the timer.
    SweepNow(RpcReplyPort<Result<SchedulerSweep>>),
    /// Timer tick (internal; re-armed after each sweep).
    Tick,
    /// Panics the actor (fault injection for supervision and chaos tests).
    #[cfg(feature = "fault-injection")]
    Crash,
}

/// The per-queue scheduler actor. Spawn it under the host's supervisor:
/// `Actor::spawn_linked(None, JobScheduler, args, supervisor)`.
///
/// It handles one message at a time, so upserts and removals sent to it are
/// applied in order: two quick upserts of one id leave the second's
/// definition and exactly one pending iteration. It keeps no state of its
/// own — everything lives in Redis — so a restart loses nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobScheduler;

/// Runtime state (rebuilt from the arguments on every start).
pub struct JobSchedulerState {
    args: JobSchedulerArgs,
    schedulers: JobSchedulers,
}

impl Actor for JobScheduler {
    type Msg = JobSchedulerMsg;
    type State = JobSchedulerState;
    type Arguments = JobSchedulerArgs;

    async fn pre_start(
        &self,
        _me: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        let schedulers = JobSchedulers::new(&args.connection, &args.queue)?
            .with_default_job_options(args.default_job_options.clone());
        Ok(JobSchedulerState { args, schedulers })
    }

    async fn post_start(
        &self,
        me: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        if !state.args.sweep_interval.is_zero() {
            // A restart is exactly when a lost iteration is most likely.
            me.send_message(JobSchedulerMsg::Tick)?;
        }
        Ok(())
    }

    async fn handle(
        &self,
        me: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            JobSchedulerMsg::Upsert(spec, reply) => {
                let _ = reply.send(state.schedulers.upsert(&spec).await);
            }
            JobSchedulerMsg::Remove(id, reply) => {
                let _ = reply.send(state.schedulers.remove(&id).await);
            }
            JobSchedulerMsg::Get(id, reply) => {
                let _ = reply.send(state.schedulers.get(&id).await);
            }
            JobSchedulerMsg::List(reply) => {
                let _ = reply.send(state.schedulers.list().await);
            }
            JobSchedulerMsg::SweepNow(reply) => {
                let _ = reply.send(state.sweep().await);
            }
            #[cfg(feature = "fault-injection")]
            JobSchedulerMsg::Crash => panic!("fault injection: job scheduler crash"),
            JobSchedulerMsg::Tick => {
                // A failed sweep is logged and retried at the next tick; Redis
                // being away is no reason to restart the actor.
                let _ = state.sweep().await;
                me.send_after(state.args.sweep_interval, || JobSchedulerMsg::Tick);
            }
        }
        Ok(())
    }
}

impl JobSchedulerState {
    async fn sweep(&self) -> Result<SchedulerSweep> {
        let r = self.schedulers.sweep(self.args.sweep_grace).await;
        match &r {
            Ok(report) => {
                for restored in &report.restored {
                    warn!(queue = %restored.queue, scheduler = %restored.scheduler_id,
                        missing = %restored.missing_job_id, created = %restored.new_job_id,
                        "scheduler iteration was missing; re-created");
                    if let Some(cb) = &self.args.on_restored {
                        cb(restored.clone());
                    }
                }
            }
            Err(e) => {
                warn!(queue = %self.args.queue, error = %e, "scheduler sweep failed; retrying next interval")
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_shape() {
        assert!(has_legacy_repeat_key_shape("n:id::UTC:0 * * * *"));
        assert!(has_legacy_repeat_key_shape("n:id:123::5000"));
        assert!(!has_legacy_repeat_key_shape("my-scheduler"));
        assert!(!has_legacy_repeat_key_shape("a:b:c:d"));
    }

    #[test]
    fn validation() {
        let now = 1_000;
        assert_eq!(
            SchedulerSpec::every("s", Duration::ZERO).validate(now),
            Err(SchedulerError::InvalidEvery)
        );
        assert_eq!(
            SchedulerSpec::every("s", Duration::from_secs(1))
                .limit(0)
                .validate(now),
            Err(SchedulerError::InvalidLimit)
        );
        assert!(matches!(
            SchedulerSpec::cron("s", "nope", Some("UTC")).validate(now),
            Err(SchedulerError::InvalidPattern { .. })
        ));
        assert_eq!(
            SchedulerSpec::every("s", Duration::from_secs(1))
                .start_date(5_000)
                .end_date(4_000)
                .validate(now),
            Err(SchedulerError::EndBeforeStart {
                start: 5_000,
                end: 4_000
            })
        );
    }
}
