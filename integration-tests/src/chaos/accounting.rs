//! Accounting of a scenario from Redis and the events stream, never from the
//! workers' own word: the producer's ledger of acknowledged and ambiguous
//! adds, set against where every id is now and what the stream says
//! happened to it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::audit::{Audit, AuditOptions};
use echomq::{Connection, Queue};
use fred::prelude::*;

/// What the producer knows about its adds: acknowledged (Ok came back) or
/// ambiguous (an error or timeout: it may or may not have been applied).
#[derive(Clone, Default)]
pub struct Ledger {
    inner: Arc<Mutex<LedgerInner>>,
}

#[derive(Default)]
struct LedgerInner {
    acked: Vec<String>,
    ambiguous: Vec<String>,
    refused: usize,
    refusals: Vec<String>,
}

impl Ledger {
    /// Records an acknowledged add.
    pub fn acked(&self, id: String) {
        self.inner.lock().unwrap().acked.push(id);
    }

    /// Records an add whose outcome is unknown (custom id known).
    pub fn ambiguous(&self, id: String) {
        self.inner.lock().unwrap().ambiguous.push(id);
    }

    /// Records an add refused with a typed error before anything was written.
    pub fn refused(&self) {
        self.inner.lock().unwrap().refused += 1;
    }

    /// Records a refused add with its error (the first few are kept).
    pub fn refused_with(&self, error: &echomq::Error) {
        let mut inner = self.inner.lock().unwrap();
        inner.refused += 1;
        if inner.refusals.len() < 5 {
            inner.refusals.push(error.to_string());
        }
    }

    /// The errors of the first refused adds.
    pub fn refusals(&self) -> Vec<String> {
        self.inner.lock().unwrap().refusals.clone()
    }

    /// The acknowledged ids.
    pub fn acked_ids(&self) -> Vec<String> {
        self.inner.lock().unwrap().acked.clone()
    }

    /// Number of acknowledged adds.
    pub fn acked_count(&self) -> usize {
        self.inner.lock().unwrap().acked.len()
    }

    /// Number of ambiguous adds.
    pub fn ambiguous_count(&self) -> usize {
        self.inner.lock().unwrap().ambiguous.len()
    }

    /// Number of refused adds.
    pub fn refused_count(&self) -> usize {
        self.inner.lock().unwrap().refused
    }

    fn ambiguous_ids(&self) -> Vec<String> {
        self.inner.lock().unwrap().ambiguous.clone()
    }
}

/// The state structures an id can be in.
const STATES: [(&str, bool); 8] = [
    ("wait", true),
    ("paused", true),
    ("active", true),
    ("prioritized", false),
    ("delayed", false),
    ("waiting-children", false),
    ("completed", false),
    ("failed", false),
];

/// The accounting of one scenario at its end.
#[derive(Clone, Debug, Default)]
pub struct Accounting {
    /// Acknowledged adds.
    pub acked: usize,
    /// Ambiguous adds.
    pub ambiguous: usize,
    /// Acknowledged ids in `completed`.
    pub completed: usize,
    /// Acknowledged ids in `failed`.
    pub failed: usize,
    /// Acknowledged ids still pending (wait, active, delayed, …).
    pub pending: usize,
    /// Those ids. A scenario that leaves jobs pending on purpose removes
    /// them from here; any other is a job the scenario did not finish.
    pub pending_ids: Vec<String>,
    /// Acknowledged ids found in no state.
    pub lost: Vec<String>,
    /// Ids in two or more state structures (or twice in one list).
    pub multi_state: Vec<String>,
    /// Ids in Redis nobody added (neither acked nor ambiguous), scheduler
    /// iterations aside.
    pub ghosts: Vec<String>,
    /// Ids with two or more `completed` events.
    pub completed_twice: Vec<String>,
    /// Ids whose `completed` event came after a `stalled` event with no
    /// `active` event in between: a finish without the lock.
    pub completed_without_lock: Vec<String>,
    /// `stalled` events in the stream.
    pub stalled_events: usize,
    /// `completed` events per id (for scenario-specific checks).
    pub completions: HashMap<String, usize>,
    /// The stream was trimmed: the event checks saw only its tail.
    pub stream_trimmed: bool,
    /// Hard violations of the quiescent audit, as `check×count`.
    pub audit_hard: Vec<String>,
    /// Every violation of the audit (hard or not), as `check×count`.
    pub audit_all: Vec<String>,
}

impl Accounting {
    /// The standard invariants that failed, as short reasons: every
    /// acknowledged add is completed or failed (INV-NoLoss: none lost, none
    /// left pending), none is in two states, nothing is in Redis that nobody
    /// added, nothing finished twice or without its lock (INV-Fence), and
    /// the audit is clean (INV-Audit). A scenario that expects some pending
    /// jobs or foreign ids removes exactly those from `pending_ids` and
    /// `ghosts` first.
    pub fn broken(&self) -> Vec<String> {
        let mut r = Vec::new();
        if !self.lost.is_empty() {
            r.push(format!("lost {:?}", first(&self.lost)));
        }
        if !self.pending_ids.is_empty() {
            r.push(format!(
                "{} acknowledged jobs still pending {:?}",
                self.pending_ids.len(),
                first(&self.pending_ids)
            ));
        }
        if !self.ghosts.is_empty() {
            r.push(format!(
                "{} ids nobody added {:?}",
                self.ghosts.len(),
                first(&self.ghosts)
            ));
        }
        if !self.multi_state.is_empty() {
            r.push(format!("in two states {:?}", first(&self.multi_state)));
        }
        if !self.completed_twice.is_empty() {
            r.push(format!(
                "completed twice {:?}",
                first(&self.completed_twice)
            ));
        }
        if !self.completed_without_lock.is_empty() {
            r.push(format!(
                "completed after a lost lock {:?}",
                first(&self.completed_without_lock)
            ));
        }
        if !self.audit_hard.is_empty() {
            r.push(format!("audit: {}", self.audit_hard.join(", ")));
        }
        r
    }

    /// The audit column: `clean`, or the violations found.
    pub fn audit_cell(&self) -> String {
        if self.audit_hard.is_empty() {
            if self.audit_all.is_empty() {
                "clean".into()
            } else {
                format!("clean (warn: {})", self.audit_all.join(", "))
            }
        } else {
            self.audit_hard.join(", ")
        }
    }
}

fn first(ids: &[String]) -> Vec<&String> {
    ids.iter().take(3).collect()
}

/// Where every id is now, from the state structures.
pub async fn locate(client: &Client, queue: &Queue) -> HashMap<String, Vec<&'static str>> {
    let k = queue.keys();
    let mut at: HashMap<String, Vec<&'static str>> = HashMap::new();
    for (state, is_list) in STATES {
        let key = k.key(state);
        let ids: Vec<String> = if is_list {
            client.lrange(&key, 0, -1).await.unwrap_or_default()
        } else {
            client
                .zrange(&key, 0, -1, None, false, None, false)
                .await
                .unwrap_or_default()
        };
        for id in ids {
            at.entry(id).or_default().push(state);
        }
    }
    at
}

/// Accounts a scenario: the ledger against Redis, the events stream, and
/// the audit at quiescence (`max_lock` is the largest lock duration used).
pub async fn account(
    conn: &Connection,
    client: &Client,
    queue: &Queue,
    ledger: &Ledger,
    max_lock: Duration,
) -> Accounting {
    let at = locate(client, queue).await;
    let acked = ledger.acked_ids();
    let known: HashSet<&String> = acked.iter().collect();
    let ambiguous = ledger.ambiguous_ids();
    let maybe: HashSet<&String> = ambiguous.iter().collect();
    let mut a = Accounting {
        acked: acked.len(),
        ambiguous: ambiguous.len(),
        ..Default::default()
    };
    for id in &acked {
        match at.get(id).map(|s| s.as_slice()) {
            None | Some([]) => a.lost.push(id.clone()),
            Some(["completed"]) => a.completed += 1,
            Some(["failed"]) => a.failed += 1,
            Some([_]) => {
                a.pending += 1;
                a.pending_ids.push(id.clone());
            }
            Some(_) => {}
        }
    }
    for (id, states) in &at {
        if states.len() > 1 {
            a.multi_state.push(id.clone());
        }
        if !known.contains(id) && !maybe.contains(id) && !id.starts_with("repeat:") {
            a.ghosts.push(id.clone());
        }
    }
    a.multi_state.sort();
    a.ghosts.sort();
    events(client, queue, &mut a).await;
    audit(conn, queue, max_lock, &mut a).await;
    a
}

async fn events(client: &Client, queue: &Queue, a: &mut Accounting) {
    let key = queue.keys().events();
    let all = read_events(client, queue).await;
    let info: Value = client
        .xinfo_stream(&key, false, None)
        .await
        .unwrap_or(Value::Null);
    let added = entries_added(info);
    a.stream_trimmed = added.is_some_and(|n| n as usize > all.len());
    // Per job: do we hold the lock in the stream's story? `active` takes it,
    // `stalled` loses it, a `completed` while not held is a finish without it.
    let mut held: HashMap<String, bool> = HashMap::new();
    for Event {
        name, job_id: id, ..
    } in all
    {
        if id.is_empty() {
            continue;
        }
        match name.as_str() {
            "active" => {
                held.insert(id, true);
            }
            "stalled" => {
                a.stalled_events += 1;
                held.insert(id, false);
            }
            "completed" => {
                let n = a.completions.entry(id.clone()).or_default();
                *n += 1;
                if *n == 2 {
                    a.completed_twice.push(id.clone());
                }
                // A trimmed stream may have lost the `active`: no verdict then.
                if held.get(&id) == Some(&false) {
                    a.completed_without_lock.push(id.clone());
                }
                held.insert(id, false);
            }
            _ => {}
        }
    }
}

async fn audit(conn: &Connection, queue: &Queue, max_lock: Duration, a: &mut Accounting) {
    let opts = AuditOptions {
        quiescent: true,
        max_lock_duration: max_lock,
    };
    match Audit::new(conn, queue.name()).options(opts).run().await {
        Ok(report) => {
            let mut hard: HashMap<String, usize> = HashMap::new();
            let mut all: HashMap<String, usize> = HashMap::new();
            for v in &report.violations {
                if std::env::var_os("CHAOS_VERBOSE").is_some() {
                    eprintln!("chaos audit {}: {v:?}", queue.name());
                }
                *all.entry(v.check.clone()).or_default() += 1;
                if v.hard {
                    *hard.entry(v.check.clone()).or_default() += 1;
                }
            }
            a.audit_hard = tally(hard);
            a.audit_all = tally(all);
        }
        Err(e) => a.audit_hard = vec![format!("audit error: {e}")],
    }
}

fn tally(m: HashMap<String, usize>) -> Vec<String> {
    let mut v: Vec<String> = m.into_iter().map(|(k, n)| format!("{k}×{n}")).collect();
    v.sort();
    v
}

/// `entries-added` of an XINFO STREAM reply (RESP2 flat array or a map).
fn entries_added(info: Value) -> Option<u64> {
    match info {
        Value::Array(flat) => flat
            .chunks(2)
            .find(|p| p.len() == 2 && p[0].as_str().as_deref() == Some("entries-added"))
            .and_then(|p| p[1].as_u64()),
        Value::Map(map) => map.inner().into_iter().find_map(|(k, v)| {
            (k.as_str() == Some("entries-added"))
                .then(|| v.as_u64())
                .flatten()
        }),
        _ => None,
    }
}

/// One entry of the events stream (`timeline::Stamp`).
pub use crate::timeline::Stamp as Event;

/// The whole events stream of `queue`, in order; empty when Redis cannot
/// be read.
pub async fn read_events(client: &Client, queue: &Queue) -> Vec<Event> {
    crate::timeline::read(client, &queue.keys().events())
        .await
        .unwrap_or_default()
}
