//! Reads: the state of a job, counts and id ranges by state, and whether a
//! job finished.

use crate::call::decode::{self, Reply, ReplyError};
use crate::call::lifecycle::EpochMs;
use crate::call::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// Order of the ids a range read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOrder {
    /// Oldest first.
    Ascending,
    /// Newest first.
    Descending,
}

/// getStateV2-8: the state of one job, as the state's name
/// (`completed`, `waiting`, `waiting-children`, … or `unknown`).
#[derive(Debug, Clone, Copy)]
pub struct GetState<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
}

impl ScriptCall for GetState<'_> {
    type Output = String;

    fn script(&self) -> ScriptId {
        ScriptId::GetStateV2
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().completed,
            &k.fixed().failed,
            &k.fixed().delayed,
            &k.fixed().active,
            &k.fixed().wait,
            &k.fixed().paused,
            &k.fixed().waiting_children,
            &k.fixed().prioritized,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id)]
    }

    fn decode(&self, reply: Reply) -> Result<String, ReplyError> {
        decode::text(self.script(), &reply)
    }
}

/// getStateBounded-8 (EchoMQ extension): [`GetState`]'s answer without
/// walking a long list: lists are searched `reach` entries from each end
/// (docs/scale.md §Getters).
#[derive(Debug, Clone, Copy)]
pub struct GetStateBounded<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// Entries searched from each end of a list.
    pub reach: u64,
}

impl ScriptCall for GetStateBounded<'_> {
    type Output = String;

    fn script(&self) -> ScriptId {
        ScriptId::GetStateBounded
    }

    fn keys(&self) -> Vec<Key> {
        GetState {
            keys: self.keys,
            id: self.id,
        }
        .keys()
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.id),
            Arg::int(self.reach),
            Arg::str(self.keys.prefix_key()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<String, ReplyError> {
        decode::text(self.script(), &reply)
    }
}

/// getCounts-1: the size of each named state, in order. States are key
/// suffixes (`wait`, `active`, `delayed`, …): the script counts any sorted
/// set of the queue, so the names are not a closed set.
#[derive(Debug, Clone, Copy)]
pub struct GetCounts<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Key suffixes of the states.
    pub states: &'a [&'a str],
    /// Count as `delayed` only the jobs due strictly before this time (ms),
    /// as Node's `getDelayedCount(timestamp)`; sent first.
    pub delayed_before: Option<EpochMs>,
}

impl ScriptCall for GetCounts<'_> {
    type Output = Vec<u64>;

    fn script(&self) -> ScriptId {
        ScriptId::GetCounts
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        let cutoff = self.delayed_before.map(|t| Arg::int(t.0));
        cutoff
            .into_iter()
            .chain(self.states.iter().map(|s| Arg::str(s)))
            .collect()
    }

    fn decode(&self, reply: Reply) -> Result<Vec<u64>, ReplyError> {
        let script = self.script();
        let counts = decode::array(script, reply)?
            .iter()
            .map(|r| {
                r.as_i64()
                    .map(|n| n.max(0) as u64)
                    .ok_or_else(|| ReplyError::shape(script, format!("count {r:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if counts.len() != self.states.len() {
            return Err(ReplyError::shape(script, "one count per state expected"));
        }
        Ok(counts)
    }
}

/// getRanges-1: ids of each named state in `[start, end]`, one list per
/// state. List states come back head first even when ascending (the caller
/// reverses them), as the script reads them.
#[derive(Debug, Clone, Copy)]
pub struct GetRanges<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// First index.
    pub start: i64,
    /// Last index, inclusive (negative from the end).
    pub end: i64,
    /// Order.
    pub order: RangeOrder,
    /// Key suffixes of the states.
    pub states: &'a [&'a str],
}

impl ScriptCall for GetRanges<'_> {
    type Output = Vec<Vec<String>>;

    fn script(&self) -> ScriptId {
        ScriptId::GetRanges
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        let mut args = vec![
            Arg::int(self.start),
            Arg::int(self.end),
            Arg::flag(self.order == RangeOrder::Ascending),
        ];
        args.extend(self.states.iter().map(|s| Arg::str(s)));
        args
    }

    fn decode(&self, reply: Reply) -> Result<Vec<Vec<String>>, ReplyError> {
        let script = self.script();
        let per_state = decode::array(script, reply)?;
        if per_state.len() != self.states.len() {
            return Err(ReplyError::shape(script, "one range per state expected"));
        }
        per_state
            .into_iter()
            .map(|ids| decode::strings(script, ids))
            .collect()
    }
}

/// What isFinished found, with the raw stored text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishedReply {
    /// Not in `completed` nor `failed`.
    No,
    /// Completed; the `returnvalue` field (JSON text).
    Completed(String),
    /// Failed; the `failedReason` field.
    Failed(String),
}

/// isFinished-3, asking for the value: whether a job completed or failed.
/// A missing job is `JobNotExist`.
#[derive(Debug, Clone, Copy)]
pub struct IsFinished<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
}

impl ScriptCall for IsFinished<'_> {
    type Output = FinishedReply;

    fn script(&self) -> ScriptId {
        ScriptId::IsFinished
    }

    fn keys(&self) -> Vec<Key> {
        keys![
            &self.keys.fixed().completed,
            &self.keys.fixed().failed,
            self.keys.job_key(self.id),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id), Arg::flag(true)]
    }

    fn decode(&self, reply: Reply) -> Result<FinishedReply, ReplyError> {
        let script = self.script();
        let items = decode::array(script, reply)?;
        let code = items
            .first()
            .and_then(Reply::as_i64)
            .ok_or_else(|| ReplyError::shape(script, "expected [code, value]"))?;
        let value = || items.get(1).and_then(Reply::to_text).unwrap_or_default();
        match decode::code(script, code)? {
            0 => Ok(FinishedReply::No),
            1 => Ok(FinishedReply::Completed(value())),
            2 => Ok(FinishedReply::Failed(value())),
            n => Err(ReplyError::shape(script, format!("unknown state {n}"))),
        }
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

    #[test]
    fn get_state() {
        let k = k();
        let call = GetState { keys: &k, id: "7" };
        assert_eq!(argv_text(&call), ["7"]);
        assert_eq!(call.keys()[6], "emq:q:waiting-children");
        assert_eq!(call.decode(Reply::text("active")).unwrap(), "active");
    }

    #[test]
    fn get_counts_and_ranges() {
        let k = k();
        let states = ["wait", "delayed"];
        let c = GetCounts {
            keys: &k,
            states: &states,
            delayed_before: None,
        };
        assert_eq!(argv_text(&c), ["wait", "delayed"]);
        let before = GetCounts {
            delayed_before: Some(EpochMs(1_700_000_000_123)),
            ..c
        };
        assert_eq!(argv_text(&before), ["1700000000123", "wait", "delayed"]);
        assert_eq!(c.keys(), ["emq:q:"]);
        assert_eq!(
            c.decode(Reply::Array(vec![Reply::Int(2), Reply::text("3")]))
                .unwrap(),
            [2, 3]
        );
        assert!(c.decode(Reply::Array(vec![Reply::Int(2)])).is_err());

        let r = GetRanges {
            keys: &k,
            start: 0,
            end: -1,
            order: RangeOrder::Ascending,
            states: &states,
        };
        assert_eq!(argv_text(&r), ["0", "-1", "1", "wait", "delayed"]);
        let reply = Reply::Array(vec![
            Reply::Array(vec![Reply::text("1")]),
            Reply::Array(vec![]),
        ]);
        assert_eq!(
            r.decode(reply).unwrap(),
            vec![vec!["1".to_string()], vec![]]
        );
    }

    #[test]
    fn is_finished() {
        let k = k();
        let c = IsFinished { keys: &k, id: "3" };
        assert_eq!(argv_text(&c), ["3", "1"]);
        assert_eq!(c.keys()[2], "emq:q:3");
        let two = |n: i64, v: &str| Reply::Array(vec![Reply::Int(n), Reply::text(v)]);
        assert_eq!(
            c.decode(two(1, "{}")).unwrap(),
            FinishedReply::Completed("{}".into())
        );
        assert_eq!(
            c.decode(two(2, "bad")).unwrap(),
            FinishedReply::Failed("bad".into())
        );
        assert_eq!(
            c.decode(Reply::Array(vec![Reply::Int(0)])).unwrap(),
            FinishedReply::No
        );
        assert_eq!(
            c.decode(two(-1, "Missing key")).unwrap_err().code(),
            Some(ScriptErrorCode::JobNotExist)
        );
    }
}
