//! The flow side of a queue: a parent's children (values, failures, pending
//! ones, counts), the tree of a flow, detaching children (docs/flows.md).

use std::collections::BTreeMap;

use echomq_protocol::call::flow::{
    ChildKeys, DependencyCounts, GetDependencyCounts, PageItem, Paginate, RemoveChildDependency,
    RemoveUnprocessedChildren,
};
use echomq_protocol::job::field;
use echomq_protocol::{Job, QueueKeys};
use fred::prelude::{HashesInterface, SetsInterface, SortedSetsInterface};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::queue::handle::Queue;
use crate::queue::handles::Flows;
use crate::queue::types::JobState;

/// SCAN rounds one paginate call may make (BullMQ's bound).
const MAX_PAGE_ITERATIONS: u64 = 10;

/// A job's children, one page of each group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dependencies {
    /// Completed children: child key -> return value.
    pub processed: BTreeMap<String, Value>,
    /// Pending children's keys.
    pub unprocessed: Vec<String>,
    /// Failed children the parent ignored or continued on: key -> reason.
    pub ignored: BTreeMap<String, String>,
    /// Children that failed the parent.
    pub failed: Vec<String>,
    /// Sizes of the four groups (whole groups, not the page).
    pub counts: DependencyCounts,
}

/// One node of [`Flows::get_flow`](crate::queue::Flows::get_flow): a job, its state, and its children.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowNode {
    /// The queue the job is in.
    pub queue: String,
    /// The job.
    pub job: Job,
    /// Its state.
    pub state: JobState,
    /// Its children (up to the requested depth and count).
    pub children: Vec<FlowNode>,
}

/// Where a child key points: `<prefix>:<queue>:<id>`.
pub(crate) fn split_job_key<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    rest.split_once(':')
}

impl Flows<'_> {
    /// Children counts of a parent by group (getDependencyCounts-4).
    pub async fn get_dependencies_count(self, id: &str) -> Result<DependencyCounts> {
        self.queue
            .conn
            .call(&GetDependencyCounts {
                keys: &self.queue.keys,
                id,
            })
            .await
    }

    /// Return values of a parent's completed children, by child key
    /// (`emq:<queue>:<id>`); a value that is not JSON reads as a string.
    pub async fn get_children_values(self, id: &str) -> Result<BTreeMap<String, Value>> {
        let keys = ChildKeys::of(&self.queue.keys.job(id));
        let raw = self.queue.hash_paged(keys.processed).await?;
        Ok(raw
            .into_iter()
            .map(|(k, v)| {
                let value = serde_json::from_str(&v).unwrap_or(Value::String(v));
                (k, value)
            })
            .collect())
    }

    /// Failures of children the parent ignored or continued on, by child key.
    pub async fn get_ignored_children_failures(
        &self,
        id: &str,
    ) -> Result<BTreeMap<String, String>> {
        let keys = ChildKeys::of(&self.queue.keys.job(id));
        self.queue.hash_paged(keys.failed).await
    }

    /// Positions `start..start + count` of each group of a parent's
    /// children (paginate-1 over the sets and hashes; sets are unordered, so
    /// pages are stable only while the flow does not move).
    pub async fn get_dependencies(self, id: &str, start: u64, count: u64) -> Result<Dependencies> {
        let keys = ChildKeys::of(&self.queue.keys.job(id));
        let end = (count > 0).then(|| start + count - 1);
        let page = |key: String| {
            let conn = self.queue.conn.clone();
            async move {
                let Some(last) = end else {
                    return Ok(Vec::new());
                };
                // One call scans a bounded number of SCAN rounds; a page
                // deep in a large group takes the calls after it, from the
                // cursor where the previous one stopped.
                let want = (last - start + 1) as usize;
                let (mut items, mut cursor, mut offset) = (Vec::new(), String::from("0"), 0);
                loop {
                    let p = conn
                        .call(&Paginate {
                            key: &key,
                            start,
                            end,
                            cursor: &cursor,
                            offset,
                            max_iterations: MAX_PAGE_ITERATIONS,
                        })
                        .await?;
                    items.extend(p.items);
                    if p.cursor == "0" || items.len() >= want || p.offset > last {
                        break;
                    }
                    cursor = p.cursor;
                    offset = p.offset;
                }
                items.truncate(want);
                Ok::<_, Error>(items)
            }
        };
        let fields = |items: Vec<PageItem>| {
            items.into_iter().filter_map(|i| match i {
                PageItem::Field(k, v) => Some((k, v)),
                PageItem::Member(_) => None,
            })
        };
        let members = |items: Vec<PageItem>| {
            items
                .into_iter()
                .filter_map(|i| match i {
                    PageItem::Member(m) => Some(m),
                    PageItem::Field(..) => None,
                })
                .collect::<Vec<_>>()
        };
        let processed = fields(page(keys.processed).await?)
            .map(|(k, v)| {
                let value = serde_json::from_str(&v).unwrap_or(Value::String(v));
                (k, value)
            })
            .collect();
        let unprocessed = members(page(keys.dependencies).await?);
        let ignored = fields(page(keys.failed).await?).collect();
        let failed: Vec<String> = match end {
            Some(end) => {
                self.queue
                    .conn
                    .pool()
                    .zrange(
                        keys.unsuccessful,
                        start as i64,
                        end as i64,
                        None,
                        false,
                        None,
                        false,
                    )
                    .await?
            }
            None => Vec::new(),
        };
        Ok(Dependencies {
            processed,
            unprocessed,
            ignored,
            failed,
            counts: self.get_dependencies_count(id).await?,
        })
    }

    /// The flow below job `id`: the job, its state and its children, in
    /// `depth` levels counting the job's own, as BullMQ's `getFlow` counts
    /// them (1 or 0: the job alone; BullMQ's default is 10), at most
    /// `max_children` per group of each parent (BullMQ's default: 20). Children may be in other queues of the prefix. `None`
    /// when the job does not exist.
    pub async fn get_flow(
        &self,
        id: &str,
        depth: u32,
        max_children: u64,
    ) -> Result<Option<FlowNode>> {
        let Some(job) = self.queue.get_job(id).await? else {
            return Ok(None);
        };
        let state = self.queue.get_job_state(id).await?;
        let mut children = Vec::new();
        if depth > 1 {
            let deps = self.get_dependencies(id, 0, max_children).await?;
            let keys = deps
                .processed
                .keys()
                .cloned()
                .chain(deps.unprocessed)
                .chain(deps.ignored.keys().cloned())
                .chain(deps.failed);
            for key in keys {
                let Some((queue, child)) = split_job_key(self.queue.keys.prefix(), &key) else {
                    continue;
                };
                let q = self.sibling(queue)?;
                if let Some(node) =
                    Box::pin(q.flows().get_flow(child, depth - 1, max_children)).await?
                {
                    children.push(node);
                }
            }
        }
        Ok(Some(FlowNode {
            queue: self.queue.name().to_owned(),
            job,
            state,
            children,
        }))
    }

    /// A handle on another queue of the same prefix, without touching its
    /// meta hash.
    fn sibling(self, name: &str) -> Result<Queue> {
        if name == self.queue.name() {
            return Ok(self.queue.clone());
        }
        Ok(Queue {
            conn: self.queue.conn.clone(),
            keys: QueueKeys::new(self.queue.keys.prefix(), name)?,
            options: self.queue.options.clone(),
            adds: Default::default(),
        })
    }

    /// Detaches job `id` from its parent: the parent stops waiting for it
    /// (and moves on if it was the last pending child); the job keeps
    /// running on its own. False when it was no pending dependency.
    pub async fn remove_child_dependency(self, id: &str) -> Result<bool> {
        let parent_key: Option<String> = self
            .queue
            .conn
            .pool()
            .hget(self.queue.keys.job(id), field::PARENT_KEY)
            .await?;
        let Some(parent_key) = parent_key else {
            if self.queue.job_exists(id).await? {
                return Ok(false);
            }
            return Err(Error::JobNotFound(id.to_owned()));
        };
        self.queue
            .conn
            .call(&RemoveChildDependency {
                keys: &self.queue.keys,
                id,
                parent_key: &parent_key,
            })
            .await
    }

    /// Removes, recursively, the children of `id` that have not run: not
    /// completed, not failed, not locked.
    pub async fn remove_unprocessed_children(self, id: &str) -> Result<()> {
        self.queue
            .conn
            .call(&RemoveUnprocessedChildren {
                keys: &self.queue.keys,
                id,
            })
            .await
    }

    /// Whether `child_key` is a pending dependency of `id`.
    pub async fn is_pending_child(self, id: &str, child_key: &str) -> Result<bool> {
        let keys = ChildKeys::of(&self.queue.keys.job(id));
        Ok(self
            .queue
            .conn
            .pool()
            .sismember(keys.dependencies, child_key)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_keys_split_into_queue_and_id() {
        assert_eq!(split_job_key("emq", "emq:q2:abc"), Some(("q2", "abc")));
        assert_eq!(split_job_key("emq", "emq:{t}x:a:b"), Some(("{t}x", "a:b")));
        assert_eq!(split_job_key("emq", "other:q:1"), None);
    }
}
