//! The consistency audit: invariants checkable over Redis state alone (the
//! checks A1–A18 of docs/stalled-checker.md §Audit). It only reads — one
//! read-only script, `auditSnapshot-1`, takes an atomic snapshot of the queue —
//! so it is safe on a live queue, and every hard invariant must hold in it
//! even while workers run (each transition is one script too). Each check is
//! one function over the typed [`Snapshot`].
//!
//! Used by `echomq audit`, by the fault tests (a run ends with an audit at
//! quiescence) and as a source of gauges.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use echomq_protocol::call::audit::{AuditSnapshot, Snapshot};
use echomq_protocol::QueueKeys;

use crate::connection::pool::Connection;
use crate::error::Result;

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
    /// The check id (`A1` …, docs/stalled-checker.md §Audit).
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
    /// Largest lock duration any worker uses (A6b). Default 30 s.
    pub max_lock_duration: Duration,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            quiescent: false,
            max_lock_duration: Duration::from_secs(30),
        }
    }
}

/// Audits `queue` with the default options (live mode).
pub async fn audit(conn: &Connection, queue: &str) -> Result<AuditReport> {
    audit_with(conn, queue, &AuditOptions::default()).await
}

/// Audits `queue` with `opts`.
pub async fn audit_with(
    conn: &Connection,
    queue: &str,
    opts: &AuditOptions,
) -> Result<AuditReport> {
    let keys = QueueKeys::new(conn.prefix(), queue)?;
    let snapshot = conn.call(&AuditSnapshot { keys: &keys }).await?;
    let mut report = check(&snapshot, opts);
    flow_checks(conn, &keys, &mut report).await?;
    group_checks(conn, &keys, &snapshot, opts, &mut report).await?;
    Ok(report)
}

/// Most groups the group checks look at in one audit.
const GROUP_AUDIT_LIMIT: u64 = 10_000;

/// The group invariants G1–G4 (docs/groups.md §Audit). An unreleased group
/// job is in no BullMQ structure by design, so A4 does not apply to it.
async fn group_checks(
    conn: &Connection,
    keys: &QueueKeys,
    s: &Snapshot,
    opts: &AuditOptions,
    report: &mut AuditReport,
) -> Result<()> {
    use echomq_protocol::call::groups::{AuditGroups, ReleasedState};
    use echomq_protocol::group::GroupKeys;
    let groups = GroupKeys::new(keys);
    let view = conn
        .call(&AuditGroups {
            keys,
            groups: &groups,
            limit: GROUP_AUDIT_LIMIT,
        })
        .await?;
    if view.groups.is_empty() && view.released.is_empty() {
        return Ok(());
    }
    let states = States::of(s);
    let mut f = Findings {
        quiescent: opts.quiescent,
        violations: Vec::new(),
    };
    let mut unreleased: HashSet<&String> = HashSet::new();
    let released: HashMap<&String, &String> =
        view.released.iter().map(|(id, gid, _)| (id, gid)).collect();
    for g in &view.groups {
        for id in &g.waiting {
            unreleased.insert(id);
            if let Some(in_states) = states.where_is.get(id) {
                let detail = format!(
                    "unreleased in group {:?} and in {}",
                    g.id,
                    in_states.join(", ")
                );
                f.add("G1", Severity::Hard, Some(id), detail);
            }
            if !s.jobs.contains_key(id) {
                let detail = format!("id left in group {:?} after its job was removed", g.id);
                f.add("G4", Severity::Warning, Some(id), detail);
            }
        }
        for id in &g.active {
            if released.get(id) != Some(&&g.id) {
                let detail = format!("in group {:?}'s active set but not released to it", g.id);
                f.add("G2", Severity::Hard, Some(id), detail);
            }
        }
    }
    let known: HashMap<&String, &Vec<String>> =
        view.groups.iter().map(|g| (&g.id, &g.active)).collect();
    for (id, gid, state) in &view.released {
        if let Some(active) = known.get(gid) {
            if !active.contains(id) {
                let detail = format!("released to group {gid:?} but not in its active set");
                f.add("G2", Severity::Hard, Some(id), detail);
            }
        }
        if *state != ReleasedState::Open {
            let detail = format!("finished ({state:?}) but still holds a slot of group {gid:?}");
            f.add("G3", Severity::Quiescent, Some(id), detail);
        }
    }
    report.violations.retain(|v| {
        !(v.check == "A4" && v.job_id.as_ref().is_some_and(|id| unreleased.contains(id)))
    });
    report.violations.extend(f.violations);
    Ok(())
}

/// Most parents the flow checks look at in one audit.
const FLOW_AUDIT_LIMIT: u64 = 10_000;

/// The flow invariants F1/F2 (docs/flows.md §Audit), hard: every flow
/// transition is one script, so no client ever leaves them broken.
async fn flow_checks(conn: &Connection, keys: &QueueKeys, report: &mut AuditReport) -> Result<()> {
    use echomq_protocol::call::flow::AuditFlows;
    let findings = conn
        .call(&AuditFlows {
            keys,
            limit: FLOW_AUDIT_LIMIT,
        })
        .await?;
    report
        .violations
        .extend(findings.into_iter().map(|f| Violation {
            check: f.check,
            severity: Severity::Hard,
            hard: true,
            job_id: Some(f.parent_id),
            detail: f.detail,
        }));
    Ok(())
}

/// Runs every check over one snapshot.
pub fn check(s: &Snapshot, opts: &AuditOptions) -> AuditReport {
    let states = States::of(s);
    let mut f = Findings {
        quiescent: opts.quiescent,
        violations: Vec::new(),
    };
    key_types(s, &mut f);
    list_duplicates(s, &mut f);
    one_state_each(s, &states, &mut f);
    pause_coherence(s, &mut f);
    locks(s, opts, &mut f);
    active_without_lock(s, &mut f);
    stalled_subset_of_active(s, &mut f);
    finished_fields(s, &mut f);
    attempt_and_ttl_fields(s, &mut f);
    priority_fields(s, &mut f);
    lost_wake_up(s, &mut f);
    schedulers(s, &states, &mut f);
    id_counter(s, &states, &mut f);
    stream_bounds(s, &mut f);

    let mut all_ids: HashSet<&String> = states.where_is.keys().copied().collect();
    all_ids.extend(s.jobs.keys());
    all_ids.extend(s.locks.iter().map(|l| &l.id));
    AuditReport {
        now_srv_ms: s.now_ms,
        counts: states.counts,
        ids: all_ids.len(),
        locks: s.locks.len(),
        violations: f.violations,
    }
}

/// The violations found so far.
struct Findings {
    quiescent: bool,
    violations: Vec<Violation>,
}

impl Findings {
    fn add(&mut self, check: &str, severity: Severity, job_id: Option<&str>, detail: String) {
        let hard =
            severity == Severity::Hard || (severity == Severity::Quiescent && self.quiescent);
        self.violations.push(Violation {
            check: check.into(),
            severity,
            hard,
            job_id: job_id.map(str::to_owned),
            detail,
        });
    }
}

/// Where each id is: the state structures that hold it.
struct States<'a> {
    where_is: HashMap<&'a String, Vec<&'static str>>,
    counts: HashMap<String, usize>,
}

impl<'a> States<'a> {
    fn of(s: &'a Snapshot) -> Self {
        let members = |z: &'a [(String, String)]| z.iter().map(|(m, _)| m).collect::<Vec<_>>();
        let states: [(&'static str, Vec<&'a String>); 8] = [
            ("wait", s.wait.iter().collect()),
            ("paused", s.paused.iter().collect()),
            ("active", s.active.iter().collect()),
            ("prioritized", members(&s.prioritized)),
            ("delayed", members(&s.delayed)),
            ("waiting-children", members(&s.waiting_children)),
            ("completed", members(&s.completed)),
            ("failed", members(&s.failed)),
        ];
        let mut where_is: HashMap<&String, Vec<&str>> = HashMap::new();
        let mut counts = HashMap::new();
        for (name, ids) in states {
            counts.insert(name.to_owned(), ids.len());
            let distinct: HashSet<&String> = ids.into_iter().collect();
            for id in distinct {
                where_is.entry(id).or_default().push(name);
            }
        }
        States { where_is, counts }
    }
}

/// A16: every structural key has its type.
fn key_types(s: &Snapshot, f: &mut Findings) {
    const EXPECTED: [(&str, &str); 15] = [
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
    for (k, t) in EXPECTED {
        if let Some(actual) = s.types.get(k).filter(|a| *a != t) {
            let detail = format!("{{P}}{k} is a {actual}, expected a {t}");
            f.add("A16", Severity::Hard, None, detail);
        }
    }
}

/// A1: no id twice in one list.
fn list_duplicates(s: &Snapshot, f: &mut Findings) {
    for (name, list) in [
        ("wait", &s.wait),
        ("paused", &s.paused),
        ("active", &s.active),
    ] {
        for id in dupes(list) {
            let detail = format!("listed more than once in {name}");
            f.add("A1", Severity::Hard, Some(&id), detail);
        }
    }
}

/// A2/A3/A4: exactly one state per job, no dangling id, no orphan hash.
fn one_state_each(s: &Snapshot, states: &States<'_>, f: &mut Findings) {
    for (id, in_states) in &states.where_is {
        if in_states.len() > 1 {
            let detail = format!("in {} states: {}", in_states.len(), in_states.join(", "));
            f.add("A2", Severity::Hard, Some(id), detail);
        }
        if !s.jobs.contains_key(*id) && !id.starts_with("0:") {
            let detail = format!("in {} but its job hash is missing", in_states.join(", "));
            f.add("A3", Severity::Hard, Some(id), detail);
        }
    }
    for id in s.jobs.keys() {
        if !states.where_is.contains_key(id) {
            let detail = "job hash in no state structure".into();
            f.add("A4", Severity::Quiescent, Some(id), detail);
        }
    }
}

/// A5: pause coherence (BullMQ 6 model: jobs stay in wait, and no base
/// marker while paused).
fn pause_coherence(s: &Snapshot, f: &mut Findings) {
    if s.meta.contains_key("paused") && s.marker.iter().any(|(m, _)| m == "0") {
        let detail = "queue paused but the ready marker is set".into();
        f.add("A5", Severity::Hard, None, detail);
    }
    if !s.paused.is_empty() {
        let detail = format!("{} ids in the legacy paused list", s.paused.len());
        f.add("A5", Severity::Warning, None, detail);
    }
}

/// A6: a lock belongs to an active job, expires within the lock duration,
/// and holds a UUID token.
fn locks(s: &Snapshot, opts: &AuditOptions, f: &mut Findings) {
    let active: HashSet<&String> = s.active.iter().collect();
    let max = i64::try_from(opts.max_lock_duration.as_millis()).unwrap_or(i64::MAX);
    for lock in &s.locks {
        let id = Some(lock.id.as_str());
        if !active.contains(&lock.id) {
            let detail = "a lock on a job that is not active".into();
            f.add("A6a", Severity::Hard, id, detail);
        }
        if lock.pttl < 0 || lock.pttl > max {
            let detail = format!("lock PTTL {} ms outside (0, {max}]", lock.pttl);
            f.add("A6b", Severity::Hard, id, detail);
        }
        if !is_uuid(&lock.value) {
            let detail = format!("lock value {:?} is not a UUID", lock.value);
            f.add("A6c", Severity::Warning, id, detail);
        }
    }
}

/// A7: an active job without a lock is a stall candidate.
fn active_without_lock(s: &Snapshot, f: &mut Findings) {
    let locked: HashSet<&String> = s.locks.iter().map(|l| &l.id).collect();
    for id in s.active.iter().filter(|id| !locked.contains(id)) {
        let detail = "active without a lock (stall candidate)".into();
        f.add("A7", Severity::Quiescent, Some(id), detail);
    }
}

/// A8: stalled ⊆ active.
fn stalled_subset_of_active(s: &Snapshot, f: &mut Findings) {
    let active: HashSet<&String> = s.active.iter().collect();
    for id in s.stalled.iter().filter(|id| !active.contains(id)) {
        let detail = "marked stalled but not active".into();
        f.add("A8", Severity::Warning, Some(id), detail);
    }
}

/// A9: completed, delayed, failed and active jobs carry their state's fields.
fn finished_fields(s: &Snapshot, f: &mut Findings) {
    for (id, score) in &s.completed {
        let Some(j) = s.jobs.get(id) else { continue };
        if j.finished_on.is_empty()
            || j.finished_on.parse::<f64>().ok() != score.parse::<f64>().ok()
        {
            let detail = format!("completed: finishedOn {:?} vs score {score}", j.finished_on);
            f.add("A9", Severity::Warning, Some(id), detail);
        }
    }
    for (id, score) in &s.delayed {
        let (Some(j), Ok(score)) = (s.jobs.get(id), score.parse::<f64>()) else {
            continue;
        };
        let due = (score / 4096.0).floor() as u64;
        if j.timestamp.parse::<u64>().is_ok_and(|t| due < t) {
            let detail = format!("delayed until {due}, before its timestamp {}", j.timestamp);
            f.add("A9", Severity::Warning, Some(id), detail);
        }
    }
    for (id, _) in &s.failed {
        let Some(j) = s.jobs.get(id) else { continue };
        if j.finished_on.is_empty() || j.failed_reason.is_empty() {
            let detail = "failed without finishedOn or failedReason".into();
            f.add("A9", Severity::Warning, Some(id), detail);
        }
    }
    for id in &s.active {
        let Some(j) = s.jobs.get(id) else { continue };
        if j.processed_on.is_empty() || j.ats.parse::<u64>().unwrap_or(0) < 1 {
            let detail = "active without processedOn or ats".into();
            f.add("A9", Severity::Warning, Some(id), detail);
        }
    }
}

/// A9 (attempts never exceed starts) and A18 (durable data does not expire).
fn attempt_and_ttl_fields(s: &Snapshot, f: &mut Findings) {
    for (id, j) in &s.jobs {
        if !j.ats.is_empty()
            && j.atm.parse::<u64>().unwrap_or(0) > j.ats.parse::<u64>().unwrap_or(0)
        {
            let detail = format!("atm {} > ats {}", j.atm, j.ats);
            f.add("A9", Severity::Warning, Some(id), detail);
        }
        if j.ttl >= 0 {
            let detail = format!("job hash has a TTL of {} ms", j.ttl);
            f.add("A18", Severity::Warning, Some(id), detail);
        }
    }
}

/// A10: priority matches the structure (and A9: a waiting job is not
/// finished).
fn priority_fields(s: &Snapshot, f: &mut Findings) {
    let priority = |id: &String| {
        s.jobs
            .get(id)
            .map(|j| j.priority.parse::<i64>().unwrap_or(0))
    };
    for (id, _) in &s.prioritized {
        if priority(id).is_some_and(|p| p <= 0) {
            let detail = "prioritized with priority 0".into();
            f.add("A10", Severity::Warning, Some(id), detail);
        }
    }
    for id in &s.wait {
        let Some(j) = s.jobs.get(id) else { continue };
        if priority(id).is_some_and(|p| p > 0) {
            f.add(
                "A10",
                Severity::Warning,
                Some(id),
                "in wait with a priority".into(),
            );
        }
        if !j.finished_on.is_empty() {
            f.add(
                "A9",
                Severity::Warning,
                Some(id),
                "waiting with finishedOn".into(),
            );
        }
    }
}

/// A11: jobs are ready, nothing runs, and no marker would wake a worker.
fn lost_wake_up(s: &Snapshot, f: &mut Findings) {
    let maxed = s
        .meta
        .get("concurrency")
        .and_then(|c| c.parse::<usize>().ok())
        .is_some_and(|c| s.active.len() >= c);
    let ready = !s.wait.is_empty() || !s.prioritized.is_empty();
    if ready
        && !s.meta.contains_key("paused")
        && !maxed
        && s.marker.is_empty()
        && s.active.is_empty()
    {
        let detail =
            "jobs ready, no marker and nothing active: workers may sleep until their block timeout"
                .into();
        f.add("A11", Severity::Warning, None, detail);
    }
}

/// A12: every scheduler has its hash and at most one pending iteration.
fn schedulers(s: &Snapshot, states: &States<'_>, f: &mut Findings) {
    for sched in &s.schedulers {
        let sid = &sched.id;
        if !sched.has_hash {
            let detail = format!("scheduler {sid} in {{P}}repeat without its hash");
            f.add("A12a", Severity::Hard, None, detail);
        }
        let pending = s
            .jobs
            .iter()
            .filter(|(id, j)| {
                j.rjk == *sid
                    && states.where_is.get(id).is_some_and(|in_states| {
                        in_states
                            .iter()
                            .any(|st| matches!(*st, "wait" | "paused" | "delayed" | "prioritized"))
                    })
            })
            .count();
        if pending > 1 {
            let detail = format!("scheduler {sid} has {pending} pending iterations");
            f.add("A12b", Severity::Quiescent, None, detail);
        }
    }
}

/// A14: the id counter is above every generated id.
fn id_counter(s: &Snapshot, states: &States<'_>, f: &mut Findings) {
    let Some(counter) = s.id_counter else { return };
    for id in states.where_is.keys() {
        if id.parse::<u64>().is_ok_and(|n| n > counter) {
            let detail = format!("generated id above the counter {counter}: ids will be reused");
            f.add("A14", Severity::Hard, Some(id), detail);
        }
    }
}

/// A15: the events stream stays near its trim target.
fn stream_bounds(s: &Snapshot, f: &mut Findings) {
    let max_len = s
        .meta
        .get("opts.maxLenEvents")
        .and_then(|m| m.parse::<i64>().ok())
        .unwrap_or(echomq_protocol::DEFAULT_MAX_LEN_EVENTS as i64);
    if s.events_len > max_len + max_len / 10 + 100 {
        let detail = format!(
            "events stream has {} entries, target {max_len}",
            s.events_len
        );
        f.add("A15", Severity::Warning, None, detail);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use echomq_protocol::call::audit::{JobRow, LockRow};

    fn job() -> JobRow {
        JobRow {
            ttl: -1,
            timestamp: "1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn checks_find_what_they_name() {
        let mut s = Snapshot::default();
        s.wait = vec!["1".into(), "1".into(), "2".into()];
        s.active = vec!["2".into()];
        s.marker = vec![("0".into(), "0".into())];
        s.jobs.insert("1".into(), job());
        s.jobs.insert("2".into(), job());
        s.jobs.insert("3".into(), job());
        s.locks.push(LockRow {
            id: "9".into(),
            value: "x".into(),
            pttl: 100,
        });
        s.id_counter = Some(2);
        let live = check(&s, &AuditOptions::default());
        let found = |r: &AuditReport, c: &str, id: Option<&str>| {
            r.violations
                .iter()
                .find(|v| v.check == c && v.job_id.as_deref() == id)
                .map(|v| v.hard)
        };
        assert_eq!(found(&live, "A1", Some("1")), Some(true));
        assert_eq!(found(&live, "A2", Some("2")), Some(true));
        assert_eq!(found(&live, "A4", Some("3")), Some(false));
        assert_eq!(found(&live, "A6a", Some("9")), Some(true));
        assert_eq!(found(&live, "A6c", Some("9")), Some(false));
        assert_eq!(found(&live, "A7", Some("2")), Some(false));
        assert_eq!(live.counts["wait"], 3);
        assert_eq!(live.ids, 4);
        let quiescent = check(
            &s,
            &AuditOptions {
                quiescent: true,
                ..Default::default()
            },
        );
        assert_eq!(found(&quiescent, "A4", Some("3")), Some(true));
        assert!(!quiescent.is_consistent());
    }
}
