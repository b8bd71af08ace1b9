//! The supervision policy, shipped as building blocks.
//!
//! EchoMQ spawns no tree of its own: the host's supervisor owns every actor
//! and sees its `SupervisionEvent`s. What the library ships is the policy, so
//! that every host applies the same one:
//!
//! * [`WorkerSetSpec`] spawns the usual set of one worker — the Worker, its
//!   LockManager and its StalledChecker — linked under the host's supervisor,
//!   and restarts one member so that it re-joins the others;
//! * [`WorkerSet::classify`] tells, for one supervision event, whether it is an
//!   expected stop, a member to restart, or the end of the restart budget
//!   ([`RestartIntensity`]) — the one place the restart policy lives;
//! * [`WorkerSet::close`] closes a set in order and marks it closing;
//! * [`HostSupervisor`](crate::host_supervisor::HostSupervisor) is a ready-made
//!   one-for-one supervisor built from these, to use as is or to copy.
//!
//! Restarting one member (one-for-one) is enough because each re-joins the
//! running others:
//!
//! * a restarted **Worker** is given the running LockManager, which it
//!   re-points at itself (`AttachWorker`);
//! * a restarted **LockManager** is given the running Worker, which answers
//!   with `Track` for every job it holds — no held lock goes unrenewed;
//! * a restarted **StalledChecker** needs nothing: its state lives in Redis.
//!
//! See `docs/architecture.md` and `examples/service.rs`.

mod close;
mod decision;
mod intensity;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

pub(crate) use close::stop_and_wait;
pub use close::{SetCloseError, SetCloseReport};
pub(crate) use decision::{ended, verdict, Verdict, CLOSED};
pub use decision::{ChildKind, SupervisionDecision, SupervisionError};
pub use intensity::RestartIntensity;

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

    fn mark_closing(&self) {
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
