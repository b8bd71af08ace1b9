//! The budget setting of a queue and the bytes it keeps: `{P}budget`
//! (docs/protocol.md §Byte budgets).

use echomq_protocol::call::budget::{BudgetStep, EnforceBudget};
use fred::prelude::{HashesInterface, KeysInterface};

use super::enforcer::EnforcerSettings;
use super::error::BudgetError;
use crate::error::Result;
use crate::queue::Queue;

/// A queue's byte budget and what it keeps, as `queue.byte_budget()` reads
/// it. Bytes are estimates (docs/operations.md §Memory says how close).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ByteBudget {
    /// The budget in bytes; `None`: the queue has none.
    pub max: Option<u64>,
    /// Bytes the queue keeps after work is done: `jobs_bytes + events_bytes`.
    pub used: u64,
    /// Bytes of the completed and failed jobs (hashes, logs, flow sets).
    pub jobs_bytes: u64,
    /// Bytes of the events stream.
    pub events_bytes: u64,
    /// Jobs in `completed`.
    pub completed: u64,
    /// Jobs in `failed`.
    pub failed: u64,
    /// Finished jobs the budget removed since it was first set.
    pub removed: u64,
    /// Events stream entries the budget trimmed since it was first set.
    pub trimmed: u64,
}

impl ByteBudget {
    /// `used` over `max`, when there is a budget.
    pub fn over(&self) -> bool {
        self.max.is_some_and(|m| self.used > m)
    }
}

impl Queue {
    /// Gives the queue a budget of `max_bytes` for what it keeps after work
    /// is done; a [`BudgetEnforcer`](super::BudgetEnforcer) on the queue
    /// holds it. Refuses 0 and more than
    /// [`MAX_BUDGET_BYTES`](super::MAX_BUDGET_BYTES) before writing anything.
    pub async fn set_byte_budget(&self, max_bytes: u64) -> Result<()> {
        let max = BudgetError::check(max_bytes)?;
        self.connection()
            .pool()
            .hset::<(), _, _>(self.keys().budget(), [("max", max.to_string())])
            .await?;
        Ok(())
    }

    /// Removes the queue's budget (and its counters): nothing is removed
    /// for bytes any more.
    pub async fn clear_byte_budget(&self) -> Result<()> {
        self.connection()
            .pool()
            .del::<(), _>(self.keys().budget())
            .await?;
        Ok(())
    }

    /// The budget and the bytes the queue keeps now, measured by one
    /// read-only `enforceBudget` step (bounded: a sample of each finished
    /// set), and the removal counters. With no budget, the bytes are still
    /// measured.
    pub async fn byte_budget(&self) -> Result<ByteBudget> {
        let pool = self.connection().pool();
        let (max, removed, trimmed): (Option<u64>, Option<u64>, Option<u64>) = pool
            .hmget(self.keys().budget(), vec!["max", "removed", "trimmed"])
            .await?;
        let step = self
            .budget_step(&EnforcerSettings::default(), 0, false)
            .await?;
        Ok(ByteBudget {
            max: max.filter(|m| *m > 0),
            used: step.used_after,
            jobs_bytes: step.jobs_bytes,
            events_bytes: step.events_bytes,
            completed: step.completed,
            failed: step.failed,
            removed: removed.unwrap_or(0),
            trimmed: trimmed.unwrap_or(0),
        })
    }

    /// One `enforceBudget` call with these settings.
    pub(crate) async fn budget_step(
        &self,
        settings: &EnforcerSettings,
        offset_permille: u16,
        enforce: bool,
    ) -> Result<BudgetStep> {
        let call = EnforceBudget {
            keys: self.keys(),
            page: settings.page,
            samples: settings.samples,
            offset_permille,
            low_percent: settings.low_percent,
            events_percent: settings.events_percent,
            enforce,
        };
        self.connection().call(&call).await
    }
}
