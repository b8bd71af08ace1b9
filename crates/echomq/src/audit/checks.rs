//! The pure auditor: fed each reply of the paged reads in turn, it checks
//! what the reply proves and keeps what later replies are checked against.
//! No I/O here, so every check is testable on hand-made replies.

use echomq_protocol::call::dag::DagFinding;
use std::collections::{HashMap, HashSet};

use echomq_protocol::call::audit::{Head, JobRow, KeysStep, PageRow, StatePage};
use echomq_protocol::call::flow::FlowFinding;
use echomq_protocol::call::groups::ReleasedState;

use super::report::{AuditOptions, AuditReport, Severity, Violation};
use super::{LISTS, SETS};

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
pub(super) struct Auditor {
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
    /// Released jobs by group, from `{P}gr:jobs` (G2: bounded by the
    /// groups' concurrencies, plus finished jobs not yet accounted).
    released: HashMap<String, HashSet<String>>,
    /// The active set of the group being read.
    group_active: HashSet<String>,
}

impl Auditor {
    pub(super) fn new(opts: &AuditOptions, head: Head) -> Self {
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
            released: HashMap::new(),
            group_active: HashSet::new(),
        };
        a.head_checks();
        a
    }

    /// The size of state structure `s` when the audit began.
    pub(super) fn size(&self, s: &str) -> u64 {
        self.head.size(s)
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
    pub(super) fn page(&mut self, state: &'static str, page: &StatePage) {
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
    pub(super) fn keys(&mut self, step: &KeysStep) {
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
    pub(super) fn group_waiting(&mut self, gid: &str, ids: &[String]) {
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

    /// G3 over a page of `{P}gr:jobs`; keeps each group's released jobs for
    /// G2.
    pub(super) fn group_released(&mut self, rows: Vec<(String, String, ReleasedState)>) {
        for (id, gid, state) in rows {
            if state != ReleasedState::Open {
                let detail =
                    format!("finished ({state:?}) but still holds a slot of group {gid:?}");
                self.f.add("G3", Severity::Quiescent, Some(&id), detail);
            }
            self.released.entry(gid).or_default().insert(id);
        }
    }

    /// G5 and G1/G4 over a page of a group's delayed ids (`first`: the page
    /// from 0, which says whether the group is indexed in `gr:delayed`).
    pub(super) fn group_delayed(&mut self, gid: &str, first: bool, indexed: bool, ids: &[String]) {
        if first && !ids.is_empty() && !indexed {
            let detail = format!("group {gid:?} has delayed jobs but is not in gr:delayed");
            self.f.add("G5", Severity::Hard, None, detail);
        }
        self.group_waiting(gid, ids);
    }

    /// G2 over a page of a group's active set: each id was released to it.
    pub(super) fn group_active(&mut self, gid: &str, ids: Vec<String>) {
        let mine = self.released.get(gid);
        for id in ids {
            if !mine.is_some_and(|m| m.contains(&id)) {
                let detail = format!("in group {gid:?}'s active set but not released to it");
                self.f.add("G2", Severity::Hard, Some(&id), detail);
            }
            self.group_active.insert(id);
        }
    }

    /// G2 once a group's active set is read: every job released to it is in it.
    pub(super) fn group_done(&mut self, gid: &str) {
        let mine = self.released.remove(gid).unwrap_or_default();
        let active = std::mem::take(&mut self.group_active);
        for id in mine.difference(&active) {
            let detail = format!("released to group {gid:?} but not in its active set");
            self.f.add("G2", Severity::Hard, Some(id), detail);
        }
    }

    /// Drops the A4 findings of unreleased group jobs.
    pub(super) fn forgive_unreleased(&mut self) {
        let unreleased = &self.unreleased;
        self.f.violations.retain(|v| {
            !(v.check == "A4"
                && v.job_id
                    .as_deref()
                    .is_some_and(|id| unreleased.contains(id)))
        });
    }

    /// A page of `stalled` (A8).
    pub(super) fn stalled(&mut self, ids: &[String]) {
        for id in ids {
            if !self.lists["active"].contains(id) {
                let detail = "marked stalled but not active".into();
                self.f.add("A8", Severity::Warning, Some(id), detail);
            }
        }
    }

    /// F1/F2 (docs/flows.md §Audit): each proven by one atomic step.
    pub(super) fn flows(&mut self, findings: Vec<FlowFinding>) {
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

    /// D1/D2 (docs/flows.md §DAGs): a finished node not handed over to its
    /// extra parents counts at quiescence; a pending node without its
    /// extra parents' hash always.
    pub(super) fn dag(&mut self, findings: Vec<DagFinding>) {
        for finding in findings {
            let severity = if finding.check == "D2" {
                Severity::Hard
            } else {
                Severity::Quiescent
            };
            self.f
                .add(&finding.check, severity, Some(&finding.id), finding.detail);
        }
    }

    pub(super) fn finish(mut self) -> AuditReport {
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
