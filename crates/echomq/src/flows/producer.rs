//! Adding flows: a tree of jobs — parents with children, nested, children in
//! other queues of the same prefix — written atomically (docs/flows.md).
//!
//! Every job's id is fixed before anything is sent (the custom id, or a fresh
//! UUID as BullMQ's FlowProducer does), because a child names its parent's
//! key. The whole tree then goes out as one `MULTI`/`EXEC` of add scripts,
//! parents before their children: a child's add checks that its parent
//! exists, and nobody sees half a flow.

use echomq_protocol::call::add::{AddJob, AddKind};
use echomq_protocol::call::flow::{
    AddParentJob, ChildKeys, FlowAdd, ReleaseParentIfNoPendingDependencies,
};
use echomq_protocol::call::groups::AddGroupJob;
use echomq_protocol::call::lifecycle::EpochMs;
use echomq_protocol::call::ScriptCall;
use echomq_protocol::group::GroupKeys;
use echomq_protocol::packing::AddArgs;
use echomq_protocol::validate::ValidationError;
use echomq_protocol::{JobOptions, QueueKeys};
use fred::prelude::{ClientLike, TransactionInterface};
use fred::types::{ClusterHash, CustomCommand, Value as FredValue};
use serde::Serialize;
use serde_json::{Map, Value};
use tracing::instrument;

use crate::connection::pool::Connection;
use crate::error::{Error, Result};

/// Refuse payloads larger than this, as a queue does by default.
const MAX_DATA_BYTES: usize = 512 * 1024 * 1024;

pub use echomq_protocol::ParentRef;

pub use crate::flows::dag::{
    DagAdded, DagError, DagNode, DagReleaser, DagReleaserArgs, DagReleaserMsg, DagReleaserStats,
    DAG_CHUNK, DAG_WRITE_LEASE,
};

#[cfg(feature = "fault-injection")]
pub use crate::flows::dag::DagWriteStop;

/// What a failed child does to its parent (BullMQ's four options; without
/// any, the parent keeps waiting for that child forever). The same rule as
/// `JobOptions::on_failure`.
pub use echomq_protocol::OnChildFailure;

/// One node of a flow: a job, and the jobs it waits for.
#[derive(Debug, Clone)]
pub struct FlowJob {
    /// Job name.
    pub name: String,
    /// Queue (of the producer's prefix).
    pub queue: String,
    /// Payload.
    pub data: Value,
    /// Options (a `job_id` fixes the id).
    pub options: JobOptions,
    /// Children: this job runs once they are all done.
    pub children: Vec<FlowJob>,
    /// For a root only: an existing job this one becomes a child of.
    pub parent: Option<ParentRef>,
    /// What this job's failure does to its parent.
    pub on_failure: Option<OnChildFailure>,
}

impl FlowJob {
    /// A job `name` in `queue` with `data`.
    pub fn new(name: impl Into<String>, queue: impl Into<String>, data: Value) -> Self {
        FlowJob {
            name: name.into(),
            queue: queue.into(),
            data,
            options: JobOptions::new(),
            children: Vec::new(),
            parent: None,
            on_failure: None,
        }
    }

    /// Sets the options.
    pub fn options(mut self, options: JobOptions) -> Self {
        self.options = options;
        self
    }

    /// Adds a child.
    pub fn child(mut self, child: FlowJob) -> Self {
        self.children.push(child);
        self
    }

    /// Makes this root a child of an existing job.
    pub fn parent(mut self, parent: ParentRef) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Sets what this job's failure does to its parent.
    pub fn on_failure(mut self, rule: OnChildFailure) -> Self {
        self.on_failure = Some(rule);
        self
    }

    /// Reads BullMQ's FlowJob JSON shape: `{name, queueName, data?, opts?,
    /// children?}`; `opts.parent` `{id, queue}` and the four failure options
    /// (long or short names) are recognised.
    pub fn from_json(v: &Value) -> std::result::Result<FlowJob, ValidationError> {
        let bad = |reason: &str| ValidationError::Data(format!("flow job: {reason}"));
        let o = v.as_object().ok_or_else(|| bad("not an object"))?;
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no name"))?;
        let queue = o
            .get("queueName")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no queueName"))?;
        let mut job = FlowJob::new(name, queue, o.get("data").cloned().unwrap_or(Value::Null));
        if let Some(opts) = o.get("opts").and_then(Value::as_object) {
            let mut opts = opts.clone();
            if let Some(p) = opts.remove("parent") {
                let id = p["id"].as_str().ok_or_else(|| bad("parent.id"))?;
                let queue = p["queue"].as_str().ok_or_else(|| bad("parent.queue"))?;
                job.parent = Some(ParentRef {
                    id: id.into(),
                    queue: queue.into(),
                });
            }
            for (long, rule) in [
                ("failParentOnFailure", OnChildFailure::FailParent),
                ("continueParentOnFailure", OnChildFailure::ContinueParent),
                (
                    "ignoreDependencyOnFailure",
                    OnChildFailure::IgnoreDependency,
                ),
                (
                    "removeDependencyOnFailure",
                    OnChildFailure::RemoveDependency,
                ),
            ] {
                let on = [opts.remove(long), opts.remove(rule.short_name())]
                    .into_iter()
                    .flatten()
                    .any(|v| v.as_bool() == Some(true));
                if on && job.on_failure.is_none() {
                    job.on_failure = Some(rule);
                }
            }
            let mut stored = Map::new();
            for (k, v) in opts {
                let short = echomq_protocol::options::SHORT_NAMES
                    .iter()
                    .find(|(_, l)| *l == k)
                    .map(|(s, _)| (*s).to_owned());
                stored.insert(short.unwrap_or(k), v);
            }
            job.options = JobOptions::from_stored(&stored);
        }
        if let Some(children) = o.get("children").and_then(Value::as_array) {
            for c in children {
                job.children.push(FlowJob::from_json(c)?);
            }
        }
        Ok(job)
    }
}

/// The ids a flow was stored with, in the shape of the flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobNode {
    /// Job id.
    pub id: String,
    /// Queue name.
    pub queue: String,
    /// Job name.
    pub name: String,
    /// The children's nodes, in the order given.
    pub children: Vec<JobNode>,
}

/// Adds flows. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FlowProducer {
    pub(super) conn: Connection,
    /// How the jobs' data is stored (docs/operations.md §Memory). Default: plain.
    #[cfg(feature = "codec")]
    codec: crate::codec::CodecOptions,
}

/// One job of a flow, validated and encoded.
pub(super) struct Entry {
    pub(super) keys: QueueKeys,
    pub(super) kind: Option<AddKind>,
    pub(super) id: String,
    name: String,
    timestamp: u64,
    data: String,
    opts: Map<String, Value>,
    parent_key: Option<String>,
    parent_deps: Option<String>,
    parent: Option<Value>,
    /// A leaf with `opts.group`: its group, priority inside it and the
    /// extension's keys (docs/groups.md §Flows).
    pub(super) group: Option<(String, i64, GroupKeys)>,
}

impl Entry {
    pub(super) fn call(&self) -> FlowAdd<'_> {
        let args = AddArgs {
            prefix_key: self.keys.prefix_key(),
            custom_id: &self.id,
            name: &self.name,
            timestamp: self.timestamp,
            parent_key: self.parent_key.as_deref(),
            parent_dependencies_key: self.parent_deps.as_deref(),
            parent: self.parent.as_ref(),
            // Every node of a flow: a child that already existed must not
            // release its parent before the parent's other children are in.
            defer_parent_release: self.parent_key.is_some(),
            ..Default::default()
        };
        if let Some((group, priority, groups)) = &self.group {
            return FlowAdd::Group(AddGroupJob {
                keys: &self.keys,
                groups,
                group,
                priority: *priority,
                args,
                data: &self.data,
                opts: &self.opts,
            });
        }
        match self.kind {
            Some(kind) => FlowAdd::Leaf(AddJob {
                keys: &self.keys,
                kind,
                args,
                data: &self.data,
                opts: &self.opts,
            }),
            None => FlowAdd::Parent(AddParentJob {
                keys: &self.keys,
                args,
                data: &self.data,
                opts: &self.opts,
            }),
        }
    }
}

impl FlowProducer {
    /// A producer on `conn` (its prefix is the flows' prefix).
    pub fn new(conn: &Connection) -> Self {
        FlowProducer {
            conn: conn.clone(),
            #[cfg(feature = "codec")]
            codec: crate::codec::CodecOptions::default(),
        }
    }

    /// Stores every job's data through `codec` (its `encode`), as a queue
    /// with [`QueueOptions::codec`](crate::QueueOptions) does.
    #[cfg(feature = "codec")]
    pub fn with_codec(mut self, codec: crate::codec::CodecOptions) -> Self {
        self.codec = codec;
        self
    }

    /// Adds one flow atomically; returns its tree of ids. With a `parent`
    /// on the root, that parent must exist (`ParentJobNotExist` otherwise,
    /// and nothing is written).
    #[instrument(level = "debug", skip_all, fields(queue = %flow.queue))]
    pub async fn add(&self, flow: FlowJob) -> Result<JobNode> {
        let mut nodes = self.add_bulk(vec![flow]).await?;
        nodes
            .pop()
            .ok_or_else(|| Error::protocol("addFlow", "empty reply".to_owned()))
    }

    /// Adds several flows in one transaction. A root whose `parent` does not
    /// exist is refused (`ParentJobNotExist`) with its whole subtree (each
    /// child's add finds no parent); the other flows of the bulk are
    /// written all the same, as with BullMQ's `addBulk`. The error is
    /// returned after the transaction.
    pub async fn add_bulk(&self, flows: Vec<FlowJob>) -> Result<Vec<JobNode>> {
        let trees = flows
            .iter()
            .map(Self::assign_ids)
            .collect::<Result<Vec<_>>>()?;
        // Level by level over the whole forest, as BullMQ's FlowProducer
        // queues its entries: the event streams then come out in the same
        // order, and every parent still precedes its children.
        let mut entries = Vec::new();
        let mut level: Vec<(&FlowJob, &JobNode, Option<ParentLink>)> = flows
            .iter()
            .zip(&trees)
            .map(|(f, n)| {
                let link = f
                    .parent
                    .as_ref()
                    .or(f.options.parent.as_ref())
                    .map(|p| ParentLink {
                        key: p.key(),
                        id: p.id.clone(),
                        queue: p.queue.clone(),
                    });
                (f, n, link)
            })
            .collect();
        while !level.is_empty() {
            let mut next = Vec::new();
            for (job, node, parent) in level {
                let entry = self.entry(job, &node.id, parent.as_ref())?;
                let link = ParentLink {
                    key: entry.keys.job(&node.id),
                    id: node.id.clone(),
                    queue: entry.keys.queue_key(),
                };
                entries.push(entry);
                for (c, n) in job.children.iter().zip(&node.children) {
                    next.push((c, n, Some(link.clone())));
                }
            }
            level = next;
        }
        self.check_slots(&entries)?;
        let replies = self.exec(&entries).await?;
        for (entry, reply) in entries.iter().zip(replies) {
            let stored = reply?;
            if stored != entry.id {
                // A duplicate custom id keeps the existing job (BullMQ too).
                tracing::debug!(id = %entry.id, existing = %stored, "flow job already existed");
            }
        }
        Ok(trees)
    }

    /// The tree of ids: each job's custom id, or a fresh UUID.
    fn assign_ids(job: &FlowJob) -> Result<JobNode> {
        if job.name.is_empty() {
            return Err(ValidationError::EmptyJobName.into());
        }
        Ok(JobNode {
            id: job
                .options
                .job_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            queue: job.queue.clone(),
            name: job.name.clone(),
            children: job
                .children
                .iter()
                .map(Self::assign_ids)
                .collect::<Result<Vec<_>>>()?,
        })
    }

    pub(super) fn entry(
        &self,
        job: &FlowJob,
        id: &str,
        parent: Option<&ParentLink>,
    ) -> Result<Entry> {
        job.options.validate()?;
        if job.options.group.is_some() && !job.children.is_empty() {
            // BullMQ's moveToFinished moves a parent whose last child
            // finished straight to wait: it would bypass its group's budget
            // (docs/decisions.md §15, addendum on flows).
            return Err(ValidationError::Option {
                option: "group",
                reason:
                    "a flow parent (a job with children) cannot be in a group; its children can"
                        .into(),
            }
            .into());
        }
        let keys = QueueKeys::new(self.conn.prefix(), &job.queue)?;
        let data =
            serde_json::to_string(&job.data).map_err(|e| ValidationError::Data(e.to_string()))?;
        if data.len() > MAX_DATA_BYTES {
            return Err(ValidationError::DataTooLarge {
                size: data.len(),
                limit: MAX_DATA_BYTES,
            }
            .into());
        }
        #[cfg(feature = "codec")]
        let data = self.codec.encode_text(data)?;
        // The node's rule wins over its options' one: one rule is stored.
        let on_failure = job.on_failure.or(job.options.on_failure);
        let mut opts = if on_failure == job.options.on_failure {
            job.options.to_stored()
        } else {
            let mut options = job.options.clone();
            options.on_failure = on_failure;
            options.to_stored()
        };
        let mut descriptor = None;
        if let Some(p) = parent {
            // Node keeps the caller's `parent` option in the stored options,
            // and the failure rule in the parent descriptor the scripts read.
            let mut o = Map::new();
            o.insert("id".into(), Value::from(p.id.clone()));
            o.insert("queue".into(), Value::from(p.queue.clone()));
            opts.insert("parent".into(), Value::Object(o));
            let mut d = Map::new();
            d.insert("id".into(), Value::from(p.id.clone()));
            d.insert("queueKey".into(), Value::from(p.queue.clone()));
            if let Some(rule) = on_failure {
                d.insert(rule.short_name().into(), Value::Bool(true));
            }
            descriptor = Some(Value::Object(d));
        }
        let kind = if job.children.is_empty() {
            Some(AddKind::for_job(
                job.options.delay.unwrap_or(0),
                job.options.priority.unwrap_or(0),
            ))
        } else {
            None
        };
        Ok(Entry {
            kind,
            id: id.to_owned(),
            name: job.name.clone(),
            timestamp: job.options.timestamp.unwrap_or_else(crate::clock::now_ms),
            data,
            opts,
            parent_key: parent.map(|p| p.key.clone()),
            parent_deps: parent.map(|p| ChildKeys::of(&p.key).dependencies),
            parent: descriptor,
            group: job
                .options
                .group
                .as_ref()
                .map(|g| (g.id.clone(), g.priority.unwrap_or(0), GroupKeys::new(&keys))),
            keys,
        })
    }

    /// On a cluster a transaction runs on one node: every queue of the flow
    /// must hash to one slot.
    pub(super) fn check_slots(&self, entries: &[Entry]) -> Result<()> {
        if !self.conn.pool().next().is_clustered() {
            return Ok(());
        }
        let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
        let mut slots = entries
            .iter()
            .map(|e| (slot(&e.keys.wait()), e.keys.name()));
        if let Some((first, first_queue)) = slots.next() {
            if let Some((_, other)) = slots.find(|(s, _)| *s != first) {
                return Err(Error::Config(format!(
                    "on Redis Cluster a flow's queues must share one hash slot: {first_queue:?} and {other:?} do not \
                     (give them a common hash tag, e.g. \"{{app}}-a\" and \"{{app}}-b\")"
                )));
            }
        }
        Ok(())
    }

    /// One MULTI/EXEC of EVALs. EVAL rather than EVALSHA: a NOSCRIPT inside
    /// EXEC would fail some entries after others were applied, leaving half
    /// a flow; EVAL cannot miss, and Redis caches the script all the same.
    async fn exec(&self, entries: &[Entry]) -> Result<Vec<Result<String>>> {
        let eval = CustomCommand::new_static("EVAL", ClusterHash::Offset(2), false);
        let client = self.conn.pool().next();
        let trx = client.multi();
        let calls: Vec<FlowAdd<'_>> = entries.iter().map(Entry::call).collect();
        for call in &calls {
            trx.custom::<(), _>(eval.clone(), eval_args(call)?).await?;
        }
        // Then, in the same transaction, each parent the flow touched:
        // released now if none of its children is pending.
        let releases = parent_releases(entries, EpochMs(crate::clock::now_ms()));
        for release in &releases {
            trx.custom::<(), _>(eval.clone(), eval_args(release)?)
                .await?;
        }
        // Once EXEC is sent the whole flow is either stored or not: a lost
        // reply leaves that unknown.
        let mut replies: Vec<FredValue> = trx
            .exec(true)
            .await
            .map_err(|e| Error::after_send(e, "MULTI/EXEC of a flow", true))?;
        if replies.len() != calls.len() + releases.len() {
            return Err(Error::protocol(
                "addFlow",
                format!(
                    "{} replies for {} jobs and {} parents",
                    replies.len(),
                    calls.len(),
                    releases.len()
                ),
            ));
        }
        for (r, release) in replies.split_off(calls.len()).into_iter().zip(&releases) {
            release.decode(crate::connection::pool::to_reply(r))?;
        }
        Ok(replies
            .into_iter()
            .zip(&calls)
            .map(|(r, c)| Ok(c.decode(crate::connection::pool::to_reply(r))?))
            .collect())
    }
}

/// The parent of the node being collected.
#[derive(Clone)]
pub(super) struct ParentLink {
    pub(super) key: String,
    pub(super) id: String,
    pub(super) queue: String,
}

/// `EVAL` arguments of one call: the script's source (a transaction cannot
/// fall back from EVALSHA), its keys and its arguments.
pub(super) fn eval_args(call: &impl ScriptCall) -> Result<Vec<FredValue>> {
    let script = call.script();
    let def = script.def().ok_or(Error::MissingScript(script.name()))?;
    let keys = call.keys();
    let mut args: Vec<FredValue> = Vec::with_capacity(2 + keys.len() + 3);
    args.push(FredValue::String(def.source.into()));
    args.push(FredValue::Integer(keys.len() as i64));
    args.extend(keys.into_iter().map(|k| FredValue::Bytes(k.into_bytes())));
    args.extend(
        call.args()
            .into_iter()
            .map(|a| FredValue::Bytes(a.into_bytes())),
    );
    Ok(args)
}

/// One release per parent the flow touched, in first-appearance order as
/// BullMQ does.
fn parent_releases(
    entries: &[Entry],
    now: EpochMs,
) -> Vec<ReleaseParentIfNoPendingDependencies<'_>> {
    let mut parents: Vec<&Entry> = Vec::new();
    for e in entries {
        if e.parent_key.is_some() && !parents.iter().any(|p| p.parent_key == e.parent_key) {
            parents.push(e);
        }
    }
    parents
        .iter()
        .filter_map(|e| {
            let parent = e.parent.as_ref()?;
            Some(ReleaseParentIfNoPendingDependencies {
                parent_key: e.parent_key.as_deref()?,
                parent_queue: parent.get("queueKey")?.as_str()?,
                parent_id: parent.get("id")?.as_str()?,
                now,
            })
        })
        .collect()
}
