//! The consistency audit: invariants checkable over Redis state alone (the
//! checks A1–A18 of docs/stalled-checker.md §Audit). It only reads, and in
//! bounded calls: one `auditHead` for the O(1) facts, then every state
//! structure page by page (`auditPage`, [`PAGE`] ids per call), the keys by
//! SCAN steps (`auditKeys`) for locks and orphan hashes, the `stalled` set by
//! SSCAN, and the flow checks in budgeted steps (`auditFlows`). No call holds
//! Redis longer than one page takes, whatever the queue holds.
//!
//! Each call is one atomic view, so what one call proves keeps its severity:
//! a job in two sorted-set states, a listed id without a hash, an id above
//! the counter, a lock on a finished job are hard findings even on a live
//! queue. What only shows across calls — the same id in two list pages, a
//! lock or a hash no page showed in a state — may be a job that moved between
//! the reads, so it is counted hard only in a quiescent audit.
//!
//! Used by `echomq audit` (with a progress line), by the fault tests (a run
//! ends with an audit at quiescence) and as a source of gauges.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use echomq_protocol::call::audit::{
    AuditHead, AuditKeys, AuditPage, Head, JobRow, KeysStep, PageRow, StatePage,
};
use echomq_protocol::call::flow::{AuditFlows, FlowFinding};
use echomq_protocol::QueueKeys;

use crate::connection::pool::Connection;
use crate::error::Result;

/// Ids per `auditPage` call. An id costs the page up to ~100 µs (it reads
/// the job's hash and looks for it in every state: 250 ids took 25.3 ms,
/// docs/benchmarks.md §Scale), so 100 keeps a call within a few ms.
pub const PAGE: u64 = 100;
/// SCAN COUNT of one `auditKeys` call: a key costs it about as much as an
/// id costs `auditPage` (its type, then the same state lookups).
pub const KEYS_STEP: u64 = 100;
/// Children and parents one `auditFlows` call looks at.
pub const FLOW_STEP: u64 = 1000;

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
    /// Redis server time when the audit began, ms.
    pub now_srv_ms: u64,
    /// Size of each state structure when the audit began.
    pub counts: HashMap<String, usize>,
    /// Number of distinct job ids seen (in structures, locks or hashes).
    pub ids: usize,
    /// Number of locks.
    pub locks: usize,
    /// Redis calls the audit made.
    pub calls: u64,
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

/// How far an audit got, after each of its calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditProgress {
    /// What it is reading (`wait`, `completed`, …, `keys`, `stalled`, `flows`).
    pub phase: &'static str,
    /// Calls made so far.
    pub calls: u64,
    /// Ids of the state structures read so far.
    pub ids_read: u64,
    /// Ids the state structures held when the audit began.
    pub ids_total: u64,
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
    audit_paged(conn, queue, opts, |_| {}).await
}

/// The list states, paged first: the other reads check against them.
const LISTS: [&str; 3] = ["wait", "paused", "active"];
/// The sorted-set states.
const SETS: [&str; 5] = [
    "prioritized",
    "delayed",
    "waiting-children",
    "completed",
    "failed",
];

/// Audits `queue` with `opts`, telling `progress` after every call.
pub async fn audit_paged(
    conn: &Connection,
    queue: &str,
    opts: &AuditOptions,
    mut progress: impl FnMut(AuditProgress),
) -> Result<AuditReport> {
    let keys = QueueKeys::new(conn.prefix(), queue)?;
    let head = conn.call(&AuditHead { keys: &keys }).await?;
    let mut a = Auditor::new(opts, head);
    let mut p = AuditProgress {
        phase: "head",
        calls: 1,
        ids_read: 0,
        ids_total: LISTS
            .iter()
            .chain(SETS.iter())
            .map(|s| a.head.size(s))
            .sum(),
    };
    progress(p);
    for state in LISTS.iter().chain(SETS.iter()).chain(["repeat"].iter()) {
        p.phase = state;
        let mut from = 0;
        loop {
            let page = conn
                .call(&AuditPage {
                    keys: &keys,
                    state,
                    from,
                    count: PAGE,
                })
                .await?;
            let n = page.rows.len() as u64;
            a.page(state, &page);
            p.calls += 1;
            if *state != "repeat" {
                p.ids_read += n;
            }
            progress(p);
            // Ids that arrive while the audit runs are not its business.
            if n < PAGE || from + n >= page.size {
                break;
            }
            from += n;
        }
    }
    p.phase = "keys";
    let mut cursor = String::from("0");
    loop {
        let step = conn
            .call(&AuditKeys {
                keys: &keys,
                cursor: &cursor,
                count: KEYS_STEP,
            })
            .await?;
        p.calls += 1;
        progress(p);
        a.keys(&step);
        if step.cursor == "0" {
            break;
        }
        cursor = step.cursor;
    }
    p.phase = "stalled";
    let mut cursor = String::from("0");
    loop {
        let (next, ids) = sscan(conn, &keys.key("stalled"), &cursor, KEYS_STEP).await?;
        p.calls += 1;
        progress(p);
        a.stalled(&ids);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    p.phase = "flows";
    let (mut parent, mut cursor) = (0, String::from("0"));
    loop {
        let step = conn
            .call(&AuditFlows {
                keys: &keys,
                parent,
                cursor: &cursor,
                budget: FLOW_STEP,
            })
            .await?;
        p.calls += 1;
        progress(p);
        a.flows(step.findings);
        if step.done {
            break;
        }
        (parent, cursor) = (step.parent, step.cursor);
    }
    p.phase = "groups";
    group_steps(conn, &keys, &mut a, &mut p, &mut progress).await?;
    let mut report = a.finish();
    report.calls = p.calls;
    Ok(report)
}

/// The group checks G1–G5 (docs/groups.md §Audit), one bounded step per
/// call: `{P}gr:jobs` by HSCAN, the groups by index page, each group's
/// unreleased ids (waiting, then delayed) by page and its active set by
/// SSCAN.
async fn group_steps(
    conn: &Connection,
    keys: &QueueKeys,
    a: &mut Auditor,
    p: &mut AuditProgress,
    progress: &mut impl FnMut(AuditProgress),
) -> Result<()> {
    use echomq_protocol::call::groups::{
        AuditGroups, GroupAuditPage as Page, GroupAuditStep as Step, ReleasedState,
    };
    let groups = echomq_protocol::group::GroupKeys::new(keys);
    let mut step = async |step: Step<'_>| -> Result<Page> {
        let page = conn
            .call(&AuditGroups {
                keys,
                groups: &groups,
                step,
                count: PAGE,
            })
            .await?;
        p.calls += 1;
        progress(*p);
        Ok(page)
    };
    // Released jobs, by group: bounded by the groups' concurrencies (and
    // finished jobs not yet accounted).
    let mut released: HashMap<String, HashSet<String>> = HashMap::new();
    let mut cursor = String::from("0");
    loop {
        let Page::Jobs(next, rows) = step(Step::Jobs { cursor: &cursor }).await? else {
            break;
        };
        for (id, gid, state) in rows {
            if state != ReleasedState::Open {
                let detail =
                    format!("finished ({state:?}) but still holds a slot of group {gid:?}");
                a.f.add("G3", Severity::Quiescent, Some(&id), detail);
            }
            released.entry(gid).or_default().insert(id);
        }
        if next == "0" {
            break;
        }
        cursor = next;
    }
    let mut from = 0;
    loop {
        let Page::Groups(rows) = step(Step::Groups { from }).await? else {
            break;
        };
        let n = rows.len() as u64;
        for (gid, _paused) in rows {
            let mut at = 0;
            loop {
                let Page::Wait(ids) = step(Step::Wait {
                    group: &gid,
                    from: at,
                })
                .await?
                else {
                    break;
                };
                a.group_waiting(&gid, &ids);
                if (ids.len() as u64) < PAGE {
                    break;
                }
                at += PAGE;
            }
            let mut at = 0;
            loop {
                let Page::Delayed(indexed, ids) = step(Step::Delayed {
                    group: &gid,
                    from: at,
                })
                .await?
                else {
                    break;
                };
                if at == 0 && !ids.is_empty() && !indexed {
                    let detail = format!("group {gid:?} has delayed jobs but is not in gr:delayed");
                    a.f.add("G5", Severity::Hard, None, detail);
                }
                a.group_waiting(&gid, &ids);
                if (ids.len() as u64) < PAGE {
                    break;
                }
                at += PAGE;
            }
            let mine = released.remove(&gid).unwrap_or_default();
            let mut active = HashSet::new();
            let mut cursor = String::from("0");
            loop {
                let Page::Active(next, ids) = step(Step::Active {
                    group: &gid,
                    cursor: &cursor,
                })
                .await?
                else {
                    break;
                };
                for id in ids {
                    if !mine.contains(&id) {
                        let detail =
                            format!("in group {gid:?}'s active set but not released to it");
                        a.f.add("G2", Severity::Hard, Some(&id), detail);
                    }
                    active.insert(id);
                }
                if next == "0" {
                    break;
                }
                cursor = next;
            }
            for id in mine.difference(&active) {
                let detail = format!("released to group {gid:?} but not in its active set");
                a.f.add("G2", Severity::Hard, Some(id), detail);
            }
        }
        if n < PAGE {
            break;
        }
        from += n;
    }
    a.forgive_unreleased();
    Ok(())
}

/// One `SSCAN` step of a set (`"0"` as the next cursor once done).
async fn sscan(
    conn: &Connection,
    key: &str,
    cursor: &str,
    count: u64,
) -> Result<(String, Vec<String>)> {
    use fred::prelude::ClientLike;
    use fred::types::{ClusterHash, CustomCommand};
    let slot = fred::util::redis_keyslot(key.as_bytes());
    let command = CustomCommand::new_static("SSCAN", ClusterHash::Custom(slot), false);
    Ok(conn
        .pool()
        .next()
        .custom(
            command,
            vec![
                key.to_owned(),
                cursor.to_owned(),
                "COUNT".to_owned(),
                count.to_string(),
            ],
        )
        .await?)
}

/// The ids seen in one list: decimal ids (generated ones) in a bitmap, any
/// other id in a set, so a list of millions of generated ids costs a bit
/// each, not a string each.
#[derive(Default)]
struct IdSet {
    bits: Vec<u64>,
    others: HashSet<String>,
    len: usize,
}

impl IdSet {
    /// Largest decimal id kept in the bitmap (64 MiB of bits at most).
    const MAX_BIT: u64 = 1 << 29;

    fn numeric(id: &str) -> Option<u64> {
        if id.is_empty() || id.len() > 10 || (id.len() > 1 && id.starts_with('0')) {
            return None;
        }
        id.parse::<u64>().ok().filter(|n| *n < Self::MAX_BIT)
    }

    /// Adds `id`; false when it was there already.
    fn insert(&mut self, id: &str) -> bool {
        let fresh = match Self::numeric(id) {
            Some(n) => {
                let (word, bit) = ((n / 64) as usize, n % 64);
                if word >= self.bits.len() {
                    self.bits.resize(word + 1, 0);
                }
                let was = self.bits[word] & (1 << bit) != 0;
                self.bits[word] |= 1 << bit;
                !was
            }
            None => self.others.insert(id.to_owned()),
        };
        self.len += usize::from(fresh);
        fresh
    }

    fn contains(&self, id: &str) -> bool {
        match Self::numeric(id) {
            Some(n) => self
                .bits
                .get((n / 64) as usize)
                .is_some_and(|w| w & (1 << (n % 64)) != 0),
            None => self.others.contains(id),
        }
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

/// The audit's state between calls: fed each reply in turn, it checks what
/// the reply proves and keeps what later replies are checked against.
struct Auditor {
    head: Head,
    max_lock_ms: i64,
    f: Findings,
    /// Ids of each list state seen so far.
    lists: HashMap<&'static str, IdSet>,
    /// Ids reported in two states already (one report per id).
    multi_state: HashSet<String>,
    /// Pending iterations seen per scheduler id (A12b).
    pending_by_scheduler: HashMap<String, usize>,
    /// Distinct ids counted so far.
    ids: usize,
    locks: usize,
    /// Job hashes the key steps showed, and those of them some state holds:
    /// the group checks tell an unreleased group job (in no state by design)
    /// from one also in a state (G1) or without a hash (G4).
    hashes: IdSet,
    held: IdSet,
    /// Unreleased group jobs seen.
    unreleased: IdSet,
}

impl Auditor {
    fn new(opts: &AuditOptions, head: Head) -> Self {
        let mut a = Auditor {
            head,
            max_lock_ms: i64::try_from(opts.max_lock_duration.as_millis()).unwrap_or(i64::MAX),
            f: Findings {
                quiescent: opts.quiescent,
                violations: Vec::new(),
            },
            lists: LISTS.iter().map(|l| (*l, IdSet::default())).collect(),
            multi_state: HashSet::new(),
            pending_by_scheduler: HashMap::new(),
            ids: 0,
            locks: 0,
            hashes: IdSet::default(),
            held: IdSet::default(),
            unreleased: IdSet::default(),
        };
        a.head_checks();
        a
    }

    /// A5, A11, A15, A16: what the head alone shows.
    fn head_checks(&mut self) {
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
        let h = &self.head;
        let f = &mut self.f;
        for (k, t) in EXPECTED {
            if let Some(actual) = h.types.get(k).filter(|a| *a != t) {
                let detail = format!("{{P}}{k} is a {actual}, expected a {t}");
                f.add("A16", Severity::Hard, None, detail);
            }
        }
        let paused = h.meta.contains_key("paused");
        if paused && h.marker.iter().any(|(m, _)| m == "0") {
            let detail = "queue paused but the ready marker is set".into();
            f.add("A5", Severity::Hard, None, detail);
        }
        if h.size("paused") > 0 && h.types.get("paused").is_some_and(|t| t == "list") {
            let detail = format!("{} ids in the legacy paused list", h.size("paused"));
            f.add("A5", Severity::Warning, None, detail);
        }
        let active = h.size("active");
        let maxed = h
            .meta
            .get("concurrency")
            .and_then(|c| c.parse::<u64>().ok())
            .is_some_and(|c| active >= c);
        let ready = h.size("wait") > 0 || h.size("prioritized") > 0;
        if ready && !paused && !maxed && h.marker.is_empty() && active == 0 {
            let detail =
                "jobs ready, no marker and nothing active: workers may sleep until their block timeout"
                    .into();
            f.add("A11", Severity::Warning, None, detail);
        }
        let max_len = h
            .meta
            .get("opts.maxLenEvents")
            .and_then(|m| m.parse::<i64>().ok())
            .unwrap_or(echomq_protocol::DEFAULT_MAX_LEN_EVENTS as i64);
        if h.events_len > max_len + max_len / 10 + 100 {
            let detail = format!(
                "events stream has {} entries, target {max_len}",
                h.events_len
            );
            f.add("A15", Severity::Warning, None, detail);
        }
    }

    /// One page of one state.
    fn page(&mut self, state: &'static str, page: &StatePage) {
        if state == "repeat" {
            for row in &page.rows {
                if !row.job.exists() {
                    let detail = format!("scheduler {} in {{P}}repeat without its hash", row.id);
                    self.f.add("A12a", Severity::Hard, None, detail);
                }
            }
            return;
        }
        let mut in_page: HashSet<&str> = HashSet::new();
        for row in &page.rows {
            let id = row.id.as_str();
            let first_in_page = in_page.insert(id);
            let fresh = self.note_list_or_count(state, row, first_in_page);
            if !first_in_page {
                // Both sightings come from one atomic read.
                let detail = format!("listed more than once in {state}");
                self.f.add("A1", Severity::Hard, Some(id), detail);
                continue;
            }
            if !fresh {
                continue;
            }
            self.row_checks(state, row, page.id_counter);
        }
    }

    /// Records a row against the lists seen so far and counts it; false when
    /// the id was already seen in this list (reported there).
    fn note_list_or_count(
        &mut self,
        state: &'static str,
        row: &PageRow,
        first_in_page: bool,
    ) -> bool {
        let id = row.id.as_str();
        // A sorted-set state holding it too is proven by this read.
        if !row.also_in.is_empty() && self.multi_state.insert(row.id.clone()) {
            let mut all = vec![state.to_owned()];
            all.extend(row.also_in.iter().cloned());
            let detail = format!("in {} states: {}", all.len(), all.join(", "));
            self.f.add("A2", Severity::Hard, Some(id), detail);
        }
        let earlier_lists: Vec<&'static str> = LISTS
            .iter()
            .copied()
            .filter(|l| *l != state && self.lists[l].contains(id))
            .collect();
        if !earlier_lists.is_empty() && self.multi_state.insert(row.id.clone()) {
            let detail = format!(
                "in {} and {} (seen by separate reads)",
                earlier_lists.join(", "),
                state
            );
            self.f.add("A2", Severity::Quiescent, Some(id), detail);
        }
        if LISTS.contains(&state) {
            let fresh = self.lists.get_mut(state).is_some_and(|set| set.insert(id));
            if !fresh && first_in_page {
                let detail = format!("listed more than once in {state} (seen by separate reads)");
                self.f.add("A1", Severity::Quiescent, Some(id), detail);
                return false;
            }
            if fresh && earlier_lists.is_empty() {
                self.ids += 1;
            }
            return fresh;
        }
        // A sorted-set id is counted once: by the first state that holds it.
        let first_state = SETS
            .iter()
            .find(|s| **s == state || row.also_in.iter().any(|a| a == *s));
        if earlier_lists.is_empty() && first_state == Some(&state) {
            self.ids += 1;
        }
        true
    }

    /// A3, A7, A9, A10, A12b, A14, A18: what one row proves about its job.
    fn row_checks(&mut self, state: &'static str, row: &PageRow, counter: Option<u64>) {
        let id = row.id.as_str();
        let j = &row.job;
        let f = &mut self.f;
        if !j.exists() {
            if !id.starts_with("0:") {
                let detail = format!("in {state} but its job hash is missing");
                f.add("A3", Severity::Hard, Some(id), detail);
            }
            return;
        }
        if let (Some(c), Ok(n)) = (counter, id.parse::<u64>()) {
            if n > c {
                let detail = format!("generated id above the counter {c}: ids will be reused");
                f.add("A14", Severity::Hard, Some(id), detail);
            }
        }
        if state == "active" && row.lock_ttl == -2 {
            let detail = "active without a lock (stall candidate)".into();
            f.add("A7", Severity::Quiescent, Some(id), detail);
        }
        fields(state, id, row.score.as_deref(), j, f);
        if matches!(state, "wait" | "paused" | "delayed" | "prioritized") && !j.rjk.is_empty() {
            *self.pending_by_scheduler.entry(j.rjk.clone()).or_default() += 1;
        }
    }

    /// One SCAN step: locks (A6) and orphan hashes (A4).
    fn keys(&mut self, step: &KeysStep) {
        for lock in &step.locks {
            self.locks += 1;
            let id = Some(lock.id.as_str());
            let active = self.lists["active"].contains(&lock.id);
            if !lock.held_by.is_empty() || !lock.job_exists {
                let detail = if lock.job_exists {
                    format!("a lock on a job in {}", lock.held_by.join(", "))
                } else {
                    "a lock on a job whose hash is missing".into()
                };
                self.f.add("A6a", Severity::Hard, id, detail);
            } else if !active {
                let detail = "a lock on a job the active pages did not show".into();
                self.f.add("A6a", Severity::Quiescent, id, detail);
            }
            if lock.pttl < 0 || lock.pttl > self.max_lock_ms {
                let detail = format!(
                    "lock PTTL {} ms outside (0, {}]",
                    lock.pttl, self.max_lock_ms
                );
                self.f.add("A6b", Severity::Hard, id, detail);
            }
            if !is_uuid(&lock.value) {
                let detail = format!("lock value {:?} is not a UUID", lock.value);
                self.f.add("A6c", Severity::Warning, id, detail);
            }
            if !lock.job_exists && lock.held_by.is_empty() && !active {
                self.ids += 1;
            }
        }
        for hash in &step.hashes {
            let listed = LISTS.iter().any(|l| self.lists[l].contains(&hash.id));
            self.hashes.insert(&hash.id);
            if listed || !hash.held_by.is_empty() {
                self.held.insert(&hash.id);
            }
            if hash.held_by.is_empty() && !listed {
                let detail = "job hash in no state structure".into();
                self.f
                    .add("A4", Severity::Quiescent, Some(&hash.id), detail);
                self.ids += 1;
            }
        }
    }

    /// G1/G4 over a page of a group's unreleased ids, after the key steps:
    /// such a job is in no BullMQ structure by design (so A4 does not apply).
    fn group_waiting(&mut self, gid: &str, ids: &[String]) {
        for id in ids {
            self.unreleased.insert(id);
            if self.held.contains(id) {
                let detail = format!("unreleased in group {gid:?} and in a state");
                self.f.add("G1", Severity::Hard, Some(id), detail);
            }
            if !self.hashes.contains(id) {
                let detail = format!("id left in group {gid:?} after its job was removed");
                self.f.add("G4", Severity::Warning, Some(id), detail);
            }
        }
    }

    /// Drops the A4 findings of unreleased group jobs.
    fn forgive_unreleased(&mut self) {
        let unreleased = &self.unreleased;
        self.f.violations.retain(|v| {
            !(v.check == "A4"
                && v.job_id
                    .as_deref()
                    .is_some_and(|id| unreleased.contains(id)))
        });
    }

    /// A page of `stalled` (A8).
    fn stalled(&mut self, ids: &[String]) {
        for id in ids {
            if !self.lists["active"].contains(id) {
                let detail = "marked stalled but not active".into();
                self.f.add("A8", Severity::Warning, Some(id), detail);
            }
        }
    }

    /// F1/F2 (docs/flows.md §Audit): each proven by one atomic step.
    fn flows(&mut self, findings: Vec<FlowFinding>) {
        for finding in findings {
            self.f.violations.push(Violation {
                check: finding.check,
                severity: Severity::Hard,
                hard: true,
                job_id: Some(finding.parent_id),
                detail: finding.detail,
            });
        }
    }

    fn finish(mut self) -> AuditReport {
        let mut over: Vec<(String, usize)> = self
            .pending_by_scheduler
            .drain()
            .filter(|(_, n)| *n > 1)
            .collect();
        over.sort();
        for (sid, n) in over {
            let detail = format!("scheduler {sid} has {n} pending iterations");
            self.f.add("A12b", Severity::Quiescent, None, detail);
        }
        let counts = LISTS
            .iter()
            .chain(SETS.iter())
            .map(|s| ((*s).to_owned(), self.head.size(s) as usize))
            .collect();
        AuditReport {
            now_srv_ms: self.head.now_ms,
            counts,
            ids: self.ids,
            locks: self.locks,
            calls: 0,
            violations: self.f.violations,
        }
    }
}

/// A9, A10, A18: the fields a job of `state` carries.
fn fields(state: &str, id: &str, score: Option<&str>, j: &JobRow, f: &mut Findings) {
    let id = Some(id);
    match state {
        "completed" => {
            let score = score.and_then(|s| s.parse::<f64>().ok());
            if j.finished_on.is_empty() || j.finished_on.parse::<f64>().ok() != score {
                let detail = format!(
                    "completed: finishedOn {:?} vs score {}",
                    j.finished_on,
                    score.map(|s| s.to_string()).unwrap_or_default()
                );
                f.add("A9", Severity::Warning, id, detail);
            }
        }
        "delayed" => {
            if let Some(score) = score.and_then(|s| s.parse::<f64>().ok()) {
                let due = (score / 4096.0).floor() as u64;
                if j.timestamp.parse::<u64>().is_ok_and(|t| due < t) {
                    let detail =
                        format!("delayed until {due}, before its timestamp {}", j.timestamp);
                    f.add("A9", Severity::Warning, id, detail);
                }
            }
        }
        "failed" if j.finished_on.is_empty() || j.failed_reason.is_empty() => {
            let detail = "failed without finishedOn or failedReason".into();
            f.add("A9", Severity::Warning, id, detail);
        }
        "active" if j.processed_on.is_empty() || j.ats.parse::<u64>().unwrap_or(0) < 1 => {
            let detail = "active without processedOn or ats".into();
            f.add("A9", Severity::Warning, id, detail);
        }
        "prioritized" if j.priority.parse::<i64>().unwrap_or(0) <= 0 => {
            let detail = "prioritized with priority 0".into();
            f.add("A10", Severity::Warning, id, detail);
        }
        "wait" => {
            if j.priority.parse::<i64>().unwrap_or(0) > 0 {
                f.add(
                    "A10",
                    Severity::Warning,
                    id,
                    "in wait with a priority".into(),
                );
            }
            if !j.finished_on.is_empty() {
                f.add(
                    "A9",
                    Severity::Warning,
                    id,
                    "waiting with finishedOn".into(),
                );
            }
        }
        _ => {}
    }
    if !j.ats.is_empty() && j.atm.parse::<u64>().unwrap_or(0) > j.ats.parse::<u64>().unwrap_or(0) {
        let detail = format!("atm {} > ats {}", j.atm, j.ats);
        f.add("A9", Severity::Warning, id, detail);
    }
    if j.ttl >= 0 {
        let detail = format!("job hash has a TTL of {} ms", j.ttl);
        f.add("A18", Severity::Warning, id, detail);
    }
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
    use echomq_protocol::call::audit::{HashRow, LockRow};

    fn row(id: &str, also_in: &[&str]) -> PageRow {
        PageRow {
            id: id.into(),
            score: None,
            job: JobRow {
                ttl: -1,
                timestamp: "1".into(),
                ..Default::default()
            },
            lock_ttl: -2,
            also_in: also_in.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn page(rows: Vec<PageRow>, counter: u64) -> StatePage {
        StatePage {
            id_counter: Some(counter),
            size: rows.len() as u64,
            rows,
        }
    }

    fn found(r: &AuditReport, c: &str, id: Option<&str>) -> Option<bool> {
        r.violations
            .iter()
            .find(|v| v.check == c && v.job_id.as_deref() == id)
            .map(|v| v.hard)
    }

    fn run(opts: &AuditOptions) -> AuditReport {
        let mut head = Head::default();
        head.marker = vec![("0".into(), "0".into())];
        let mut a = Auditor::new(opts, head);
        // Job 1 twice in one wait page, job 2 in wait and active across
        // pages, job 4 in wait and (atomically) completed, job 9 above the
        // counter, "ghost" without a hash.
        let mut ghost = row("ghost", &[]);
        ghost.job.ttl = -2;
        a.page(
            "wait",
            &page(
                vec![
                    row("1", &[]),
                    row("1", &[]),
                    row("2", &[]),
                    row("4", &["completed"]),
                    row("9", &[]),
                    ghost,
                ],
                8,
            ),
        );
        a.page("active", &page(vec![row("2", &[])], 8));
        a.keys(&KeysStep {
            cursor: "0".into(),
            locks: vec![LockRow {
                id: "7".into(),
                value: "x".into(),
                pttl: 100,
                job_exists: true,
                held_by: vec![],
            }],
            hashes: vec![
                HashRow {
                    id: "3".into(),
                    held_by: vec![],
                },
                HashRow {
                    id: "1".into(),
                    held_by: vec![],
                },
            ],
        });
        a.finish()
    }

    #[test]
    fn checks_find_what_they_name_with_the_severity_their_reads_prove() {
        let live = run(&AuditOptions::default());
        assert_eq!(found(&live, "A1", Some("1")), Some(true));
        assert_eq!(found(&live, "A2", Some("4")), Some(true));
        assert_eq!(found(&live, "A2", Some("2")), Some(false), "{live:#?}");
        assert_eq!(found(&live, "A3", Some("ghost")), Some(true));
        assert_eq!(found(&live, "A14", Some("9")), Some(true));
        assert_eq!(found(&live, "A7", Some("2")), Some(false));
        assert_eq!(found(&live, "A6a", Some("7")), Some(false));
        assert_eq!(found(&live, "A6c", Some("7")), Some(false));
        assert_eq!(found(&live, "A4", Some("3")), Some(false));
        assert_eq!(found(&live, "A4", Some("1")), None);
        let quiescent = run(&AuditOptions {
            quiescent: true,
            ..Default::default()
        });
        assert_eq!(found(&quiescent, "A4", Some("3")), Some(true));
        assert_eq!(found(&quiescent, "A2", Some("2")), Some(true));
        assert!(!quiescent.is_consistent());
    }

    #[test]
    fn id_sets_keep_generated_ids_as_bits() {
        let mut s = IdSet::default();
        assert!(s.insert("12") && !s.insert("12") && s.insert("012") && s.insert("x"));
        assert!(s.contains("12") && s.contains("012") && !s.contains("13"));
        assert_eq!(s.len, 3);
        assert!(s.others.contains("012"), "not the canonical form of 12");
        assert!(s.bits.len() == 1);
    }
}
