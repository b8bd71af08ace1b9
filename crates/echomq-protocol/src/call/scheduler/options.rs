//! The scheduler hash `{P}repeat:<id>` as a type, and the job options of a
//! scheduler iteration, built in one place.
//!
//! Three paths create an iteration — an upsert (its first one), a worker that
//! took the current one, the runtime's repair sweep — and each sends the
//! iteration's options packed. They all go through [`IterationOptions`], so
//! the `repeat` map, `jobId`, `delay`, `prevMillis` … are written once.

use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use crate::packing::pack_map;

/// Field names of a scheduler hash `{P}repeat:<id>`, which are also the keys
/// of an iteration's `repeat` options (docs/protocol.md).
pub mod field {
    /// Name of the jobs produced.
    pub const NAME: &str = "name";
    /// Interval, ms.
    pub const EVERY: &str = "every";
    /// Cron pattern.
    pub const PATTERN: &str = "pattern";
    /// Zone of the pattern.
    pub const TZ: &str = "tz";
    /// Iteration limit.
    pub const LIMIT: &str = "limit";
    /// Start date, ms.
    pub const START_DATE: &str = "startDate";
    /// End date, ms.
    pub const END_DATE: &str = "endDate";
    /// Phase of every slots, ms.
    pub const OFFSET: &str = "offset";
    /// Iterations produced.
    pub const ITERATION_COUNT: &str = "ic";
    /// Template data, JSON.
    pub const DATA: &str = "data";
    /// Template options, JSON.
    pub const OPTS: &str = "opts";
    /// Iteration number (in `repeat` options only).
    pub const COUNT: &str = "count";
    /// Cron: run the first iteration now (in `repeat` options only).
    pub const IMMEDIATELY: &str = "immediately";
}

/// Job option keys an iteration carries besides the template's.
pub mod opt {
    /// The `repeat` options map.
    pub const REPEAT: &str = "repeat";
    /// The iteration's job id.
    pub const JOB_ID: &str = "jobId";
    /// Its delay from `timestamp`, ms.
    pub const DELAY: &str = "delay";
    /// Creation time, ms.
    pub const TIMESTAMP: &str = "timestamp";
    /// Cron: the millis this iteration runs at.
    pub const PREV_MILLIS: &str = "prevMillis";
    /// The scheduler id.
    pub const REPEAT_JOB_KEY: &str = "repeatJobKey";
    /// Attempts (dropped from templates that did not set it).
    pub const ATTEMPTS: &str = "attempts";
}

/// A non-negative number from JSON, as Node may have stored it (number,
/// float or decimal text).
pub fn json_u64(v: &Json) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .or_else(|| v.as_str().and_then(parse_millis))
}

/// Millis from decimal text (integer or float).
pub fn parse_millis(s: &str) -> Option<u64> {
    crate::call::decode::parse_int(s).and_then(|n| u64::try_from(n).ok())
}

fn put(m: &mut Map<String, Json>, key: &str, v: Option<Json>) {
    match v {
        Some(v) => {
            m.insert(key.into(), v);
        }
        None => {
            m.remove(key);
        }
    }
}

/// The `repeat` options of one iteration. Keys this type does not know (a
/// Node client's own) are kept in `extra` and sent back unchanged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepeatOptions {
    /// Interval, ms.
    pub every: Option<u64>,
    /// Cron pattern.
    pub pattern: Option<String>,
    /// Zone of the pattern.
    pub tz: Option<String>,
    /// Iteration limit.
    pub limit: Option<u64>,
    /// Phase of every slots, ms.
    pub offset: Option<u64>,
    /// Start date, ms.
    pub start_date: Option<u64>,
    /// End date, ms.
    pub end_date: Option<u64>,
    /// This iteration's number (1 = the first).
    pub count: u64,
    /// Other keys, as found.
    pub extra: Map<String, Json>,
}

impl RepeatOptions {
    /// Reads stored `repeat` options.
    pub fn from_map(mut m: Map<String, Json>) -> Self {
        let mut num = |k: &str| m.remove(k).as_ref().and_then(json_u64);
        let every = num(field::EVERY);
        let limit = num(field::LIMIT);
        let offset = num(field::OFFSET);
        let start_date = num(field::START_DATE);
        let end_date = num(field::END_DATE);
        let count = num(field::COUNT).unwrap_or(0);
        let mut text = |k: &str| match m.remove(k) {
            Some(Json::String(s)) => Some(s),
            _ => None,
        };
        let pattern = text(field::PATTERN);
        let tz = text(field::TZ);
        RepeatOptions {
            every,
            pattern,
            tz,
            limit,
            offset,
            start_date,
            end_date,
            count,
            extra: m,
        }
    }

    /// The stored form.
    pub fn to_map(&self) -> Map<String, Json> {
        let mut m = self.extra.clone();
        put(&mut m, field::EVERY, self.every.map(Json::from));
        put(&mut m, field::PATTERN, self.pattern.clone().map(Json::from));
        put(&mut m, field::TZ, self.tz.clone().map(Json::from));
        put(&mut m, field::LIMIT, self.limit.map(Json::from));
        put(&mut m, field::OFFSET, self.offset.map(Json::from));
        m.insert(field::COUNT.into(), self.count.into());
        put(&mut m, field::START_DATE, self.start_date.map(Json::from));
        put(&mut m, field::END_DATE, self.end_date.map(Json::from));
        m
    }
}

/// The job options of one iteration: what it inherits (template options, or
/// the options of the iteration that produced it) plus what makes it an
/// iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct IterationOptions<'a> {
    /// Inherited options in stored form; `repeat` and the iteration keys are
    /// replaced.
    pub base: Map<String, Json>,
    /// Its `repeat` options.
    pub repeat: RepeatOptions,
    /// The scheduler.
    pub scheduler_id: &'a str,
    /// Cron: the millis it runs at. Every schedulers leave it to the script.
    pub next_millis: Option<u64>,
    /// Creation time, ms.
    pub now: u64,
}

impl IterationOptions<'_> {
    /// `repeat:<schedulerId>:<millis>` (`millis` empty for every schedulers:
    /// the script computes the slot).
    pub fn job_id(&self) -> String {
        format!("repeat:{}:{}", self.scheduler_id, self.millis_text())
    }

    pub(crate) fn millis_text(&self) -> String {
        self.next_millis.map(|n| n.to_string()).unwrap_or_default()
    }

    /// The options map sent to the script.
    pub fn to_map(&self) -> Map<String, Json> {
        let mut m = self.base.clone();
        m.insert(opt::REPEAT.into(), Json::Object(self.repeat.to_map()));
        m.insert(opt::JOB_ID.into(), self.job_id().into());
        let delay = self
            .next_millis
            .map(|n| n.saturating_sub(self.now))
            .unwrap_or(0);
        m.insert(opt::DELAY.into(), delay.into());
        m.insert(opt::TIMESTAMP.into(), self.now.into());
        put(&mut m, opt::PREV_MILLIS, self.next_millis.map(Json::from));
        m.insert(opt::REPEAT_JOB_KEY.into(), self.scheduler_id.into());
        m
    }
}

/// The scheduler's own options (the second ARGV of addJobScheduler), stored as its hash.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerOptions {
    /// Name of the jobs produced.
    pub name: String,
    /// Interval, ms.
    pub every: Option<u64>,
    /// Cron pattern.
    pub pattern: Option<String>,
    /// Zone of the pattern.
    pub tz: Option<String>,
    /// Iteration limit.
    pub limit: Option<u64>,
    /// Start date, ms.
    pub start_date: Option<u64>,
    /// End date, ms.
    pub end_date: Option<u64>,
    /// User offset of an every scheduler, ms.
    pub offset: Option<u64>,
}

impl SchedulerOptions {
    /// The packed map.
    pub fn pack(&self) -> Vec<u8> {
        let mut m = Map::new();
        m.insert(field::NAME.into(), self.name.clone().into());
        put(&mut m, field::START_DATE, self.start_date.map(Json::from));
        put(&mut m, field::END_DATE, self.end_date.map(Json::from));
        put(&mut m, field::TZ, self.tz.clone().map(Json::from));
        put(&mut m, field::PATTERN, self.pattern.clone().map(Json::from));
        put(&mut m, field::EVERY, self.every.map(Json::from));
        put(&mut m, field::LIMIT, self.limit.map(Json::from));
        put(&mut m, field::OFFSET, self.offset.map(Json::from));
        pack_map(&m)
    }

    /// The `repeat` options of the first iteration.
    pub fn first_repeat(&self) -> RepeatOptions {
        RepeatOptions {
            every: self.every,
            pattern: self.pattern.clone(),
            tz: self.tz.clone(),
            limit: self.limit,
            offset: self.offset,
            start_date: self.start_date,
            end_date: self.end_date,
            count: 1,
            extra: Map::new(),
        }
    }
}

/// A scheduler as stored (getJobScheduler, or its hash read directly).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
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
    /// Reads a scheduler hash; unreadable fields read as absent.
    pub fn from_hash(id: &str, next: u64, mut h: HashMap<String, String>) -> Self {
        let mut num = |f: &str| h.remove(f).as_deref().and_then(parse_millis);
        let every = num(field::EVERY);
        let limit = num(field::LIMIT);
        let start_date = num(field::START_DATE);
        let end_date = num(field::END_DATE);
        let offset = num(field::OFFSET);
        let iteration_count = num(field::ITERATION_COUNT).unwrap_or(0);
        SchedulerInfo {
            id: id.to_owned(),
            name: h.remove(field::NAME).unwrap_or_default(),
            next,
            every,
            pattern: h.remove(field::PATTERN),
            tz: h.remove(field::TZ),
            limit,
            start_date,
            end_date,
            offset,
            iteration_count,
            data: h
                .remove(field::DATA)
                .and_then(|s| serde_json::from_str(&s).ok()),
            options: h
                .remove(field::OPTS)
                .and_then(|s| serde_json::from_str::<Json>(&s).ok())
                .and_then(|v| match v {
                    Json::Object(m) => Some(m),
                    _ => None,
                }),
        }
    }

    /// The `repeat` options of an iteration of this scheduler, its number
    /// taken from `ic` (the offset is left to the script).
    pub fn repeat_options(&self) -> RepeatOptions {
        RepeatOptions {
            every: self.every,
            pattern: self.pattern.clone(),
            tz: self.tz.clone(),
            limit: self.limit,
            offset: None,
            start_date: self.start_date,
            end_date: self.end_date,
            count: self.iteration_count.max(1),
            extra: Map::new(),
        }
    }
}
