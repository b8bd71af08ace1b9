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
//!
//! The audit is three parts: what it reports (`report.rs`), the paged reads
//! that feed it (`reads.rs`, every Redis call) and the pure auditor that
//! checks each reply (`checks.rs`, no I/O).

mod checks;
mod reads;
mod report;

pub use self::reads::Audit;
pub use self::report::{AuditOptions, AuditProgress, AuditReport, Severity, Violation};

/// Ids per `auditPage` call. An id costs the page up to ~100 µs (it reads
/// the job's hash and looks for it in every state: 250 ids took 25.3 ms,
/// docs/benchmarks.md §Scale), so 100 keeps a call within a few ms.
pub const PAGE: u64 = 100;
/// SCAN COUNT of one `auditKeys` call: a key costs it about as much as an
/// id costs `auditPage` (its type, then the same state lookups).
pub const KEYS_STEP: u64 = 100;
/// Children and parents one `auditFlows` call looks at.
pub const FLOW_STEP: u64 = 1000;

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
