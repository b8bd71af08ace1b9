//! DAG flows (EchoMQ extension, docs/flows.md §DAGs): the keys a node with
//! several dependents carries beside BullMQ's, releaseDagParents-5, which
//! hands a finished node to the dependents BullMQ's `parentKey` cannot name,
//! addDagEdges-4 (a node's extra edges at add time), and dagGate-2 /
//! repairDagWrite-2 (a DAG written in several transactions, and the end of
//! one whose writer died).

use super::decode::{Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::call::lifecycle::EpochMs;
use crate::keys::{Key, QueueKeys};
use crate::scripts::ScriptId;

/// The stored option (`opts.emqDag: 1`) of a DAG node with extra parents:
/// an EchoMQ worker finishes it through moveJobsToFinished, which hands it to
/// those parents in the same call. BullMQ Node carries it through untouched.
pub const DAG_NODE_OPTION: &str = "emqDag";

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

/// `{H}dag:gates`: ZSET of a home queue's open gated writes (gate key ->
/// the writer's deadline, ms on Redis's clock), walked by the repair.
pub fn gates_key(home: &QueueKeys) -> String {
    home.key("dag:gates")
}

/// `{H}dag:gate:<token>`: the gate of one gated write (HASH owner, state,
/// deadline), also the member that holds its nodes without dependencies.
pub fn gate_key(home: &QueueKeys, token: &str) -> String {
    home.key(&format!("dag:gate:{token}"))
}

/// How a node's [`AddDagEdges`] call takes part in a gated write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateMode {
    /// A one-transaction DAG (or a later call for the same node).
    None,
    /// A node with dependencies of a gated write: listed on the write.
    Node,
    /// A node without dependencies of a gated write: listed, and held by
    /// the gate in its `:dependencies`.
    Root,
}

/// Most extra parents per [`AddDagEdges`] call (the script refuses more).
pub const EDGES_PER_CALL: usize = 100;

/// addDagEdges-4: see `lua/addDagEdges-4.lua`.
#[derive(Debug, Clone)]
pub struct AddDagEdges<'a> {
    /// The node's queue.
    pub keys: &'a QueueKeys,
    /// The node's id.
    pub id: &'a str,
    /// The gate of a gated write (any key with [`GateMode::None`]).
    pub gate: &'a str,
    /// Its part in a gated write.
    pub mode: GateMode,
    /// Extra parents: (job key, queue key), at most [`EDGES_PER_CALL`].
    pub parents: &'a [(String, String)],
}

impl ScriptCall for AddDagEdges<'_> {
    type Output = u64;

    fn script(&self) -> ScriptId {
        ScriptId::AddDagEdges
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            k.job(self.id),
            extra_parents_key(k, self.id),
            pending_key(k),
            self.gate,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let mode = match self.mode {
            GateMode::None => "",
            GateMode::Node => "node",
            GateMode::Root => "root",
        };
        let mut args = vec![Arg::str(self.id), Arg::from_static(mode)];
        for (key, queue) in self.parents {
            args.push(Arg::str(key));
            args.push(Arg::str(queue));
        }
        args
    }

    fn decode(&self, reply: Reply) -> Result<u64, ReplyError> {
        match reply.as_i64() {
            Some(n) if n >= 0 => Ok(n as u64),
            _ => Err(ReplyError::shape(
                self.script(),
                format!("expected a count, got {reply:?}"),
            )),
        }
    }
}

/// What a [`DagGate`] call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateOp {
    /// A new gate, state `writing`.
    Open,
    /// The deadline pushed on.
    Renew,
    /// Every node is written: a repair now finishes, never rolls back.
    Lifting,
    /// Every gate member is lifted: gate, node list and registry entry deleted.
    Close,
}

/// dagGate-2: see `lua/dagGate-2.lua`. Replies the new deadline (ms on
/// Redis's clock; 0 for [`GateOp::Close`]); a write a repair took over gets
/// the error `dagGate: taken over`.
#[derive(Debug, Clone)]
pub struct DagGate<'a> {
    /// The gate's home queue.
    pub home: &'a QueueKeys,
    /// The gate key ([`gate_key`]).
    pub gate: &'a str,
    /// The operation.
    pub op: GateOp,
    /// The writer's token.
    pub owner: &'a str,
    /// Lease from Redis's TIME.
    pub lease: std::time::Duration,
}

impl ScriptCall for DagGate<'_> {
    type Output = u64;

    fn script(&self) -> ScriptId {
        ScriptId::DagGate
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.gate, gates_key(self.home)]
    }

    fn args(&self) -> Vec<Arg> {
        let op = match self.op {
            GateOp::Open => "open",
            GateOp::Renew => "renew",
            GateOp::Lifting => "lifting",
            GateOp::Close => "close",
        };
        vec![
            Arg::from_static(op),
            Arg::str(self.owner),
            Arg::ms(self.lease),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<u64, ReplyError> {
        match reply.as_i64() {
            Some(n) if n >= 0 => Ok(n as u64),
            _ => Err(ReplyError::shape(
                self.script(),
                format!("expected a deadline, got {reply:?}"),
            )),
        }
    }
}

/// What one repairDagWrite call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DagRepair {
    /// The writer's deadline has not passed: nothing changed.
    Alive,
    /// This many nodes are left (call again while above 0); 0: ended.
    Left(u64),
}

/// repairDagWrite-2: see `lua/repairDagWrite-2.lua`.
#[derive(Debug, Clone)]
pub struct RepairDagWrite<'a> {
    /// The gate's home queue.
    pub home: &'a QueueKeys,
    /// The gate key.
    pub gate: &'a str,
    /// Most nodes per call.
    pub budget: u64,
}

impl ScriptCall for RepairDagWrite<'_> {
    type Output = DagRepair;

    fn script(&self) -> ScriptId {
        ScriptId::RepairDagWrite
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.gate, gates_key(self.home)]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::int(self.budget.max(1))]
    }

    fn decode(&self, reply: Reply) -> Result<DagRepair, ReplyError> {
        match reply.as_i64() {
            Some(-1) => Ok(DagRepair::Alive),
            Some(n) if n >= 0 => Ok(DagRepair::Left(n as u64)),
            _ => Err(ReplyError::shape(
                self.script(),
                format!("expected -1 or a count, got {reply:?}"),
            )),
        }
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

    #[test]
    fn gated_write_calls_name_their_keys() {
        let keys = QueueKeys::new("emq", "d").unwrap();
        let gate = gate_key(&keys, "t");
        assert_eq!(gate, "emq:d:dag:gate:t");
        let parents = [("emq:d:p".to_owned(), "emq:d".to_owned())];
        let add = AddDagEdges {
            keys: &keys,
            id: "a",
            gate: &gate,
            mode: GateMode::Root,
            parents: &parents,
        };
        assert_eq!(add.keys().len(), ScriptId::AddDagEdges.num_keys());
        assert_eq!(add.args().len(), 4);
        let g = DagGate {
            home: &keys,
            gate: &gate,
            op: GateOp::Open,
            owner: "t",
            lease: std::time::Duration::from_secs(1),
        };
        let k: Vec<String> = g.keys().iter().map(|k| k.as_str().to_owned()).collect();
        assert_eq!(k, ["emq:d:dag:gate:t", "emq:d:dag:gates"]);
        let r = RepairDagWrite {
            home: &keys,
            gate: &gate,
            budget: 0,
        };
        assert_eq!(r.keys().len(), ScriptId::RepairDagWrite.num_keys());
    }
}
