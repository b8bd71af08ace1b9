//! Flows (parent/child jobs): adding a parent, parking an active parent
//! until its children finish, reading and detaching children.
//!
//! A parent's children live in four keys next to its hash (docs/flows.md):
//! `:dependencies` (SET of pending child keys), `:processed` (HASH child key
//! -> return value JSON), `:failed` (HASH child key -> reason, failures the
//! parent ignores or continues on) and `:unsuccessful` (ZSET of children that
//! failed the parent).

use serde_json::{Map, Value};

use super::add::AddJob;
use super::decode::{self, Reply, ReplyError};
use super::groups::{AddGroupJob, GroupAdded};
use super::script::{Arg, ScriptCall};
use crate::call::lifecycle::EpochMs;
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::packing::AddArgs;
use crate::scripts::ScriptId;

/// The per-parent child bookkeeping keys, from the parent's full key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildKeys {
    /// SET of pending child keys.
    pub dependencies: String,
    /// HASH child key -> return value (JSON text).
    pub processed: String,
    /// HASH child key -> failure reason (ignored or continued failures).
    pub failed: String,
    /// ZSET of child keys that failed the parent.
    pub unsuccessful: String,
}

impl ChildKeys {
    /// The keys of the parent stored at `job_key`.
    pub fn of(job_key: &str) -> Self {
        ChildKeys {
            dependencies: format!("{job_key}:dependencies"),
            processed: format!("{job_key}:processed"),
            failed: format!("{job_key}:failed"),
            unsuccessful: format!("{job_key}:unsuccessful"),
        }
    }
}

/// addParentJob-6: stores a flow parent and parks it in `waiting-children`.
/// Answers the id, like [`AddJob`] (the existing id for a duplicate custom
/// id, the owner's id when deduplicated).
#[derive(Debug, Clone)]
pub struct AddParentJob<'a> {
    /// The parent's queue.
    pub keys: &'a QueueKeys,
    /// Name, id, timestamp and the parent's own parent (nested flows).
    pub args: AddArgs<'a>,
    /// The payload as JSON text.
    pub data: &'a str,
    /// The options in their stored (Node) spelling.
    pub opts: &'a Map<String, Value>,
}

impl ScriptCall for AddParentJob<'_> {
    type Output = String;

    fn script(&self) -> ScriptId {
        ScriptId::AddParentJob
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().meta,
            &k.fixed().id,
            &k.fixed().delayed,
            &k.fixed().waiting_children,
            &k.fixed().completed,
            &k.fixed().events,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::packed(self.args.pack()),
            Arg::str(self.data),
            Arg::packed(crate::packing::pack_map(self.opts)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<String, ReplyError> {
        id_or_code(self.script(), reply)
    }
}

fn id_or_code(script: ScriptId, reply: Reply) -> Result<String, ReplyError> {
    if let Reply::Int(n) = reply {
        return decode::code(script, n).map(|n| n.to_string());
    }
    decode::text(script, &reply)
}

/// One job of a flow: a leaf (an ordinary add script) or a node with
/// children (addParentJob). A flow is sent as a list of these in one
/// transaction, parents before their children.
#[derive(Debug, Clone)]
pub enum FlowAdd<'a> {
    /// A job without children.
    Leaf(AddJob<'a>),
    /// A job with children.
    Parent(AddParentJob<'a>),
    /// A job without children in a group (docs/groups.md §Flows).
    Group(AddGroupJob<'a>),
}

impl ScriptCall for FlowAdd<'_> {
    type Output = String;

    fn script(&self) -> ScriptId {
        match self {
            FlowAdd::Leaf(c) => c.script(),
            FlowAdd::Parent(c) => c.script(),
            FlowAdd::Group(c) => c.script(),
        }
    }

    fn keys(&self) -> Vec<Key> {
        match self {
            FlowAdd::Leaf(c) => c.keys(),
            FlowAdd::Parent(c) => c.keys(),
            FlowAdd::Group(c) => c.keys(),
        }
    }

    fn args(&self) -> Vec<Arg> {
        match self {
            FlowAdd::Leaf(c) => c.args(),
            FlowAdd::Parent(c) => c.args(),
            FlowAdd::Group(c) => c.args(),
        }
    }

    fn decode(&self, reply: Reply) -> Result<String, ReplyError> {
        match self {
            FlowAdd::Leaf(c) => c.decode(reply),
            FlowAdd::Parent(c) => c.decode(reply),
            FlowAdd::Group(c) => match c.decode(reply)? {
                GroupAdded::Added(id) => Ok(id),
                // A flow insert skips the max size check: never answered.
                GroupAdded::Full { max_size } => Err(ReplyError::shape(
                    c.script(),
                    format!("group full ({max_size}) inside a flow"),
                )),
            },
        }
    }
}

/// releaseParentIfNoPendingDependencies-2: the last call of a flow insert,
/// once per parent the flow touched, in the same transaction as the adds
/// (sent with [`AddArgs::defer_parent_release`]): a parent left without
/// pending children leaves waiting-children now, honouring its delay and
/// priority. A no-op for a parent that is gone or not parked.
#[derive(Debug, Clone)]
pub struct ReleaseParentIfNoPendingDependencies<'a> {
    /// The parent's full job key.
    pub parent_key: &'a str,
    /// The parent's queue key (`<prefix>:<queue>`).
    pub parent_queue: &'a str,
    /// The parent's id.
    pub parent_id: &'a str,
    /// Now: the base of the parent's delay.
    pub now: EpochMs,
}

impl ScriptCall for ReleaseParentIfNoPendingDependencies<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::ReleaseParentIfNoPendingDependencies
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.parent_key, ChildKeys::of(self.parent_key).dependencies]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.parent_queue),
            Arg::str(self.parent_id),
            Arg::int(self.now.0),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::unit(self.script(), &reply)
    }
}

/// What moveToWaitingChildren did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The job released its lock and waits in `waiting-children`.
    Parked,
    /// Nothing pending (or the given child already finished): the job is
    /// still active and locked by the caller.
    NothingPending,
}

/// moveToWaitingChildren-7: an active job waits for its pending children.
#[derive(Debug, Clone)]
pub struct MoveToWaitingChildren<'a> {
    /// The job's queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The lock token held.
    pub token: &'a str,
    /// Wait only while this child (full key) is pending; `None`: any child.
    pub child_key: Option<&'a str>,
    /// Score in `waiting-children`, ms.
    pub timestamp: u64,
}

impl ScriptCall for MoveToWaitingChildren<'_> {
    type Output = WaitOutcome;

    fn script(&self) -> ScriptId {
        ScriptId::MoveToWaitingChildren
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        let job = k.job(self.id);
        let children = ChildKeys::of(&job);
        keys![
            &k.fixed().active,
            &k.fixed().waiting_children,
            job,
            children.dependencies,
            children.unsuccessful,
            &k.fixed().stalled,
            &k.fixed().events,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.token),
            self.child_key.map(Arg::str).unwrap_or_else(Arg::empty),
            Arg::int(self.timestamp),
            Arg::str(self.id),
            Arg::str(self.keys.prefix_key()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<WaitOutcome, ReplyError> {
        match decode::int_or_code(self.script(), &reply)? {
            0 => Ok(WaitOutcome::Parked),
            1 => Ok(WaitOutcome::NothingPending),
            n => Err(ReplyError::shape(self.script(), format!("unexpected {n}"))),
        }
    }
}

/// How many children of a parent are in each group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DependencyCounts {
    /// Completed children (their values are in `:processed`).
    pub processed: u64,
    /// Children not finished yet.
    pub unprocessed: u64,
    /// Failed children the parent ignored or continued on (`:failed`).
    pub ignored: u64,
    /// Failed children that failed the parent (`:unsuccessful`).
    pub failed: u64,
}

/// getDependencyCounts-4, asking for all four groups.
#[derive(Debug, Clone)]
pub struct GetDependencyCounts<'a> {
    /// The parent's queue.
    pub keys: &'a QueueKeys,
    /// The parent.
    pub id: &'a str,
}

const GROUPS: [&str; 4] = ["processed", "unprocessed", "ignored", "failed"];

impl ScriptCall for GetDependencyCounts<'_> {
    type Output = DependencyCounts;

    fn script(&self) -> ScriptId {
        ScriptId::GetDependencyCounts
    }

    fn keys(&self) -> Vec<Key> {
        let c = ChildKeys::of(&self.keys.job(self.id));
        keys![c.processed, c.dependencies, c.failed, c.unsuccessful]
    }

    fn args(&self) -> Vec<Arg> {
        GROUPS.iter().map(|g| Arg::str(g)).collect()
    }

    fn decode(&self, reply: Reply) -> Result<DependencyCounts, ReplyError> {
        let items = decode::array(self.script(), reply)?;
        if items.len() != GROUPS.len() {
            return Err(ReplyError::shape(self.script(), "expected four counts"));
        }
        let n = |i: usize| -> Result<u64, ReplyError> {
            Ok(decode::int_or_code(self.script(), &items[i])?.max(0) as u64)
        };
        Ok(DependencyCounts {
            processed: n(0)?,
            unprocessed: n(1)?,
            ignored: n(2)?,
            failed: n(3)?,
        })
    }
}

/// One element of a paginated set or hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageItem {
    /// A set member.
    Member(String),
    /// A hash field and its value.
    Field(String, String),
}

/// One page of a set or hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Scan cursor to continue from (`"0"`: the scan is complete).
    pub cursor: String,
    /// Items scanned so far, to pass back with the cursor.
    pub offset: u64,
    /// The items of this page.
    pub items: Vec<PageItem>,
    /// Size of the whole set or hash.
    pub total: u64,
}

/// paginate-1: one page of a parent's `:dependencies` (set) or
/// `:processed`/`:failed` (hash) by SSCAN/HSCAN.
#[derive(Debug, Clone)]
pub struct Paginate<'a> {
    /// The set or hash.
    pub key: &'a str,
    /// First position wanted.
    pub start: u64,
    /// Last position wanted, `None` for all.
    pub end: Option<u64>,
    /// Cursor from the previous page (`"0"` to begin).
    pub cursor: &'a str,
    /// Offset from the previous page (0 to begin).
    pub offset: u64,
    /// Upper bound on SCAN round trips inside the script.
    pub max_iterations: u64,
}

impl ScriptCall for Paginate<'_> {
    type Output = Page;

    fn script(&self) -> ScriptId {
        ScriptId::Paginate
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.key.to_owned()]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::int(self.start),
            self.end.map(Arg::int).unwrap_or_else(|| Arg::int(-1)),
            Arg::str(self.cursor),
            Arg::int(self.offset),
            Arg::int(self.max_iterations),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Page, ReplyError> {
        let s = self.script();
        let mut parts = decode::array(s, reply)?.into_iter();
        let (Some(cursor), Some(offset), Some(items), Some(total)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ReplyError::shape(
                s,
                "expected [cursor, offset, items, total]",
            ));
        };
        let items = decode::array(s, items)?
            .into_iter()
            .map(|item| match item {
                Reply::Array(_) => {
                    let mut kv = decode::strings(s, item)?.into_iter();
                    match (kv.next(), kv.next()) {
                        (Some(k), Some(v)) => Ok(PageItem::Field(k, v)),
                        _ => Err(ReplyError::shape(s, "hash item without a value")),
                    }
                }
                other => decode::text(s, &other).map(PageItem::Member),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Page {
            cursor: decode::text(s, &cursor)?,
            offset: offset.as_i64().unwrap_or(0).max(0) as u64,
            items,
            total: total.as_i64().unwrap_or(0).max(0) as u64,
        })
    }
}

/// removeChildDependency-1: detaches a child from its parent. `true` when it
/// was a pending dependency of that parent (now detached).
#[derive(Debug, Clone)]
pub struct RemoveChildDependency<'a> {
    /// The child's queue.
    pub keys: &'a QueueKeys,
    /// The child.
    pub id: &'a str,
    /// The parent's full key.
    pub parent_key: &'a str,
}

impl ScriptCall for RemoveChildDependency<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::RemoveChildDependency
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::text(self.keys.job(self.id)), Arg::str(self.parent_key)]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? == 0)
    }
}

/// removeUnprocessedChildren-2: removes, recursively, the children of a job
/// that neither finished nor run (locked ones stay).
#[derive(Debug, Clone)]
pub struct RemoveUnprocessedChildren<'a> {
    /// The parent's queue.
    pub keys: &'a QueueKeys,
    /// The parent.
    pub id: &'a str,
}

impl ScriptCall for RemoveUnprocessedChildren<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::RemoveUnprocessedChildren
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.job_key(self.id), &self.keys.fixed().meta]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.keys.prefix_key()), Arg::str(self.id)]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::unit(self.script(), &reply)
    }
}

/// One broken flow invariant found by [`AuditFlows`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowFinding {
    /// `F1` (parked parent without pending children) or `F2` (dangling
    /// dependency).
    pub check: String,
    /// The parent.
    pub parent_id: String,
    /// What was found.
    pub detail: String,
}

/// auditFlows-1 (EchoMQ extension, read-only): one bounded step of the
/// flow checks over the parents in `waiting-children`, resumed from
/// where the previous step stopped.
#[derive(Debug, Clone)]
pub struct AuditFlows<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Index of the parent to go on with (0 to begin).
    pub parent: u64,
    /// SSCAN cursor in that parent's dependencies (`"0"`: from the start).
    pub cursor: &'a str,
    /// Children and parents this step may look at.
    pub budget: u64,
}

/// What one [`AuditFlows`] step found, and where the next one goes on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowStep {
    /// Parent index of the next step.
    pub parent: u64,
    /// SSCAN cursor of the next step.
    pub cursor: String,
    /// Every parent has been looked at.
    pub done: bool,
    /// What this step found.
    pub findings: Vec<FlowFinding>,
}

impl ScriptCall for AuditFlows<'_> {
    type Output = FlowStep;

    fn script(&self) -> ScriptId {
        ScriptId::AuditFlows
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().waiting_children]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::int(self.parent),
            Arg::str(self.cursor),
            Arg::int(self.budget.max(1)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<FlowStep, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        if parts.len() != 4 {
            return Err(ReplyError::shape(
                s,
                format!("{} parts, not 4", parts.len()),
            ));
        }
        let mut it = parts.into_iter();
        let parent = it.next().and_then(|r| r.as_i64()).unwrap_or(0).max(0) as u64;
        let cursor = decode::text(s, &it.next().unwrap_or(Reply::Nil))?;
        let done = it.next().and_then(|r| r.as_i64()) == Some(1);
        let items = decode::strings(s, it.next().unwrap_or(Reply::Nil))?;
        if items.len() % 3 != 0 {
            return Err(ReplyError::shape(s, "findings come in threes"));
        }
        Ok(FlowStep {
            parent,
            cursor,
            done,
            findings: items
                .chunks(3)
                .map(|c| FlowFinding {
                    check: c[0].clone(),
                    parent_id: c[1].clone(),
                    detail: c[2].clone(),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;
    use crate::reply::ScriptErrorCode;

    fn k() -> QueueKeys {
        QueueKeys::new("emq", "q").unwrap()
    }

    #[test]
    fn release_parent_keys_and_args() {
        let c = ReleaseParentIfNoPendingDependencies {
            parent_key: "emq:q:p",
            parent_queue: "emq:q",
            parent_id: "p",
            now: EpochMs(9),
        };
        assert_eq!(c.keys(), ["emq:q:p", "emq:q:p:dependencies"]);
        assert_eq!(argv_text(&c), ["emq:q", "p", "9"]);
        assert!(c.decode(Reply::Nil).is_ok());
    }

    #[test]
    fn add_parent_keys_and_args() {
        let k = k();
        let opts = Map::new();
        let c = AddParentJob {
            keys: &k,
            args: AddArgs {
                prefix_key: k.prefix_key(),
                name: "p",
                ..Default::default()
            },
            data: "{}",
            opts: &opts,
        };
        let argv = argv_text(&c);
        assert_eq!(argv.len(), 3);
        assert_eq!(c.keys()[3], "emq:q:waiting-children");
        assert_eq!(c.keys()[5], "emq:q:events");
        assert_eq!(c.decode(Reply::text("7")).unwrap(), "7");
        assert_eq!(
            c.decode(Reply::Int(-5)).unwrap_err().code(),
            Some(ScriptErrorCode::ParentJobNotExist)
        );
    }

    #[test]
    fn move_to_waiting_children_order() {
        let k = k();
        let c = MoveToWaitingChildren {
            keys: &k,
            id: "3",
            token: "tok",
            child_key: None,
            timestamp: 42,
        };
        assert_eq!(argv_text(&c), ["tok", "", "42", "3", "emq:q:"]);
        assert_eq!(c.keys()[3], "emq:q:3:dependencies");
        assert_eq!(c.keys()[4], "emq:q:3:unsuccessful");
        assert_eq!(c.decode(Reply::Int(0)).unwrap(), WaitOutcome::Parked);
        assert_eq!(
            c.decode(Reply::Int(1)).unwrap(),
            WaitOutcome::NothingPending
        );
        assert_eq!(
            c.decode(Reply::Int(-9)).unwrap_err().code(),
            Some(ScriptErrorCode::JobHasFailedChildren)
        );
    }

    #[test]
    fn dependency_counts_order() {
        let k = k();
        let c = GetDependencyCounts { keys: &k, id: "p" };
        assert_eq!(argv_text(&c), GROUPS);
        assert_eq!(
            c.keys(),
            [
                "emq:q:p:processed",
                "emq:q:p:dependencies",
                "emq:q:p:failed",
                "emq:q:p:unsuccessful"
            ]
        );
        let r = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(2),
            Reply::Int(3),
            Reply::Int(4),
        ]);
        assert_eq!(
            c.decode(r).unwrap(),
            DependencyCounts {
                processed: 1,
                unprocessed: 2,
                ignored: 3,
                failed: 4
            }
        );
    }

    #[test]
    fn paginate_args_and_items() {
        let c = Paginate {
            key: "emq:q:p:processed",
            start: 0,
            end: None,
            cursor: "0",
            offset: 0,
            max_iterations: 5,
        };
        assert_eq!(argv_text(&c), ["0", "-1", "0", "0", "5"]);
        let r = Reply::Array(vec![
            Reply::text("0"),
            Reply::Int(2),
            Reply::Array(vec![
                Reply::Array(vec![Reply::text("emq:q:1"), Reply::text("5")]),
                Reply::text("emq:q:2"),
            ]),
            Reply::Int(2),
            Reply::Array(vec![]),
        ]);
        let page = c.decode(r).unwrap();
        assert_eq!(page.total, 2);
        assert_eq!(
            page.items,
            [
                PageItem::Field("emq:q:1".into(), "5".into()),
                PageItem::Member("emq:q:2".into())
            ]
        );
    }

    #[test]
    fn audit_flows_findings() {
        let k = k();
        let c = AuditFlows {
            keys: &k,
            parent: 3,
            cursor: "0",
            budget: 10,
        };
        assert_eq!(argv_text(&c), ["emq:q:", "3", "0", "10"]);
        let r = Reply::Array(vec![
            Reply::Int(4),
            Reply::text("12"),
            Reply::Int(0),
            Reply::Array(["F1", "p", "x"].iter().map(|s| Reply::text(s)).collect()),
        ]);
        let step = c.decode(r).unwrap();
        assert_eq!(
            (step.parent, step.cursor.as_str(), step.done),
            (4, "12", false)
        );
        assert_eq!(step.findings[0].check, "F1");
        assert!(c.decode(Reply::Array(vec![Reply::text("F1")])).is_err());
    }

    #[test]
    fn detach_and_remove_children_order() {
        let k = k();
        let c = RemoveChildDependency {
            keys: &k,
            id: "c",
            parent_key: "emq:p:1",
        };
        assert_eq!(argv_text(&c), ["emq:q:c", "emq:p:1"]);
        assert!(c.decode(Reply::Int(0)).unwrap());
        assert!(!c.decode(Reply::Int(1)).unwrap());
        let r = RemoveUnprocessedChildren { keys: &k, id: "p" };
        assert_eq!(argv_text(&r), ["emq:q:", "p"]);
        assert_eq!(r.keys(), ["emq:q:p", "emq:q:meta"]);
    }
}
