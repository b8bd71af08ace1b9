//! Adopting a queue a BullMQ fleet already runs (`echomq adopt`,
//! docs/migrating.md): what in it matters for a mixed fleet — legacy
//! repeatable jobs of BullMQ <= 4, which BullMQ 6 refuses and whose schedule
//! an EchoMQ worker cannot continue; the meta `version`; keys of a shape no
//! BullMQ or EchoMQ writes — and the conversion of each legacy repeatable into
//! a job scheduler with the same definition and the same next run.
//!
//! [`inspect`] only reads. [`apply`] converts one legacy entry per atomic
//! script call (`adoptLegacyRepeatable-5`), so a run killed half-way leaves
//! every entry either legacy or converted, and a second run converts what is
//! left: it is idempotent and converges. Every read is bounded: the
//! `{P}repeat` index and the key walk go a page at a time.

mod legacy;

use std::collections::HashMap;
use std::time::Duration;

use echomq_protocol::call::audit::glob_escape;
use echomq_protocol::call::scheduler::{opt, AdoptLegacyRepeatable, Adopted};
use echomq_protocol::QueueKeys;
use fred::prelude::{HashesInterface, KeysInterface, SortedSetsInterface};
use serde_json::Value as Json;
use tracing::info;

pub use self::legacy::{LegacyKey, LegacyRepeat};
use crate::connection::pool::Connection;
use crate::error::Result;
use crate::scheduler::{iteration, JobSchedulers};

/// `{P}repeat` members read per call.
pub const REPEAT_PAGE: i64 = 500;
/// SCAN COUNT of the key walk.
pub const SCAN_COUNT: u32 = 1000;
/// SCAN calls the key walk makes at most; past them the report says the walk
/// is incomplete.
pub const SCAN_CALLS: u32 = 2000;
/// Unknown keys named in a report (all are counted).
pub const UNKNOWN_SAMPLE: usize = 20;

/// Why adopt refused a queue: nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdoptError {
    /// No key of the queue exists under the prefix.
    #[error("no queue {queue:?} under prefix {prefix:?}: {hint}")]
    QueueNotFound {
        /// The prefix.
        prefix: String,
        /// The queue.
        queue: String,
        /// What is there instead.
        hint: String,
    },
    /// A queue key holds another Redis type than BullMQ's.
    #[error("{key} is a {found}, not a {expected}: not a BullMQ queue of this shape")]
    WrongType {
        /// The key.
        key: String,
        /// What BullMQ keeps there.
        expected: &'static str,
        /// What it holds.
        found: String,
    },
    /// Keys of a shape neither BullMQ nor EchoMQ writes: converting next to
    /// them is refused.
    #[error("{count} key(s) of unknown shape under {base} (e.g. {sample}): nothing converted")]
    UnknownKeys {
        /// The queue's key prefix.
        base: String,
        /// How many.
        count: usize,
        /// Some of them.
        sample: String,
    },
    /// A scheduler already has the id a legacy entry would take.
    #[error("legacy repeatable {member:?}: a job scheduler {scheduler_id:?} exists already")]
    IdTaken {
        /// The legacy member.
        member: String,
        /// The id.
        scheduler_id: String,
    },
}

/// Where the latest iteration of a legacy repeatable is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IterationState {
    /// Not taken yet: it carries the schedule on once converted.
    Pending,
    /// Taken by a worker (running, or retried).
    Taken,
    /// Finished, or gone: the conversion creates the next one.
    Gone,
}

/// One legacy repeatable found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyEntry {
    /// The member, parsed.
    pub key: LegacyKey,
    /// The millis of its latest iteration (its score).
    pub next_millis: u64,
    /// The scheduler id it becomes.
    pub scheduler_id: String,
    /// Its latest iteration `repeat:<scheduler id>:<millis>`.
    pub iteration_id: String,
    /// Where that iteration is.
    pub iteration: IterationState,
}

/// What happened to one legacy entry under [`apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converted {
    /// The legacy member.
    pub member: String,
    /// The scheduler id.
    pub scheduler_id: String,
    /// The script's answer.
    pub outcome: Adopted,
    /// The iteration created when the latest one was not pending.
    pub created: Option<String>,
}

/// What adopt found in a queue (and, with [`apply`], did).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdoptReport {
    /// The prefix.
    pub prefix: String,
    /// The queue.
    pub queue: String,
    /// The meta hash's `version` (`bullmq:4.18.3`), if any.
    pub version: Option<String>,
    /// Legacy repeatables (BullMQ <= 4's `{P}repeat` members).
    pub legacy: Vec<LegacyEntry>,
    /// Other `{P}repeat` members: job schedulers, BullMQ 5's hashed repeatables.
    pub schedulers: u64,
    /// Keys of the queue walked.
    pub keys_seen: u64,
    /// Whether the walk covered the whole keyspace (within [`SCAN_CALLS`]).
    pub walk_complete: bool,
    /// Keys of unknown shape: how many.
    pub unknown_keys: usize,
    /// Some of them.
    pub unknown_sample: Vec<String>,
    /// What [`apply`] did, one per legacy entry it met.
    pub converted: Vec<Converted>,
}

impl AdoptReport {
    /// Whether the report found something that blocks a conversion.
    pub fn blocked(&self) -> Option<AdoptError> {
        (self.unknown_keys > 0).then(|| AdoptError::UnknownKeys {
            base: format!("{}:{}:", self.prefix, self.queue),
            count: self.unknown_keys,
            sample: self.unknown_sample.join(", "),
        })
    }
}

/// Reads what matters in `queue` for a mixed fleet; writes nothing.
pub async fn inspect(conn: &Connection, queue: &str) -> Result<AdoptReport> {
    let keys = QueueKeys::new(conn.prefix(), queue)?;
    let mut report = AdoptReport {
        prefix: conn.prefix().to_owned(),
        queue: queue.to_owned(),
        ..AdoptReport::default()
    };
    walk_keys(conn, &keys, &mut report).await?;
    if report.keys_seen == 0 {
        return Err(not_found(conn, &keys).await?.into());
    }
    check_type(conn, &keys.meta(), "hash").await?;
    check_type(conn, &keys.repeat(), "zset").await?;
    report.version = conn.pool().hget(keys.meta(), "version").await?;
    read_repeat(conn, &keys, &mut report).await?;
    Ok(report)
}

/// [`inspect`], then converts every legacy repeatable into a job scheduler
/// (one atomic call each), and creates the next iteration of those whose
/// latest one had been taken or lost. Refuses to write anything when
/// [`AdoptReport::blocked`].
pub async fn apply(conn: &Connection, queue: &str) -> Result<AdoptReport> {
    let mut report = inspect(conn, queue).await?;
    if let Some(e) = report.blocked() {
        return Err(e.into());
    }
    let keys = QueueKeys::new(conn.prefix(), queue)?;
    for entry in report.legacy.clone() {
        report
            .converted
            .push(convert_one(conn, &keys, &entry).await?);
    }
    // A run killed between a conversion and the successor it owed leaves a
    // scheduler whose iteration is gone; the repair sweep re-creates it once
    // its time has passed (and does nothing when all is well).
    let sweep = JobSchedulers::new(conn, queue)?
        .sweep(Duration::ZERO)
        .await?;
    for r in sweep.restored {
        info!(queue, scheduler = %r.scheduler_id, job_id = %r.new_job_id, "adopt: lost iteration re-created");
    }
    Ok(report)
}

async fn convert_one(
    conn: &Connection,
    keys: &QueueKeys,
    entry: &LegacyEntry,
) -> Result<Converted> {
    let mut millis = entry.next_millis;
    // The score moves only if a BullMQ 4 worker is still running the
    // schedule; a few re-reads cover it.
    for _ in 0..5 {
        let job: HashMap<String, String> = conn
            .pool()
            .hgetall(keys.job(&entry.key.iteration_id(millis)))
            .await?;
        let conv = legacy::convert(&entry.key, millis, &job);
        let iteration_opts = Json::Object(conv.iteration_opts.clone()).to_string();
        let outcome = conn
            .call(&AdoptLegacyRepeatable {
                keys,
                member: &entry.key.member,
                scheduler_id: &entry.scheduler_id,
                millis,
                definition: &conv.definition,
                iteration_opts: &iteration_opts,
            })
            .await?;
        let mut done = Converted {
            member: entry.key.member.clone(),
            scheduler_id: entry.scheduler_id.clone(),
            outcome,
            created: None,
        };
        match outcome {
            Adopted::Moved => {
                let score: Option<f64> =
                    conn.pool().zscore(keys.repeat(), &entry.key.member).await?;
                match score {
                    Some(s) => millis = s.max(0.0) as u64,
                    None => {
                        done.outcome = Adopted::Gone;
                        return Ok(done);
                    }
                }
                continue;
            }
            Adopted::IdTaken => {
                return Err(AdoptError::IdTaken {
                    member: entry.key.member.clone(),
                    scheduler_id: entry.scheduler_id.clone(),
                }
                .into())
            }
            Adopted::NeedsIteration => {
                let mut base = conv.template_opts.clone();
                base.insert(opt::PREV_MILLIS.into(), millis.into());
                done.created = iteration::next_iteration(
                    conn,
                    keys,
                    &entry.scheduler_id,
                    &entry.key.iteration_id(millis),
                    base,
                    conv.repeat.clone(),
                    crate::clock::now_ms(),
                )
                .await?;
            }
            Adopted::Pending | Adopted::Gone => {}
        }
        info!(queue = %keys.name(), member = %entry.key.member, scheduler = %entry.scheduler_id, outcome = ?done.outcome, "adopt: legacy repeatable");
        return Ok(done);
    }
    Err(crate::error::Error::protocol(
        "adopt",
        format!(
            "legacy repeatable {:?} kept moving: is a BullMQ 4 worker still running it?",
            entry.key.member
        ),
    ))
}

/// Walks the queue's keys (bounded SCAN calls), counting them and noting
/// those of unknown shape.
async fn walk_keys(conn: &Connection, keys: &QueueKeys, report: &mut AdoptReport) -> Result<()> {
    let base = keys.prefix_key().to_owned();
    let pattern = format!("{}*", glob_escape(&base));
    let client = conn.pool().next();
    let mut cursor = "0".to_owned();
    for _ in 0..SCAN_CALLS {
        let (next, found): (String, Vec<String>) = client
            .scan_page(cursor, pattern.clone(), Some(SCAN_COUNT), None)
            .await?;
        for key in found {
            report.keys_seen += 1;
            let suffix = &key[base.len().min(key.len())..];
            if !known_shape(suffix) {
                report.unknown_keys += 1;
                if report.unknown_sample.len() < UNKNOWN_SAMPLE {
                    report.unknown_sample.push(key);
                }
            }
        }
        if next == "0" {
            report.walk_complete = true;
            return Ok(());
        }
        cursor = next;
    }
    Ok(())
}

/// Whether `suffix` (a key less `{P}`) is a key BullMQ 6, BullMQ 4 or EchoMQ
/// writes.
fn known_shape(suffix: &str) -> bool {
    const FIXED: &[&str] = &[
        "wait",
        "active",
        "paused",
        "prioritized",
        "pc",
        "delayed",
        "waiting-children",
        "completed",
        "failed",
        "stalled",
        "stalled-check",
        "meta",
        "id",
        "events",
        "marker",
        "limiter",
        "repeat",
        "drained",
        "cancel",
        "budget",
        "blobs",
    ];
    const FAMILIES: &[&str] = &["repeat:", "de:", "dn:", "metrics:", "gr:", "blobs:"];
    const JOB_PARTS: &[&str] = &[
        "lock",
        "logs",
        "dependencies",
        "processed",
        "failed",
        "unsuccessful",
    ];
    if FIXED.contains(&suffix) || FAMILIES.iter().any(|f| suffix.starts_with(f)) {
        return true;
    }
    match suffix.split_once(':') {
        // A job hash: ids carry no colon (BullMQ refuses them).
        None => !suffix.is_empty(),
        Some((id, part)) => !id.is_empty() && JOB_PARTS.contains(&part),
    }
}

async fn check_type(conn: &Connection, key: &str, expected: &'static str) -> Result<()> {
    let found: String = conn.pool().next().r#type(key).await?;
    if found != "none" && found != expected {
        return Err(AdoptError::WrongType {
            key: key.to_owned(),
            expected,
            found,
        }
        .into());
    }
    Ok(())
}

/// The `{P}repeat` index a page at a time; each page's iteration hashes in
/// one pipelined round trip.
async fn read_repeat(conn: &Connection, keys: &QueueKeys, report: &mut AdoptReport) -> Result<()> {
    let mut start = 0i64;
    loop {
        let page: Vec<(String, f64)> = conn
            .pool()
            .zrange(
                keys.repeat(),
                start,
                start + REPEAT_PAGE - 1,
                None,
                false,
                None,
                true,
            )
            .await?;
        let n = page.len() as i64;
        let mut found = Vec::new();
        for (member, score) in page {
            match LegacyKey::parse(&member) {
                Some(key) => {
                    let millis = score.max(0.0) as u64;
                    found.push(LegacyEntry {
                        scheduler_id: key.scheduler_id(),
                        iteration_id: key.iteration_id(millis),
                        key,
                        next_millis: millis,
                        iteration: IterationState::Gone,
                    })
                }
                None => report.schedulers += 1,
            }
        }
        if !found.is_empty() {
            let pipe = conn.pool().next().pipeline();
            for e in &found {
                pipe.hmget::<(), _, _>(
                    keys.job(&e.iteration_id),
                    vec!["timestamp", "processedOn", "finishedOn"],
                )
                .await?;
            }
            let states: Vec<Vec<Option<String>>> = pipe.all().await?;
            for (e, s) in found.iter_mut().zip(states) {
                e.iteration = match s.as_slice() {
                    [Some(_), None, None] => IterationState::Pending,
                    [Some(_), Some(_), None] => IterationState::Taken,
                    _ => IterationState::Gone,
                };
            }
            report.legacy.extend(found);
        }
        if n < REPEAT_PAGE {
            return Ok(());
        }
        start += n;
    }
}

/// The message for a queue with no key: the queues the prefix has, or that
/// it has none.
async fn not_found(conn: &Connection, keys: &QueueKeys) -> Result<AdoptError> {
    let prefix = keys.prefix();
    let pattern = format!("{}:*:meta", glob_escape(prefix));
    let client = conn.pool().next();
    let mut cursor = "0".to_owned();
    let mut queues = std::collections::BTreeSet::new();
    for _ in 0..SCAN_CALLS {
        let (next, found): (String, Vec<String>) = client
            .scan_page(cursor, pattern.clone(), Some(SCAN_COUNT), None)
            .await?;
        for k in found {
            if let Some(name) = k
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix(':'))
                .and_then(|r| r.strip_suffix(":meta"))
                .filter(|n| !n.contains(':'))
            {
                queues.insert(name.to_owned());
            }
        }
        if next == "0" || queues.len() >= 20 {
            break;
        }
        cursor = next;
    }
    let hint = if queues.is_empty() {
        "the prefix has no queue at all (is the prefix right? BullMQ's default is `bull`)"
            .to_owned()
    } else {
        let names: Vec<String> = queues.into_iter().collect();
        format!("queues under this prefix: {}", names.join(", "))
    };
    Ok(AdoptError::QueueNotFound {
        prefix: prefix.to_owned(),
        queue: keys.name().to_owned(),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_shapes() {
        for k in [
            "wait",
            "meta",
            "repeat",
            "repeat:abc",
            "repeat:abc:123",
            "repeat:abc:123:lock",
            "17",
            "17:lock",
            "abc:logs",
            "de:x",
            "dn:x",
            "cancel",
            "metrics:completed:data",
            "gr:ready",
        ] {
            assert!(known_shape(k), "{k}");
        }
        for k in ["", "17:other", "weird:key:here", ":lock"] {
            assert!(!known_shape(k), "{k}");
        }
    }
}
