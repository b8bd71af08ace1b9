//! The lock seam: the jobs this worker instance holds a lock for, shared with
//! the LockManager that renews them. [`LockSeam`] is the only place that
//! registers or drops a held job; the LockManager reads the set at each tick
//! ([`HeldLocks`]), so taking and letting go of a job send no message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;

use super::protocol::{HeldLock, HeldLocks, HeldLocksRef, InternalMsg, LockManagerMsg};
use crate::sync::lock;

/// Why a held job was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelReason {
    /// Not cancelled.
    None,
    /// The LockManager could not renew the lock: the job is not ours any more.
    LockLost,
    /// The close deadline passed: the job goes back to `wait`.
    Shutdown,
    /// The job ran past its timeout: the attempt fails with a timeout reason.
    Timeout,
    /// Someone cancelled the job (`Queue::cancel`), which ended it in Redis
    /// already: nothing is written by this worker.
    Cancelled,
}

impl CancelReason {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => CancelReason::LockLost,
            2 => CancelReason::Shutdown,
            3 => CancelReason::Timeout,
            4 => CancelReason::Cancelled,
            _ => CancelReason::None,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            CancelReason::None => 0,
            CancelReason::LockLost => 1,
            CancelReason::Shutdown => 2,
            CancelReason::Timeout => 3,
            CancelReason::Cancelled => 4,
        }
    }
}

/// A job this worker instance holds a lock for.
#[derive(Clone)]
pub(crate) struct Held {
    token: Arc<str>,
    cancel: CancellationToken,
    reason: Arc<AtomicU8>,
    /// A finishing call of this job was sent and its reply lost: the lock may
    /// be gone because that call applied (see [`Held::finish_unknown`]).
    finish_unknown: Arc<AtomicBool>,
    since: Instant,
}

impl Held {
    fn new(token: Arc<str>) -> Self {
        Held {
            token,
            cancel: CancellationToken::new(),
            reason: Arc::new(AtomicU8::new(CancelReason::None.as_u8())),
            finish_unknown: Arc::new(AtomicBool::new(false)),
            since: Instant::now(),
        }
    }

    /// Marks that a finish of this job was sent without its reply. A lock the
    /// LockManager then finds gone is no lost lock yet: the finish may have
    /// released it, and only its resend can tell (the worker does not cancel
    /// or report it; the resend's answer does).
    pub fn set_finish_unknown(&self) {
        self.finish_unknown.store(true, Ordering::Release);
    }

    /// Whether a finish of this job is awaiting a resend's answer.
    pub fn finish_unknown(&self) -> bool {
        self.finish_unknown.load(Ordering::Acquire)
    }

    pub fn token(&self) -> &Arc<str> {
        &self.token
    }

    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Cancels the processor, recording why first so it is read correctly.
    /// The first reason stays: a lock found lost after a remote cancel ended
    /// the job is still a cancel.
    pub fn cancel(&self, reason: CancelReason) {
        let _ = self.reason.compare_exchange(
            CancelReason::None.as_u8(),
            reason.as_u8(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.cancel.cancel();
    }

    pub fn cancel_reason(&self) -> CancelReason {
        CancelReason::from_u8(self.reason.load(Ordering::Acquire))
    }
}

#[derive(Default)]
struct SeamState {
    lock_manager: Option<ActorRef<LockManagerMsg>>,
    held: HashMap<String, Held>,
}

/// Held jobs, shared with the LockManager renewing their locks.
#[derive(Default)]
pub(crate) struct LockSeam {
    state: Mutex<SeamState>,
}

impl LockSeam {
    /// Registers a job the moment a script handed it over, without awaiting,
    /// so no renewal window opens between the lock being set and the
    /// LockManager seeing it.
    pub fn track(&self, id: &str, token: Arc<str>) -> Held {
        let held = Held::new(token);
        self.retrack(id, &held);
        held
    }

    /// Puts a job (back) under renewal.
    pub fn retrack(&self, id: &str, held: &Held) {
        let mut held = held.clone();
        held.since = Instant::now();
        lock(&self.state).held.insert(id.to_owned(), held);
    }

    /// Stops renewing a job's lock, unless the entry was replaced meanwhile.
    pub fn untrack(&self, id: &str, token: &str) {
        let mut s = lock(&self.state);
        if s.held.get(id).is_some_and(|h| &*h.token == token) {
            s.held.remove(id);
        }
    }

    /// Uses `lm` from now on and shares the held set with it; returns how
    /// many jobs are held.
    pub fn attach(self: &Arc<Self>, lm: ActorRef<LockManagerMsg>) -> usize {
        let set: Arc<dyn HeldLocks> = self.clone();
        let _ = lm.cast(LockManagerMsg::internal(InternalMsg::Share(
            HeldLocksRef::new(set),
        )));
        let mut s = lock(&self.state);
        s.lock_manager = Some(lm);
        s.held.len()
    }

    /// The LockManager, taken away (the worker is closed).
    pub fn detach(&self) -> Option<ActorRef<LockManagerMsg>> {
        lock(&self.state).lock_manager.take()
    }

    pub fn attached(&self) -> bool {
        lock(&self.state).lock_manager.is_some()
    }

    /// Removes the job when it is still held with `token`.
    pub fn take_if(&self, id: &str, token: &str) -> Option<Held> {
        let mut s = lock(&self.state);
        match s.held.get(id) {
            Some(h) if *h.token == *token => s.held.remove(id),
            _ => None,
        }
    }

    /// The job held under `id`, if any.
    pub fn get(&self, id: &str) -> Option<Held> {
        lock(&self.state).held.get(id).cloned()
    }

    /// Every held job.
    pub fn held(&self) -> Vec<(String, Held)> {
        let s = lock(&self.state);
        s.held.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// How many jobs are held.
    pub fn held_count(&self) -> usize {
        lock(&self.state).held.len()
    }

    /// Ids of the held jobs, sorted.
    pub fn held_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.state).held.keys().cloned().collect();
        ids.sort();
        ids
    }
}

impl HeldLocks for LockSeam {
    fn snapshot(&self) -> Vec<HeldLock> {
        lock(&self.state)
            .held
            .iter()
            .map(|(id, h)| HeldLock {
                id: id.clone(),
                token: h.token.to_string(),
                since: h.since,
            })
            .collect()
    }
}
