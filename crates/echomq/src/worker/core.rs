//! State one Worker instance shares with the tasks it owns: the slot gate, the
//! lock seam (held jobs and the LockManager they are reported to), counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use echomq_protocol::packing::{FetchOpts, MetricsSize};
use echomq_protocol::{QueueKeys, ScriptId};
use fred::prelude::{Client, Value};
use ractor::{ActorRef, ActorStatus};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::job::ActiveJob;
use super::{Internal, WorkerEvent, WorkerMsg, WorkerOptions};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::lock_manager::LockManagerMsg;
use crate::queue::Queue;
use crate::reply::{as_array, as_i64, as_string, bytes, pairs, text};
use crate::worker::processor::Processor;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short critical sections leaves plain
    // data behind, still consistent enough to keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why a held job was cancelled.
pub(crate) const CANCEL_NONE: u8 = 0;
pub(crate) const CANCEL_LOCK_LOST: u8 = 1;
pub(crate) const CANCEL_SHUTDOWN: u8 = 2;

/// A job this worker instance holds a lock for.
#[derive(Clone)]
pub(crate) struct Held {
    pub token: Arc<str>,
    pub cancel: CancellationToken,
    pub reason: Arc<AtomicU8>,
    pub attempt: u64,
}

#[derive(Default)]
pub(crate) struct Seam {
    pub lock_manager: Option<ActorRef<LockManagerMsg>>,
    pub held: HashMap<String, Held>,
}

/// Counts the slots in use against the concurrency; the fetcher takes a slot
/// before it fetches, so no more jobs are ever taken than there are slots.
pub(crate) struct SlotGate {
    state: Mutex<GateState>,
    notify: Notify,
}

struct GateState {
    limit: usize,
    in_use: usize,
    paused: bool,
    closing: bool,
}

impl SlotGate {
    fn new(limit: usize) -> Self {
        SlotGate {
            state: Mutex::new(GateState {
                limit: limit.max(1),
                in_use: 0,
                paused: false,
                closing: false,
            }),
            notify: Notify::new(),
        }
    }

    /// Waits for a free slot while running; `None` once closing.
    pub async fn acquire(self: &Arc<Self>, core: &Arc<WorkerCore>) -> Option<SlotPermit> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a release between the check and the
            // await is not missed.
            notified.as_mut().enable();
            {
                let mut s = lock(&self.state);
                if s.closing {
                    return None;
                }
                if !s.paused && s.in_use < s.limit {
                    s.in_use += 1;
                    return Some(SlotPermit { core: core.clone() });
                }
            }
            notified.await;
        }
    }

    fn release(&self) {
        let mut s = lock(&self.state);
        s.in_use = s.in_use.saturating_sub(1);
        drop(s);
        self.notify.notify_waiters();
    }

    /// Whether a finishing slot may take the next job in the same call: the
    /// slot is still counted, so "not above" the limit (worker-loop.md §3).
    pub fn may_fetch_next(&self) -> bool {
        let s = lock(&self.state);
        !s.closing && !s.paused && s.in_use <= s.limit
    }

    pub fn runnable(&self) -> bool {
        let s = lock(&self.state);
        !s.closing && !s.paused
    }

    pub fn set(&self, f: impl FnOnce(&mut GateStateView)) {
        let mut s = lock(&self.state);
        let mut v = GateStateView {
            limit: s.limit,
            paused: s.paused,
            closing: s.closing,
        };
        f(&mut v);
        s.limit = v.limit.max(1);
        s.paused = v.paused;
        s.closing = s.closing || v.closing;
        drop(s);
        self.notify.notify_waiters();
    }

    pub fn snapshot(&self) -> (usize, usize, bool, bool) {
        let s = lock(&self.state);
        (s.limit, s.in_use, s.paused, s.closing)
    }
}

/// The settable part of the gate.
pub(crate) struct GateStateView {
    pub limit: usize,
    pub paused: bool,
    pub closing: bool,
}

/// One slot; given back when dropped, whatever path the holder takes.
pub(crate) struct SlotPermit {
    core: Arc<WorkerCore>,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.core.gate.release();
        if self.core.gate.snapshot().3 {
            // The actor finishes an ordered close when the last slot is back.
            let _ = self.core.myself.cast(WorkerMsg::Internal(Internal(
                super::InternalKind::SlotFreed,
            )));
        }
    }
}

/// What the fetcher's blocking read is doing, for the watchdog.
#[derive(Default)]
pub(crate) struct Watch {
    /// ms after which a pending BZPOPMIN is overdue; 0 when none is pending.
    pub blocking_deadline: AtomicU64,
    /// Last time the fetcher went round its loop, ms.
    pub heartbeat: AtomicU64,
}

pub(crate) struct WorkerCore {
    pub queue: Queue,
    pub keys: QueueKeys,
    pub conn: Connection,
    pub processor: Arc<dyn Processor>,
    pub opts: WorkerOptions,
    pub name: Option<Arc<str>>,
    pub gate: Arc<SlotGate>,
    pub seam: Mutex<Seam>,
    pub myself: ActorRef<WorkerMsg>,
    pub events: Option<tokio::sync::mpsc::Sender<WorkerEvent>>,
    pub processed: AtomicU64,
    pub failed: AtomicU64,
    pub dropped_events: AtomicU64,
    pub last_fetch: AtomicU64,
    pub drained: AtomicBool,
    pub block_until: AtomicI64,
    pub limit_until: AtomicI64,
    pub watch: Watch,
    pub blocking: Mutex<Option<(Client, Option<i64>)>>,
}

/// A decoded next-job reply (scripts.md §0.2).
pub(crate) enum NextReply {
    Job {
        id: String,
        fields: Vec<(String, String)>,
    },
    RateLimited(i64),
    DelayedUntil(i64),
    Nothing,
}

impl WorkerCore {
    pub fn new(
        queue: Queue,
        processor: Arc<dyn Processor>,
        opts: WorkerOptions,
        myself: ActorRef<WorkerMsg>,
        events: Option<tokio::sync::mpsc::Sender<WorkerEvent>>,
    ) -> Self {
        WorkerCore {
            keys: queue.keys().clone(),
            conn: queue.connection().clone(),
            name: opts.name.as_deref().map(Arc::from),
            gate: Arc::new(SlotGate::new(opts.concurrency)),
            queue,
            processor,
            opts,
            seam: Mutex::new(Seam::default()),
            myself,
            events,
            processed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped_events: AtomicU64::new(0),
            last_fetch: AtomicU64::new(0),
            drained: AtomicBool::new(false),
            block_until: AtomicI64::new(0),
            limit_until: AtomicI64::new(0),
            watch: Watch::default(),
            blocking: Mutex::new(None),
        }
    }

    /// Whether the actor that owns these tasks still runs; tasks of a dead
    /// instance finish what they hold and take nothing new.
    pub fn alive(&self) -> bool {
        matches!(
            self.myself.get_status(),
            ActorStatus::Starting | ActorStatus::Running | ActorStatus::Upgrading
        )
    }

    pub fn emit(&self, event: WorkerEvent) {
        if let Some(tx) = &self.events {
            if tx.try_send(event).is_err() {
                self.dropped_events.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn fetch_opts_packed(&self, token: &str) -> Vec<u8> {
        FetchOpts {
            token,
            lock_duration: self.opts.lock_duration.as_millis() as u64,
            limiter: None,
            name: self.name.as_deref(),
        }
        .pack()
    }

    pub fn metrics(&self) -> MetricsSize {
        match self.opts.max_metrics_size {
            Some(n) => MetricsSize::Points(n),
            None => MetricsSize::Off,
        }
    }

    pub async fn move_to_active(&self, token: &str) -> Result<NextReply> {
        let k = &self.keys;
        let keys = k.move_to_active_keys();
        let args = vec![
            text(k.prefix_key()),
            text(crate::clock::now_ms()),
            bytes(self.fetch_opts_packed(token)),
        ];
        let v = self
            .conn
            .run_script(ScriptId::MoveToActive, keys, args)
            .await?;
        parse_next("moveToActive", v)
    }

    /// Registers a job the moment a script handed it over: held map first,
    /// then `Track` to the LockManager, both without awaiting, so no renewal
    /// window opens between the lock being set and being tracked.
    pub fn track(&self, id: &str, token: &Arc<str>, attempt: u64) -> Held {
        let held = Held {
            token: token.clone(),
            cancel: CancellationToken::new(),
            reason: Arc::new(AtomicU8::new(CANCEL_NONE)),
            attempt,
        };
        let mut seam = lock(&self.seam);
        seam.held.insert(id.to_owned(), held.clone());
        if let Some(lm) = &seam.lock_manager {
            let _ = lm.cast(LockManagerMsg::Track {
                id: id.to_owned(),
                token: token.to_string(),
            });
        }
        held
    }

    /// Stops renewing a job's lock, unless the entry was replaced meanwhile.
    pub fn untrack(&self, id: &str, token: &str) {
        let mut seam = lock(&self.seam);
        if seam.held.get(id).is_some_and(|h| &*h.token == token) {
            seam.held.remove(id);
            if let Some(lm) = &seam.lock_manager {
                let _ = lm.cast(LockManagerMsg::Untrack { id: id.to_owned() });
            }
        }
    }

    /// Puts a job back under renewal after a finishing call failed on the
    /// connection and will be retried.
    pub fn retrack(&self, id: &str, held: &Held) {
        let mut seam = lock(&self.seam);
        seam.held.insert(id.to_owned(), held.clone());
        if let Some(lm) = &seam.lock_manager {
            let _ = lm.cast(LockManagerMsg::Track {
                id: id.to_owned(),
                token: held.token.to_string(),
            });
        }
    }

    /// Turns a next-job reply carrying a job into a tracked handle.
    pub fn adopt(
        self: &Arc<Self>,
        id: String,
        fields: Vec<(String, String)>,
        token: Arc<str>,
    ) -> Result<ActiveJob> {
        // `ats` after this take is the attempt about to start; read it before
        // decoding so that tracking happens before anything else.
        let attempt = fields
            .iter()
            .find(|(k, _)| k == "atm")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        let held = self.track(&id, &token, attempt);
        self.last_fetch
            .store(crate::clock::now_ms(), Ordering::Relaxed);
        let hash: HashMap<String, String> = fields.into_iter().collect();
        match crate::Job::from_hash(&id, hash) {
            Ok(job) => Ok(ActiveJob::new(self.clone(), Arc::new(job), held)),
            Err(e) => {
                self.untrack(&id, &token);
                Err(Error::Decode(e))
            }
        }
    }

    /// Applies the scheduling hints of a reply that carried no job.
    pub fn note_no_job(&self, reply: &NextReply) {
        let now = crate::clock::now_ms() as i64;
        match reply {
            NextReply::RateLimited(pttl) => {
                self.limit_until.store(now + pttl, Ordering::Relaxed);
            }
            NextReply::DelayedUntil(ts) => {
                self.block_until.store(*ts, Ordering::Relaxed);
                self.drained.store(true, Ordering::Relaxed);
            }
            NextReply::Nothing => {
                self.block_until.store(0, Ordering::Relaxed);
                self.drained.store(true, Ordering::Relaxed);
            }
            NextReply::Job { .. } => {}
        }
    }
}

/// Reads `[jobData, jobId, rateLimitDelay, delayUntil]`.
pub(crate) fn parse_next(script: &'static str, v: Value) -> Result<NextReply> {
    let items =
        as_array(v).ok_or_else(|| Error::protocol(script, "expected the next-job array"))?;
    if items.is_empty() {
        return Ok(NextReply::Nothing);
    }
    let mut it = items.into_iter();
    let data = it.next().unwrap_or(Value::Null);
    let id = it.next().unwrap_or(Value::Null);
    let limit = it.next().as_ref().and_then(as_i64).unwrap_or(0);
    let delay_until = it.next().as_ref().and_then(as_i64).unwrap_or(0);
    if matches!(data, Value::Array(_)) {
        let id = as_string(&id).ok_or_else(|| Error::protocol(script, "job id is not a string"))?;
        let fields = pairs(script, data)?;
        return Ok(NextReply::Job { id, fields });
    }
    if limit > 0 {
        return Ok(NextReply::RateLimited(limit));
    }
    if delay_until > 0 {
        return Ok(NextReply::DelayedUntil(delay_until));
    }
    Ok(NextReply::Nothing)
}
