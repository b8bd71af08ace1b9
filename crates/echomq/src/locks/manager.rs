//! The [`LockManager`] actor: one timer per worker, ticking once per renew
//! window (`lockDuration / 2` by default, as BullMQ), and every held lock
//! extended in one round trip per tick, whatever the number of held jobs:
//! one `extendLocks` call per [`MAX_LOCKS_PER_CALL`] locks, sent together.
//! The contract is in `docs/lock-manager.md`.
//!
//! N held jobs cost one timer and one Redis round trip per window, not N. The
//! Worker shares its held set (the `Share` plumbing message) rather than sending
//! a message per job taken and let go. A lock that cannot be renewed is
//! reported to the Worker at once, which cancels that job's processor and does
//! not finish the job.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use echomq_protocol::call::lifecycle::ExtendLocks;
use echomq_protocol::QueueKeys;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{debug, info, info_span, warn, Instrument};

use super::protocol::{
    HeldLock, HeldLocksRef, InternalMsg, LockManagerMsg, LockOwnerRef, LockStats, TrackedLock,
};
use crate::connection::pool::Connection;
use crate::error::Error;
use crate::telemetry::metrics::QueueMetrics;

/// Start-up arguments of a [`LockManager`].
#[derive(Clone, Debug)]
pub struct LockManagerArgs {
    /// The shared connection.
    pub connection: Connection,
    /// The queue's keys.
    pub keys: QueueKeys,
    /// TTL each renewal gives a lock. BullMQ default 30 s.
    pub lock_duration: Duration,
    /// Renewal window; `None` = `lock_duration / 2`. The timer ticks once per
    /// window and renews every held lock, so a lock is never older than one
    /// window (plus a call) when renewed.
    pub lock_renew_time: Option<Duration>,
    /// The Worker to report lost locks to. When set, the LockManager attaches
    /// itself to that Worker on start, so a restarted LockManager is handed
    /// every held job again. Set by
    /// [`WorkerArgs::lock_manager_args`](crate::worker::WorkerArgs::lock_manager_args)
    /// or [`LockManagerArgs::reporting_to`].
    pub(crate) owner: Option<LockOwnerRef>,
}

impl LockManagerArgs {
    /// Arguments for the locks of `keys`' queue, renewed with `lock_duration`
    /// every `lock_duration / 2`, reporting to no Worker.
    pub fn new(connection: Connection, keys: QueueKeys, lock_duration: Duration) -> Self {
        LockManagerArgs {
            connection,
            keys,
            lock_duration,
            lock_renew_time: None,
            owner: None,
        }
    }

    fn renew_time(&self) -> Duration {
        self.lock_renew_time
            .unwrap_or(self.lock_duration / 2)
            .max(Duration::from_millis(2))
    }
}

/// The LockManager actor. Spawn it linked to the host's supervisor, one per
/// Worker; name it `None` (the registry is global).
#[derive(Debug, Default, Clone, Copy)]
pub struct LockManager;

/// The actor's state.
pub struct LockManagerState {
    args: LockManagerArgs,
    renew_time: Duration,
    shared: Vec<HeldLocksRef>,
    /// When each lock of the shared sets was last renewed.
    renewed_at: HashMap<String, Instant>,
    stats: LockStats,
    timer_gen: u64,
    failing_since: Option<Instant>,
    span: tracing::Span,
    metrics: QueueMetrics,
}

impl Actor for LockManager {
    type Msg = LockManagerMsg;
    type State = LockManagerState;
    type Arguments = LockManagerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<LockManagerMsg>,
        args: LockManagerArgs,
    ) -> Result<LockManagerState, ActorProcessingErr> {
        if args.lock_duration.is_zero() {
            return Err("lock_duration must be positive".into());
        }
        let renew_time = args.renew_time();
        let span = info_span!("lock_manager", queue = %args.keys.name());
        let metrics = QueueMetrics::new(args.keys.name());
        Ok(LockManagerState {
            args,
            renew_time,
            shared: Vec::new(),
            renewed_at: HashMap::new(),
            stats: LockStats::default(),
            timer_gen: 0,
            failing_since: None,
            span,
            metrics,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<LockManagerMsg>,
        state: &mut LockManagerState,
    ) -> Result<(), ActorProcessingErr> {
        let _enter = state.span.clone().entered();
        info!(
            renew_every_ms = state.renew_time.as_millis() as u64,
            "lock manager started"
        );
        arm(&myself, state, state.renew_time);
        if let Some(w) = &state.args.owner {
            // The Worker answers by sharing its held set.
            w.attach(myself.clone());
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LockManagerMsg>,
        msg: LockManagerMsg,
        state: &mut LockManagerState,
    ) -> Result<(), ActorProcessingErr> {
        let span = state.span.clone();
        handle(myself, msg, state).instrument(span).await
    }
}

async fn handle(
    myself: ActorRef<LockManagerMsg>,
    msg: LockManagerMsg,
    state: &mut LockManagerState,
) -> Result<(), ActorProcessingErr> {
    match msg {
        #[cfg(feature = "fault-injection")]
        LockManagerMsg::Crash => panic!("fault injection: lock manager crash"),
        LockManagerMsg::Internal(super::protocol::Internal(msg)) => match msg {
            InternalMsg::AttachWorker(w) => state.args.owner = Some(w),
            InternalMsg::Share(set) => {
                if !state.shared.iter().any(|s| s.same(&set)) {
                    state.shared.push(set);
                    handed_over(&myself, state).await?;
                }
            }
            InternalMsg::Tick(gen) if gen == state.timer_gen => tick(&myself, state).await?,
            InternalMsg::Tick(_) => {}
        },
        LockManagerMsg::RenewNow => {
            if let Err(e) = renew(state).await {
                return on_error(state, e);
            }
        }
        LockManagerMsg::GetTracked(reply) => {
            let _ = reply.send(tracked(state));
        }
        LockManagerMsg::GetStats(reply) => {
            let _ = reply.send(state.stats.clone());
        }
    }
    Ok(())
}

/// A Worker handed its held set over (at the start of a LockManager, or of a
/// Worker): its locks are renewed at once and the window counted from here.
/// A restarted LockManager cannot know how old they are — its predecessor
/// may have died just before its tick, leaving them a whole window old —
/// and its own first tick would come another window later, past the locks'
/// life (docs/lock-manager.md §Restart).
async fn handed_over(
    myself: &ActorRef<LockManagerMsg>,
    state: &mut LockManagerState,
) -> Result<(), ActorProcessingErr> {
    let period = state.renew_time;
    match renew(state).await {
        Ok(()) => arm(myself, state, period),
        Err(e) => {
            on_error(state, e)?;
            arm(myself, state, (period / 8).max(Duration::from_millis(10)));
        }
    }
    Ok(())
}

/// The live timer fired: renew what is due and re-arm.
async fn tick(
    myself: &ActorRef<LockManagerMsg>,
    state: &mut LockManagerState,
) -> Result<(), ActorProcessingErr> {
    state.stats.ticks += 1;
    let period = state.renew_time;
    match renew(state).await {
        Ok(()) => arm(myself, state, period),
        Err(e) => {
            on_error(state, e)?;
            // Retry soon: the locks still have half their life left.
            arm(myself, state, (period / 8).max(Duration::from_millis(10)));
        }
    }
    Ok(())
}

fn tracked(state: &LockManagerState) -> Vec<TrackedLock> {
    let now = Instant::now();
    let mut v: Vec<TrackedLock> = shared_locks(state)
        .into_iter()
        .map(|lock| {
            let last = match state.renewed_at.get(&lock.id) {
                Some(at) if *at > lock.since => *at,
                _ => lock.since,
            };
            TrackedLock {
                id: lock.id,
                token: lock.token,
                since_renewal: now.saturating_duration_since(last),
            }
        })
        .collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

/// The locks of the shared sets, as they are now.
fn shared_locks(state: &LockManagerState) -> Vec<HeldLock> {
    state.shared.iter().flat_map(|set| set.snapshot()).collect()
}

/// Re-arms the one timer; an older pending tick is ignored by generation, so
/// there is never more than one live timer, and a slow call never piles
/// ticks up.
fn arm(myself: &ActorRef<LockManagerMsg>, state: &mut LockManagerState, after: Duration) {
    state.timer_gen += 1;
    let gen = state.timer_gen;
    myself.send_after(after, move || {
        LockManagerMsg::internal(InternalMsg::Tick(gen))
    });
}

/// A failed renewal call: retried while the oldest lock may still be alive,
/// otherwise the actor fails for its supervisor.
fn on_error(state: &mut LockManagerState, e: Error) -> Result<(), ActorProcessingErr> {
    state.stats.redis_errors += 1;
    if !e.is_connection() {
        return Err(Box::new(e));
    }
    let since = *state.failing_since.get_or_insert_with(Instant::now);
    if since.elapsed() > state.args.lock_duration {
        warn!(error = %e, "renewals failing for longer than a lock lives");
        return Err(Box::new(e));
    }
    warn!(error = %e, "lock renewal failed; retrying");
    Ok(())
}

/// Most locks one `extendLocks` call renews. A lock costs the script about
/// 2.6 µs of Redis time (10 000 in one call took 25.8 ms on a quiet machine,
/// docs/benchmarks.md §Scale), so a call of 1 000 stays within the few ms
/// any one call may hold Redis (docs/decisions.md §17).
pub const MAX_LOCKS_PER_CALL: usize = 1000;

/// Every lock of the shared sets renewed in one round trip: one
/// `extendLocks` call per [`MAX_LOCKS_PER_CALL`] locks, all sent at once.
#[tracing::instrument(level = "debug", name = "lock_renewal", skip_all)]
async fn renew(state: &mut LockManagerState) -> Result<(), Error> {
    let now = Instant::now();
    // A set nobody else holds belongs to a Worker instance whose tasks all
    // ended: nothing of it is held any more.
    state.shared.retain(|set| !set.orphaned());
    let locks: Vec<(String, String)> = shared_locks(state)
        .into_iter()
        .map(|l| (l.id, l.token))
        .collect();
    if locks.is_empty() {
        state.renewed_at.clear();
        state.metrics.no_locks_held();
        return Ok(());
    }
    let (keys, duration) = (&state.args.keys, state.args.lock_duration);
    let connection = &state.args.connection;
    let chunks: Vec<&[(String, String)]> = locks.chunks(MAX_LOCKS_PER_CALL).collect();
    let replies = futures_util::future::join_all(chunks.iter().map(|chunk| async move {
        let call = ExtendLocks {
            keys,
            locks: chunk,
            duration,
        };
        connection.call(&call).await
    }))
    .await;
    state.stats.extend_calls += chunks.len() as u64;
    state.stats.last_batch = locks.len();
    state.stats.last_calls = chunks.len();
    // A chunk whose call failed keeps its locks' last renewal time: they are
    // neither renewed nor known lost, and the retry comes within the window.
    let mut first_error = None;
    let mut lost: HashSet<String> = HashSet::new();
    let mut unanswered: HashSet<&str> = HashSet::new();
    for (chunk, reply) in chunks.iter().zip(replies) {
        match reply {
            Ok(failed) => lost.extend(failed),
            Err(e) => {
                unanswered.extend(chunk.iter().map(|(id, _)| id.as_str()));
                first_error.get_or_insert(e);
            }
        }
    }
    // A job finished while its renewal was on the way comes back failed too
    // (its lock is deleted): only a lock still held under the same token is
    // lost. The rest were let go, which is neither a loss nor a warning.
    let still_held: HashSet<(String, String)> = if lost.is_empty() {
        HashSet::new()
    } else {
        shared_locks(state)
            .into_iter()
            .map(|l| (l.id, l.token))
            .collect()
    };
    let (mut renewed, mut lost_held, mut let_go) = (0u64, 0u64, 0u64);
    let mut renewed_at = HashMap::with_capacity(locks.len());
    for (id, token) in &locks {
        if unanswered.contains(id.as_str()) {
            if let Some(at) = state.renewed_at.get(id) {
                renewed_at.insert(id.clone(), *at);
            }
        } else if lost.contains(id.as_str()) {
            if !still_held.contains(&(id.clone(), token.clone())) {
                let_go += 1;
                continue;
            }
            lost_held += 1;
            warn!(job_id = %id, "lock lost: reporting to the worker");
            if let Some(w) = &state.args.owner {
                w.lock_lost(id.clone(), token.clone());
            }
        } else {
            renewed += 1;
            renewed_at.insert(id.clone(), now);
        }
    }
    state.renewed_at = renewed_at;
    state.stats.renewed += renewed;
    state.stats.lost += lost_held;
    state.stats.let_go += let_go;
    state.metrics.locks_renewed(
        (renewed + lost_held) as usize,
        lost_held as usize,
        now.elapsed(),
    );
    debug!(
        renewed,
        lost = lost_held,
        let_go,
        calls = chunks.len(),
        "locks renewed"
    );
    match first_error {
        None => {
            state.failing_since = None;
            Ok(())
        }
        Some(e) => Err(e),
    }
}
