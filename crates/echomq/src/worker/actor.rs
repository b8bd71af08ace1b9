//! The [`Worker`] actor: fetches jobs of one queue, locks them, runs a
//! [`Processor`](super::process::processor::Processor) on each and finishes them, as BullMQ 6.7.0 workers do. The
//! contract is in `docs/worker.md`.
//!
//! The library ships no supervision tree: the host spawns the Worker and its
//! [`LockManager`](crate::locks::LockManager) under its own supervisor
//! (see `supervision::WorkerSetSpec`) and decides about restarts.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::fetch::fetcher;
use super::messages::{
    CloseReport, Internal, InternalKind, WorkerCounts, WorkerEvent, WorkerMsg, WorkerStatus,
};
use super::options::{WorkerArgs, WorkerProcessor};
use super::process::cancels;
use super::shared::WorkerShared;
use crate::locks::protocol::{InternalMsg, LockManagerMsg, LockOwnerRef};
use crate::locks::seam::CancelReason;

/// The Worker actor. Spawn it with `Actor::spawn_linked(None, Worker,
/// args, supervisor)`; `supervision::WorkerSetSpec`
/// spawns it with its LockManager and StalledChecker, as `Host::add_worker` does.
#[derive(Debug, Default, Clone, Copy)]
pub struct Worker;

/// The actor's state.
pub struct WorkerState {
    core: Arc<WorkerShared>,
    stop_fetcher: CancellationToken,
    fetcher: Option<tokio::task::JoinHandle<()>>,
    /// The remote-cancel listener and its stop.
    cancels: (tokio::task::JoinHandle<()>, CancellationToken),
    /// The running probe of the shared pool (see `probe_pool`).
    pool_probe: Option<tokio::task::JoinHandle<()>>,
    close: Option<PendingClose>,
    span: tracing::Span,
}

struct PendingClose {
    reply: RpcReplyPort<CloseReport>,
    running_at_close: Vec<String>,
    moved_back: Vec<String>,
}

impl Actor for Worker {
    type Msg = WorkerMsg;
    type State = WorkerState;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<WorkerMsg>,
        args: WorkerArgs,
    ) -> Result<WorkerState, ActorProcessingErr> {
        let mut args = args;
        if args.options.dead_letter.is_none() {
            args.options.dead_letter = args.queue.options.dead_letter.clone();
        }
        if let Some(dlq) = args.options.dead_letter.as_mut() {
            dlq.resolve(args.queue.connection(), args.queue.keys())?;
        }
        if args.options.lock_duration.is_zero() {
            return Err("lock_duration must be positive".into());
        }
        if let Some(limit) = &args.options.limiter {
            limit.validate()?;
        }
        if let Some(group) = &args.options.group {
            crate::groups::admin::validate_defaults(group)?;
        }
        if let WorkerProcessor::Batches(_, batch) = &args.processor {
            batch.validate()?;
        }
        let span =
            tracing::info_span!("worker", queue = %args.queue.name(), worker = ?args.options.name);
        let core = Arc::new(WorkerShared::new(
            args.queue,
            args.processor,
            args.options,
            myself.clone(),
            args.events,
        ));
        if let Some(lm) = args.lock_manager {
            // A restarted Worker re-points its LockManager at itself, so lost
            // locks are reported to a live actor.
            let _ = lm.cast(LockManagerMsg::internal(InternalMsg::AttachWorker(
                LockOwnerRef::new(myself.clone()),
            )));
            core.seam().attach(lm);
        }
        let stop = CancellationToken::new();
        if let Some(group) = core.opts().group {
            crate::groups::defaults::publish(core.queue_arc(), group, stop.clone());
        }
        let fetcher = fetcher::spawn(core.clone(), stop.clone());
        let cancels_stop = CancellationToken::new();
        let cancels = cancels::spawn(core.clone(), cancels_stop.clone());
        myself.send_after(core.opts().watchdog_interval, || {
            WorkerMsg::Internal(Internal(InternalKind::Watchdog))
        });
        span.in_scope(|| info!(concurrency = core.opts().concurrency, "worker started"));
        Ok(WorkerState {
            core,
            stop_fetcher: stop,
            fetcher: Some(fetcher),
            cancels: (cancels, cancels_stop),
            pool_probe: None,
            close: None,
            span,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        state: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        let _enter = state.span.clone().entered();
        self.handle_sync(&myself, msg, state);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<WorkerMsg>,
        state: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        state.stop_fetcher.cancel();
        state.cancels.1.cancel();
        state.core.gate().close();
        state.core.blocking().discard();
        Ok(())
    }
}

impl Worker {
    // Every handler is synchronous: Redis work happens in the tasks the
    // worker owns, so the mailbox never waits on the network.
    fn handle_sync(&self, myself: &ActorRef<WorkerMsg>, msg: WorkerMsg, state: &mut WorkerState) {
        let core = state.core.clone();
        match msg {
            WorkerMsg::Pause => core.gate().set_paused(true),
            WorkerMsg::Resume => {
                // A marker popped while paused is gone: look at the queue
                // directly instead of waiting for the next one.
                core.hints().wake();
                core.gate().set_paused(false);
            }
            WorkerMsg::SetConcurrency(n) => {
                info!(concurrency = n, "concurrency changed");
                core.hints().wake();
                core.gate().set_limit(n);
            }
            WorkerMsg::GetStatus(reply) => {
                let _ = reply.send(status(&core));
            }
            WorkerMsg::GetCounts(reply) => {
                let counters = core.counters();
                // Takes before held jobs: a take settles only once its job
                // is tracked, so a job cannot fall between the two reads.
                let takes = core.takes().map(|t| t.now());
                let _ = reply.send(WorkerCounts {
                    active: core.seam().held_count(),
                    processed: counters.processed(),
                    failed: counters.failed(),
                    takes_left: takes.map(|t| t.left),
                    takes_in_flight: takes.map_or(0, |t| t.in_flight),
                });
            }
            WorkerMsg::AttachLockManager(lm) => {
                let held = core.seam().attach(lm);
                info!(held, "lock manager attached; held jobs tracked again");
            }
            WorkerMsg::LockLost { job_id, token } => lock_lost(&core, job_id, &token),
            WorkerMsg::Close(timeout, reply) => self.start_close(myself, state, timeout, reply),
            #[cfg(feature = "fault-injection")]
            WorkerMsg::Crash => panic!("fault injection: worker crash"),
            WorkerMsg::Internal(Internal(kind)) => self.internal(myself, state, kind),
        }
    }

    fn internal(&self, myself: &ActorRef<WorkerMsg>, state: &mut WorkerState, kind: InternalKind) {
        match kind {
            InternalKind::Beat => {}
            InternalKind::SlotFreed => self.maybe_finish_close(myself, state),
            InternalKind::CloseDeadline => {
                if let Some(pc) = state.close.as_mut() {
                    for (id, h) in state.core.seam().held() {
                        warn!(job_id = %id, "close deadline: cancelling and moving back to wait");
                        h.cancel(CancelReason::Shutdown);
                        pc.moved_back.push(id);
                    }
                }
                self.maybe_finish_close(myself, state);
            }
            InternalKind::Watchdog => {
                self.watchdog(state);
                myself.send_after(state.core.opts().watchdog_interval, || {
                    WorkerMsg::Internal(Internal(InternalKind::Watchdog))
                });
            }
        }
    }

    fn start_close(
        &self,
        myself: &ActorRef<WorkerMsg>,
        state: &mut WorkerState,
        timeout: Duration,
        reply: RpcReplyPort<CloseReport>,
    ) {
        if state.close.is_some() {
            // A second Close gets the same final answer as the first would: not
            // worth a queue of ports; answer empty at once.
            let _ = reply.send(CloseReport::default());
            return;
        }
        let core = &state.core;
        info!(
            timeout_ms = timeout.as_millis() as u64,
            "closing: fetching stopped, waiting for running jobs"
        );
        core.gate().close();
        state.stop_fetcher.cancel();
        let running = core.seam().held_ids();
        state.close = Some(PendingClose {
            reply,
            running_at_close: running,
            moved_back: Vec::new(),
        });
        myself.send_after(timeout, || {
            WorkerMsg::Internal(Internal(InternalKind::CloseDeadline))
        });
        self.maybe_finish_close(myself, state);
    }

    fn maybe_finish_close(&self, myself: &ActorRef<WorkerMsg>, state: &mut WorkerState) {
        if state.close.is_none() {
            return;
        }
        let in_use = state.core.gate().snapshot().in_use;
        let fetcher_done = state.fetcher.as_ref().is_none_or(|h| h.is_finished());
        if in_use > 0 || !fetcher_done {
            if !fetcher_done {
                // The fetcher may sit in BZPOPMIN: unblock it, then look again.
                state.core.blocking().discard();
                myself.send_after(Duration::from_millis(50), || {
                    WorkerMsg::Internal(Internal(InternalKind::SlotFreed))
                });
            }
            return;
        }
        let Some(pc) = state.close.take() else { return };
        state.core.blocking().discard();
        let moved: std::collections::HashSet<&String> = pc.moved_back.iter().collect();
        let report = CloseReport {
            finished_in_time: pc
                .running_at_close
                .iter()
                .filter(|id| !moved.contains(id))
                .count(),
            moved_back: pc.moved_back.clone(),
        };
        info!(
            finished = report.finished_in_time,
            moved_back = report.moved_back.len(),
            "worker closed"
        );
        let _ = pc.reply.send(report);
        // The LockManager exists for this worker only; with every job let
        // go it has nothing left to renew.
        if let Some(lm) = state.core.seam().detach() {
            lm.stop(Some("worker closed".into()));
        }
        myself.stop(Some("closed".into()));
    }

    fn watchdog(&self, state: &mut WorkerState) {
        if state.close.is_some() {
            return;
        }
        let core = &state.core;
        let now = crate::clock::now_ms();
        let deadline = core.blocking().deadline();
        let stuck = deadline != 0 && now > deadline + fetcher::WATCHDOG_MARGIN.as_millis() as u64;
        let dead = state.fetcher.as_ref().is_none_or(|h| h.is_finished());
        if stuck || dead {
            warn!(
                stuck,
                dead, "fetch loop not alive: restarting it on a fresh connection"
            );
            state.stop_fetcher.cancel();
            if let Some(h) = state.fetcher.take() {
                h.abort();
            }
            core.blocking().discard();
            core.blocking().set_deadline(0);
            state.stop_fetcher = CancellationToken::new();
            state.fetcher = Some(fetcher::spawn(core.clone(), state.stop_fetcher.clone()));
        }
        if state.pool_probe.as_ref().is_none_or(|h| h.is_finished()) {
            let conn = core.conn().clone();
            state.pool_probe = Some(tokio::spawn(async move { conn.probe().await }));
        }
    }
}

/// A lost lock reported by the LockManager: the job is not ours any more, so
/// its processor is cancelled and nothing is written.
fn lock_lost(core: &WorkerShared, job_id: String, token: &str) {
    match core.seam().take_if(&job_id, token) {
        Some(h) if h.finish_unknown() => {
            // Renewal stops (the lock is gone either way); whether it went
            // with this worker's own finish is the resend's to say.
            debug!(%job_id, "lock gone while a finish's outcome is unknown: its resend decides");
        }
        Some(h) => {
            warn!(%job_id, "lock lost: cancelling the job's processor");
            h.cancel(CancelReason::LockLost);
            core.emit(WorkerEvent::LockLost { job_id });
        }
        None => debug!(%job_id, "lock lost for a job no longer held"),
    }
}

fn status(core: &WorkerShared) -> WorkerStatus {
    let gate = core.gate().snapshot();
    let counters = core.counters();
    WorkerStatus {
        active_jobs: core.seam().held_ids(),
        processed: counters.processed(),
        failed: counters.failed(),
        last_fetch_ms: counters.last_fetch(),
        concurrency: gate.limit,
        paused: gate.paused,
        closing: gate.closing,
        lock_manager_attached: core.seam().attached(),
        dropped_events: counters.dropped_events(),
    }
}
