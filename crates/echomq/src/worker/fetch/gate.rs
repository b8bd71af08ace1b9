//! The slot gate: counts the slots in use against the concurrency. The
//! fetcher takes a slot before it fetches, so no more jobs are ever taken
//! than there are slots.

use std::sync::{Arc, Mutex};

use ractor::ActorRef;
use tokio::sync::Notify;

use crate::sync::lock;
use crate::worker::messages::{Internal, InternalKind, WorkerMsg};

/// The gate's state at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GateSnapshot {
    pub limit: usize,
    pub in_use: usize,
    pub paused: bool,
    pub closing: bool,
}

pub(crate) struct SlotGate {
    state: Mutex<GateSnapshot>,
    notify: Notify,
}

impl SlotGate {
    pub fn new(limit: usize) -> Self {
        SlotGate {
            state: Mutex::new(GateSnapshot {
                limit: limit.max(1),
                in_use: 0,
                paused: false,
                closing: false,
            }),
            notify: Notify::new(),
        }
    }

    /// Waits for a free slot while running; `None` once closing. The permit
    /// tells `owner` when it comes back during a close.
    pub async fn acquire(self: &Arc<Self>, owner: &ActorRef<WorkerMsg>) -> Option<SlotPermit> {
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
                    return Some(SlotPermit {
                        gate: self.clone(),
                        owner: owner.clone(),
                    });
                }
            }
            notified.await;
        }
    }

    /// A free slot now, if there is one (no wait): the fetcher's extra
    /// slots for a batched fetch.
    pub fn try_acquire(self: &Arc<Self>, owner: &ActorRef<WorkerMsg>) -> Option<SlotPermit> {
        let mut s = lock(&self.state);
        if s.closing || s.paused || s.in_use >= s.limit {
            return None;
        }
        s.in_use += 1;
        Some(SlotPermit {
            gate: self.clone(),
            owner: owner.clone(),
        })
    }

    fn release(&self) -> GateSnapshot {
        let mut s = lock(&self.state);
        s.in_use = s.in_use.saturating_sub(1);
        let snap = *s;
        drop(s);
        self.notify.notify_waiters();
        snap
    }

    /// Whether a finishing slot may take the next job in the same call: the
    /// slot is still counted, so "not above" the limit (docs/worker.md).
    pub fn may_fetch_next(&self) -> bool {
        let s = lock(&self.state);
        !s.closing && !s.paused && s.in_use <= s.limit
    }

    pub fn runnable(&self) -> bool {
        let s = lock(&self.state);
        !s.closing && !s.paused
    }

    fn update(&self, f: impl FnOnce(&mut GateSnapshot)) {
        let mut s = lock(&self.state);
        f(&mut s);
        drop(s);
        self.notify.notify_waiters();
    }

    pub fn set_paused(&self, paused: bool) {
        self.update(|s| s.paused = paused);
    }

    pub fn set_limit(&self, limit: usize) {
        self.update(|s| s.limit = limit.max(1));
    }

    /// Closing is for good: no slot is handed out afterwards.
    pub fn close(&self) {
        self.update(|s| s.closing = true);
    }

    pub fn snapshot(&self) -> GateSnapshot {
        *lock(&self.state)
    }
}

/// One slot; given back when dropped, whatever path the holder takes.
pub(crate) struct SlotPermit {
    gate: Arc<SlotGate>,
    owner: ActorRef<WorkerMsg>,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if self.gate.release().closing {
            // The actor finishes an ordered close when the last slot is back.
            let _ = self
                .owner
                .cast(WorkerMsg::Internal(Internal(InternalKind::SlotFreed)));
        }
    }
}
