//! Reading whole jobs by state in one atomic call (docs/protocol.md §Reading jobs).

use crate::call::admin::RangeOrder;
use crate::call::decode::{self, Reply, ReplyError};
use crate::call::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// Extra reads per state that refill a page whose ids vanished (BullMQ's
/// bound, so a page costs the same on either client).
pub const MAX_REFILL_READS: u32 = 5;

/// getJobs-1: for each state, the jobs of `[start, end]` as (id, hash fields);
/// ids without a hash are skipped and a bounded page refilled from the ids
/// after it.
#[derive(Debug, Clone, Copy)]
pub struct GetJobs<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// First index.
    pub start: i64,
    /// Last index, inclusive (negative from the end).
    pub end: i64,
    /// Order.
    pub order: RangeOrder,
    /// Key suffixes of the states (`wait`, not `waiting`).
    pub states: &'a [&'a str],
}

/// One job as getJobs reads it.
pub type JobEntry = (String, Vec<(String, String)>);

impl ScriptCall for GetJobs<'_> {
    type Output = Vec<Vec<JobEntry>>;

    fn script(&self) -> ScriptId {
        ScriptId::GetJobs
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        let mut args = vec![
            Arg::int(self.start),
            Arg::int(self.end),
            Arg::flag(self.order == RangeOrder::Ascending),
            Arg::int(MAX_REFILL_READS),
        ];
        args.extend(self.states.iter().map(|s| Arg::str(s)));
        args
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        let script = self.script();
        let per_state = decode::array(script, reply)?
            .into_iter()
            .map(|state| {
                decode::array(script, state)?
                    .into_iter()
                    .map(|entry| {
                        let mut parts = decode::array(script, entry)?.into_iter();
                        match (parts.next(), parts.next()) {
                            (Some(id), Some(hash)) => {
                                Ok((decode::text(script, &id)?, decode::pairs(script, hash)?))
                            }
                            _ => Err(ReplyError::shape(script, "entry is not {id, hash}")),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        if per_state.len() != self.states.len() {
            return Err(ReplyError::shape(script, "one list per state expected"));
        }
        Ok(per_state)
    }
}

/// searchJobs-1 (EchoMQ extension): one page of a scan of `state` from
/// `cursor`, `count` ids read, keeping on the server only the jobs named
/// `name` and whose data contains `text`. Answers the next cursor (`None`
/// when the state is exhausted) and the jobs kept.
#[derive(Debug, Clone, Copy)]
pub struct SearchJobs<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Key suffix of the state (`wait`, not `waiting`).
    pub state: &'a str,
    /// Index of the first id to read.
    pub cursor: u64,
    /// Ids to read in this call (at least 1).
    pub count: u64,
    /// Order.
    pub order: RangeOrder,
    /// Exact job name, `None` for any.
    pub name: Option<&'a str>,
    /// Plain text the data must contain, `None` for any.
    pub text: Option<&'a str>,
}

/// A page of [`SearchJobs`]: the next cursor and the jobs kept.
pub type SearchPage = (Option<u64>, Vec<JobEntry>);

impl ScriptCall for SearchJobs<'_> {
    type Output = SearchPage;

    fn script(&self) -> ScriptId {
        ScriptId::SearchJobs
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.state),
            Arg::int(self.cursor),
            Arg::int(self.count.max(1)),
            Arg::flag(self.order == RangeOrder::Ascending),
            Arg::str(self.name.unwrap_or("")),
            Arg::str(self.text.unwrap_or("")),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<SearchPage, ReplyError> {
        let script = self.script();
        let mut parts = decode::array(script, reply)?.into_iter();
        let (Some(next), Some(found)) = (parts.next(), parts.next()) else {
            return Err(ReplyError::shape(script, "expected {cursor, jobs}"));
        };
        let next = next
            .as_i64()
            .ok_or_else(|| ReplyError::shape(script, "cursor is not a number"))?;
        let jobs = decode::array(script, found)?
            .into_iter()
            .map(|entry| {
                let mut p = decode::array(script, entry)?.into_iter();
                match (p.next(), p.next()) {
                    (Some(id), Some(hash)) => {
                        Ok((decode::text(script, &id)?, decode::pairs(script, hash)?))
                    }
                    _ => Err(ReplyError::shape(script, "entry is not {id, hash}")),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((u64::try_from(next).ok(), jobs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn args_and_entries() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let c = GetJobs {
            keys: &k,
            start: 0,
            end: 9,
            order: RangeOrder::Ascending,
            states: &["wait", "completed"],
        };
        assert_eq!(argv_text(&c), vec!["0", "9", "1", "5", "wait", "completed"]);
        assert_eq!(c.keys(), vec!["emq:q:"]);
        let entry = |id: &str| {
            Reply::Array(vec![
                Reply::text(id),
                Reply::Array(vec![Reply::text("name"), Reply::text("n")]),
            ])
        };
        let r = Reply::Array(vec![
            Reply::Array(vec![entry("1"), entry("2")]),
            Reply::Array(vec![]),
        ]);
        let out = c.decode(r).unwrap();
        assert_eq!(out[0][1].0, "2");
        assert_eq!(out[0][0].1, vec![("name".to_string(), "n".to_string())]);
        assert!(out[1].is_empty());
        assert!(c.decode(Reply::Array(vec![])).is_err());
    }

    #[test]
    fn search_args_and_cursor() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let c = SearchJobs {
            keys: &k,
            state: "wait",
            cursor: 500,
            count: 500,
            order: RangeOrder::Descending,
            name: Some("mail"),
            text: None,
        };
        assert_eq!(argv_text(&c), vec!["wait", "500", "500", "0", "mail", ""]);
        let done = c
            .decode(Reply::Array(vec![Reply::Int(-1), Reply::Array(vec![])]))
            .unwrap();
        assert_eq!(done, (None, vec![]));
        let more = c
            .decode(Reply::Array(vec![Reply::Int(1000), Reply::Array(vec![])]))
            .unwrap();
        assert_eq!(more.0, Some(1000));
    }
}
