//! Writing a DAG (docs/flows.md §DAGs): each node is an ordinary BullMQ flow
//! job whose parent is its first dependent; the other dependents get the
//! node's key in their `:dependencies` and are listed in the node's
//! `:dag:parents`, for releaseDagParents.
//!
//! Nodes go out dependents first, in transactions of at most `chunk` nodes.
//! A node with dependencies is parked in `waiting-children` by its add, so
//! only the nodes without dependencies could run early. When the DAG fits in
//! one transaction nothing runs before its `EXEC`; when it does not, each of
//! them is also written as a parent waiting for a gate member (a string that
//! is no job's key) in its `:dependencies`, and the gates are lifted, chunk
//! by chunk, only after the last node is written. A writer that dies
//! half-way therefore leaves nodes that never run, never a part of a DAG
//! running.

use echomq_protocol::call::dag::{extra_parents_key, pending_key};
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
        let chunk = chunk.max(1);
        let prefix = self.conn.prefix().to_owned();
        let plan = plan(&nodes, &prefix)?;
        let keys: Vec<QueueKeys> = nodes
            .iter()
            .map(|n| QueueKeys::new(&prefix, &n.queue))
            .collect::<Result<_, _>>()
            .map_err(|e| DagError::Format(e.to_string()))?;
        let gated = nodes.len() > chunk;
        let gate = format!("{prefix}:dag:gate:{}", uuid::Uuid::new_v4());

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
                options: n.options.clone().job_id(n.id.clone()),
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

        let eval = CustomCommand::new_static("EVAL", ClusterHash::Offset(2), false);
        let sadd = CustomCommand::new_static("SADD", ClusterHash::FirstKey, false);
        let hset = CustomCommand::new_static("HSET", ClusterHash::FirstKey, false);
        let srem = CustomCommand::new_static("SREM", ClusterHash::FirstKey, false);
        let mut added = DagAdded {
            nodes: nodes.len(),
            bullmq_edges: 0,
            extra_edges: 0,
            transactions: 0,
        };
        for (part, idx) in entries.chunks(chunk).zip(plan.order.chunks(chunk)) {
            let client = self.conn.pool().next();
            let trx = client.multi();
            // Which replies are adds (the others are SADD/HSET counts).
            let mut adds = Vec::with_capacity(part.len());
            let mut sent = 0usize;
            for (entry, &i) in part.iter().zip(idx) {
                trx.custom::<(), _>(eval.clone(), eval_args(&entry.call())?)
                    .await
                    .map_err(Error::from)?;
                adds.push(sent);
                sent += 1;
                let node_key = keys[i].job(&nodes[i].id);
                if !plan.dependents[i].is_empty() {
                    added.bullmq_edges += 1;
                }
                let extra = plan.dependents[i].iter().skip(1);
                let mut any_extra = false;
                for &p in extra {
                    let parent_key = keys[p].job(&nodes[p].id);
                    trx.custom::<(), _>(
                        sadd.clone(),
                        vec![ChildKeys::of(&parent_key).dependencies, node_key.clone()],
                    )
                    .await
                    .map_err(Error::from)?;
                    trx.custom::<(), _>(
                        hset.clone(),
                        vec![
                            extra_parents_key(&keys[i], &nodes[i].id),
                            parent_key,
                            keys[p].queue_key(),
                        ],
                    )
                    .await
                    .map_err(Error::from)?;
                    sent += 2;
                    added.extra_edges += 1;
                    any_extra = true;
                }
                if any_extra {
                    trx.custom::<(), _>(
                        sadd.clone(),
                        vec![pending_key(&keys[i]), nodes[i].id.clone()],
                    )
                    .await
                    .map_err(Error::from)?;
                    sent += 1;
                }
                if gated && nodes[i].depends_on.is_empty() {
                    trx.custom::<(), _>(
                        sadd.clone(),
                        vec![ChildKeys::of(&node_key).dependencies, gate.clone()],
                    )
                    .await
                    .map_err(Error::from)?;
                    sent += 1;
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

        if gated {
            // Every node is written: lift the gates, chunk by chunk.
            let now = EpochMs(crate::clock::now_ms());
            let roots: Vec<usize> = plan
                .order
                .iter()
                .copied()
                .filter(|&i| nodes[i].depends_on.is_empty())
                .collect();
            for part in roots.chunks(chunk) {
                let client = self.conn.pool().next();
                let trx = client.multi();
                let ids: Vec<(String, String)> = part
                    .iter()
                    .map(|&i| (keys[i].job(&nodes[i].id), keys[i].queue_key()))
                    .collect();
                for ((key, queue), &i) in ids.iter().zip(part) {
                    trx.custom::<(), _>(
                        srem.clone(),
                        vec![ChildKeys::of(key).dependencies, gate.clone()],
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
