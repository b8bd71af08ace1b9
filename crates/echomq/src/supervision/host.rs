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
//! * closes everything in order on [`HostSupervisorMsg::Close`]: the worker
//!   sets (each [`WorkerSet::close`], concurrently), then the JobSchedulers,
//!   then the QueueEvents; answers with a [`ShutdownReport`] and stops.
//!
//! Children replaced by a restart have new refs: ask for the current ones
//! with `GetWorkerSet` / `GetJobScheduler` / `GetQueueEvents` rather than
//! keeping a ref across a crash. Contract: `docs/architecture.md`.
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
use crate::groups::feeder::{GroupFeeder, GroupFeederArgs, GroupFeederMsg};
use crate::queue_events::{QueueEvents, QueueEventsArgs, QueueEventsMsg};
use crate::scheduler::actor::{JobScheduler, JobSchedulerArgs, JobSchedulerMsg};

/// How many recent restarts [`HostStatus`] lists.
const RECENT: usize = 64;

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

/// Messages of the [`HostSupervisor`].
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
    /// The current ref of a GroupFeeder.
    GetGroupFeeder(ChildId, RpcReplyPort<Option<ActorRef<GroupFeederMsg>>>),
    /// The current refs of a worker set.
    GetWorkerSet(ChildId, RpcReplyPort<Option<WorkerSet>>),
    /// The current ref of a JobScheduler.
    GetJobScheduler(ChildId, RpcReplyPort<Option<ActorRef<JobSchedulerMsg>>>),
    /// The current ref of a QueueEvents.
    GetQueueEvents(ChildId, RpcReplyPort<Option<ActorRef<QueueEventsMsg>>>),
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
            HostSupervisorMsg::GetGroupFeeder(id, _) => write!(f, "GetGroupFeeder({id})"),
            HostSupervisorMsg::GetWorkerSet(id, _) => write!(f, "GetWorkerSet({id})"),
            HostSupervisorMsg::GetJobScheduler(id, _) => write!(f, "GetJobScheduler({id})"),
            HostSupervisorMsg::GetQueueEvents(id, _) => write!(f, "GetQueueEvents({id})"),
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
}

/// The actor. Arguments: its restart budget (use
/// `RestartIntensity::default()`).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSupervisor;

struct SetChild {
    id: ChildId,
    spec: WorkerSetSpec,
    set: WorkerSet,
}

struct Child<M: ractor::Message, A> {
    id: ChildId,
    args: A,
    actor: ActorRef<M>,
}

/// The supervisor's state.
pub struct HostSupervisorState {
    budget: RestartIntensity,
    sets: Vec<SetChild>,
    schedulers: Vec<Child<JobSchedulerMsg, JobSchedulerArgs>>,
    events: Vec<Child<QueueEventsMsg, QueueEventsArgs>>,
    feeders: Vec<Child<GroupFeederMsg, GroupFeederArgs>>,
    next_id: u64,
    closing: bool,
    status: HostStatus,
}

/// Registers a spawned child under `id` and answers what the caller gets.
fn adopt<M: ractor::Message, A>(
    list: &mut Vec<Child<M, A>>,
    id: ChildId,
    args: A,
    actor: ActorRef<M>,
) -> (ChildId, ActorRef<M>) {
    list.push(Child {
        id,
        args,
        actor: actor.clone(),
    });
    (id, actor)
}

impl HostSupervisorState {
    fn new_id(&mut self) -> ChildId {
        self.next_id += 1;
        ChildId(self.next_id)
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

async fn spawn_scheduler(
    args: &JobSchedulerArgs,
    sup: ActorCell,
) -> Result<ActorRef<JobSchedulerMsg>, SpawnErr> {
    Ok(Actor::spawn_linked(None, JobScheduler, args.clone(), sup)
        .await?
        .0)
}

async fn spawn_feeder(
    args: &GroupFeederArgs,
    sup: ActorCell,
) -> Result<ActorRef<GroupFeederMsg>, SpawnErr> {
    Ok(Actor::spawn_linked(None, GroupFeeder, args.clone(), sup)
        .await?
        .0)
}

async fn spawn_events(
    args: &QueueEventsArgs,
    sup: ActorCell,
) -> Result<ActorRef<QueueEventsMsg>, SpawnErr> {
    Ok(Actor::spawn_linked(None, QueueEvents, args.clone(), sup)
        .await?
        .0)
}

/// What the supervisor does about one ended child that is not a set member.
enum Outcome {
    Ignore,
    Restarted,
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
            sets: Vec::new(),
            schedulers: Vec::new(),
            events: Vec::new(),
            feeders: Vec::new(),
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
        match msg {
            HostSupervisorMsg::AddWorkerSet(spec, reply) => {
                let r = spec.spawn_linked(me.get_cell()).await.map(|set| {
                    let id = s.new_id();
                    s.sets.push(SetChild {
                        id,
                        spec: *spec,
                        set: set.clone(),
                    });
                    (id, set)
                });
                let _ = reply.send(r);
            }
            HostSupervisorMsg::AddJobScheduler(args, reply) => {
                let r = spawn_scheduler(&args, me.get_cell()).await.map(|actor| {
                    let id = s.new_id();
                    adopt(&mut s.schedulers, id, *args, actor)
                });
                let _ = reply.send(r);
            }
            HostSupervisorMsg::AddQueueEvents(args, reply) => {
                let r = spawn_events(&args, me.get_cell()).await.map(|actor| {
                    let id = s.new_id();
                    adopt(&mut s.events, id, *args, actor)
                });
                let _ = reply.send(r);
            }
            HostSupervisorMsg::AddGroupFeeder(args, reply) => {
                let r = spawn_feeder(&args, me.get_cell()).await.map(|actor| {
                    let id = s.new_id();
                    adopt(&mut s.feeders, id, *args, actor)
                });
                let _ = reply.send(r);
            }
            HostSupervisorMsg::GetGroupFeeder(id, reply) => {
                let found = s.feeders.iter().find(|c| c.id == id);
                let _ = reply.send(found.map(|c| c.actor.clone()));
            }
            HostSupervisorMsg::GetWorkerSet(id, reply) => {
                let _ = reply.send(s.sets.iter().find(|c| c.id == id).map(|c| c.set.clone()));
            }
            HostSupervisorMsg::GetJobScheduler(id, reply) => {
                let found = s.schedulers.iter().find(|c| c.id == id);
                let _ = reply.send(found.map(|c| c.actor.clone()));
            }
            HostSupervisorMsg::GetQueueEvents(id, reply) => {
                let found = s.events.iter().find(|c| c.id == id);
                let _ = reply.send(found.map(|c| c.actor.clone()));
            }
            HostSupervisorMsg::GetStatus(reply) => {
                let _ = reply.send(s.status.clone());
            }
            HostSupervisorMsg::Close(timeout, reply) => {
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
        for i in 0..s.sets.len() {
            let decision = s.sets[i].set.classify(&evt, &mut s.budget);
            match decision {
                SupervisionDecision::Restart(member) => {
                    let SetChild { spec, set, id } = &mut s.sets[i];
                    let id = *id;
                    if let Err(source) = spec.restart(set, member, me.get_cell()).await {
                        return Err(give_up(
                            &me,
                            SupervisionError::RestartFailed {
                                child: member.into(),
                                source,
                            },
                        ));
                    }
                    s.record(id, member.into());
                    return Ok(());
                }
                SupervisionDecision::GiveUp(member) => {
                    return Err(give_up(&me, SupervisionError::gave_up(member, &s.budget)));
                }
                SupervisionDecision::NotMine => {}
                _ => return Ok(()),
            }
        }
        let id = cell.get_id();
        if let Some(i) = s.schedulers.iter().position(|c| c.actor.get_id() == id) {
            let outcome = decide(
                &me,
                s.closing,
                asked,
                &mut s.budget,
                ChildKind::JobScheduler,
            )?;
            if let Outcome::Restarted = outcome {
                let c = &mut s.schedulers[i];
                c.actor = spawn_scheduler(&c.args, me.get_cell())
                    .await
                    .map_err(|source| restart_failed(&me, ChildKind::JobScheduler, source))?;
                let id = c.id;
                s.record(id, ChildKind::JobScheduler);
            }
        } else if let Some(i) = s.events.iter().position(|c| c.actor.get_id() == id) {
            let outcome = decide(&me, s.closing, asked, &mut s.budget, ChildKind::QueueEvents)?;
            if let Outcome::Restarted = outcome {
                let c = &mut s.events[i];
                c.actor = spawn_events(&c.args, me.get_cell())
                    .await
                    .map_err(|source| restart_failed(&me, ChildKind::QueueEvents, source))?;
                let id = c.id;
                s.record(id, ChildKind::QueueEvents);
            }
        } else if let Some(i) = s.feeders.iter().position(|c| c.actor.get_id() == id) {
            let outcome = decide(&me, s.closing, asked, &mut s.budget, ChildKind::GroupFeeder)?;
            if let Outcome::Restarted = outcome {
                let c = &mut s.feeders[i];
                c.actor = spawn_feeder(&c.args, me.get_cell())
                    .await
                    .map_err(|source| restart_failed(&me, ChildKind::GroupFeeder, source))?;
                let id = c.id;
                s.record(id, ChildKind::GroupFeeder);
            }
        }
        Ok(())
    }
}

/// The policy for a child that is not a set member.
fn decide(
    me: &ActorRef<HostSupervisorMsg>,
    closing: bool,
    asked: bool,
    budget: &mut RestartIntensity,
    kind: ChildKind,
) -> Result<Outcome, ActorProcessingErr> {
    match verdict(asked, closing, budget) {
        Verdict::Expected => Ok(Outcome::Ignore),
        Verdict::Restart => Ok(Outcome::Restarted),
        Verdict::GiveUp => Err(give_up(me, SupervisionError::gave_up(kind, budget))),
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

/// The shutdown order: worker sets first (their jobs finish or go back to
/// wait while locks are renewed), then schedulers, then QueueEvents — last,
/// so that subscribers get the events the closing workers wrote that it has
/// already read.
async fn close_all(s: &mut HostSupervisorState, timeout: Duration) -> ShutdownReport {
    s.closing = true;
    // Feeders first: nothing more is released while the workers finish.
    for c in &s.feeders {
        stop_and_wait(c.actor.get_cell()).await;
    }
    let closes: Vec<_> = s
        .sets
        .iter()
        .map(|c| {
            let set = c.set.clone();
            (c.id, tokio::spawn(async move { set.close(timeout).await }))
        })
        .collect();
    let mut worker_sets = Vec::with_capacity(closes.len());
    for (id, task) in closes {
        match task.await {
            Ok(r) => worker_sets.push((id, r)),
            Err(e) => warn!(child = %id, error = %e, "worker set close task failed"),
        }
    }
    for c in &s.schedulers {
        stop_and_wait(c.actor.get_cell()).await;
    }
    for c in &s.events {
        stop_and_wait(c.actor.get_cell()).await;
        c.args.subscribers.close(c.actor.get_id());
    }
    ShutdownReport {
        worker_sets,
        job_schedulers: s.schedulers.len(),
        queue_events: s.events.len(),
    }
}
