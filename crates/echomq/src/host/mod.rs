//! The front door to the actors: typed, cloneable handles with async methods.
//!
//! A [`Host`] runs the shipped one-for-one [`HostSupervisor`] and is the one way
//! to start and supervise EchoMQ's actors: each `add_*` spawns a child under
//! it and answers a handle — [`WorkerHandle`], [`SchedulerHandle`],
//! [`EventsHandle`], [`FeederHandle`], [`DagReleaserHandle`], [`RelayHandle`]. A handle names its
//! child by [`ChildId`] and resolves the child's current actor on every call,
//! so it stays valid across the child's restarts.
//!
//! Every call waits at most the handle's timeout ([`DEFAULT_TIMEOUT`], or
//! [`Host::with_timeout`]) and fails with a typed [`HandleError`]. The actor
//! messages stay public for hosts that speak to the actors themselves (and for
//! tests that inject faults); the handles send exactly those messages.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use echomq::host::Host;
//! use echomq::worker::processor_fn;
//! use echomq::{Connection, Queue, WorkerArgs};
//! use std::time::Duration;
//!
//! let conn = Connection::connect_url("redis://127.0.0.1:6379").await?;
//! let queue = Queue::new(&conn, "mail").await?;
//! let host = Host::start().await?;
//! let worker = host
//!     .add_worker(WorkerArgs::new(queue, processor_fn(|job| async move {
//!         Ok(serde_json::json!({ "sent": job.data()["to"] }))
//!     })))
//!     .await?;
//! worker.set_concurrency(16).await?;
//! // … until the service stops:
//! host.close(Duration::from_secs(10)).await?;
//! # Ok(()) }
//! ```
//!
//! Contract: `docs/architecture.md` §Handles.

mod call;
mod error;
mod events;
mod feeder;
mod relay;
mod releaser;
mod scheduler;
mod worker;

use std::time::Duration;

use ractor::{Actor, ActorCell, ActorRef};

pub use self::error::HandleError;
pub use self::events::EventsHandle;
pub use self::feeder::FeederHandle;
pub use self::relay::RelayHandle;
pub use self::releaser::DagReleaserHandle;
pub use self::scheduler::SchedulerHandle;
pub use self::worker::WorkerHandle;
pub use crate::supervision::ChildId;

use self::call::ask;
use crate::flows::dag::releaser::DagReleaserArgs;
use crate::groups::feeder::GroupFeederArgs;
use crate::queue_events::QueueEventsArgs;
use crate::relay::RelayArgs;
use crate::scheduler::actor::JobSchedulerArgs;
use crate::supervision::{
    HostStatus, HostSupervisor, HostSupervisorMsg, RestartIntensity, ShutdownReport, WorkerSetSpec,
};

/// How long a handle waits for an answer unless told otherwise: long enough
/// for a spawn that loads nothing and a control message behind a busy
/// mailbox, short enough that a stuck actor is reported, not waited on.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much longer than the jobs' timeout [`Host::close`] waits for the
/// report: each worker set's answer grace and the stops of the helpers.
const CLOSE_GRACE: Duration = Duration::from_secs(30);

/// A running [`HostSupervisor`]: adds children and closes them in order.
/// Cheap to clone; every clone speaks to the same supervisor.
#[derive(Clone, Debug)]
pub struct Host {
    actor: ActorRef<HostSupervisorMsg>,
    timeout: Duration,
}

impl Host {
    /// Starts a host with the default restart budget
    /// ([`RestartIntensity::default`]: 10 restarts in 10 s), supervised by
    /// nobody: past its budget it stops every child and ends
    /// ([`Host::wait`] returns).
    pub async fn start() -> Result<Host, HandleError> {
        Self::start_with(RestartIntensity::default()).await
    }

    /// Starts a host with this restart budget, supervised by nobody.
    pub async fn start_with(budget: RestartIntensity) -> Result<Host, HandleError> {
        let (actor, _) = Actor::spawn(None, HostSupervisor, budget)
            .await
            .map_err(HandleError::Spawn)?;
        Ok(Self::from_actor(actor))
    }

    /// Starts a host linked under the service's own `supervisor`, which sees
    /// it fail when its budget is spent.
    pub async fn start_linked(
        supervisor: ActorCell,
        budget: RestartIntensity,
    ) -> Result<Host, HandleError> {
        let (actor, _) = Actor::spawn_linked(None, HostSupervisor, budget, supervisor)
            .await
            .map_err(HandleError::Spawn)?;
        Ok(Self::from_actor(actor))
    }

    /// A handle on a supervisor spawned some other way.
    pub fn from_actor(actor: ActorRef<HostSupervisorMsg>) -> Host {
        Host {
            actor,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same host with another per-call timeout (handles made from it
    /// inherit it).
    pub fn with_timeout(mut self, timeout: Duration) -> Host {
        self.timeout = timeout;
        self
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The supervisor actor itself.
    pub fn actor(&self) -> &ActorRef<HostSupervisorMsg> {
        &self.actor
    }

    /// Spawns a worker set — the Worker, its LockManager and (unless the
    /// spec says none) its StalledChecker — from [`WorkerArgs`](crate::WorkerArgs)
    /// or a [`WorkerSetSpec`].
    pub async fn add_worker(
        &self,
        spec: impl Into<WorkerSetSpec>,
    ) -> Result<WorkerHandle, HandleError> {
        let spec = Box::new(spec.into());
        let (id, _) = self
            .spawned("add_worker", |r| HostSupervisorMsg::AddWorkerSet(spec, r))
            .await?;
        Ok(WorkerHandle::new(self.clone(), id))
    }

    /// Spawns a JobScheduler.
    pub async fn add_scheduler(
        &self,
        args: JobSchedulerArgs,
    ) -> Result<SchedulerHandle, HandleError> {
        let args = Box::new(args);
        let (id, _) = self
            .spawned("add_scheduler", |r| {
                HostSupervisorMsg::AddJobScheduler(args, r)
            })
            .await?;
        Ok(SchedulerHandle::new(self.clone(), id))
    }

    /// Spawns a QueueEvents. Subscriptions made through the handle live in
    /// `args`' registry, so they outlive restarts of the actor.
    pub async fn add_queue_events(
        &self,
        args: QueueEventsArgs,
    ) -> Result<EventsHandle, HandleError> {
        let subscribers = args.subscribers.clone();
        let args = Box::new(args);
        let (id, _) = self
            .spawned("add_queue_events", |r| {
                HostSupervisorMsg::AddQueueEvents(args, r)
            })
            .await?;
        Ok(EventsHandle::new(self.clone(), id, subscribers))
    }

    /// Spawns a GroupFeeder (docs/groups.md).
    pub async fn add_group_feeder(
        &self,
        args: GroupFeederArgs,
    ) -> Result<FeederHandle, HandleError> {
        let args = Box::new(args);
        let (id, _) = self
            .spawned("add_group_feeder", |r| {
                HostSupervisorMsg::AddGroupFeeder(args, r)
            })
            .await?;
        Ok(FeederHandle::new(self.clone(), id))
    }

    /// Spawns a DagReleaser (docs/flows.md §DAGs): the follower that hands
    /// a queue's finished DAG nodes to their extra parents. Dormant (one
    /// EXISTS every 250 ms) until the queue holds such a node.
    pub async fn add_dag_releaser(
        &self,
        args: DagReleaserArgs,
    ) -> Result<DagReleaserHandle, HandleError> {
        let args = Box::new(args);
        let (id, _) = self
            .spawned("add_dag_releaser", |r| {
                HostSupervisorMsg::AddDagReleaser(args, r)
            })
            .await?;
        Ok(DagReleaserHandle::new(self.clone(), id))
    }

    /// Spawns a Relay node (docs/relay.md); it answers once the node is
    /// registered.
    pub async fn add_relay(&self, args: RelayArgs) -> Result<RelayHandle, HandleError> {
        let args = Box::new(args);
        let (id, _) = self
            .spawned("add_relay", |r| HostSupervisorMsg::AddRelay(args, r))
            .await?;
        Ok(RelayHandle::new(self.clone(), id))
    }

    /// Restart counters.
    pub async fn status(&self) -> Result<HostStatus, HandleError> {
        ask(
            &self.actor,
            "host status",
            self.timeout,
            HostSupervisorMsg::GetStatus,
        )
        .await
    }

    /// Closes every child in order — feeders and DAG releasers, worker sets (running jobs get
    /// `timeout` to finish; the rest go back to wait), schedulers, relay
    /// nodes, QueueEvents — and returns once the host has stopped.
    pub async fn close(&self, timeout: Duration) -> Result<ShutdownReport, HandleError> {
        let report = ask(&self.actor, "host close", timeout + CLOSE_GRACE, |r| {
            HostSupervisorMsg::Close(timeout, r)
        })
        .await?;
        self.wait().await;
        Ok(report)
    }

    /// Waits until the host has stopped: closed, or given up past its
    /// restart budget.
    pub async fn wait(&self) {
        let _ = self.actor.get_cell().wait(None).await;
    }

    /// Closes one child in order (a worker set with `timeout` for its
    /// running jobs) and forgets it.
    pub(crate) async fn close_child(
        &self,
        id: ChildId,
        timeout: Duration,
    ) -> Result<(), HandleError> {
        let found = ask(&self.actor, "close", timeout + CLOSE_GRACE, |r| {
            HostSupervisorMsg::CloseChild(id, timeout, r)
        })
        .await?;
        if found {
            Ok(())
        } else {
            Err(HandleError::ChildGone { operation: "close" })
        }
    }

    /// Asks the host for something that exists only while the child does.
    pub(crate) async fn resolve<T: Send + 'static>(
        &self,
        operation: &'static str,
        msg: impl FnOnce(ractor::RpcReplyPort<Option<T>>) -> HostSupervisorMsg,
    ) -> Result<T, HandleError> {
        ask(&self.actor, operation, self.timeout, msg)
            .await?
            .ok_or(HandleError::ChildGone { operation })
    }

    async fn spawned<T: Send + 'static>(
        &self,
        operation: &'static str,
        msg: impl FnOnce(ractor::RpcReplyPort<crate::supervision::Added<T>>) -> HostSupervisorMsg,
    ) -> Result<(ChildId, T), HandleError> {
        ask(&self.actor, operation, self.timeout, msg)
            .await?
            .map_err(HandleError::Spawn)
    }
}

impl From<crate::worker::WorkerArgs> for WorkerSetSpec {
    fn from(args: crate::worker::WorkerArgs) -> Self {
        WorkerSetSpec::new(args)
    }
}
