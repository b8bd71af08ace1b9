//! Calls of the job-scheduler scripts, the scheduler hash as a type, and the
//! job options of a scheduler iteration, built in one place.
//!
//! Three paths create an iteration — an upsert (its first one), a worker that
//! took the current one, the runtime's repair sweep — and each sends the
//! iteration's options packed. They all go through [`IterationOptions`], so
//! the `repeat` map, `jobId`, `delay`, `prevMillis` … are written once.

use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use super::decode::{self, Reply};
use super::{Arg, ReplyError, ScriptCall};
use crate::keys::QueueKeys;
use crate::packing::pack_map;
use crate::scripts::ScriptId;

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
    s.parse::<u64>().ok().or_else(|| {
        s.parse::<f64>()
            .ok()
            .filter(|f| *f >= 0.0)
            .map(|f| f as u64)
    })
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

    fn millis_text(&self) -> String {
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

/// The iteration an upsert created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iteration {
    /// Its job id, `repeat:<schedulerId>:<millis>`.
    pub job_id: String,
    /// Its delay from the time of the call, ms (0 = ready now).
    pub delay: u64,
}

/// addJobScheduler-11: creates or replaces a scheduler and its pending
/// iteration. Refusals: `-10` (cron id collision), `-11` (every slots busy).
#[derive(Debug, Clone)]
pub struct AddJobScheduler<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The scheduler's options.
    pub scheduler: &'a SchedulerOptions,
    /// Template data, JSON text.
    pub data: &'a str,
    /// Template job options, stored form.
    pub template: &'a Map<String, Json>,
    /// The first iteration's options.
    pub first: &'a IterationOptions<'a>,
}

impl ScriptCall for AddJobScheduler<'_> {
    type Output = Iteration;

    fn script(&self) -> ScriptId {
        ScriptId::AddJobScheduler
    }

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.repeat(),
            k.delayed(),
            k.wait(),
            k.paused(),
            k.meta(),
            k.prioritized(),
            k.marker(),
            k.id(),
            k.events(),
            k.pc(),
            k.active(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::text(self.first.millis_text()),
            Arg::packed(self.scheduler.pack()),
            Arg::str(self.first.scheduler_id),
            Arg::str(self.data),
            Arg::packed(pack_map(self.template)),
            Arg::packed(pack_map(&self.first.to_map())),
            Arg::int(self.first.now),
            Arg::str(self.keys.prefix_key()),
            // The producer key: unused by the script, sent empty as Node does.
            Arg::empty(),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Iteration, ReplyError> {
        if let Reply::Int(n) = reply {
            decode::code(self.script(), n)?;
        }
        let items = decode::array(self.script(), reply)?;
        let job_id = items
            .first()
            .ok_or_else(|| ReplyError::shape(self.script(), "no job id"))
            .and_then(|r| decode::text(self.script(), r))?;
        let delay = items.get(1).and_then(Reply::as_i64).unwrap_or(0).max(0) as u64;
        Ok(Iteration { job_id, delay })
    }
}

/// updateJobScheduler-12: creates the iteration after `producer_id`, the one
/// a worker has just taken. `None`: nothing created (scheduler gone or
/// replaced, or the successor exists already).
#[derive(Debug, Clone)]
pub struct UpdateJobScheduler<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The iteration just taken.
    pub producer_id: &'a str,
    /// The next iteration's options.
    pub next: &'a IterationOptions<'a>,
}

impl ScriptCall for UpdateJobScheduler<'_> {
    type Output = Option<String>;

    fn script(&self) -> ScriptId {
        ScriptId::UpdateJobScheduler
    }

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.repeat(),
            k.delayed(),
            k.wait(),
            k.paused(),
            k.meta(),
            k.prioritized(),
            k.marker(),
            k.id(),
            k.events(),
            k.pc(),
            k.job(self.producer_id),
            k.active(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::text(self.next.millis_text()),
            Arg::str(self.next.scheduler_id),
            // Template data: the script uses the stored one.
            Arg::str("{}"),
            Arg::packed(pack_map(&self.next.to_map())),
            Arg::int(self.next.now),
            Arg::str(self.keys.prefix_key()),
            Arg::str(self.producer_id),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Option<String>, ReplyError> {
        match reply {
            Reply::Nil => Ok(None),
            Reply::Int(n) => {
                decode::code(self.script(), n)?;
                Ok(Some(n.to_string()))
            }
            other => decode::text(self.script(), &other).map(Some),
        }
    }
}

/// removeJobScheduler-3: deletes a scheduler and its delayed iteration;
/// `true` when the scheduler existed.
#[derive(Debug, Clone, Copy)]
pub struct RemoveJobScheduler<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The scheduler.
    pub id: &'a str,
}

impl ScriptCall for RemoveJobScheduler<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::RemoveJobScheduler
    }

    fn keys(&self) -> Vec<String> {
        vec![self.keys.repeat(), self.keys.delayed(), self.keys.events()]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id), Arg::str(self.keys.prefix_key())]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? == 0)
    }
}

/// getJobScheduler-1: one scheduler, `None` when the id has no score.
#[derive(Debug, Clone, Copy)]
pub struct GetJobScheduler<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The scheduler.
    pub id: &'a str,
}

impl ScriptCall for GetJobScheduler<'_> {
    type Output = Option<SchedulerInfo>;

    fn script(&self) -> ScriptId {
        ScriptId::GetJobScheduler
    }

    fn keys(&self) -> Vec<String> {
        vec![self.keys.repeat()]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id)]
    }

    fn decode(&self, reply: Reply) -> Result<Option<SchedulerInfo>, ReplyError> {
        let s = self.script();
        let mut items = decode::array(s, reply)?;
        // `[nil, nil]` arrives as an array of fewer than two elements.
        if items.len() < 2 || items[1].is_nil() {
            return Ok(None);
        }
        let score = decode::text(s, &items[1])?;
        let next = parse_millis(&score)
            .ok_or_else(|| ReplyError::shape(s, format!("score {score:?} is not a number")))?;
        let hash = decode::pairs(s, items.swap_remove(0))?;
        Ok(Some(SchedulerInfo::from_hash(
            self.id,
            next,
            hash.into_iter().collect(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::argv_text;
    use crate::reply::ScriptErrorCode;

    fn k() -> QueueKeys {
        QueueKeys::new("emq", "q").unwrap()
    }

    fn first(next_millis: Option<u64>) -> IterationOptions<'static> {
        IterationOptions {
            base: Map::new(),
            repeat: RepeatOptions {
                every: Some(1000),
                count: 1,
                ..Default::default()
            },
            scheduler_id: "s1",
            next_millis,
            now: 5_000,
        }
    }

    #[test]
    fn add_job_scheduler_order_and_codes() {
        let k = k();
        let sched = SchedulerOptions {
            name: "n".into(),
            every: Some(1000),
            ..Default::default()
        };
        let template = Map::new();
        let first = first(None);
        let call = AddJobScheduler {
            keys: &k,
            scheduler: &sched,
            data: "{}",
            template: &template,
            first: &first,
        };
        let argv = argv_text(&call);
        assert_eq!(argv.len(), 9);
        assert_eq!(argv[0], "");
        assert_eq!(argv[2], "s1");
        assert_eq!(argv[3], "{}");
        assert_eq!(argv[6], "5000");
        assert_eq!(argv[7], "emq:q:");
        assert_eq!(argv[8], "");
        assert_eq!(call.keys()[10], "emq:q:active");
        let ok = call
            .decode(Reply::Array(vec![
                Reply::text("repeat:s1:6000"),
                Reply::Int(1000),
            ]))
            .unwrap();
        assert_eq!(ok.job_id, "repeat:s1:6000");
        assert_eq!(ok.delay, 1000);
        for (n, code) in [
            (-10, ScriptErrorCode::SchedulerJobIdCollision),
            (-11, ScriptErrorCode::SchedulerJobSlotsBusy),
        ] {
            assert_eq!(call.decode(Reply::Int(n)).unwrap_err().code(), Some(code));
        }
    }

    #[test]
    fn update_job_scheduler_order() {
        let k = k();
        let next = first(Some(7_000));
        let call = UpdateJobScheduler {
            keys: &k,
            producer_id: "repeat:s1:6000",
            next: &next,
        };
        let argv = argv_text(&call);
        assert_eq!(
            [&argv[0], &argv[1], &argv[2], &argv[4], &argv[5], &argv[6]],
            ["7000", "s1", "{}", "5000", "emq:q:", "repeat:s1:6000"]
        );
        assert_eq!(call.keys()[10], "emq:q:repeat:s1:6000");
        assert_eq!(call.decode(Reply::Nil).unwrap(), None);
        assert_eq!(
            call.decode(Reply::text("repeat:s1:7000"))
                .unwrap()
                .as_deref(),
            Some("repeat:s1:7000")
        );
        assert_eq!(
            call.decode(Reply::Int(-8)).unwrap_err().code(),
            Some(ScriptErrorCode::JobBelongsToJobScheduler)
        );
    }

    #[test]
    fn remove_and_get() {
        let k = k();
        let rm = RemoveJobScheduler { keys: &k, id: "s1" };
        assert_eq!(argv_text(&rm), ["s1", "emq:q:"]);
        assert!(rm.decode(Reply::Int(0)).unwrap());
        assert!(!rm.decode(Reply::Int(1)).unwrap());
        let get = GetJobScheduler { keys: &k, id: "s1" };
        assert_eq!(argv_text(&get), ["s1"]);
        assert_eq!(get.decode(Reply::Array(vec![])).unwrap(), None);
        let hash = Reply::Array(
            ["name", "n", "every", "1000", "ic", "3"]
                .iter()
                .map(|s| Reply::text(s))
                .collect(),
        );
        let info = get
            .decode(Reply::Array(vec![hash, Reply::text("6000")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (info.every, info.iteration_count, info.next),
            (Some(1000), 3, 6000)
        );
    }

    #[test]
    fn iteration_options_in_one_place() {
        let it = first(Some(7_000));
        let m = it.to_map();
        assert_eq!(m[opt::JOB_ID], "repeat:s1:7000");
        assert_eq!(m[opt::DELAY], 2_000);
        assert_eq!(m[opt::PREV_MILLIS], 7_000);
        assert_eq!(m[opt::REPEAT_JOB_KEY], "s1");
        assert_eq!(m[opt::REPEAT][field::COUNT], 1);
        let every = first(None).to_map();
        assert_eq!(every[opt::JOB_ID], "repeat:s1:");
        assert!(!every.contains_key(opt::PREV_MILLIS));
        // Unknown repeat keys of a Node client survive a round trip.
        let mut stored = Map::new();
        stored.insert("every".into(), "1000".into());
        stored.insert("key".into(), "x".into());
        let r = RepeatOptions::from_map(stored);
        assert_eq!(r.every, Some(1000));
        assert_eq!(r.to_map()["key"], "x");
    }
}
