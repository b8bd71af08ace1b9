//! Helpers for hosts that supervise EchoMQ's actors themselves.
//!
//! EchoMQ ships no supervision tree: the host's supervisor owns every actor,
//! sees its `SupervisionEvent`s and decides about restarts. [`WorkerSetSpec`]
//! makes that easy for the usual set of one worker — the Worker, its
//! LockManager and its StalledChecker — spawning them linked under the host's
//! supervisor, telling which member a failed cell was, and restarting one
//! member so that it re-joins the others:
//!
//! * a restarted **Worker** is given the running LockManager, which it
//!   re-points at itself (`AttachWorker`);
//! * a restarted **LockManager** is given the running Worker, which answers
//!   with `Track` for every job it holds — no held lock goes unrenewed;
//! * a restarted **StalledChecker** needs nothing: its state lives in Redis.
//!
//! See `docs/architecture.md` and `examples/service.rs`.

use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

use crate::lock_manager::{LockManager, LockManagerArgs, LockManagerMsg};
use crate::stalled_checker::{StalledChecker, StalledCheckerArgs, StalledCheckerMsg};
use crate::worker::{Worker, WorkerArgs, WorkerMsg};

/// Which member of a worker set an actor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Member {
    /// The Worker.
    Worker,
    /// Its LockManager.
    LockManager,
    /// Its StalledChecker.
    StalledChecker,
}

/// The running set: typed refs the host sends control messages to.
#[derive(Clone, Debug)]
pub struct WorkerSet {
    /// The Worker (Pause, Resume, SetConcurrency, GetStatus, Close).
    pub worker: ActorRef<WorkerMsg>,
    /// Its LockManager (RenewNow, GetTracked, GetStats).
    pub lock_manager: ActorRef<LockManagerMsg>,
    /// Its StalledChecker (CheckNow, GetStats), unless disabled.
    pub stalled_checker: Option<ActorRef<StalledCheckerMsg>>,
}

impl WorkerSet {
    /// Which member `cell` is, if it belongs to this set (compare the cell of
    /// a `SupervisionEvent` with it).
    pub fn member_of(&self, cell: &ActorCell) -> Option<Member> {
        let id = cell.get_id();
        if self.worker.get_id() == id {
            Some(Member::Worker)
        } else if self.lock_manager.get_id() == id {
            Some(Member::LockManager)
        } else if self
            .stalled_checker
            .as_ref()
            .is_some_and(|s| s.get_id() == id)
        {
            Some(Member::StalledChecker)
        } else {
            None
        }
    }
}

/// Everything needed to spawn — and respawn — one worker's set. Keep it in the
/// host supervisor's state.
#[derive(Clone)]
pub struct WorkerSetSpec {
    /// The Worker's arguments (its LockManager's are derived from them).
    pub worker: WorkerArgs,
    /// The StalledChecker's arguments; `None` runs no checker in this set.
    pub stalled_checker: Option<StalledCheckerArgs>,
}

impl WorkerSetSpec {
    /// The usual set: a StalledChecker with the worker's stalled interval and
    /// max stalled count.
    pub fn new(worker: WorkerArgs) -> Self {
        let mut checker =
            StalledCheckerArgs::new(worker.queue.connection().clone(), worker.queue.name());
        checker.interval = worker.options.stalled_interval;
        checker.max_stalled_count = worker.options.max_stalled_count;
        Self {
            worker,
            stalled_checker: Some(checker),
        }
    }

    /// Spawns the set, every member linked to `supervisor`.
    pub async fn spawn_linked(&self, supervisor: ActorCell) -> Result<WorkerSet, SpawnErr> {
        let mut worker_args = self.worker.clone();
        worker_args.lock_manager = None;
        let (worker, _) =
            Actor::spawn_linked(None, Worker, worker_args, supervisor.clone()).await?;
        let lock_manager = self.spawn_lock_manager(&worker, supervisor.clone()).await?;
        let stalled_checker = self.spawn_stalled_checker(supervisor).await?;
        Ok(WorkerSet {
            worker,
            lock_manager,
            stalled_checker,
        })
    }

    /// Respawns `member` of `set` (after the host saw it fail or stop) and
    /// updates the set's ref.
    pub async fn restart(
        &self,
        set: &mut WorkerSet,
        member: Member,
        supervisor: ActorCell,
    ) -> Result<(), SpawnErr> {
        match member {
            Member::Worker => {
                let mut args = self.worker.clone();
                args.lock_manager = Some(set.lock_manager.clone());
                let (worker, _) = Actor::spawn_linked(None, Worker, args, supervisor).await?;
                set.worker = worker;
            }
            Member::LockManager => {
                set.lock_manager = self.spawn_lock_manager(&set.worker, supervisor).await?;
            }
            Member::StalledChecker => {
                set.stalled_checker = self.spawn_stalled_checker(supervisor).await?;
            }
        }
        Ok(())
    }

    async fn spawn_lock_manager(
        &self,
        worker: &ActorRef<WorkerMsg>,
        supervisor: ActorCell,
    ) -> Result<ActorRef<LockManagerMsg>, SpawnErr> {
        let args: LockManagerArgs = self.worker.lock_manager_args(Some(worker.clone()));
        let (lm, _) = Actor::spawn_linked(None, LockManager, args, supervisor).await?;
        Ok(lm)
    }

    async fn spawn_stalled_checker(
        &self,
        supervisor: ActorCell,
    ) -> Result<Option<ActorRef<StalledCheckerMsg>>, SpawnErr> {
        match &self.stalled_checker {
            Some(args) => {
                let (sc, _) =
                    Actor::spawn_linked(None, StalledChecker, args.clone(), supervisor).await?;
                Ok(Some(sc))
            }
            None => Ok(None),
        }
    }
}

/// A restart budget for a one-for-one host supervisor: at most `max` restarts
/// within a sliding `window`, as Erlang's restart intensity. Past it the host
/// should stop restarting and fail itself, so that its own supervisor sees
/// the problem instead of a restart loop.
#[derive(Clone, Debug)]
pub struct RestartIntensity {
    max: usize,
    window: std::time::Duration,
    recent: std::collections::VecDeque<std::time::Instant>,
}

impl RestartIntensity {
    /// At most `max` restarts per `window`.
    pub fn new(max: usize, window: std::time::Duration) -> Self {
        Self {
            max,
            window,
            recent: std::collections::VecDeque::new(),
        }
    }

    /// Records a restart now; `false` when it exceeds the budget.
    pub fn allow(&mut self) -> bool {
        let now = std::time::Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        self.recent.len() <= self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_intensity_allows_max_per_window() {
        let mut r = RestartIntensity::new(3, std::time::Duration::from_secs(60));
        assert!(r.allow() && r.allow() && r.allow());
        assert!(!r.allow());
        let mut r = RestartIntensity::new(1, std::time::Duration::ZERO);
        assert!(
            r.allow() && r.allow(),
            "an empty window forgets every restart"
        );
    }
}
