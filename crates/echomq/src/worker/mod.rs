//! The [`Worker`] actor: fetches jobs of one queue, locks them, runs a
//! [`Processor`] on each and finishes them, as BullMQ 6.7.0 workers do. The
//! contract is in `docs/worker.md`.
//!
//! The library ships no supervision tree: the host spawns the Worker and its
//! [`LockManager`] under its own supervisor
//! (see [`spawn_linked`]) and decides about restarts.

mod backoff;
mod backoff_strategy;
mod blocking;
mod core;
mod due_timer;
mod fetcher;
mod flow_ctx;
mod gate;
mod hints;
mod job;
mod limiter;
mod manual;
mod processor;
mod run;
mod seam;

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use self::backoff_strategy::{BackoffInput, BackoffStrategy, CustomBackoff};
pub use self::flow_ctx::Parking;
pub use self::job::{ActiveJob, FinishFailed, FinishOutcome};
pub use self::manual::{Fetched, ManualJob, ManualParking, ManualWorker};
pub use self::processor::{processor_fn, JobContext, ProcessError, ProcessFuture, Processor};

use self::core::WorkerCore;
use self::seam::CancelReason;
use crate::lock_manager::{LockManager, LockManagerArgs};
use crate::lock_protocol::{LockManagerMsg, LockOwner, LockOwnerRef};
use crate::{KeepJobs, Queue};

/// Settings of a worker; the defaults are BullMQ 6.7.0's.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Jobs run at the same time. Default 1.
    pub concurrency: usize,
    /// TTL of a job lock, set on take and on every renewal. Default 30 s.
    pub lock_duration: Duration,
    /// How often the lock is renewed; `None` = `lock_duration / 2`.
    pub lock_renew_time: Option<Duration>,
    /// Period of the stalled check (run by the StalledChecker actor; kept
    /// here so one settings struct describes the worker). Default 30 s.
    pub stalled_interval: Duration,
    /// Stalls tolerated before a job is failed. Default 1.
    pub max_stalled_count: u64,
    /// BZPOPMIN timeout (delayed jobs have their own timer). Default 5 s
    /// (capped at 10 s).
    pub drain_delay: Duration,
    /// Worker name: `pb` of taken jobs and the `:w:<name>` suffix of the
    /// blocking connection's client name. Default none.
    pub name: Option<String>,
    /// A failed attempt of a job started this many times (`ats`) is not
    /// retried: the job fails with its error (BullMQ 6.7.0); a job whose `ats`
    /// exceeds it anyway (recovered from a stall) is failed on pick-up.
    /// Default none; `Some(0)` also means no limit, as BullMQ's
    /// `maxStartedAttempts: 0`.
    pub max_started_attempts: Option<u64>,
    /// Retention after completion when the job sets none.
    pub remove_on_complete: Option<KeepJobs>,
    /// Retention after final failure when the job sets none.
    pub remove_on_fail: Option<KeepJobs>,
    /// Metrics data points (`None` = metrics off).
    pub max_metrics_size: Option<u64>,
    /// How often the actor checks that the blocking read is alive. Default 5 s.
    pub watchdog_interval: Duration,
    /// How long a cancelled processor may run on before its future is
    /// dropped. Default 1 s.
    pub cancel_grace: Duration,
    /// Pause between tries when producing the next iteration of a job
    /// scheduler fails on the connection (BullMQ's `runRetryDelay`).
    /// Default 15 s.
    pub run_retry_delay: Duration,
    /// The worker's rate limiter: at most `max` jobs start per `duration`
    /// across every worker of the queue that uses the same limiter, Rust or
    /// Node (they share `{P}limiter`). A global limit set on the queue
    /// overrides its max. Default none.
    pub limiter: Option<crate::queue::RateLimit>,
    /// Computes the retry delay of jobs whose backoff type is custom (BullMQ's
    /// `settings.backoffStrategy`). Without it such a job fails for good.
    pub backoff_strategy: Option<BackoffStrategy>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            concurrency: 1,
            lock_duration: Duration::from_millis(30_000),
            lock_renew_time: None,
            stalled_interval: Duration::from_millis(30_000),
            max_stalled_count: 1,
            drain_delay: Duration::from_secs(5),
            name: None,
            max_started_attempts: None,
            remove_on_complete: None,
            remove_on_fail: None,
            max_metrics_size: None,
            watchdog_interval: Duration::from_secs(5),
            cancel_grace: Duration::from_secs(1),
            run_retry_delay: Duration::from_secs(15),
            limiter: None,
            backoff_strategy: None,
        }
    }
}

/// Builder setters, one per setting: `WorkerOptions::default().concurrency(8)`.
impl WorkerOptions {
    /// Sets [`backoff_strategy`](Self::backoff_strategy).
    pub fn backoff_strategy(mut self, strategy: BackoffStrategy) -> Self {
        self.backoff_strategy = Some(strategy);
        self
    }

    /// Sets [`limiter`](Self::limiter).
    pub fn limiter(mut self, limit: crate::queue::RateLimit) -> Self {
        self.limiter = Some(limit);
        self
    }

    /// Sets [`concurrency`](Self::concurrency).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets [`lock_duration`](Self::lock_duration).
    pub fn lock_duration(mut self, d: Duration) -> Self {
        self.lock_duration = d;
        self
    }

    /// Sets [`lock_renew_time`](Self::lock_renew_time).
    pub fn lock_renew_time(mut self, d: Duration) -> Self {
        self.lock_renew_time = Some(d);
        self
    }

    /// Sets [`stalled_interval`](Self::stalled_interval).
    pub fn stalled_interval(mut self, d: Duration) -> Self {
        self.stalled_interval = d;
        self
    }

    /// Sets [`max_stalled_count`](Self::max_stalled_count).
    pub fn max_stalled_count(mut self, n: u64) -> Self {
        self.max_stalled_count = n;
        self
    }

    /// Sets [`drain_delay`](Self::drain_delay).
    pub fn drain_delay(mut self, d: Duration) -> Self {
        self.drain_delay = d;
        self
    }

    /// Sets [`name`](Self::name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets [`max_started_attempts`](Self::max_started_attempts) (0 = no limit).
    pub fn max_started_attempts(mut self, n: u64) -> Self {
        self.max_started_attempts = Some(n);
        self
    }

    /// Sets [`remove_on_complete`](Self::remove_on_complete).
    pub fn remove_on_complete(mut self, keep: KeepJobs) -> Self {
        self.remove_on_complete = Some(keep);
        self
    }

    /// Sets [`remove_on_fail`](Self::remove_on_fail).
    pub fn remove_on_fail(mut self, keep: KeepJobs) -> Self {
        self.remove_on_fail = Some(keep);
        self
    }

    /// Sets [`max_metrics_size`](Self::max_metrics_size).
    pub fn max_metrics_size(mut self, points: u64) -> Self {
        self.max_metrics_size = Some(points);
        self
    }

    /// Sets [`watchdog_interval`](Self::watchdog_interval).
    pub fn watchdog_interval(mut self, d: Duration) -> Self {
        self.watchdog_interval = d;
        self
    }

    /// Sets [`cancel_grace`](Self::cancel_grace).
    pub fn cancel_grace(mut self, d: Duration) -> Self {
        self.cancel_grace = d;
        self
    }

    /// Sets [`run_retry_delay`](Self::run_retry_delay).
    pub fn run_retry_delay(mut self, d: Duration) -> Self {
        self.run_retry_delay = d;
        self
    }
}

/// Start-up arguments of a [`Worker`].
#[derive(Clone)]
pub struct WorkerArgs {
    /// The queue (and through it the shared connection).
    pub queue: Queue,
    /// The code run for every job.
    pub processor: Arc<dyn Processor>,
    /// Settings.
    pub options: WorkerOptions,
    /// The LockManager that renews this worker's locks, when already spawned.
    /// A LockManager spawned with this worker's ref attaches itself instead.
    pub lock_manager: Option<ActorRef<LockManagerMsg>>,
    /// Where [`WorkerEvent`]s go; full channel = event dropped and counted.
    pub events: Option<tokio::sync::mpsc::Sender<WorkerEvent>>,
}

impl WorkerArgs {
    /// Arguments with default options and no event channel.
    pub fn new(queue: Queue, processor: Arc<dyn Processor>) -> Self {
        WorkerArgs {
            queue,
            processor,
            options: WorkerOptions::default(),
            lock_manager: None,
            events: None,
        }
    }

    /// The LockManager arguments matching these settings.
    pub fn lock_manager_args(&self, worker: Option<ActorRef<WorkerMsg>>) -> LockManagerArgs {
        LockManagerArgs {
            connection: self.queue.connection().clone(),
            keys: self.queue.keys().clone(),
            lock_duration: self.options.lock_duration,
            lock_renew_time: self.options.lock_renew_time,
            worker: worker.map(LockOwnerRef::new),
        }
    }
}

/// What a worker tells its host, through [`WorkerArgs::events`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// The job completed.
    Completed {
        /// Job id.
        job_id: String,
    },
    /// An attempt failed; `retrying` says whether the job will run again.
    Failed {
        /// Job id.
        job_id: String,
        /// `failedReason`.
        reason: String,
        /// Moved to `wait`/`delayed` for another attempt.
        retrying: bool,
    },
    /// The job's lock was lost (renewal or transition refused): its
    /// processor was cancelled and the worker did not finish it.
    LockLost {
        /// Job id.
        job_id: String,
    },
    /// A transition found the job gone from `active` (or deleted).
    FinishRejected {
        /// Job id.
        job_id: String,
    },
    /// The job was moved back to `wait` at the close deadline.
    MovedBack {
        /// Job id.
        job_id: String,
    },
}

/// A snapshot answered to [`WorkerMsg::GetStatus`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStatus {
    /// Ids of the jobs held now.
    pub active_jobs: Vec<String>,
    /// Transitions made (completed, failed, retried, delayed).
    pub processed: u64,
    /// Failed attempts.
    pub failed: u64,
    /// Time of the last job taken (ms), if any.
    pub last_fetch_ms: Option<u64>,
    /// Current concurrency.
    pub concurrency: usize,
    /// Locally paused.
    pub paused: bool,
    /// Closing.
    pub closing: bool,
    /// A LockManager is attached.
    pub lock_manager_attached: bool,
    /// Events dropped because the host's channel was full.
    pub dropped_events: u64,
}

/// What [`WorkerMsg::Close`] answers once the worker has let every job go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseReport {
    /// Jobs still running when Close arrived that finished before the deadline.
    pub finished_in_time: usize,
    /// Jobs cancelled at the deadline and moved back to `wait`.
    pub moved_back: Vec<String>,
}

/// The Worker's messages. Use `call_t!` for the ones with a reply port.
pub enum WorkerMsg {
    /// Stop taking jobs (local; nothing is written to Redis). Running jobs go on.
    Pause,
    /// Take jobs again.
    Resume,
    /// Change the concurrency (at least 1). Lowering it lets extra slots end
    /// with their current job.
    SetConcurrency(usize),
    /// A snapshot of the worker.
    GetStatus(RpcReplyPort<WorkerStatus>),
    /// Ordered shutdown (docs/worker.md): stop fetching, keep renewing locks,
    /// wait for running jobs up to the timeout, cancel the rest and move them
    /// back to `wait`, close the blocking connection, answer, stop.
    Close(Duration, RpcReplyPort<CloseReport>),
    /// Use this LockManager from now on; every held job is tracked again.
    AttachLockManager(ActorRef<LockManagerMsg>),
    /// From the LockManager: the lock of `job_id` (taken with `token`) could
    /// not be renewed. The job's processor is cancelled; it is not finished.
    LockLost {
        /// Job id.
        job_id: String,
        /// The token whose renewal failed.
        token: String,
    },
    /// Messages the worker sends itself.
    Internal(Internal),
    /// Panics the actor (fault injection for supervision and chaos tests).
    #[cfg(feature = "fault-injection")]
    Crash,
}

/// The worker's own timer and task messages (opaque to hosts).
#[derive(Debug)]
pub struct Internal(InternalKind);

#[derive(Debug)]
enum InternalKind {
    Beat,
    SlotFreed,
    Watchdog,
    CloseDeadline,
}

/// The Worker actor. Spawn it with `Actor::spawn_linked(None, Worker,
/// args, supervisor)`; see [`spawn_linked`] for the Worker + LockManager pair.
#[derive(Debug, Default, Clone, Copy)]
pub struct Worker;

/// The actor's state.
pub struct WorkerState {
    core: Arc<WorkerCore>,
    stop_fetcher: CancellationToken,
    fetcher: Option<tokio::task::JoinHandle<()>>,
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
        if args.options.lock_duration.is_zero() {
            return Err("lock_duration must be positive".into());
        }
        if let Some(limit) = &args.options.limiter {
            limit.validate()?;
        }
        let span =
            tracing::info_span!("worker", queue = %args.queue.name(), worker = ?args.options.name);
        let core = Arc::new(WorkerCore::new(
            args.queue,
            args.processor,
            args.options,
            myself.clone(),
            args.events,
        ));
        if let Some(lm) = args.lock_manager {
            // A restarted Worker re-points its LockManager at itself, so lost
            // locks are reported to a live actor.
            let _ = lm.cast(LockManagerMsg::AttachWorker(LockOwnerRef::new(
                myself.clone(),
            )));
            core.seam().attach(lm);
        }
        let stop = CancellationToken::new();
        let fetcher = fetcher::spawn(core.clone(), stop.clone());
        myself.send_after(core.opts().watchdog_interval, || {
            WorkerMsg::Internal(Internal(InternalKind::Watchdog))
        });
        span.in_scope(|| info!(concurrency = core.opts().concurrency, "worker started"));
        Ok(WorkerState {
            core,
            stop_fetcher: stop,
            fetcher: Some(fetcher),
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
            state.pool_probe = Some(tokio::spawn(probe_pool(core.conn().clone())));
        }
    }
}

/// A half-open network (packets vanish, no FIN or RST) leaves the shared
/// pool's sockets open but dead: fred times each command out and keeps the
/// socket, so every later command on it times out too, and renewals,
/// finishes and stalled checks all fail for good (a deaf worker). A PING
/// that times out rebuilds the pool's connections (commands are never
/// replayed, so nothing runs twice). The blocking client has its own
/// watchdog above. Chaos scenario F40 (docs/reliability.md).
async fn probe_pool(conn: crate::Connection) {
    use fred::interfaces::ClientLike;
    if let Err(e) = conn.pool().ping::<String>(None).await {
        if matches!(e.kind(), fred::error::ErrorKind::Timeout) {
            warn!(error = %e, "the pool does not answer: reconnecting it");
            if let Err(e) = conn.pool().force_reconnection().await {
                warn!(error = %e, "pool reconnection failed; the next watchdog tick retries");
            }
        }
    }
}

/// A lost lock reported by the LockManager: the job is not ours any more, so
/// its processor is cancelled and nothing is written.
fn lock_lost(core: &WorkerCore, job_id: String, token: &str) {
    match core.seam().take_if(&job_id, token) {
        Some(h) => {
            warn!(%job_id, "lock lost: cancelling the job's processor");
            h.cancel(CancelReason::LockLost);
            core.emit(WorkerEvent::LockLost { job_id });
        }
        None => debug!(%job_id, "lock lost for a job no longer held"),
    }
}

fn status(core: &WorkerCore) -> WorkerStatus {
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

/// The Worker as its LockManager's [`LockOwner`]: reports become messages.
impl LockOwner for ActorRef<WorkerMsg> {
    fn lock_lost(&self, job_id: String, token: String) {
        let _ = self.cast(WorkerMsg::LockLost { job_id, token });
    }

    fn attach(&self, lock_manager: ActorRef<LockManagerMsg>) {
        let _ = self.cast(WorkerMsg::AttachLockManager(lock_manager));
    }
}

/// Spawns a Worker and its LockManager, both linked to `supervisor`, and
/// returns their refs. The LockManager attaches itself to the Worker; when the
/// host's supervisor restarts the LockManager with
/// [`WorkerArgs::lock_manager_args`] and the Worker's ref, the new one
/// attaches itself again and every held lock is tracked again.
pub async fn spawn_linked(
    supervisor: ActorCell,
    args: WorkerArgs,
) -> Result<(ActorRef<WorkerMsg>, ActorRef<LockManagerMsg>), SpawnErr> {
    let lm_args_base = args.lock_manager_args(None);
    let (worker, _) = Actor::spawn_linked(None, Worker, args, supervisor.clone()).await?;
    let lm_args = LockManagerArgs {
        worker: Some(LockOwnerRef::new(worker.clone())),
        ..lm_args_base
    };
    let (lm, _) = Actor::spawn_linked(None, LockManager, lm_args, supervisor).await?;
    Ok((worker, lm))
}
