//! The audit's read-only snapshot of a queue (an EchoMQ extension script,
//! `lua/auditSnapshot-1.lua`), decoded into a typed [`Snapshot`].

use std::collections::HashMap;

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// auditSnapshot-1: one atomic view of every structure, lock, job hash and
/// scheduler of a queue. Writes nothing.
#[derive(Debug, Clone, Copy)]
pub struct AuditSnapshot<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
}

/// A lock key, as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRow {
    /// The job.
    pub id: String,
    /// Its token.
    pub value: String,
    /// Remaining time, ms (negative: no expiry).
    pub pttl: i64,
}

/// The fields of a job hash the audit looks at (empty = absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobRow {
    /// PTTL of the hash, ms (-1: no expiry).
    pub ttl: i64,
    /// `timestamp`.
    pub timestamp: String,
    /// `finishedOn`.
    pub finished_on: String,
    /// `processedOn`.
    pub processed_on: String,
    /// `failedReason`.
    pub failed_reason: String,
    /// `priority`.
    pub priority: String,
    /// `atm`.
    pub atm: String,
    /// `ats`.
    pub ats: String,
    /// `stc`.
    pub stc: String,
    /// `rjk`.
    pub rjk: String,
}

/// One entry of `{P}repeat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerRow {
    /// The scheduler id.
    pub id: String,
    /// Whether `{P}repeat:<id>` exists.
    pub has_hash: bool,
}

/// Members of a sorted set with their scores, as text.
pub type Scored = Vec<(String, String)>;

/// The queue as the snapshot saw it.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// Redis server time, ms.
    pub now_ms: u64,
    /// `{P}wait`.
    pub wait: Vec<String>,
    /// `{P}paused` (legacy).
    pub paused: Vec<String>,
    /// `{P}active`.
    pub active: Vec<String>,
    /// `{P}prioritized`.
    pub prioritized: Scored,
    /// `{P}delayed`.
    pub delayed: Scored,
    /// `{P}waiting-children`.
    pub waiting_children: Scored,
    /// `{P}completed`.
    pub completed: Scored,
    /// `{P}failed`.
    pub failed: Scored,
    /// `{P}marker`.
    pub marker: Scored,
    /// `{P}stalled`.
    pub stalled: Vec<String>,
    /// Whether `{P}stalled-check` exists.
    pub stalled_check: bool,
    /// `{P}id`, when it is a number.
    pub id_counter: Option<u64>,
    /// `{P}meta`.
    pub meta: HashMap<String, String>,
    /// Type of every structural key that exists, by suffix.
    pub types: HashMap<String, String>,
    /// Every lock.
    pub locks: Vec<LockRow>,
    /// Every job hash, by id.
    pub jobs: HashMap<String, JobRow>,
    /// Entries in `{P}events`.
    pub events_len: i64,
    /// Every entry of `{P}repeat`.
    pub schedulers: Vec<SchedulerRow>,
}

impl ScriptCall for AuditSnapshot<'_> {
    type Output = Snapshot;

    fn script(&self) -> ScriptId {
        ScriptId::AuditSnapshot
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        Vec::new()
    }

    fn decode(&self, reply: Reply) -> Result<Snapshot, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        if parts.len() != 19 {
            return Err(ReplyError::shape(
                s,
                format!("{} parts, not 19", parts.len()),
            ));
        }
        let mut it = parts.into_iter();
        let mut next = || it.next().unwrap_or(Reply::Nil);
        Ok(Snapshot {
            now_ms: server_time(s, next())?,
            wait: decode::strings(s, next())?,
            paused: decode::strings(s, next())?,
            active: decode::strings(s, next())?,
            prioritized: decode::pairs(s, next())?,
            delayed: decode::pairs(s, next())?,
            waiting_children: decode::pairs(s, next())?,
            completed: decode::pairs(s, next())?,
            failed: decode::pairs(s, next())?,
            marker: decode::pairs(s, next())?,
            stalled: decode::strings(s, next())?,
            stalled_check: next().as_i64() == Some(1),
            id_counter: next().to_text().and_then(|t| t.parse().ok()),
            meta: decode::pairs(s, next())?.into_iter().collect(),
            types: decode::pairs(s, next())?.into_iter().collect(),
            locks: rows(s, next(), lock_row)?,
            jobs: rows(s, next(), job_row)?.into_iter().collect(),
            events_len: decode::array(s, next())?
                .first()
                .and_then(Reply::as_i64)
                .unwrap_or(0),
            schedulers: rows(s, next(), scheduler_row)?,
        })
    }
}

/// `TIME` (seconds, microseconds) as ms.
fn server_time(s: ScriptId, reply: Reply) -> Result<u64, ReplyError> {
    let t = decode::strings(s, reply)?;
    let part = |i: usize| t.get(i).and_then(|x| x.parse::<u64>().ok());
    match (part(0), part(1)) {
        (Some(secs), Some(micros)) => Ok(secs * 1000 + micros / 1000),
        _ => Err(ReplyError::shape(s, format!("TIME reply {t:?}"))),
    }
}

fn rows<T>(
    s: ScriptId,
    reply: Reply,
    row: fn(ScriptId, Vec<Reply>) -> Result<T, ReplyError>,
) -> Result<Vec<T>, ReplyError> {
    decode::array(s, reply)?
        .into_iter()
        .map(|r| row(s, decode::array(s, r)?))
        .collect()
}

fn int_at(s: ScriptId, r: &[Reply], i: usize) -> Result<i64, ReplyError> {
    r.get(i)
        .and_then(Reply::as_i64)
        .ok_or_else(|| ReplyError::shape(s, format!("row element {i} is not a number")))
}

fn text_at(s: ScriptId, r: &[Reply], i: usize) -> Result<String, ReplyError> {
    let e = r
        .get(i)
        .ok_or_else(|| ReplyError::shape(s, format!("row has no element {i}")))?;
    decode::text(s, e)
}

fn lock_row(s: ScriptId, r: Vec<Reply>) -> Result<LockRow, ReplyError> {
    Ok(LockRow {
        id: text_at(s, &r, 0)?,
        value: text_at(s, &r, 1)?,
        pttl: int_at(s, &r, 2)?,
    })
}

fn job_row(s: ScriptId, r: Vec<Reply>) -> Result<(String, JobRow), ReplyError> {
    let t = |i| text_at(s, &r, i);
    let row = JobRow {
        ttl: int_at(s, &r, 1)?,
        timestamp: t(2)?,
        finished_on: t(3)?,
        processed_on: t(4)?,
        failed_reason: t(5)?,
        priority: t(6)?,
        atm: t(7)?,
        ats: t(8)?,
        stc: t(9)?,
        rjk: t(10)?,
    };
    Ok((t(0)?, row))
}

fn scheduler_row(s: ScriptId, r: Vec<Reply>) -> Result<SchedulerRow, ReplyError> {
    Ok(SchedulerRow {
        id: text_at(s, &r, 0)?,
        has_hash: int_at(s, &r, 2)? == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    fn list(items: &[&str]) -> Reply {
        Reply::Array(items.iter().map(|s| Reply::text(s)).collect())
    }

    #[test]
    fn snapshot_decodes() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call = AuditSnapshot { keys: &k };
        assert!(argv_text(&call).is_empty());
        assert_eq!(call.keys(), ["emq:q:"]);
        let job = Reply::Array(vec![
            Reply::text("1"),
            Reply::Int(-1),
            Reply::text("10"),
            Reply::text(""),
            Reply::text(""),
            Reply::text(""),
            Reply::text("0"),
            Reply::text(""),
            Reply::text(""),
            Reply::text(""),
            Reply::text(""),
        ]);
        let reply = Reply::Array(vec![
            list(&["1700000000", "250000"]),
            list(&["1"]),
            list(&[]),
            list(&[]),
            list(&[]),
            list(&[]),
            list(&[]),
            list(&[]),
            list(&[]),
            list(&["0", "0"]),
            list(&[]),
            Reply::Int(0),
            Reply::text("1"),
            list(&["opts.maxLenEvents", "100"]),
            list(&["wait", "list"]),
            Reply::Array(vec![Reply::Array(vec![
                Reply::text("2"),
                Reply::text("tok"),
                Reply::Int(900),
            ])]),
            Reply::Array(vec![job]),
            Reply::Array(vec![Reply::Int(3), Reply::text("1-0")]),
            Reply::Array(vec![Reply::Array(vec![
                Reply::text("s"),
                Reply::text("5"),
                Reply::Int(1),
            ])]),
        ]);
        let snap = call.decode(reply).unwrap();
        assert_eq!(snap.now_ms, 1_700_000_000_250);
        assert_eq!(snap.wait, ["1"]);
        assert_eq!(snap.id_counter, Some(1));
        assert_eq!(snap.locks[0].pttl, 900);
        assert_eq!(snap.jobs["1"].timestamp, "10");
        assert_eq!(snap.events_len, 3);
        assert!(snap.schedulers[0].has_hash);
        assert!(call.decode(list(&["x"])).is_err());
    }
}
