//! The consistency audit's reads, a bounded page per call (EchoMQ extension
//! scripts, read-only): [`AuditHead`] for the O(1) facts of a queue,
//! [`AuditPage`] for one page of one state structure, [`AuditKeys`] for one
//! SCAN step over the queue's keys (locks, orphan hashes).

use std::collections::HashMap;

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// The fields of a job hash the audit looks at (empty = absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobRow {
    /// PTTL of the hash, ms (-1: no expiry, -2: no hash).
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

impl JobRow {
    /// Whether the job hash exists.
    pub fn exists(&self) -> bool {
        self.ttl != -2
    }
}

/// auditHead-1: the O(1) facts of a queue in one atomic view.
#[derive(Debug, Clone, Copy)]
pub struct AuditHead<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
}

/// What [`AuditHead`] read.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Head {
    /// Redis server time, ms.
    pub now_ms: u64,
    /// Type of every structural key that exists, by suffix.
    pub types: HashMap<String, String>,
    /// Size of every structural key that exists (elements; 1 for a string).
    pub sizes: HashMap<String, u64>,
    /// `{P}meta` (empty when it holds more than 100 fields).
    pub meta: HashMap<String, String>,
    /// `{P}id`, when it is a number.
    pub id_counter: Option<u64>,
    /// `{P}marker` (at most 10 members).
    pub marker: Vec<(String, String)>,
    /// Whether `{P}stalled-check` exists.
    pub stalled_check: bool,
    /// Entries in `{P}events`.
    pub events_len: i64,
}

impl Head {
    /// Size of a structure (0 when missing).
    pub fn size(&self, suffix: &str) -> u64 {
        self.sizes.get(suffix).copied().unwrap_or(0)
    }
}

impl ScriptCall for AuditHead<'_> {
    type Output = Head;

    fn script(&self) -> ScriptId {
        ScriptId::AuditHead
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        Vec::new()
    }

    fn decode(&self, reply: Reply) -> Result<Head, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        if parts.len() != 7 {
            return Err(ReplyError::shape(
                s,
                format!("{} parts, not 7", parts.len()),
            ));
        }
        let mut it = parts.into_iter();
        let mut next = || it.next().unwrap_or(Reply::Nil);
        let now_ms = server_time(s, next())?;
        let triples = decode::array(s, next())?;
        if triples.len() % 3 != 0 {
            return Err(ReplyError::shape(s, "types come in threes"));
        }
        let (mut types, mut sizes) = (HashMap::new(), HashMap::new());
        for t in triples.chunks(3) {
            let name = decode::text(s, &t[0])?;
            types.insert(name.clone(), decode::text(s, &t[1])?);
            sizes.insert(name, t[2].as_i64().unwrap_or(0).max(0) as u64);
        }
        Ok(Head {
            now_ms,
            types,
            sizes,
            meta: decode::pairs(s, next())?.into_iter().collect(),
            id_counter: next().to_text().and_then(|t| t.parse().ok()),
            marker: decode::pairs(s, next())?,
            stalled_check: next().as_i64() == Some(1),
            events_len: next().as_i64().unwrap_or(0),
        })
    }
}

/// auditPage-1: one page of one state structure, each id with its hash
/// fields, lock and other sorted-set states, in one atomic view.
#[derive(Debug, Clone, Copy)]
pub struct AuditPage<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Key suffix of the structure (`wait`, `completed`, …, or `repeat`).
    pub state: &'a str,
    /// Position of the first id (lists count from the tail).
    pub from: u64,
    /// Ids in the page.
    pub count: u64,
}

/// One id of an [`AuditPage`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageRow {
    /// The id.
    pub id: String,
    /// Its score, for a sorted set.
    pub score: Option<String>,
    /// Its job hash.
    pub job: JobRow,
    /// PTTL of its lock, ms (-2: no lock).
    pub lock_ttl: i64,
    /// The other sorted-set states that hold it.
    pub also_in: Vec<String>,
}

/// What one [`AuditPage`] read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatePage {
    /// `{P}id` at the time of the page, when a number.
    pub id_counter: Option<u64>,
    /// Size of the structure at the time of the page.
    pub size: u64,
    /// The ids (for `repeat`: the schedulers, with `job.ttl` 1 when their
    /// hash exists, -2 when not).
    pub rows: Vec<PageRow>,
}

impl ScriptCall for AuditPage<'_> {
    type Output = StatePage;

    fn script(&self) -> ScriptId {
        ScriptId::AuditPage
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.state),
            Arg::int(self.from),
            Arg::int(self.count.max(1)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<StatePage, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        if parts.len() != 3 {
            return Err(ReplyError::shape(
                s,
                format!("{} parts, not 3", parts.len()),
            ));
        }
        let mut it = parts.into_iter();
        let id_counter = it
            .next()
            .and_then(|r| r.to_text())
            .and_then(|t| t.parse().ok());
        let size = it.next().and_then(|r| r.as_i64()).unwrap_or(0).max(0) as u64;
        let rows = decode::array(s, it.next().unwrap_or(Reply::Nil))?
            .into_iter()
            .map(|r| {
                let r = decode::array(s, r)?;
                if self.state == "repeat" {
                    return Ok(PageRow {
                        id: text_at(s, &r, 0)?,
                        score: Some(text_at(s, &r, 1)?),
                        job: JobRow {
                            ttl: if int_at(s, &r, 2)? == 1 { 1 } else { -2 },
                            ..JobRow::default()
                        },
                        lock_ttl: -2,
                        also_in: Vec::new(),
                    });
                }
                page_row(s, &r)
            })
            .collect::<Result<_, _>>()?;
        Ok(StatePage {
            id_counter,
            size,
            rows,
        })
    }
}

fn page_row(s: ScriptId, r: &[Reply]) -> Result<PageRow, ReplyError> {
    let t = |i| text_at(s, r, i);
    let score = t(1)?;
    Ok(PageRow {
        id: t(0)?,
        score: (!score.is_empty()).then_some(score),
        job: JobRow {
            ttl: int_at(s, r, 2)?,
            timestamp: t(3)?,
            finished_on: t(4)?,
            processed_on: t(5)?,
            failed_reason: t(6)?,
            priority: t(7)?,
            atm: t(8)?,
            ats: t(9)?,
            stc: t(10)?,
            rjk: t(11)?,
        },
        lock_ttl: int_at(s, r, 12)?,
        also_in: split_names(&t(13)?),
    })
}

fn split_names(csv: &str) -> Vec<String> {
    csv.split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// auditKeys-1: one SCAN step over the queue's keys, for its locks and its
/// job hashes.
#[derive(Debug, Clone)]
pub struct AuditKeys<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// SCAN cursor (`"0"` to begin).
    pub cursor: &'a str,
    /// SCAN COUNT.
    pub count: u64,
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
    /// Whether the job hash exists.
    pub job_exists: bool,
    /// The sorted-set states that hold the job.
    pub held_by: Vec<String>,
}

/// A job hash found by the key scan, with the sorted-set states holding it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashRow {
    /// The job.
    pub id: String,
    /// The sorted-set states that hold it.
    pub held_by: Vec<String>,
}

/// What one [`AuditKeys`] step found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeysStep {
    /// Cursor of the next step, `"0"` when the scan is complete.
    pub cursor: String,
    /// The locks found.
    pub locks: Vec<LockRow>,
    /// The job hashes found.
    pub hashes: Vec<HashRow>,
}

impl ScriptCall for AuditKeys<'_> {
    type Output = KeysStep;

    fn script(&self) -> ScriptId {
        ScriptId::AuditKeys
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.cursor),
            Arg::int(self.count.max(1)),
            Arg::text(glob_escape(self.keys.prefix_key())),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<KeysStep, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        if parts.len() != 3 {
            return Err(ReplyError::shape(
                s,
                format!("{} parts, not 3", parts.len()),
            ));
        }
        let mut it = parts.into_iter();
        let cursor = decode::text(s, &it.next().unwrap_or(Reply::Nil))?;
        let locks = decode::array(s, it.next().unwrap_or(Reply::Nil))?
            .into_iter()
            .map(|r| {
                let r = decode::array(s, r)?;
                Ok(LockRow {
                    id: text_at(s, &r, 0)?,
                    value: text_at(s, &r, 1)?,
                    pttl: int_at(s, &r, 2)?,
                    job_exists: int_at(s, &r, 3)? == 1,
                    held_by: split_names(&text_at(s, &r, 4)?),
                })
            })
            .collect::<Result<_, ReplyError>>()?;
        let hashes = decode::array(s, it.next().unwrap_or(Reply::Nil))?
            .into_iter()
            .map(|r| {
                let r = decode::array(s, r)?;
                Ok(HashRow {
                    id: text_at(s, &r, 0)?,
                    held_by: split_names(&text_at(s, &r, 1)?),
                })
            })
            .collect::<Result<_, ReplyError>>()?;
        Ok(KeysStep {
            cursor,
            locks,
            hashes,
        })
    }
}

/// A key prefix as a literal inside a SCAN glob.
pub fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `TIME` (seconds, microseconds) as ms.
fn server_time(s: ScriptId, reply: Reply) -> Result<u64, ReplyError> {
    let t = decode::strings(s, reply)?;
    let part = |i: usize| t.get(i).and_then(|x| x.parse::<u64>().ok());
    // Foreign bytes may hold any number: one past u64's range is a bad
    // reply, not an overflow.
    let ms = match (part(0), part(1)) {
        (Some(secs), Some(micros)) => secs
            .checked_mul(1000)
            .and_then(|ms| ms.checked_add(micros / 1000)),
        _ => None,
    };
    ms.ok_or_else(|| ReplyError::shape(s, format!("TIME reply {t:?}")))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    fn list(items: &[&str]) -> Reply {
        Reply::Array(items.iter().map(|s| Reply::text(s)).collect())
    }

    #[test]
    fn head_decodes() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call = AuditHead { keys: &k };
        assert!(argv_text(&call).is_empty());
        assert_eq!(call.keys(), ["emq:q:"]);
        let reply = Reply::Array(vec![
            list(&["1700000000", "250000"]),
            Reply::Array(vec![
                Reply::text("wait"),
                Reply::text("list"),
                Reply::Int(3),
            ]),
            list(&["opts.maxLenEvents", "100"]),
            Reply::text("7"),
            list(&["0", "0"]),
            Reply::Int(0),
            Reply::Int(12),
        ]);
        let h = call.decode(reply).unwrap();
        assert_eq!(h.now_ms, 1_700_000_000_250);
        assert_eq!(h.size("wait"), 3);
        assert_eq!(h.types["wait"], "list");
        assert_eq!(h.id_counter, Some(7));
        assert_eq!(h.events_len, 12);
        assert!(call.decode(list(&["x"])).is_err());
    }

    #[test]
    fn page_and_keys_decode() {
        let k = QueueKeys::new("emq", "q").unwrap();
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
        let page = AuditPage {
            keys: &k,
            state: "completed",
            from: 200,
            count: 100,
        };
        assert_eq!(argv_text(&page), ["completed", "200", "100"]);
        let row = Reply::Array(vec![
            Reply::text("1"),
            Reply::text("5"),
            Reply::Int(-1),
            Reply::text("10"),
            Reply::text("5"),
            Reply::text(""),
            Reply::text(""),
            Reply::text("0"),
            Reply::text("1"),
            Reply::text("1"),
            Reply::text(""),
            Reply::text(""),
            Reply::Int(-2),
            Reply::text("failed,delayed"),
        ]);
        let p = page
            .decode(Reply::Array(vec![
                Reply::text("9"),
                Reply::Int(300),
                Reply::Array(vec![row]),
            ]))
            .unwrap();
        assert_eq!(p.id_counter, Some(9));
        assert_eq!(p.size, 300);
        assert_eq!(p.rows[0].score.as_deref(), Some("5"));
        assert_eq!(p.rows[0].also_in, ["failed", "delayed"]);
        assert!(p.rows[0].job.exists());
        let keys = AuditKeys {
            keys: &k,
            cursor: "0",
            count: 100,
        };
        assert_eq!(argv_text(&keys), ["0", "100", "emq:q:"]);
        let step = keys
            .decode(Reply::Array(vec![
                Reply::text("17"),
                Reply::Array(vec![Reply::Array(vec![
                    Reply::text("2"),
                    Reply::text("tok"),
                    Reply::Int(900),
                    Reply::Int(1),
                    Reply::text(""),
                ])]),
                Reply::Array(vec![Reply::Array(vec![
                    Reply::text("3"),
                    Reply::text("completed"),
                ])]),
            ]))
            .unwrap();
        assert_eq!(step.cursor, "17");
        assert_eq!(step.locks[0].pttl, 900);
        assert_eq!(step.hashes[0].held_by, ["completed"]);
    }
}
