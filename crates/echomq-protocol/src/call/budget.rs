//! Byte budgets, an EchoMQ extension (docs/operations.md §Memory,
//! docs/protocol.md §Byte budgets): the call of `lua/enforceBudget-4.lua`.

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::{Key, QueueKeys};
use crate::scripts::ScriptId;

/// enforceBudget-4: one bounded step of a queue's byte budget, or (with
/// `enforce` false) the estimate alone, nothing written.
#[derive(Debug, Clone, Copy)]
pub struct EnforceBudget<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Most finished jobs this call removes.
    pub page: u32,
    /// Jobs sampled per finished set for the estimate.
    pub samples: u32,
    /// Where the evenly spread samples start, in thousandths of a stride
    /// (0–999); varied between calls so that every rank gets its turn.
    pub offset_permille: u16,
    /// A step over the budget removes down to this percent of it.
    pub low_percent: u8,
    /// The events stream's share of the budget, in percent.
    pub events_percent: u8,
    /// Enforce (trim and remove) or only measure.
    pub enforce: bool,
}

/// What one [`EnforceBudget`] saw and did. Byte counts are estimates
/// (docs/operations.md §Memory says how close).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetStep {
    /// The budget in bytes (0: the queue has none, nothing else was read).
    pub max: u64,
    /// Bytes kept before the step.
    pub used_before: u64,
    /// Bytes kept after it.
    pub used_after: u64,
    /// Finished jobs removed.
    pub removed: u64,
    /// Events stream entries trimmed.
    pub trimmed: u64,
    /// Jobs in `completed` after the step.
    pub completed: u64,
    /// Jobs in `failed` after the step.
    pub failed: u64,
    /// Bytes of the finished jobs after the step.
    pub jobs_bytes: u64,
    /// Bytes of the events stream after the step.
    pub events_bytes: u64,
    /// Still over the budget with finished jobs left: call again.
    pub more: bool,
}

impl ScriptCall for EnforceBudget<'_> {
    type Output = BudgetStep;

    fn script(&self) -> ScriptId {
        ScriptId::EnforceBudget
    }

    fn keys(&self) -> Vec<Key> {
        let f = self.keys.fixed();
        keys![&f.budget, &f.completed, &f.failed, &f.events]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::key(&self.keys.fixed().base),
            Arg::int(self.page.max(1)),
            Arg::int(self.samples.max(1)),
            Arg::text(format!("0.{:03}", self.offset_permille.min(999))),
            Arg::int(self.low_percent.clamp(1, 100)),
            Arg::int(self.events_percent.clamp(1, 100)),
            Arg::flag(self.enforce),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<BudgetStep, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        let n = |i: usize| {
            parts
                .get(i)
                .and_then(Reply::as_i64)
                .map(|n| n.max(0) as u64)
                .ok_or_else(|| ReplyError::shape(s, format!("element {i} is not a number")))
        };
        Ok(BudgetStep {
            max: n(0)?,
            used_before: n(1)?,
            used_after: n(2)?,
            removed: n(3)?,
            trimmed: n(4)?,
            completed: n(5)?,
            failed: n(6)?,
            jobs_bytes: n(7)?,
            events_bytes: n(8)?,
            more: n(9)? == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn enforce_budget_sends_its_keys_and_args_in_order() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call = EnforceBudget {
            keys: &k,
            page: 200,
            samples: 16,
            offset_permille: 7,
            low_percent: 95,
            events_percent: 25,
            enforce: true,
        };
        assert_eq!(
            call.keys(),
            [
                "emq:q:budget",
                "emq:q:completed",
                "emq:q:failed",
                "emq:q:events"
            ]
        );
        assert_eq!(
            argv_text(&call),
            ["emq:q:", "200", "16", "0.007", "95", "25", "1"]
        );
    }
}
