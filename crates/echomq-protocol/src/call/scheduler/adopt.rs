//! adoptLegacyRepeatable-5 (EchoMQ extension, `echomq adopt`): one legacy
//! repeatable job of BullMQ <= 4 becomes a job scheduler in one atomic call.

use crate::call::decode::{Reply, ReplyError};
use crate::call::script::{Arg, ScriptCall};
use crate::keys::{Key, QueueKeys};
use crate::packing::pack_fields;
use crate::scripts::ScriptId;

/// What the script did with one legacy entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adopted {
    /// The entry is gone: converted by an earlier call, or removed.
    Gone,
    /// Converted; its pending iteration is now the scheduler's.
    Pending,
    /// Converted; its iteration is missing, taken or finished, so the caller
    /// must create the successor.
    NeedsIteration,
    /// Refused: the entry's score changed since the caller read it.
    Moved,
    /// Refused: a scheduler with that id exists already.
    IdTaken,
}

/// adoptLegacyRepeatable-5: see `lua/adoptLegacyRepeatable-5.lua`.
#[derive(Debug, Clone)]
pub struct AdoptLegacyRepeatable<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The legacy `{P}repeat` member (`name:id:endDate:tz:pattern`).
    pub member: &'a str,
    /// The scheduler id it becomes (the MD5 part of its iteration ids).
    pub scheduler_id: &'a str,
    /// The member's score as read: the millis of its latest iteration.
    pub millis: u64,
    /// The scheduler's definition hash, field and value.
    pub definition: &'a [(String, String)],
    /// The pending iteration's options rewritten for the scheduler (JSON text).
    pub iteration_opts: &'a str,
}

impl AdoptLegacyRepeatable<'_> {
    /// `repeat:<scheduler id>:<millis>`, the iteration the call adopts.
    pub fn iteration_id(&self) -> String {
        format!("repeat:{}:{}", self.scheduler_id, self.millis)
    }
}

impl ScriptCall for AdoptLegacyRepeatable<'_> {
    type Output = Adopted;

    fn script(&self) -> ScriptId {
        ScriptId::AdoptLegacyRepeatable
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().repeat,
            &k.fixed().delayed,
            &k.fixed().prioritized,
            k.scheduler(self.scheduler_id),
            k.job(&self.iteration_id()),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.member),
            Arg::str(self.scheduler_id),
            Arg::int(self.millis),
            Arg::packed_or_empty(pack_fields(self.definition)),
            Arg::str(self.iteration_opts),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Adopted, ReplyError> {
        match reply.as_i64() {
            Some(0) => Ok(Adopted::Gone),
            Some(1) => Ok(Adopted::Pending),
            Some(2) => Ok(Adopted::NeedsIteration),
            Some(3) => Ok(Adopted::Moved),
            Some(4) => Ok(Adopted::IdTaken),
            _ => Err(ReplyError::shape(
                self.script(),
                format!("expected 0..=4, got {reply:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_adopted_iteration() {
        let keys = QueueKeys::new("bull", "q").unwrap();
        let def = vec![("name".to_owned(), "n".to_owned())];
        let call = AdoptLegacyRepeatable {
            keys: &keys,
            member: "n::::5000",
            scheduler_id: "abc",
            millis: 10_000,
            definition: &def,
            iteration_opts: "{}",
        };
        let k: Vec<String> = call.keys().iter().map(|k| k.as_str().to_owned()).collect();
        assert_eq!(k[3], "bull:q:repeat:abc");
        assert_eq!(k[4], "bull:q:repeat:abc:10000");
        assert_eq!(call.decode(Reply::Int(2)).unwrap(), Adopted::NeedsIteration);
        assert!(call.decode(Reply::Int(7)).is_err());
    }
}
