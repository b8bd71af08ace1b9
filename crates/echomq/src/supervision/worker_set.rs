//! A worker set: one Worker, its LockManager and its StalledChecker, spawned
//! linked under the host's supervisor ([`WorkerSetSpec`]), and the running
//! set's refs ([`WorkerSet`]). Its restart decision is `decision.rs`, its
//! ordered close `close.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

use crate::locks::manager::{LockManager, LockManagerArgs};
use crate::locks::protocol::LockManagerMsg;
use crate::stalled_checker::{StalledChecker, StalledCheckerArgs, StalledCheckerMsg};
use crate::worker::actor::Worker;
use crate::worker::messages::WorkerMsg;
use crate::worker::options::WorkerArgs;

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

/// The running set: typed refs the host sends control messages to. Clones
/// share the set's closing mark (see [`WorkerSet::close`]); the refs are the
/// ones of the moment the clone was taken.
#[derive(Clone, Debug)]
pub struct WorkerSet {
    /// The Worker (Pause, Resume, SetConcurrency, GetStatus, Close).
    pub worker: ActorRef<WorkerMsg>,
    /// Its LockManager (RenewNow, GetTracked, GetStats).
    pub lock_manager: ActorRef<LockManagerMsg>,
    /// Its StalledChecker (CheckNow, GetStats), unless disabled.
    pub stalled_checker: Option<ActorRef<StalledCheckerMsg>>,
    closing: Arc<AtomicBool>,
}

impl WorkerSet {
    /// Whether [`WorkerSet::close`] was called on this set (or a clone).
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    pub(crate) fn mark_closing(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

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
            closing: Arc::default(),
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
