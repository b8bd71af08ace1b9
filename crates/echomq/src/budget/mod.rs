//! Byte budgets (issue 44, docs/operations.md §Memory): a queue may be given
//! a budget in bytes for what it keeps after work is done — completed and
//! failed jobs with their logs, and the events stream. Over it, the oldest
//! finished jobs are removed (BullMQ's retention effects) and the events
//! stream is trimmed; waiting, delayed, prioritized, active and
//! waiting-children jobs are never touched.
//!
//! * `queue.set_byte_budget(..)`, `queue.clear_byte_budget()` and
//!   `queue.byte_budget()` ([`ByteBudget`]) — the setting, in the queue's
//!   `{P}budget` hash, and the bytes in use.
//! * [`BudgetEnforcer`] — the periodic enforcer: one bounded
//!   `enforceBudget-4` call a tick, whoever finishes the jobs (EchoMQ, Node
//!   or Python workers). `echomq work` runs one for its queue; a service
//!   starts one per queue with [`BudgetEnforcer::start`].

pub(crate) mod admin;
pub mod enforcer;
mod error;

pub use self::admin::ByteBudget;
pub use self::enforcer::{BudgetEnforcer, EnforcerSettings, EnforcerStats};
pub use self::error::{parse_max_bytes, BudgetError, MAX_BUDGET_BYTES};

/// Bytes in binary units (`3.0 MiB`), as `echomq budget`, `echomq stats`
/// and the dashboard print them.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
