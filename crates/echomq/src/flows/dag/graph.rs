//! A DAG as the caller gives it (nodes with `depends_on`), its checks, and the
//! plan the writer follows: for every node its first dependent (its BullMQ
//! parent), its other dependents (the extension's extra parents), and the
//! order in which nodes are written: every node after all of its dependents
//! (an add checks that its parent exists).

use std::collections::{HashMap, HashSet, VecDeque};

use echomq_protocol::validate::ValidationError;
use echomq_protocol::{JobOptions, KeepJobs, OnChildFailure, QueueKeys};
use serde_json::Value;

use crate::flows::producer::FlowJob;

/// One node of a DAG: a job with a fixed id and the ids it waits for.
#[derive(Debug, Clone)]
pub struct DagNode {
    /// The node's id in the DAG, stored as its custom job id.
    pub id: String,
    /// Job name.
    pub name: String,
    /// Queue (of the producer's prefix).
    pub queue: String,
    /// Payload.
    pub data: Value,
    /// Options (their `job_id` must be unset or equal to `id`).
    pub options: JobOptions,
    /// Ids of the nodes this one waits for.
    pub depends_on: Vec<String>,
    /// What this node's failure does to every node that waits for it.
    pub on_failure: Option<OnChildFailure>,
}

impl DagNode {
    /// A node `id` named `name` in `queue` with `data`, without dependencies.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        queue: impl Into<String>,
        data: Value,
    ) -> Self {
        DagNode {
            id: id.into(),
            name: name.into(),
            queue: queue.into(),
            data,
            options: JobOptions::new(),
            depends_on: Vec::new(),
            on_failure: None,
        }
    }

    /// Sets the options.
    pub fn options(mut self, options: JobOptions) -> Self {
        self.options = options;
        self
    }

    /// Adds a dependency: this node waits for node `id`.
    pub fn depends_on(mut self, id: impl Into<String>) -> Self {
        self.depends_on.push(id.into());
        self
    }

    /// Sets what this node's failure does to the nodes waiting for it.
    pub fn on_failure(mut self, rule: OnChildFailure) -> Self {
        self.on_failure = Some(rule);
        self
    }

    /// Reads one entry of the `{"dag": [...]}` JSON format: `{id, name,
    /// queueName, data?, opts?, dependsOn?}`, `opts` as in BullMQ's FlowJob
    /// (the four failure options included; `parent` is refused).
    pub fn from_json(v: &Value) -> Result<DagNode, DagError> {
        let id = v
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| DagError::Format("a dag node without a string `id`".into()))?
            .to_owned();
        let job = FlowJob::from_json(v).map_err(|source| DagError::InvalidNode {
            id: id.clone(),
            source,
        })?;
        if job.parent.is_some() || job.options.parent.is_some() {
            return Err(DagError::Unsupported {
                id,
                reason: "`opts.parent`: a DAG node's parents are the nodes that depend on it"
                    .into(),
            });
        }
        if v.get("children").is_some() {
            return Err(DagError::Unsupported {
                id,
                reason: "`children` in a dag node: use `dependsOn`".into(),
            });
        }
        let mut depends_on = Vec::new();
        if let Some(deps) = v.get("dependsOn") {
            let deps = deps.as_array().ok_or_else(|| {
                DagError::Format(format!("node {id:?}: `dependsOn` is not an array"))
            })?;
            for d in deps {
                let d = d.as_str().ok_or_else(|| {
                    DagError::Format(format!("node {id:?}: a `dependsOn` entry is not a string"))
                })?;
                depends_on.push(d.to_owned());
            }
        }
        Ok(DagNode {
            id,
            name: job.name,
            queue: job.queue,
            data: job.data,
            options: job.options,
            depends_on,
            on_failure: job.on_failure,
        })
    }

    /// Reads `{"dag": [node, ...]}`.
    pub fn list_from_json(v: &Value) -> Result<Vec<DagNode>, DagError> {
        v.get("dag")
            .and_then(Value::as_array)
            .ok_or_else(|| DagError::Format("expected {\"dag\": [...]}".into()))?
            .iter()
            .map(DagNode::from_json)
            .collect()
    }
}

/// Why a DAG was refused. Every refusal but [`DagError::Redis`] happens
/// before anything is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DagError {
    /// The JSON form is not a DAG.
    #[error("not a dag: {0}")]
    Format(String),
    /// Two nodes share an id.
    #[error("duplicate node id {0:?}")]
    DuplicateId(String),
    /// A node lists the same dependency twice.
    #[error("node {node:?} depends on {dependency:?} twice")]
    DuplicateDependency {
        /// The node.
        node: String,
        /// The repeated dependency.
        dependency: String,
    },
    /// A node depends on an id that is not a node of the DAG.
    #[error("node {node:?} depends on {dependency:?}, which is not a node of the dag")]
    UnknownDependency {
        /// The node.
        node: String,
        /// The missing id.
        dependency: String,
    },
    /// The edges form a cycle; these nodes are on it or below it (waited
    /// for by a node of the cycle).
    #[error("the dag has a cycle through {0:?}")]
    Cycle(Vec<String>),
    /// A node's id, queue name, name, options or data is not valid.
    #[error("node {id:?}: {source}")]
    InvalidNode {
        /// The node.
        id: String,
        /// What is wrong.
        #[source]
        source: ValidationError,
    },
    /// A node uses something a DAG node cannot have.
    #[error("node {id:?}: {reason}")]
    Unsupported {
        /// The node.
        id: String,
        /// What and why.
        reason: String,
    },
    /// A job with a node's id already exists in its queue.
    #[error("a job {id:?} already exists in queue {queue:?}")]
    IdTaken {
        /// The node.
        id: String,
        /// Its queue.
        queue: String,
    },
    /// A gated write let its gate's deadline pass (a writer stalled past
    /// the lease) and a repair took it over: rolled back, or finished.
    #[error("the dag write was taken over by a repair: its gate {gate:?} passed its deadline")]
    TakenOver {
        /// The gate key.
        gate: String,
    },
    /// Redis failed. Chunks already written stay written, but no node of
    /// the DAG can run: its roots are released only after the last chunk;
    /// once the write's lease has passed, the home queue's DagReleaser
    /// rolls the write back (or finishes lifting its gates).
    #[error(transparent)]
    Redis(#[from] crate::error::Error),
}

/// The writer's plan.
pub(crate) struct Plan {
    /// Node indexes in write order: every node after all of its dependents.
    pub(crate) order: Vec<usize>,
    /// Per node, its dependents in input order (the first is its BullMQ parent).
    pub(crate) dependents: Vec<Vec<usize>>,
}

/// Checks the DAG and plans its writing; nothing is sent.
pub(crate) fn plan(nodes: &[DagNode], prefix: &str) -> Result<Plan, DagError> {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        if index.insert(n.id.as_str(), i).is_some() {
            return Err(DagError::DuplicateId(n.id.clone()));
        }
    }
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut depends: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        check_node(n, prefix)?;
        let mut seen = HashSet::new();
        for d in &n.depends_on {
            if !seen.insert(d.as_str()) {
                return Err(DagError::DuplicateDependency {
                    node: n.id.clone(),
                    dependency: d.clone(),
                });
            }
            let &j = index
                .get(d.as_str())
                .ok_or_else(|| DagError::UnknownDependency {
                    node: n.id.clone(),
                    dependency: d.clone(),
                })?;
            dependents[j].push(i);
            depends[i].push(j);
        }
    }
    // Kahn's algorithm backwards, from the nodes nothing waits for, first in
    // first out: every node comes after all of its dependents, and a tree
    // comes out level by level, children in their order — the order of
    // BullMQ's FlowProducer, so a tree-shaped DAG writes the same streams.
    let mut left: Vec<usize> = dependents.iter().map(Vec::len).collect();
    let mut ready: VecDeque<usize> = (0..nodes.len()).filter(|&i| left[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &d in &depends[i] {
            left[d] -= 1;
            if left[d] == 0 {
                ready.push_back(d);
            }
        }
    }
    if order.len() != nodes.len() {
        let mut stuck: Vec<String> = (0..nodes.len())
            .filter(|&i| left[i] > 0)
            .map(|i| nodes[i].id.clone())
            .collect();
        stuck.sort();
        return Err(DagError::Cycle(stuck));
    }
    for n in nodes {
        if !n.depends_on.is_empty() && n.options.group.is_some() {
            return Err(DagError::Unsupported {
                id: n.id.clone(),
                reason: "a node with dependencies cannot be in a group (it is released \
                         straight to wait, past its group's budget)"
                    .into(),
            });
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        if dependents[i].len() > 1 && removes_on_complete(n.options.remove_on_complete.as_ref()) {
            return Err(DagError::Unsupported {
                id: n.id.clone(),
                reason: "removeOnComplete on a node several nodes depend on: its return value \
                         must outlive its finish to reach them all"
                    .into(),
            });
        }
    }
    Ok(Plan { order, dependents })
}

fn removes_on_complete(keep: Option<&KeepJobs>) -> bool {
    matches!(
        keep,
        Some(KeepJobs::Remove(true)) | Some(KeepJobs::Count(0))
    ) || matches!(keep, Some(KeepJobs::Policy { count: Some(0), .. }))
}

fn check_node(n: &DagNode, prefix: &str) -> Result<(), DagError> {
    let invalid = |source: ValidationError| DagError::InvalidNode {
        id: n.id.clone(),
        source,
    };
    echomq_protocol::validate::validate_job_id(&n.id).map_err(invalid)?;
    if n.name.is_empty() {
        return Err(invalid(ValidationError::EmptyJobName));
    }
    QueueKeys::new(prefix, &n.queue).map_err(invalid)?;
    if let Some(id) = &n.options.job_id {
        if id != &n.id {
            return Err(DagError::Unsupported {
                id: n.id.clone(),
                reason: format!("options.job_id {id:?} differs from the node id"),
            });
        }
    }
    if n.options.parent.is_some() {
        return Err(DagError::Unsupported {
            id: n.id.clone(),
            reason: "options.parent: a DAG node's parents are the nodes that depend on it".into(),
        });
    }
    n.options.validate().map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(id: &str, deps: &[&str]) -> DagNode {
        let mut n = DagNode::new(id, id, "q", json!({}));
        for d in deps {
            n = n.depends_on(*d);
        }
        n
    }

    #[test]
    fn a_diamond_is_written_dependents_first() {
        let nodes = vec![
            node("a", &[]),
            node("b", &["a"]),
            node("c", &["a"]),
            node("d", &["a"]),
            node("e", &["b", "c", "d"]),
        ];
        let p = plan(&nodes, "emq").unwrap();
        let ids: Vec<&str> = p.order.iter().map(|&i| nodes[i].id.as_str()).collect();
        assert_eq!(ids.first(), Some(&"e"));
        assert_eq!(ids.last(), Some(&"a"));
        assert_eq!(p.dependents[0], vec![1, 2, 3]);
        for (pos, &i) in p.order.iter().enumerate() {
            for &d in &p.dependents[i] {
                let dpos = p.order.iter().position(|&x| x == d).unwrap();
                assert!(dpos < pos, "{} written before its dependent", nodes[i].id);
            }
        }
    }

    #[test]
    fn refusals_are_typed() {
        let cycle = plan(
            &[node("a", &["c"]), node("b", &["a"]), node("c", &["b"])],
            "emq",
        );
        assert!(matches!(cycle, Err(DagError::Cycle(ids)) if ids == ["a", "b", "c"]));
        assert!(matches!(
            plan(&[node("a", &[]), node("a", &[])], "emq"),
            Err(DagError::DuplicateId(id)) if id == "a"
        ));
        assert!(matches!(
            plan(&[node("a", &["x"])], "emq"),
            Err(DagError::UnknownDependency { .. })
        ));
        assert!(matches!(
            plan(&[node("a", &["a"])], "emq"),
            Err(DagError::Cycle(_))
        ));
        let mut bad_queue = node("a", &[]);
        bad_queue.queue = "bad:queue".into();
        assert!(matches!(
            plan(&[bad_queue], "emq"),
            Err(DagError::InvalidNode { .. })
        ));
        assert!(matches!(
            plan(&[node("12", &[])], "emq"),
            Err(DagError::InvalidNode { .. })
        ));
    }

    #[test]
    fn the_json_format_reads_depends_on_and_failure_options() {
        let v = json!({"dag": [
            {"id": "a-1", "name": "a", "queueName": "d", "data": {"x": 1},
             "opts": {"failParentOnFailure": true, "attempts": 2}},
            {"id": "b-1", "name": "b", "queueName": "d", "dependsOn": ["a-1"]}
        ]});
        let nodes = DagNode::list_from_json(&v).unwrap();
        assert_eq!(nodes[0].on_failure, Some(OnChildFailure::FailParent));
        assert_eq!(nodes[0].options.attempts, Some(2));
        assert_eq!(nodes[1].depends_on, ["a-1"]);
        assert!(matches!(
            DagNode::list_from_json(&json!({"dag": [{"name": "x", "queueName": "d"}]})),
            Err(DagError::Format(_))
        ));
    }
}
