//! Bounded steps of queue-wide operations whose BullMQ script walks a whole
//! structure in one call: EchoMQ extension scripts (docs/scale.md §Chunked
//! operations), each looking at a caller-given budget of ids.

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// A structure a drain empties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainTarget {
    /// `{P}wait`.
    Wait,
    /// `{P}paused` (legacy).
    Paused,
    /// `{P}prioritized`.
    Prioritized,
    /// `{P}delayed`.
    Delayed,
}

impl DrainTarget {
    /// Key suffix of the structure.
    pub fn key_suffix(self) -> &'static str {
        match self {
            DrainTarget::Wait => "wait",
            DrainTarget::Paused => "paused",
            DrainTarget::Prioritized => "prioritized",
            DrainTarget::Delayed => "delayed",
        }
    }

    fn is_list(self) -> bool {
        matches!(self, DrainTarget::Wait | DrainTarget::Paused)
    }
}

/// drainChunk-2: removes up to `budget` jobs of one structure (hard, as
/// drain-5 removes them, no events), sparing current scheduler iterations,
/// which keep their place.
#[derive(Debug, Clone, Copy)]
pub struct DrainChunk<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The structure.
    pub target: DrainTarget,
    /// Ids at its front spared by the previous steps (the sum of their
    /// [`DrainStep::spared`]).
    pub spared_before: u64,
    /// Most ids this step looks at past them.
    pub budget: u64,
}

/// What one [`DrainChunk`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrainStep {
    /// Jobs removed.
    pub removed: u64,
    /// Scheduler iterations spared in this step's window.
    pub spared: u64,
    /// Ids looked at past the spared front: fewer than the budget means the
    /// structure is done.
    pub looked_at: u64,
}

impl ScriptCall for DrainChunk<'_> {
    type Output = DrainStep;

    fn script(&self) -> ScriptId {
        ScriptId::DrainChunk
    }

    fn keys(&self) -> Vec<Key> {
        keys![
            self.keys.key(self.target.key_suffix()),
            &self.keys.fixed().repeat
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::str(if self.target.is_list() {
                "list"
            } else {
                "zset"
            }),
            Arg::int(self.spared_before),
            Arg::int(self.budget),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<DrainStep, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        let n = |i: usize| {
            parts
                .get(i)
                .and_then(Reply::as_i64)
                .map(|n| n.max(0) as u64)
                .ok_or_else(|| ReplyError::shape(s, format!("element {i} is not a number")))
        };
        Ok(DrainStep {
            removed: n(0)?,
            spared: n(1)?,
            looked_at: n(2)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn drain_chunk_names_its_structure() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let c = DrainChunk {
            keys: &k,
            target: DrainTarget::Prioritized,
            spared_before: 2,
            budget: 500,
        };
        assert_eq!(c.keys(), ["emq:q:prioritized", "emq:q:repeat"]);
        assert_eq!(argv_text(&c), ["emq:q:", "zset", "2", "500"]);
        let w = DrainChunk {
            target: DrainTarget::Wait,
            ..c
        };
        assert_eq!(argv_text(&w)[1], "list");
        let step = c
            .decode(Reply::Array(vec![
                Reply::Int(3),
                Reply::Int(1),
                Reply::Int(4),
            ]))
            .unwrap();
        assert_eq!(
            step,
            DrainStep {
                removed: 3,
                spared: 1,
                looked_at: 4
            }
        );
        assert!(c.decode(Reply::Int(1)).is_err());
    }
}
