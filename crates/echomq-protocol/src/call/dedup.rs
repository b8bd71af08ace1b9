//! Deduplication: freeing a deduplication id on behalf of the job that owns it
//! (docs/protocol.md §Deduplication).

use crate::call::decode::{self, Reply, ReplyError};
use crate::call::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// removeDeduplicationKey-1: deletes `{P}de:<id>` only while it still names
/// `job_id` as its owner; answers whether it did.
#[derive(Debug, Clone, Copy)]
pub struct RemoveDeduplicationKey<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The deduplication id (not the key).
    pub dedup_id: &'a str,
    /// The job that must own the key.
    pub job_id: &'a str,
}

impl ScriptCall for RemoveDeduplicationKey<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::RemoveDeduplicationKey
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.dedup(self.dedup_id)]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.job_id)]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn keys_args_and_reply() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let c = RemoveDeduplicationKey {
            keys: &k,
            dedup_id: "user-7",
            job_id: "12",
        };
        assert_eq!(argv_text(&c), vec!["12"]);
        assert_eq!(c.keys(), vec!["emq:q:de:user-7"]);
        assert!(c.decode(Reply::Int(1)).unwrap());
        assert!(!c.decode(Reply::Int(0)).unwrap());
        assert!(c.decode(Reply::text("x")).is_err());
    }
}
