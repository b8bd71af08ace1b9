//! The consistency audit (reliability.md §5): invariants checkable over Redis
//! state alone. It only reads — one read-only script takes an atomic snapshot
//! of the queue — so it is safe on a live queue, and every hard invariant must
//! hold in it even while workers run (each transition is one script too).
//!
//! Used by `echomq audit`, by the fault tests (a run ends with an audit at
//! quiescence) and as a source of gauges.

use std::collections::{HashMap, HashSet};

use echomq_protocol::QueueKeys;
use fred::prelude::{LuaInterface, Value};

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::reply::{as_array, as_i64, as_string};

const SNAPSHOT: &str = include_str!("audit_snapshot.lua");

/// How bad a violation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// A bug: must never be seen, even while workers run.
    Hard,
    /// Must hold once the queue is quiescent (no workers, faults stopped, stall bound passed).
    Quiescent,
    /// Worth a look; may be transient.
    Warning,
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The check id of reliability.md §5.3 (`A1` …).
    pub check: String,
    /// How bad.
    pub severity: Severity,
    /// Counted as hard for this report (hard, or quiescent in a quiescent audit).
    pub hard: bool,
    /// The job concerned, if any.
    pub job_id: Option<String>,
    /// What was found.
    pub detail: String,
}

/// What the audit found.
#[derive(Clone, Debug, Default)]
pub struct AuditReport {
    /// Redis server time of the snapshot, ms.
    pub now_srv_ms: u64,
    /// Size of each state structure.
    pub counts: HashMap<String, usize>,
    /// Number of distinct job ids seen (in structures, locks or hashes).
    pub ids: usize,
    /// Number of locks.
    pub locks: usize,
    /// The broken invariants.
    pub violations: Vec<Violation>,
}

impl AuditReport {
    /// Violations counted as hard.
    pub fn hard_count(&self) -> usize {
        self.violations.iter().filter(|v| v.hard).count()
    }

    /// True when nothing counted as hard was found.
    pub fn is_consistent(&self) -> bool {
        self.hard_count() == 0
    }
}

/// Options of an audit.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    /// The queue is quiescent: "Q" checks count as hard. Default false.
    pub quiescent: bool,
    /// Largest lock duration any worker uses (A6b), ms. Default 30 000.
    pub max_lock_duration_ms: i64,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            quiescent: false,
            max_lock_duration_ms: 30_000,
        }
    }
}

/// Audits `queue` with the default options (live mode).
pub async fn audit(conn: &Connection, queue: &str) -> Result<AuditReport> {
    audit_with(conn, queue, &AuditOptions::default()).await
}

struct Job {
    ttl: i64,
    timestamp: String,
    finished_on: String,
    processed_on: String,
    failed_reason: String,
    priority: String,
    atm: String,
    ats: String,
    rjk: String,
}

/// Audits `queue` with `opts`.
pub async fn audit_with(
    conn: &Connection,
    queue: &str,
    opts: &AuditOptions,
) -> Result<AuditReport> {
    let keys = QueueKeys::new(conn.prefix(), queue)?;
    let v: Value = conn
        .pool()
        .eval(
            SNAPSHOT,
            vec![keys.prefix_key().to_owned()],
            Vec::<Value>::new(),
        )
        .await?;
    let parts = as_array(v).ok_or_else(|| Error::protocol("audit", "snapshot is not an array"))?;
    if parts.len() < 19 {
        return Err(Error::protocol("audit", "short snapshot"));
    }
    let mut parts = parts.into_iter();
    let mut next = || parts.next().unwrap_or(Value::Null);
    let strs = |v: Value| -> Vec<String> {
        as_array(v)
            .unwrap_or_default()
            .iter()
            .filter_map(as_string)
            .collect()
    };
    let pairs = |v: Value| -> Vec<(String, String)> {
        let s: Vec<String> = as_array(v)
            .unwrap_or_default()
            .iter()
            .filter_map(as_string)
            .collect();
        s.chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect()
    };
    let time = strs(next());
    let now_srv_ms = time
        .first()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0)
        * 1000
        + time.get(1).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) / 1000;
    let wait = strs(next());
    let paused = strs(next());
    let active = strs(next());
    let prioritized = pairs(next());
    let delayed = pairs(next());
    let waiting_children = pairs(next());
    let completed = pairs(next());
    let failed = pairs(next());
    let marker = pairs(next());
    let stalled = strs(next());
    let stalled_check = as_i64(&next()).unwrap_or(0) == 1;
    let id_counter = as_string(&next()).and_then(|s| s.parse::<u64>().ok());
    let meta: HashMap<String, String> = pairs(next()).into_iter().collect();
    let types: HashMap<String, String> = pairs(next()).into_iter().collect();
    let locks: Vec<(String, String, i64)> = as_array(next())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|row| {
            let r = as_array(row)?;
            Some((
                as_string(r.first()?)?,
                as_string(r.get(1)?).unwrap_or_default(),
                as_i64(r.get(2)?)?,
            ))
        })
        .collect();
    let jobs: HashMap<String, Job> = as_array(next())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|row| {
            let r = as_array(row)?;
            let s = |i: usize| r.get(i).and_then(as_string).unwrap_or_default();
            Some((
                s(0),
                Job {
                    ttl: r.get(1).and_then(as_i64).unwrap_or(-1),
                    timestamp: s(2),
                    finished_on: s(3),
                    processed_on: s(4),
                    failed_reason: s(5),
                    priority: s(6),
                    atm: s(7),
                    ats: s(8),
                    rjk: s(10),
                },
            ))
        })
        .collect();
    let stream = as_array(next()).unwrap_or_default();
    let xlen = stream.first().and_then(as_i64).unwrap_or(0);
    let schedulers: Vec<(String, bool)> = as_array(next())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|row| {
            let r = as_array(row)?;
            Some((as_string(r.first()?)?, r.get(2).and_then(as_i64) == Some(1)))
        })
        .collect();

    let mut report = AuditReport {
        now_srv_ms,
        locks: locks.len(),
        ..Default::default()
    };
    let mut add = |check: &str, severity: Severity, job_id: Option<&str>, detail: String| {
        let hard =
            severity == Severity::Hard || (severity == Severity::Quiescent && opts.quiescent);
        report.violations.push(Violation {
            check: check.into(),
            severity,
            hard,
            job_id: job_id.map(str::to_owned),
            detail,
        });
    };

    // A16: key types.
    let expected = [
        ("wait", "list"),
        ("paused", "list"),
        ("active", "list"),
        ("prioritized", "zset"),
        ("delayed", "zset"),
        ("waiting-children", "zset"),
        ("completed", "zset"),
        ("failed", "zset"),
        ("marker", "zset"),
        ("repeat", "zset"),
        ("stalled", "set"),
        ("meta", "hash"),
        ("events", "stream"),
        ("id", "string"),
        ("stalled-check", "string"),
    ];
    for (k, t) in expected {
        if let Some(actual) = types.get(k) {
            if actual != t {
                add(
                    "A16",
                    Severity::Hard,
                    None,
                    format!("{{P}}{k} is a {actual}, expected a {t}"),
                );
            }
        }
    }

    // A1: no duplicates inside a list.
    for (name, list) in [("wait", &wait), ("paused", &paused), ("active", &active)] {
        let distinct: HashSet<&String> = list.iter().collect();
        if distinct.len() != list.len() {
            for id in dupes(list) {
                add(
                    "A1",
                    Severity::Hard,
                    Some(&id),
                    format!("listed more than once in {name}"),
                );
            }
        }
    }

    // A2/A3/A4: exactly one state, no dangling reference, no orphan hash.
    let states: Vec<(&str, Vec<&String>)> = vec![
        ("wait", wait.iter().collect()),
        ("paused", paused.iter().collect()),
        ("active", active.iter().collect()),
        ("prioritized", prioritized.iter().map(|(m, _)| m).collect()),
        ("delayed", delayed.iter().map(|(m, _)| m).collect()),
        (
            "waiting-children",
            waiting_children.iter().map(|(m, _)| m).collect(),
        ),
        ("completed", completed.iter().map(|(m, _)| m).collect()),
        ("failed", failed.iter().map(|(m, _)| m).collect()),
    ];
    let mut where_is: HashMap<&String, Vec<&str>> = HashMap::new();
    for (name, ids) in &states {
        report.counts.insert((*name).to_owned(), ids.len());
        let distinct: HashSet<&String> = ids.iter().copied().collect();
        for id in distinct {
            where_is.entry(id).or_default().push(name);
        }
    }
    for (id, in_states) in &where_is {
        if in_states.len() > 1 {
            add(
                "A2",
                Severity::Hard,
                Some(id),
                format!("in {} states: {}", in_states.len(), in_states.join(", ")),
            );
        }
        if !jobs.contains_key(*id) && !id.starts_with("0:") {
            add(
                "A3",
                Severity::Hard,
                Some(id),
                format!("in {} but its job hash is missing", in_states.join(", ")),
            );
        }
    }
    for id in jobs.keys() {
        if !where_is.contains_key(id) {
            add(
                "A4",
                Severity::Quiescent,
                Some(id),
                "job hash in no state structure".into(),
            );
        }
    }

    // A5: pause coherence (BullMQ 6 model: jobs stay in wait; no base marker while paused).
    let is_paused = meta.contains_key("paused");
    if is_paused && marker.iter().any(|(m, _)| m == "0") {
        add(
            "A5",
            Severity::Hard,
            None,
            "queue paused but the ready marker is set".into(),
        );
    }
    if !paused.is_empty() {
        add(
            "A5",
            Severity::Warning,
            None,
            format!("{} ids in the legacy paused list", paused.len()),
        );
    }

    // A6: locks.
    let active_set: HashSet<&String> = active.iter().collect();
    for (id, value, pttl) in &locks {
        if !active_set.contains(id) {
            add(
                "A6a",
                Severity::Hard,
                Some(id),
                "a lock on a job that is not active".into(),
            );
        }
        if *pttl < 0 || *pttl > opts.max_lock_duration_ms {
            add(
                "A6b",
                Severity::Hard,
                Some(id),
                format!(
                    "lock PTTL {pttl} ms outside (0, {}]",
                    opts.max_lock_duration_ms
                ),
            );
        }
        if !is_uuid(value) {
            add(
                "A6c",
                Severity::Warning,
                Some(id),
                format!("lock value {value:?} is not a UUID"),
            );
        }
    }
    // A7: active without a lock (stall candidates).
    let locked: HashSet<&String> = locks.iter().map(|(id, _, _)| id).collect();
    for id in &active {
        if !locked.contains(id) {
            add(
                "A7",
                Severity::Quiescent,
                Some(id),
                "active without a lock (stall candidate)".into(),
            );
        }
    }
    // A8: stalled ⊆ active.
    for id in &stalled {
        if !active_set.contains(id) {
            add(
                "A8",
                Severity::Warning,
                Some(id),
                "marked stalled but not active".into(),
            );
        }
    }
    let _ = stalled_check;

    // A9/A10: per-state fields.
    let field = |id: &String| jobs.get(id);
    for (id, score) in &completed {
        if let Some(j) = field(id) {
            if j.finished_on.is_empty()
                || j.finished_on.parse::<f64>().ok() != score.parse::<f64>().ok()
            {
                add(
                    "A9",
                    Severity::Warning,
                    Some(id),
                    format!("completed: finishedOn {:?} vs score {score}", j.finished_on),
                );
            }
        }
    }
    for (id, score) in &delayed {
        if let (Some(j), Ok(score)) = (field(id), score.parse::<f64>()) {
            let due = (score / 4096.0).floor() as u64;
            if j.timestamp.parse::<u64>().is_ok_and(|t| due < t) {
                add(
                    "A9",
                    Severity::Warning,
                    Some(id),
                    format!("delayed until {due}, before its timestamp {}", j.timestamp),
                );
            }
        }
    }
    for (id, _) in &failed {
        if let Some(j) = field(id) {
            if j.finished_on.is_empty() || j.failed_reason.is_empty() {
                add(
                    "A9",
                    Severity::Warning,
                    Some(id),
                    "failed without finishedOn or failedReason".into(),
                );
            }
        }
    }
    for id in &active {
        if let Some(j) = field(id) {
            if j.processed_on.is_empty() || j.ats.parse::<u64>().unwrap_or(0) < 1 {
                add(
                    "A9",
                    Severity::Warning,
                    Some(id),
                    "active without processedOn or ats".into(),
                );
            }
        }
    }
    for (id, j) in &jobs {
        if j.atm.parse::<u64>().unwrap_or(0) > j.ats.parse::<u64>().unwrap_or(0)
            && !j.ats.is_empty()
        {
            add(
                "A9",
                Severity::Warning,
                Some(id),
                format!("atm {} > ats {}", j.atm, j.ats),
            );
        }
        // A18: durable data must not expire.
        if j.ttl >= 0 {
            add(
                "A18",
                Severity::Warning,
                Some(id),
                format!("job hash has a TTL of {} ms", j.ttl),
            );
        }
    }
    for (id, _) in &prioritized {
        if let Some(j) = field(id) {
            if j.priority.parse::<i64>().unwrap_or(0) <= 0 {
                add(
                    "A10",
                    Severity::Warning,
                    Some(id),
                    "prioritized with priority 0".into(),
                );
            }
        }
    }
    for id in &wait {
        if let Some(j) = field(id) {
            if j.priority.parse::<i64>().unwrap_or(0) > 0 {
                add(
                    "A10",
                    Severity::Warning,
                    Some(id),
                    "in wait with a priority".into(),
                );
            }
            if !j.finished_on.is_empty() {
                add(
                    "A9",
                    Severity::Warning,
                    Some(id),
                    "waiting with finishedOn".into(),
                );
            }
        }
    }

    // A11: a lost wake-up.
    let maxed = meta
        .get("concurrency")
        .and_then(|c| c.parse::<usize>().ok())
        .is_some_and(|c| active.len() >= c);
    if (!wait.is_empty() || !prioritized.is_empty())
        && !is_paused
        && !maxed
        && marker.is_empty()
        && active.is_empty()
    {
        add(
            "A11",
            Severity::Warning,
            None,
            "jobs ready, no marker and nothing active: workers may sleep until their block timeout"
                .into(),
        );
    }

    // A12: schedulers.
    for (sid, has_hash) in &schedulers {
        if !has_hash {
            add(
                "A12a",
                Severity::Hard,
                None,
                format!("scheduler {sid} in {{P}}repeat without its hash"),
            );
        }
        let pending = jobs
            .iter()
            .filter(|(id, j)| {
                j.rjk == *sid
                    && where_is.get(id).is_some_and(|s| {
                        s.iter()
                            .any(|s| matches!(*s, "wait" | "paused" | "delayed" | "prioritized"))
                    })
            })
            .count();
        if pending > 1 {
            add(
                "A12b",
                Severity::Quiescent,
                None,
                format!("scheduler {sid} has {pending} pending iterations"),
            );
        }
    }

    // A14: the id counter is above every generated id.
    if let Some(counter) = id_counter {
        for id in where_is.keys() {
            if let Ok(n) = id.parse::<u64>() {
                if n > counter {
                    add(
                        "A14",
                        Severity::Hard,
                        Some(id),
                        format!("generated id above the counter {counter}: ids will be reused"),
                    );
                }
            }
        }
    }

    // A15: stream bounds.
    let max_len = meta
        .get("opts.maxLenEvents")
        .and_then(|m| m.parse::<i64>().ok())
        .unwrap_or(10_000);
    if xlen > max_len + max_len / 10 + 100 {
        add(
            "A15",
            Severity::Warning,
            None,
            format!("events stream has {xlen} entries, target {max_len}"),
        );
    }

    let mut all_ids: HashSet<&String> = where_is.keys().copied().collect();
    all_ids.extend(jobs.keys());
    all_ids.extend(locks.iter().map(|(id, _, _)| id));
    report.ids = all_ids.len();
    Ok(report)
}

fn dupes(list: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for id in list {
        if !seen.insert(id) && !out.contains(id) {
            out.push(id.clone());
        }
    }
    out
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}
