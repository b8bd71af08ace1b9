//! The JobScheduler actor: the job-scheduler operations of one queue as
//! messages, upserts serialised, plus EchoMQ's periodic reconciliation sweep,
//! which re-creates the pending iteration of a scheduler whose next run is
//! past and whose iteration has gone missing (deleted, evicted, lost in a
//! crash), so a scheduler cannot silently stop.
//!
//! The operations themselves are [`JobSchedulers`] (`store.rs`);
//! definitions are `spec.rs`, the cron engine `cron.rs`.
//! Contract: `docs/job-scheduler.md`.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::JobOptions;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::warn;

use echomq_protocol::call::scheduler::{Iteration, SchedulerInfo};

use super::spec::SchedulerSpec;
use super::store::{IterationRestored, JobSchedulers, SchedulerSweep};
use crate::connection::pool::Connection;
use crate::error::Result;

/// Arguments of a [`JobScheduler`]: [`JobSchedulerArgs::new`], then set the
/// fields to change.
#[derive(Clone)]
#[non_exhaustive]
pub struct JobSchedulerArgs {
    /// The shared connection.
    pub connection: Connection,
    /// The queue.
    pub queue: String,
    /// Options merged under every template's (a Node Queue's `defaultJobOptions`).
    pub default_job_options: JobOptions,
    /// Time between reconciliation sweeps. Default 30 s. Zero disables them.
    pub sweep_interval: Duration,
    /// How far in the past a next run must be before the sweep treats a
    /// missing iteration as lost (it leaves workers time to take it). Default 5 s.
    pub sweep_grace: Duration,
    /// Told about every iteration a sweep re-created. Runs inside the actor:
    /// keep it short (a `cast`, a channel send).
    pub on_restored: Option<Arc<dyn Fn(IterationRestored) + Send + Sync>>,
}

impl JobSchedulerArgs {
    /// Defaults for `queue`: a sweep every 30 s with 5 s grace, no callback.
    pub fn new(connection: Connection, queue: impl Into<String>) -> Self {
        JobSchedulerArgs {
            connection,
            queue: queue.into(),
            default_job_options: JobOptions::default(),
            sweep_interval: Duration::from_secs(30),
            sweep_grace: Duration::from_secs(5),
            on_restored: None,
        }
    }
}

impl std::fmt::Debug for JobSchedulerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSchedulerArgs")
            .field("queue", &self.queue)
            .field("sweep_interval", &self.sweep_interval)
            .field("sweep_grace", &self.sweep_grace)
            .finish()
    }
}

/// Messages of the [`JobScheduler`]. Use `call_t!` with a timeout:
/// `call_t!(actor, JobSchedulerMsg::Upsert, 5000, spec)`.
#[derive(Debug)]
pub enum JobSchedulerMsg {
    /// Create or replace a scheduler; replies with its pending iteration.
    Upsert(Box<SchedulerSpec>, RpcReplyPort<Result<Option<Iteration>>>),
    /// Remove a scheduler; replies whether it existed.
    Remove(String, RpcReplyPort<Result<bool>>),
    /// Read one scheduler.
    Get(String, RpcReplyPort<Result<Option<SchedulerInfo>>>),
    /// Read every scheduler, earliest next run first.
    List(RpcReplyPort<Result<Vec<SchedulerInfo>>>),
    /// Run a reconciliation sweep now. Does not move the timer.
    SweepNow(RpcReplyPort<Result<SchedulerSweep>>),
    /// Panics the actor (fault injection for supervision and chaos tests).
    #[cfg(feature = "fault-injection")]
    Crash,
    /// The sweep timer (opaque to hosts: only the actor makes one, so there
    /// is one timer chain per actor).
    Tick(Tick),
}

/// A timer message; only the [`JobScheduler`] makes them.
#[derive(Debug)]
pub struct Tick(());

/// The per-queue scheduler actor. Spawn it under the host's supervisor:
/// `Actor::spawn_linked(None, JobScheduler, args, supervisor)`.
///
/// It handles one message at a time, so upserts and removals sent to it are
/// applied in order: two quick upserts of one id leave the second's
/// definition and exactly one pending iteration. It keeps no state of its
/// own — everything lives in Redis — so a restart loses nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobScheduler;

/// Runtime state (rebuilt from the arguments on every start).
pub struct JobSchedulerState {
    args: JobSchedulerArgs,
    schedulers: JobSchedulers,
    metrics: crate::telemetry::metrics::QueueMetrics,
}

impl Actor for JobScheduler {
    type Msg = JobSchedulerMsg;
    type State = JobSchedulerState;
    type Arguments = JobSchedulerArgs;

    async fn pre_start(
        &self,
        _me: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        let schedulers = JobSchedulers::new(&args.connection, &args.queue)?
            .with_default_job_options(args.default_job_options.clone());
        let metrics = crate::telemetry::metrics::QueueMetrics::new(&args.queue);
        Ok(JobSchedulerState {
            args,
            schedulers,
            metrics,
        })
    }

    async fn post_start(
        &self,
        me: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        if !state.args.sweep_interval.is_zero() {
            // A restart is exactly when a lost iteration is most likely.
            me.send_message(JobSchedulerMsg::Tick(Tick(())))?;
        }
        Ok(())
    }

    async fn handle(
        &self,
        me: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            JobSchedulerMsg::Upsert(spec, reply) => {
                let _ = reply.send(state.schedulers.upsert(&spec).await);
            }
            JobSchedulerMsg::Remove(id, reply) => {
                let _ = reply.send(state.schedulers.remove(&id).await);
            }
            JobSchedulerMsg::Get(id, reply) => {
                let _ = reply.send(state.schedulers.get(&id).await);
            }
            JobSchedulerMsg::List(reply) => {
                let _ = reply.send(state.schedulers.list().await);
            }
            JobSchedulerMsg::SweepNow(reply) => {
                let _ = reply.send(state.sweep().await);
            }
            #[cfg(feature = "fault-injection")]
            JobSchedulerMsg::Crash => panic!("fault injection: job scheduler crash"),
            JobSchedulerMsg::Tick(Tick(())) => {
                // A failed sweep is logged and retried at the next tick; Redis
                // being away is no reason to restart the actor.
                let _ = state.sweep().await;
                me.send_after(state.args.sweep_interval, || {
                    JobSchedulerMsg::Tick(Tick(()))
                });
            }
        }
        Ok(())
    }
}

impl JobSchedulerState {
    #[tracing::instrument(level = "debug", name = "scheduler_sweep", skip_all, fields(queue = %self.args.queue))]
    async fn sweep(&self) -> Result<SchedulerSweep> {
        let r = self.schedulers.sweep(self.args.sweep_grace).await;
        match &r {
            Ok(report) => {
                self.metrics.iterations_restored(report.restored.len());
                for restored in &report.restored {
                    warn!(queue = %restored.queue, scheduler = %restored.scheduler_id,
                        missing = %restored.missing_job_id, created = %restored.new_job_id,
                        "scheduler iteration was missing; re-created");
                    if let Some(cb) = &self.args.on_restored {
                        cb(restored.clone());
                    }
                }
            }
            Err(e) => {
                warn!(queue = %self.args.queue, error = %e, "scheduler sweep failed; retrying next interval")
            }
        }
        r
    }
}
