//! Writing a DAG (docs/flows.md §DAGs): each node is an ordinary BullMQ flow
//! job whose parent is its first dependent; the other dependents get the
//! node's key in their `:dependencies` and are listed in the node's
//! `:dag:parents`, for releaseDagParents — written by addDagEdges-4, one
//! checked script call per node (per 100 extra parents) right after the
//! node's add, in the same transaction.
//!
//! Nodes go out dependents first, in transactions of at most `chunk` nodes.
//! A node with dependencies is parked in `waiting-children` by its add, so
//! only the nodes without dependencies could run early. When the DAG fits in
//! one transaction nothing runs before its `EXEC`. When it does not, the
//! write is *gated*: a gate (dagGate-2: owner, state, a deadline on Redis's
//! clock, renewed before every transaction) is opened in the home queue (the
//! queue of the first node without dependencies); every node is listed on
//! it, and the nodes without dependencies are also held by the gate's key in
//! their `:dependencies`. The gates are lifted, chunk by chunk, only after
//! the last node is written. A writer that dies lets the deadline pass, and
//! the home queue's DagReleaser ends the write (repairDagWrite-2): rolled
//! back when it died writing, finished when it died lifting. So no part of a
//! DAG runs before the whole DAG is written, and nothing waits forever.

use std::time::Duration;

use echomq_protocol::call::dag::{
    gate_key, AddDagEdges, DagGate, GateMode, GateOp, EDGES_PER_CALL,
};
use echomq_protocol::call::flow::{ChildKeys, ReleaseParentIfNoPendingDependencies};
use echomq_protocol::call::lifecycle::EpochMs;
use echomq_protocol::call::ScriptCall;
use echomq_protocol::QueueKeys;
use fred::prelude::{ClientLike, KeysInterface, TransactionInterface};
use fred::types::{ClusterHash, CustomCommand, Value as FredValue};

use super::graph::{plan, DagError, DagNode};
use crate::error::Error;
use crate::flows::producer::{eval_args, Entry, FlowJob, FlowProducer, ParentLink};

/// Nodes per transaction of [`FlowProducer::add_dag`].
pub const DAG_CHUNK: usize = 200;

/// How long a gated write's gate holds without a renewal (the writer renews
/// it before each transaction): past it, the home queue's DagReleaser rolls
/// the write back (or finishes lifting it). Long beside one transaction of
/// [`DAG_CHUNK`] nodes (milliseconds), short beside "forever".
pub const DAG_WRITE_LEASE: Duration = Duration::from_secs(30);

/// What [`FlowProducer::add_dag`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DagAdded {
    /// Nodes written.
    pub nodes: usize,
    /// Edges BullMQ records itself (`parentKey`).
    pub bullmq_edges: usize,
    /// Edges recorded in the extension's `:dag:parents`.
    pub extra_edges: usize,
    /// Transactions used (node chunks, then gate lifts).
    pub transactions: usize,
}

/// Where a fault-injected write stops (`add_dag_abandoned`): after this
/// many transactions (node chunks first, then gate lifts), as a writer
/// killed there would.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy)]
pub struct DagWriteStop {
    /// Transactions done before the writer "dies".
    pub after_transactions: usize,
    /// The gate's lease (short, for a test).
    pub lease: Duration,
}

/// A gated write's gate, on the writer's side.
struct Gate<'a> {
    home: &'a QueueKeys,
    key: String,
    owner: String,
    lease: Duration,
}

impl Gate<'_> {
    async fn op(&self, fp: &FlowProducer, op: GateOp) -> Result<(), DagError> {
        let call = DagGate {
            home: self.home,
            gate: &self.key,
            op,
            owner: &self.owner,
            lease: self.lease,
        };
        match fp.conn.call(&call).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("taken over") => Err(DagError::TakenOver {
                gate: self.key.clone(),
            }),
            Err(e) => Err(e.into()),
        }
    }
}

impl FlowProducer {
    /// Adds a DAG: every node waits for all of its `depends_on`. Checked
    /// first (ids, edges, cycles, queue names, options), nothing written on
    /// a refusal; then written in transactions of at most [`DAG_CHUNK`]
    /// nodes, no node able to run before the last one is written.
    pub async fn add_dag(&self, nodes: Vec<DagNode>) -> Result<DagAdded, DagError> {
        self.add_dag_in_chunks(nodes, DAG_CHUNK).await
    }

    /// [`FlowProducer::add_dag`] with transactions of at most `chunk` nodes
    /// (at least 1).
    pub async fn add_dag_in_chunks(
        &self,
        nodes: Vec<DagNode>,
        chunk: usize,
    ) -> Result<DagAdded, DagError> {
        self.write_dag(nodes, chunk, DAG_WRITE_LEASE, usize::MAX)
            .await
    }

    /// Fault injection: [`FlowProducer::add_dag_in_chunks`] whose writer
    /// "dies" after `stop.after_transactions` transactions — it stops there
    /// and leaves the write for the repair, as a killed process would.
    #[cfg(feature = "fault-injection")]
    pub async fn add_dag_abandoned(
        &self,
        nodes: Vec<DagNode>,
        chunk: usize,
        stop: DagWriteStop,
    ) -> Result<DagAdded, DagError> {
        self.write_dag(nodes, chunk, stop.lease, stop.after_transactions)
            .await
    }

    async fn write_dag(
        &self,
        nodes: Vec<DagNode>,
        chunk: usize,
        lease: Duration,
        stop_after: usize,
    ) -> Result<DagAdded, DagError> {
        let chunk = chunk.max(1);
        let prefix = self.conn.prefix().to_owned();
        let plan = plan(&nodes, &prefix)?;
        let keys: Vec<QueueKeys> = nodes
            .iter()
            .map(|n| QueueKeys::new(&prefix, &n.queue))
            .collect::<Result<_, _>>()
            .map_err(|e| DagError::Format(e.to_string()))?;
        let gated = nodes.len() > chunk;
        let roots: Vec<usize> = plan
            .order
            .iter()
            .copied()
            .filter(|&i| nodes[i].depends_on.is_empty())
            .collect();
        // The gate lives in the home queue: the queue of the first root (a
        // DAG has one: no cycle), so its DagReleaser repairs the write.
        let gate = roots.first().map(|&r| {
            let token = uuid::Uuid::new_v4().to_string();
            Gate {
                home: &keys[r],
                key: gate_key(&keys[r], &token),
                owner: token,
                lease,
            }
        });

        // Every entry encoded before anything is sent.
        let mut entries: Vec<Entry> = Vec::with_capacity(nodes.len());
        for &i in &plan.order {
            let n = &nodes[i];
            let parent = plan.dependents[i].first().map(|&p| ParentLink {
                key: keys[p].job(&nodes[p].id),
                id: nodes[p].id.clone(),
                queue: keys[p].queue_key(),
            });
            let job = FlowJob {
                name: n.name.clone(),
                queue: n.queue.clone(),
                data: n.data.clone(),
                options: {
                    let mut o = n.options.clone().job_id(n.id.clone());
                    if plan.dependents[i].len() > 1 {
                        o.extra.insert(
                            echomq_protocol::call::dag::DAG_NODE_OPTION.into(),
                            serde_json::json!(1),
                        );
                    }
                    o
                },
                children: Vec::new(),
                parent: None,
                on_failure: n.on_failure,
            };
            let mut entry = self
                .entry(&job, &n.id, parent.as_ref())
                .map_err(|e| match e {
                    Error::Validation(source) => DagError::InvalidNode {
                        id: n.id.clone(),
                        source,
                    },
                    other => DagError::Redis(other),
                })?;
            let waits = !n.depends_on.is_empty() || gated;
            if waits {
                if entry.group.is_some() {
                    return Err(DagError::Unsupported {
                        id: n.id.clone(),
                        reason: "a group job in a DAG larger than one transaction".into(),
                    });
                }
                // addParentJob: stored in waiting-children.
                entry.kind = None;
            }
            entries.push(entry);
        }
        self.check_slots(&entries)?;
        self.refuse_taken_ids(&entries).await?;

        let gate = gate.filter(|_| gated);
        if let Some(g) = &gate {
            g.op(self, GateOp::Open).await?;
        }
        let eval = CustomCommand::new_static("EVAL", ClusterHash::Offset(2), false);
        let srem = CustomCommand::new_static("SREM", ClusterHash::FirstKey, false);
        let mut added = DagAdded {
            nodes: nodes.len(),
            bullmq_edges: 0,
            extra_edges: 0,
            transactions: 0,
        };
        for (part, idx) in entries.chunks(chunk).zip(plan.order.chunks(chunk)) {
            if added.transactions >= stop_after {
                return Ok(added);
            }
            if let Some(g) = &gate {
                g.op(self, GateOp::Renew).await?;
            }
            let client = self.conn.pool().next();
            let trx = client.multi();
            // Which replies are adds (the others are addDagEdges counts).
            let mut adds = Vec::with_capacity(part.len());
            let mut sent = 0usize;
            for (entry, &i) in part.iter().zip(idx) {
                trx.custom::<(), _>(eval.clone(), eval_args(&entry.call())?)
                    .await
                    .map_err(Error::from)?;
                adds.push(sent);
                sent += 1;
                if !plan.dependents[i].is_empty() {
                    added.bullmq_edges += 1;
                }
                let extra: Vec<(String, String)> = plan.dependents[i]
                    .iter()
                    .skip(1)
                    .map(|&p| (keys[p].job(&nodes[p].id), keys[p].queue_key()))
                    .collect();
                added.extra_edges += extra.len();
                let mut mode = match (&gate, nodes[i].depends_on.is_empty()) {
                    (None, _) => GateMode::None,
                    (Some(_), true) => GateMode::Root,
                    (Some(_), false) => GateMode::Node,
                };
                // Without a gate, KEYS[4] is unused: any key of the node's slot.
                let own = keys[i].job(&nodes[i].id);
                let gate_name = gate.as_ref().map_or(&own, |g| &g.key);
                let mut parts: Vec<&[(String, String)]> = extra.chunks(EDGES_PER_CALL).collect();
                if parts.is_empty() && mode != GateMode::None {
                    parts.push(&[]);
                }
                for parents in parts {
                    let call = AddDagEdges {
                        keys: &keys[i],
                        id: &nodes[i].id,
                        gate: gate_name,
                        mode,
                        parents,
                    };
                    trx.custom::<(), _>(eval.clone(), eval_args(&call)?)
                        .await
                        .map_err(Error::from)?;
                    sent += 1;
                    // Listed on the gate once.
                    mode = GateMode::None;
                }
            }
            let replies: Vec<FredValue> = trx
                .exec(true)
                .await
                .map_err(|e| Error::after_send(e, "MULTI/EXEC of a DAG chunk", true))?;
            added.transactions += 1;
            if replies.len() != sent {
                return Err(Error::protocol(
                    "addDag",
                    format!("{} replies for {sent} commands", replies.len()),
                )
                .into());
            }
            for (entry, &at) in part.iter().zip(&adds) {
                let stored = entry
                    .call()
                    .decode(crate::connection::pool::to_reply(replies[at].clone()))
                    .map_err(Error::from)?;
                if stored != entry.id {
                    tracing::warn!(id = %entry.id, existing = %stored, "DAG node was taken meanwhile");
                }
            }
        }

        if let Some(g) = &gate {
            // Every node is written: from now a repair finishes, never
            // rolls back; lift the gates, chunk by chunk.
            g.op(self, GateOp::Lifting).await?;
            let now = EpochMs(crate::clock::now_ms());
            for part in roots.chunks(chunk) {
                if added.transactions >= stop_after {
                    return Ok(added);
                }
                g.op(self, GateOp::Renew).await?;
                let client = self.conn.pool().next();
                let trx = client.multi();
                let ids: Vec<(String, String)> = part
                    .iter()
                    .map(|&i| (keys[i].job(&nodes[i].id), keys[i].queue_key()))
                    .collect();
                for ((key, queue), &i) in ids.iter().zip(part) {
                    trx.custom::<(), _>(
                        srem.clone(),
                        vec![ChildKeys::of(key).dependencies, g.key.clone()],
                    )
                    .await
                    .map_err(Error::from)?;
                    let release = ReleaseParentIfNoPendingDependencies {
                        parent_key: key,
                        parent_queue: queue,
                        parent_id: &nodes[i].id,
                        now,
                    };
                    trx.custom::<(), _>(eval.clone(), eval_args(&release)?)
                        .await
                        .map_err(Error::from)?;
                }
                let _: Vec<FredValue> = trx
                    .exec(true)
                    .await
                    .map_err(|e| Error::after_send(e, "MULTI/EXEC of a DAG's gates", true))?;
                added.transactions += 1;
            }
            g.op(self, GateOp::Close).await?;
        }
        Ok(added)
    }

    /// A node id already taken would make BullMQ keep the existing job and
    /// attach it: refused before anything is written (a job added between
    /// this check and the write is kept and attached, as BullMQ does).
    async fn refuse_taken_ids(&self, entries: &[Entry]) -> Result<(), DagError> {
        let client = self.conn.pool().next();
        for part in entries.chunks(500) {
            let pipe = client.pipeline();
            for e in part {
                let _: () = pipe.exists(e.keys.job(&e.id)).await.map_err(Error::from)?;
            }
            let found: Vec<i64> = pipe.all().await.map_err(Error::from)?;
            if let Some((e, _)) = part.iter().zip(found).find(|(_, n)| *n > 0) {
                return Err(DagError::IdTaken {
                    id: e.id.clone(),
                    queue: e.keys.name().to_owned(),
                });
            }
        }
        Ok(())
    }
}
