//! Calls of the job-scheduler scripts (addJobScheduler-11,
//! updateJobScheduler-12, removeJobScheduler-3, getJobScheduler-1); the
//! options they carry are in `options.rs`.

mod adopt;
mod options;

use serde_json::{Map, Value as Json};

use crate::call::decode::{self, Reply, ReplyError};
use crate::call::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::packing::pack_map;
use crate::scripts::ScriptId;

pub use adopt::{AdoptLegacyRepeatable, Adopted};
pub use options::{
    field, json_u64, opt, parse_millis, IterationOptions, RepeatOptions, SchedulerInfo,
    SchedulerOptions,
};

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

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().repeat,
            &k.fixed().delayed,
            &k.fixed().wait,
            &k.fixed().paused,
            &k.fixed().meta,
            &k.fixed().prioritized,
            &k.fixed().marker,
            &k.fixed().id,
            &k.fixed().events,
            &k.fixed().pc,
            &k.fixed().active,
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

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().repeat,
            &k.fixed().delayed,
            &k.fixed().wait,
            &k.fixed().paused,
            &k.fixed().meta,
            &k.fixed().prioritized,
            &k.fixed().marker,
            &k.fixed().id,
            &k.fixed().events,
            &k.fixed().pc,
            k.job_key(self.producer_id),
            &k.fixed().active,
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

    fn keys(&self) -> Vec<Key> {
        keys![
            &self.keys.fixed().repeat,
            &self.keys.fixed().delayed,
            &self.keys.fixed().events
        ]
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

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().repeat]
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
    use crate::call::script::argv_text;
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
