//! A ready-made one-for-one host supervisor.
//!
//! EchoMQ spawns no tree of its own; this actor is the policy of
//! [`supervision`](crate::supervision) assembled into a supervisor a service
//! may spawn under its own root, use as is, or copy. It owns worker sets,
//! JobSchedulers and QueueEvents added to it by message, and:
//!
//! * restarts exactly the child that ended unasked (one-for-one) — a worker
//!   set's member re-joins the running others, a JobScheduler starts from
//!   Redis, a QueueEvents re-attaches its [`Subscribers`] and resumes after
//!   the last entry they got;
//! * never restarts a child that stopped as asked (a completed `Close`);
//! * counts every restart in one [`RestartIntensity`]; past it, stops all its
//!   children and fails with [`SupervisionError::GaveUp`];
//! * closes everything in order on [`HostSupervisorMsg::Close`]: the group
//!   feeders and DAG releasers, the worker sets (each [`WorkerSet::close`], concurrently), the
//!   JobSchedulers, the Relay nodes, then the QueueEvents; answers with a
//!   [`ShutdownReport`] and stops.
//!
//! Its children live in one table of [`ChildId`] → child, and one restart
//! path serves every kind that is not a worker set member. Children replaced
//! by a restart have new refs: the typed handles of [`crate::host`] resolve
//! the current ones on every call (the `Get*` messages do the same for code
//! that speaks to the actor). Contract: `docs/architecture.md`.
//!
//! [`Subscribers`]: crate::queue_events::Subscribers

use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};
use ractor::{SupervisionEvent, SupervisionEvent as Evt};
use tracing::{info, warn};

use super::close::{stop_and_wait, SetCloseError, SetCloseReport};
use super::decision::{
    ended, verdict, ChildKind, SupervisionDecision, SupervisionError, Verdict, CLOSED,
};
use super::intensity::RestartIntensity;
use super::worker_set::{WorkerSet, WorkerSetSpec};
use crate::flows::dag::releaser::{DagReleaser, DagReleaserArgs, DagReleaserMsg};
use crate::groups::feeder::{GroupFeeder, GroupFeederArgs, GroupFeederMsg};
use crate::queue_events::{QueueEvents, QueueEventsArgs, QueueEventsMsg};
use crate::relay::{Relay, RelayArgs, RelayMsg};
use crate::scheduler::actor::{JobScheduler, JobSchedulerArgs, JobSchedulerMsg};

/// How many recent restarts [`HostStatus`] lists.
const RECENT: usize = 64;

/// How long a Relay node may take to unregister at close.
const RELAY_CLOSE: Duration = Duration::from_secs(5);

/// A child's handle in a [`HostSupervisor`], stable across its restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChildId(u64);

impl std::fmt::Display for ChildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "child-{}", self.0)
    }
}

/// What a spawn of a new child answers.
pub type Added<T> = Result<(ChildId, T), SpawnErr>;

/// Messages of the [`HostSupervisor`]. [`crate::host::Host`] sends them for
/// you, with a timeout and a typed error.
pub enum HostSupervisorMsg {
    /// Spawn a worker set (Worker, LockManager, StalledChecker) under the
    /// supervisor.
    AddWorkerSet(Box<WorkerSetSpec>, RpcReplyPort<Added<WorkerSet>>),
    /// Spawn a JobScheduler under the supervisor.
    AddJobScheduler(
        Box<JobSchedulerArgs>,
        RpcReplyPort<Added<ActorRef<JobSchedulerMsg>>>,
    ),
    /// Spawn a QueueEvents under the supervisor; subscribe through the
    /// registry of `args` (it survives restarts) or the actor.
    AddQueueEvents(
        Box<QueueEventsArgs>,
        RpcReplyPort<Added<ActorRef<QueueEventsMsg>>>,
    ),
    /// Spawn a GroupFeeder (docs/groups.md) under the supervisor.
    AddGroupFeeder(
        Box<GroupFeederArgs>,
        RpcReplyPort<Added<ActorRef<GroupFeederMsg>>>,
    ),
    /// Spawn a DagReleaser (docs/flows.md §DAGs) under the supervisor.
    AddDagReleaser(
        Box<DagReleaserArgs>,
        RpcReplyPort<Added<ActorRef<DagReleaserMsg>>>,
    ),
    /// Spawn a Relay node (docs/relay.md) under the supervisor; a restarted
    /// node keeps its id and the subscriptions of `args`' registry.
    AddRelay(Box<RelayArgs>, RpcReplyPort<Added<ActorRef<RelayMsg>>>),
    /// The current ref of a GroupFeeder.
    GetGroupFeeder(ChildId, RpcReplyPort<Option<ActorRef<GroupFeederMsg>>>),
    /// The current ref of a DagReleaser.
    GetDagReleaser(ChildId, RpcReplyPort<Option<ActorRef<DagReleaserMsg>>>),
    /// The current refs of a worker set.
    GetWorkerSet(ChildId, RpcReplyPort<Option<WorkerSet>>),
    /// The current ref of a JobScheduler.
    GetJobScheduler(ChildId, RpcReplyPort<Option<ActorRef<JobSchedulerMsg>>>),
    /// The current ref of a QueueEvents.
    GetQueueEvents(ChildId, RpcReplyPort<Option<ActorRef<QueueEventsMsg>>>),
    /// The current ref of a Relay node.
    GetRelay(ChildId, RpcReplyPort<Option<ActorRef<RelayMsg>>>),
    /// Close one child in order (a worker set with this timeout for its
    /// running jobs) and forget it; answers `false` when there was no such
    /// child. The others go on.
    CloseChild(ChildId, Duration, RpcReplyPort<bool>),
    /// Restart counters.
    GetStatus(RpcReplyPort<HostStatus>),
    /// Close everything in order with this timeout for running jobs, answer,
    /// and stop (reason `"closed"`).
    Close(Duration, RpcReplyPort<ShutdownReport>),
}

impl std::fmt::Debug for HostSupervisorMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostSupervisorMsg::AddWorkerSet(..) => write!(f, "AddWorkerSet"),
            HostSupervisorMsg::AddJobScheduler(..) => write!(f, "AddJobScheduler"),
            HostSupervisorMsg::AddQueueEvents(..) => write!(f, "AddQueueEvents"),
            HostSupervisorMsg::AddGroupFeeder(..) => write!(f, "AddGroupFeeder"),
            HostSupervisorMsg::AddDagReleaser(..) => write!(f, "AddDagReleaser"),
            HostSupervisorMsg::AddRelay(..) => write!(f, "AddRelay"),
            HostSupervisorMsg::GetGroupFeeder(id, _) => write!(f, "GetGroupFeeder({id})"),
            HostSupervisorMsg::GetDagReleaser(id, _) => write!(f, "GetDagReleaser({id})"),
            HostSupervisorMsg::GetWorkerSet(id, _) => write!(f, "GetWorkerSet({id})"),
            HostSupervisorMsg::GetJobScheduler(id, _) => write!(f, "GetJobScheduler({id})"),
            HostSupervisorMsg::GetQueueEvents(id, _) => write!(f, "GetQueueEvents({id})"),
            HostSupervisorMsg::GetRelay(id, _) => write!(f, "GetRelay({id})"),
            HostSupervisorMsg::CloseChild(id, t, _) => write!(f, "CloseChild({id}, {t:?})"),
            HostSupervisorMsg::GetStatus(_) => write!(f, "GetStatus"),
            HostSupervisorMsg::Close(t, _) => write!(f, "Close({t:?})"),
        }
    }
}

/// Restart counters of a [`HostSupervisor`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStatus {
    /// Restarts since start.
    pub restarts: u64,
    /// The most recent restarts (at most 64), oldest first.
    pub recent: Vec<(ChildId, ChildKind)>,
}

/// What [`HostSupervisorMsg::Close`] did, per child, in close order.
#[derive(Debug)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Each worker set's close.
    pub worker_sets: Vec<(ChildId, Result<SetCloseReport, SetCloseError>)>,
    /// JobSchedulers stopped.
    pub job_schedulers: usize,
    /// QueueEvents closed (their subscriptions ended).
    pub queue_events: usize,
    /// Relay nodes closed (unregistered).
    pub relays: usize,
}

/// The actor. Arguments: its restart budget (use
/// `RestartIntensity::default()`).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSupervisor;

/// One supervised child: what it was spawned from (to spawn it again) and its
/// current ref(s).
enum Child {
    Set {
        spec: Box<WorkerSetSpec>,
        set: WorkerSet,
    },
    Scheduler(Box<JobSchedulerArgs>, ActorRef<JobSchedulerMsg>),
    Events(Box<QueueEventsArgs>, ActorRef<QueueEventsMsg>),
    Feeder(Box<GroupFeederArgs>, ActorRef<GroupFeederMsg>),
    Releaser(Box<DagReleaserArgs>, ActorRef<DagReleaserMsg>),
    Relay(Box<RelayArgs>, ActorRef<RelayMsg>),
}

impl Child {
    fn kind(&self) -> ChildKind {
        match self {
            Child::Set { .. } => ChildKind::Worker,
            Child::Scheduler(..) => ChildKind::JobScheduler,
            Child::Events(..) => ChildKind::QueueEvents,
            Child::Feeder(..) => ChildKind::GroupFeeder,
            Child::Releaser(..) => ChildKind::DagReleaser,
            Child::Relay(..) => ChildKind::Relay,
        }
    }

    /// The single actor of a child that is not a worker set.
    fn cell(&self) -> Option<ActorCell> {
        match self {
            Child::Set { .. } => None,
            Child::Scheduler(_, a) => Some(a.get_cell()),
            Child::Events(_, a) => Some(a.get_cell()),
            Child::Feeder(_, a) => Some(a.get_cell()),
            Child::Releaser(_, a) => Some(a.get_cell()),
            Child::Relay(_, a) => Some(a.get_cell()),
        }
    }

    /// Spawns a single-actor child again from its arguments.
    async fn respawn(&mut self, sup: ActorCell) -> Result<(), SpawnErr> {
        match self {
            Child::Set { .. } => {}
            Child::Scheduler(args, a) => *a = spawn(JobScheduler, args, sup).await?,
            Child::Events(args, a) => *a = spawn(QueueEvents, args, sup).await?,
            Child::Feeder(args, a) => *a = spawn(GroupFeeder, args, sup).await?,
            Child::Releaser(args, a) => *a = spawn(DagReleaser, args, sup).await?,
            Child::Relay(args, a) => *a = spawn(Relay, args, sup).await?,
        }
        Ok(())
    }

    /// Closes the child in order: a worker set with `timeout` for its
    /// running jobs; the others stopped (a Relay node unregistered first, a
    /// QueueEvents' subscriptions ended).
    async fn close(&self, timeout: Duration) -> Option<Result<SetCloseReport, SetCloseError>> {
        match self {
            Child::Set { set, .. } => return Some(set.close(timeout).await),
            Child::Relay(_, a) => {
                let _ = a.call(RelayMsg::Close, Some(RELAY_CLOSE)).await;
                stop_and_wait(a.get_cell()).await;
            }
            Child::Events(args, a) => {
                stop_and_wait(a.get_cell()).await;
                args.subscribers.close(a.get_id());
            }
            Child::Scheduler(_, a) => stop_and_wait(a.get_cell()).await,
            Child::Feeder(_, a) => stop_and_wait(a.get_cell()).await,
            Child::Releaser(_, a) => stop_and_wait(a.get_cell()).await,
        }
        None
    }
}

async fn spawn<A>(
    actor: A,
    args: &A::Arguments,
    sup: ActorCell,
) -> Result<ActorRef<A::Msg>, SpawnErr>
where
    A: Actor,
    A::Arguments: Clone,
{
    Ok(Actor::spawn_linked(None, actor, args.clone(), sup).await?.0)
}

/// The supervisor's state.
pub struct HostSupervisorState {
    budget: RestartIntensity,
    /// Every child, in the order it was added.
    children: Vec<(ChildId, Child)>,
    next_id: u64,
    closing: bool,
    status: HostStatus,
}

impl HostSupervisorState {
    fn add(&mut self, child: Child) -> ChildId {
        self.next_id += 1;
        let id = ChildId(self.next_id);
        self.children.push((id, child));
        id
    }

    fn get(&self, id: ChildId) -> Option<&Child> {
        self.children.iter().find(|(i, _)| *i == id).map(|(_, c)| c)
    }

    fn record(&mut self, id: ChildId, kind: ChildKind) {
        info!(child = %id, kind = %kind, "restarted");
        self.status.restarts += 1;
        if self.status.recent.len() == RECENT {
            self.status.recent.remove(0);
        }
        self.status.recent.push((id, kind));
    }
}

impl Actor for HostSupervisor {
    type Msg = HostSupervisorMsg;
    type State = HostSupervisorState;
    type Arguments = RestartIntensity;

    async fn pre_start(
        &self,
        _me: ActorRef<Self::Msg>,
        budget: RestartIntensity,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(HostSupervisorState {
            budget,
            children: Vec::new(),
            next_id: 0,
            closing: false,
            status: HostStatus::default(),
        })
    }

    async fn handle(
        &self,
        me: ActorRef<Self::Msg>,
        msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        use HostSupervisorMsg as M;
        let sup = me.get_cell();
        match msg {
            M::AddWorkerSet(spec, reply) => {
                let r = spec.spawn_linked(sup).await.map(|set| {
                    let id = s.add(Child::Set {
                        spec,
                        set: set.clone(),
                    });
                    (id, set)
                });
                let _ = reply.send(r);
            }
            M::AddJobScheduler(args, reply) => {
                let r = spawn(JobScheduler, &args, sup).await;
                let _ = reply.send(r.map(|a| (s.add(Child::Scheduler(args, a.clone())), a)));
            }
            M::AddQueueEvents(args, reply) => {
                let r = spawn(QueueEvents, &args, sup).await;
                let _ = reply.send(r.map(|a| (s.add(Child::Events(args, a.clone())), a)));
            }
            M::AddGroupFeeder(args, reply) => {
                let r = spawn(GroupFeeder, &args, sup).await;
                let _ = reply.send(r.map(|a| (s.add(Child::Feeder(args, a.clone())), a)));
            }
            M::AddDagReleaser(args, reply) => {
                let r = spawn(DagReleaser, &args, sup).await;
                let _ = reply.send(r.map(|a| (s.add(Child::Releaser(args, a.clone())), a)));
            }
            M::AddRelay(args, reply) => {
                let r = spawn(Relay, &args, sup).await;
                let _ = reply.send(r.map(|a| (s.add(Child::Relay(args, a.clone())), a)));
            }
            M::GetWorkerSet(id, reply) => {
                let _ = reply.send(match s.get(id) {
                    Some(Child::Set { set, .. }) => Some(set.clone()),
                    _ => None,
                });
            }
            M::GetJobScheduler(id, reply) => {
                let _ = reply.send(match s.get(id) {
                    Some(Child::Scheduler(_, a)) => Some(a.clone()),
                    _ => None,
                });
            }
            M::GetQueueEvents(id, reply) => {
                let _ = reply.send(match s.get(id) {
                    Some(Child::Events(_, a)) => Some(a.clone()),
                    _ => None,
                });
            }
            M::GetGroupFeeder(id, reply) => {
                let _ = reply.send(match s.get(id) {
                    Some(Child::Feeder(_, a)) => Some(a.clone()),
                    _ => None,
                });
            }
            M::GetDagReleaser(id, reply) => {
                let _ = reply.send(match s.get(id) {
                    Some(Child::Releaser(_, a)) => Some(a.clone()),
                    _ => None,
                });
            }
            M::GetRelay(id, reply) => {
                let _ = reply.send(match s.get(id) {
                    Some(Child::Relay(_, a)) => Some(a.clone()),
                    _ => None,
                });
            }
            M::CloseChild(id, timeout, reply) => {
                let found = match s.children.iter().position(|(i, _)| *i == id) {
                    // Forgotten first: the ends its close causes are then
                    // nobody's, never restarted.
                    Some(i) => {
                        let (_, child) = s.children.remove(i);
                        if let Some(Err(e)) = child.close(timeout).await {
                            warn!(child = %id, error = %e, "worker set close");
                        }
                        true
                    }
                    None => false,
                };
                let _ = reply.send(found);
            }
            M::GetStatus(reply) => {
                let _ = reply.send(s.status.clone());
            }
            M::Close(timeout, reply) => {
                let report = close_all(s, timeout).await;
                let _ = reply.send(report);
                me.stop(Some(CLOSED.into()));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        me: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some((cell, asked)) = ended(&evt) else {
            return Ok(());
        };
        if let Evt::ActorFailed(_, e) = &evt {
            warn!(actor = %cell.get_id(), error = %e, "child failed");
        }
        let ended_id = cell.get_id();
        for i in 0..s.children.len() {
            let (id, child) = &mut s.children[i];
            let id = *id;
            let restarted = match child {
                Child::Set { spec, set } => match set.classify(&evt, &mut s.budget) {
                    SupervisionDecision::NotMine => continue,
                    SupervisionDecision::Restart(member) => {
                        spec.restart(set, member, me.get_cell())
                            .await
                            .map_err(|source| restart_failed(&me, member.into(), source))?;
                        member.into()
                    }
                    SupervisionDecision::GiveUp(member) => {
                        return Err(give_up(&me, SupervisionError::gave_up(member, &s.budget)));
                    }
                    _ => return Ok(()),
                },
                other => {
                    if other.cell().map(|c| c.get_id()) != Some(ended_id) {
                        continue;
                    }
                    let kind = other.kind();
                    match verdict(asked, s.closing, &mut s.budget) {
                        Verdict::Expected => return Ok(()),
                        Verdict::GiveUp => {
                            return Err(give_up(&me, SupervisionError::gave_up(kind, &s.budget)))
                        }
                        Verdict::Restart => {
                            other
                                .respawn(me.get_cell())
                                .await
                                .map_err(|source| restart_failed(&me, kind, source))?;
                            kind
                        }
                    }
                }
            };
            s.record(id, restarted);
            return Ok(());
        }
        Ok(())
    }
}

fn restart_failed(
    me: &ActorRef<HostSupervisorMsg>,
    child: ChildKind,
    source: SpawnErr,
) -> ActorProcessingErr {
    give_up(me, SupervisionError::RestartFailed { child, source })
}

/// Giving up: no child may outlive its supervisor, so all are stopped before
/// the supervisor fails with `err`.
fn give_up(me: &ActorRef<HostSupervisorMsg>, err: SupervisionError) -> ActorProcessingErr {
    warn!(error = %err, "host supervisor gives up");
    me.stop_children(Some("supervisor gave up".into()));
    Box::new(err)
}

/// Close order of the kinds: feeders and DAG releasers first (nothing more is
/// released while the workers finish; a finish after that is the next
/// releaser's, by its sweep), then the worker sets (their jobs finish or go back to wait
/// while locks are renewed), the schedulers, the relay nodes, and QueueEvents
/// last, so that subscribers get the events the closing workers wrote that it
/// has already read.
fn close_rank(c: &Child) -> u8 {
    match c {
        Child::Feeder(..) | Child::Releaser(..) => 0,
        Child::Set { .. } => 1,
        Child::Scheduler(..) => 2,
        Child::Relay(..) => 3,
        Child::Events(..) => 4,
    }
}

async fn close_all(s: &mut HostSupervisorState, timeout: Duration) -> ShutdownReport {
    s.closing = true;
    let mut report = ShutdownReport {
        worker_sets: Vec::new(),
        job_schedulers: 0,
        queue_events: 0,
        relays: 0,
    };
    for rank in 0..=4 {
        // The worker sets of a rank close concurrently: each waits out its
        // own running jobs, and the timeout is the whole host's.
        let closes: Vec<_> = s
            .children
            .iter()
            .filter(|(_, c)| close_rank(c) == rank)
            .map(|(id, c)| {
                match c {
                    Child::Scheduler(..) => report.job_schedulers += 1,
                    Child::Events(..) => report.queue_events += 1,
                    Child::Relay(..) => report.relays += 1,
                    _ => {}
                }
                (*id, c.close(timeout))
            })
            .collect();
        let done = futures_util::future::join_all(
            closes
                .into_iter()
                .map(|(id, f)| async move { (id, f.await) }),
        )
        .await;
        for (id, closed) in done {
            if let Some(r) = closed {
                report.worker_sets.push((id, r));
            }
        }
    }
    report
}
