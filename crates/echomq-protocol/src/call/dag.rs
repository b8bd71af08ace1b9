//! DAG flows (EchoMQ extension, docs/flows.md §DAGs): the keys a node with
//! several dependents carries beside BullMQ's, and releaseDagParents-5, which
//! hands a finished node to the dependents BullMQ's `parentKey` cannot name.

use super::decode::{Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::call::lifecycle::EpochMs;
use crate::keys::{Key, QueueKeys};
use crate::scripts::ScriptId;

/// `{P}<id>:dag:parents`: HASH extra parent key -> that parent's queue key
/// (`<prefix>:<queue>`), the dependents of node `id` after its first.
pub fn extra_parents_key(keys: &QueueKeys, id: &str) -> String {
    format!("{}:dag:parents", keys.job(id))
}

/// `{P}dag:pending`: SET of the queue's node ids whose extra parents have
/// not all been handed the node's outcome yet (the follower's sweep walks it).
pub fn pending_key(keys: &QueueKeys) -> String {
    keys.key("dag:pending")
}

/// What one releaseDagParents call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DagRelease {
    /// The node has not finished (or failed without a failure rule): nothing changed.
    NotFinished,
    /// This many extra parents are left (call again while above 0); 0: done.
    Left(u64),
}

/// releaseDagParents-5: see `lua/releaseDagParents-5.lua`.
#[derive(Debug, Clone)]
pub struct ReleaseDagParents<'a> {
    /// The node's queue.
    pub keys: &'a QueueKeys,
    /// The node's id.
    pub id: &'a str,
    /// Now: the base of a released parent's delay.
    pub now: EpochMs,
    /// Most extra parents handed over per call.
    pub budget: u64,
}

impl ScriptCall for ReleaseDagParents<'_> {
    type Output = DagRelease;

    fn script(&self) -> ScriptId {
        ScriptId::ReleaseDagParents
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            k.job(self.id),
            extra_parents_key(k, self.id),
            pending_key(k),
            &k.fixed().completed,
            &k.fixed().failed,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.id),
            Arg::int(self.now.0),
            Arg::int(self.budget.max(1)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<DagRelease, ReplyError> {
        match reply.as_i64() {
            Some(-1) => Ok(DagRelease::NotFinished),
            Some(n) if n >= 0 => Ok(DagRelease::Left(n as u64)),
            _ => Err(ReplyError::shape(
                self.script(),
                format!("expected -1 or a count, got {reply:?}"),
            )),
        }
    }
}

/// One broken DAG invariant (docs/flows.md §DAGs, checks D1 and D2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagFinding {
    /// `D1` (a finished node not handed over) or `D2` (pending without its
    /// extra parents' hash).
    pub check: String,
    /// The node.
    pub id: String,
    /// What was found.
    pub detail: String,
}

/// One page of auditDag-1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagAuditPage {
    /// The next SSCAN cursor, `"0"` when the set was walked.
    pub cursor: String,
    /// What the page found.
    pub findings: Vec<DagFinding>,
}

/// auditDag-1 (EchoMQ extension, read-only): one SSCAN page of
/// `{P}dag:pending`; see `lua/auditDag-1.lua`.
#[derive(Debug, Clone)]
pub struct AuditDag<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// SSCAN cursor (`"0"` to start).
    pub cursor: &'a str,
    /// SSCAN COUNT.
    pub count: u64,
}

impl ScriptCall for AuditDag<'_> {
    type Output = DagAuditPage;

    fn script(&self) -> ScriptId {
        ScriptId::AuditDag
    }

    fn keys(&self) -> Vec<Key> {
        keys![pending_key(self.keys)]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::str(self.cursor),
            Arg::int(self.count.max(1)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<DagAuditPage, ReplyError> {
        let s = self.script();
        let parts = super::decode::array(s, reply)?;
        let mut it = parts.into_iter();
        let cursor = super::decode::text(s, &it.next().unwrap_or(Reply::Nil))?;
        let items = super::decode::strings(s, it.next().unwrap_or(Reply::Nil))?;
        if items.len() % 3 != 0 {
            return Err(ReplyError::shape(s, "findings come in threes"));
        }
        let findings = items
            .chunks(3)
            .map(|c| DagFinding {
                check: c[0].clone(),
                id: c[1].clone(),
                detail: c[2].clone(),
            })
            .collect();
        Ok(DagAuditPage { cursor, findings })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_script_header() {
        let keys = QueueKeys::new("emq", "d").unwrap();
        let call = ReleaseDagParents {
            keys: &keys,
            id: "a-1",
            now: EpochMs(5),
            budget: 0,
        };
        let k: Vec<String> = call.keys().iter().map(|k| k.as_str().to_owned()).collect();
        assert_eq!(
            k,
            [
                "emq:d:a-1",
                "emq:d:a-1:dag:parents",
                "emq:d:dag:pending",
                "emq:d:completed",
                "emq:d:failed"
            ]
        );
        assert_eq!(call.args().len(), 3);
        assert_eq!(call.keys().len(), ScriptId::ReleaseDagParents.num_keys());
    }
}
