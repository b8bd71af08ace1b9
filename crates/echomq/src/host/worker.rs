//! The handle of a worker set under a [`Host`].

use std::time::Duration;

use super::call::{ask, tell};
use super::error::HandleError;
use super::{ChildId, Host};
use crate::locks::{LockManagerMsg, LockStats, TrackedLock};
use crate::stalled_checker::{StalledCheckerMsg, StalledStats, SweepReport};
use crate::supervision::{HostSupervisorMsg, WorkerSet};
use crate::worker::{WorkerCounts, WorkerMsg, WorkerStatus};

/// One worker set — a Worker, its LockManager and its StalledChecker — under
/// a [`Host`]. Cheap to clone; valid across restarts of its members.
#[derive(Clone, Debug)]
pub struct WorkerHandle {
    host: Host,
    id: ChildId,
}

impl WorkerHandle {
    pub(super) fn new(host: Host, id: ChildId) -> Self {
        Self { host, id }
    }

    /// Its id in the host.
    pub fn id(&self) -> ChildId {
        self.id
    }

    /// The set's current actor refs (they change when a member restarts).
    pub async fn refs(&self) -> Result<WorkerSet, HandleError> {
        let id = self.id;
        self.host
            .resolve("worker", |r| HostSupervisorMsg::GetWorkerSet(id, r))
            .await
    }

    /// Stops taking jobs (local to this worker; running jobs go on).
    pub async fn pause(&self) -> Result<(), HandleError> {
        tell(&self.refs().await?.worker, "pause", WorkerMsg::Pause)
    }

    /// Takes jobs again.
    pub async fn resume(&self) -> Result<(), HandleError> {
        tell(&self.refs().await?.worker, "resume", WorkerMsg::Resume)
    }

    /// Changes the concurrency (at least 1); lowering it lets the extra slots
    /// end with their current job.
    pub async fn set_concurrency(&self, concurrency: usize) -> Result<(), HandleError> {
        tell(
            &self.refs().await?.worker,
            "set_concurrency",
            WorkerMsg::SetConcurrency(concurrency),
        )
    }

    /// The worker's counters: O(1), whatever it holds.
    pub async fn counts(&self) -> Result<WorkerCounts, HandleError> {
        let set = self.refs().await?;
        ask(
            &set.worker,
            "counts",
            self.host.timeout(),
            WorkerMsg::GetCounts,
        )
        .await
    }

    /// A snapshot of the worker, with the id of every held job.
    pub async fn status(&self) -> Result<WorkerStatus, HandleError> {
        let set = self.refs().await?;
        ask(
            &set.worker,
            "status",
            self.host.timeout(),
            WorkerMsg::GetStatus,
        )
        .await
    }

    /// The LockManager's counters.
    pub async fn lock_stats(&self) -> Result<LockStats, HandleError> {
        let set = self.refs().await?;
        ask(
            &set.lock_manager,
            "lock_stats",
            self.host.timeout(),
            LockManagerMsg::GetStats,
        )
        .await
    }

    /// The held locks, with the time since each was last renewed.
    pub async fn tracked_locks(&self) -> Result<Vec<TrackedLock>, HandleError> {
        let set = self.refs().await?;
        ask(
            &set.lock_manager,
            "tracked_locks",
            self.host.timeout(),
            LockManagerMsg::GetTracked,
        )
        .await
    }

    /// Renews every held lock now, due or not (one round trip); the renewal
    /// timer is not moved.
    pub async fn renew_now(&self) -> Result<(), HandleError> {
        tell(
            &self.refs().await?.lock_manager,
            "renew_now",
            LockManagerMsg::RenewNow,
        )
    }

    /// Runs the stalled sweep now and answers what it found; `None` when the
    /// set runs no StalledChecker.
    pub async fn check_stalled_now(&self) -> Result<Option<SweepReport>, HandleError> {
        let Some(sc) = self.refs().await?.stalled_checker else {
            return Ok(None);
        };
        let report = ask(
            &sc,
            "check_stalled_now",
            self.host.timeout(),
            StalledCheckerMsg::CheckNow,
        )
        .await??;
        Ok(Some(report))
    }

    /// The StalledChecker's counters; `None` when the set runs none.
    pub async fn stalled_stats(&self) -> Result<Option<StalledStats>, HandleError> {
        let Some(sc) = self.refs().await?.stalled_checker else {
            return Ok(None);
        };
        let stats = ask(
            &sc,
            "stalled_stats",
            self.host.timeout(),
            StalledCheckerMsg::GetStats,
        )
        .await?;
        Ok(Some(stats))
    }

    /// Closes this set in order (running jobs get `timeout`; the rest go
    /// back to wait) and removes it from the host; the host's other children
    /// go on.
    pub async fn close(&self, timeout: Duration) -> Result<(), HandleError> {
        self.host.close_child(self.id, timeout).await
    }
}
