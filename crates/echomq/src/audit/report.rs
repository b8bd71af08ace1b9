//! What an audit reports, how it is asked for, and how far it got.

use std::collections::HashMap;
use std::time::Duration;

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
