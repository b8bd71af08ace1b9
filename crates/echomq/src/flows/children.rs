//! What a processor sees of its job's children, and the "spawn children now,
//! resume me when they finish" pattern (docs/flows.md §Waiting for children).

use std::collections::BTreeMap;

use echomq_protocol::call::flow::{DependencyCounts, MoveToWaitingChildren, WaitOutcome};
use serde_json::Value;

use super::reads::Dependencies;
use crate::error::Result;
use crate::worker::finish::job::{ActiveJob, FinishFailed};
use crate::worker::process::processor::JobContext;

impl JobContext {
    /// Return values of this job's completed children, by child key.
    pub async fn children_values(&self) -> Result<BTreeMap<String, Value>> {
        self.queue.flows().get_children_values(&self.job.id).await
    }

    /// Failures of children this job ignored or continued on, by child key.
    pub async fn ignored_children_failures(&self) -> Result<BTreeMap<String, String>> {
        self.queue
            .flows()
            .get_ignored_children_failures(&self.job.id)
            .await
    }

    /// Positions `start..start + count` of each group of this job's children.
    pub async fn dependencies(&self, start: u64, count: u64) -> Result<Dependencies> {
        self.queue
            .flows()
            .get_dependencies(&self.job.id, start, count)
            .await
    }

    /// How many children are in each group.
    pub async fn dependencies_count(&self) -> Result<DependencyCounts> {
        self.queue
            .flows()
            .get_dependencies_count(&self.job.id)
            .await
    }

    /// Parks this job in `waiting-children` while it has pending children
    /// (or while `child_key` is pending): the lock is given up and the job
    /// leaves `active`. On [`WaitOutcome::Parked`] the processor must return
    /// [`ProcessError::WaitingChildren`](crate::worker::ProcessError::WaitingChildren)
    /// at once; the job runs again, from the start, when the children are
    /// done. On [`WaitOutcome::NothingPending`] it still owns the job and
    /// goes on. A child that failed its parent is
    /// [`JobHasFailedChildren`](echomq_protocol::ScriptErrorCode::JobHasFailedChildren).
    pub async fn move_to_waiting_children(&self, child_key: Option<&str>) -> Result<WaitOutcome> {
        self.queue
            .connection()
            .call(&MoveToWaitingChildren {
                keys: self.queue.keys(),
                id: &self.job.id,
                token: &self.token,
                child_key,
                timestamp: crate::clock::now_ms(),
            })
            .await
    }
}

/// What [`ActiveJob::move_to_waiting_children`] did.
#[derive(Debug)]
pub enum Parking {
    /// The job waits in `waiting-children`; the handle and its token are gone.
    Parked,
    /// Nothing pending: the handle comes back, still owning the job.
    StillHeld(ActiveJob),
}

impl ActiveJob {
    /// Parks the held job in `waiting-children` while it has pending
    /// children (or while `child_key` is pending), for code that holds jobs
    /// by hand rather than through a processor. The handle is consumed only
    /// when the job is parked; on an error (a refusal such as
    /// `JobHasFailedChildren`, or a connection error) it comes back with it.
    pub async fn move_to_waiting_children(
        self,
        child_key: Option<&str>,
    ) -> std::result::Result<Parking, Box<FinishFailed>> {
        let core = self.core().clone();
        let call = MoveToWaitingChildren {
            keys: core.keys(),
            id: self.id(),
            token: self.token(),
            child_key,
            timestamp: crate::clock::now_ms(),
        };
        match core.conn().call(&call).await {
            Ok(WaitOutcome::Parked) => {
                self.abandon();
                Ok(Parking::Parked)
            }
            Ok(WaitOutcome::NothingPending) => Ok(Parking::StillHeld(self)),
            Err(error) => Err(Box::new(FinishFailed { job: self, error })),
        }
    }
}

/// The processor parked its job in `waiting-children`: the script already
/// released the lock and took the job out of `active`, so the handle is let
/// go without writing anything.
pub(crate) fn parked(job: ActiveJob) -> Option<ActiveJob> {
    tracing::debug!(id = job.id(), "job waits for its children");
    job.abandon();
    None
}
