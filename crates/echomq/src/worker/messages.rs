//! What a Worker and its host say to each other: the control messages
//! ([`WorkerMsg`]), the events it reports ([`WorkerEvent`]) and its answers
//! ([`WorkerStatus`], [`CloseReport`]); and the Worker as its LockManager's
//! lock owner.

use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};

use crate::locks::protocol::{LockManagerMsg, LockOwner};

/// What a worker tells its host, through [`WorkerArgs::events`](super::options::WorkerArgs::events).
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
    /// The job was cancelled (`Queue::cancel`) while this worker ran it: its
    /// processor was stopped, and the canceller ended the job.
    Cancelled {
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

/// The worker's counters, answered to [`WorkerMsg::GetCounts`]: what a
/// once-a-second progress line or probe needs, at no cost per held job
/// (a [`WorkerStatus`] lists every held job's id).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerCounts {
    /// Jobs held now.
    pub active: usize,
    /// Transitions made (completed, failed, retried, delayed).
    pub processed: u64,
    /// Failed attempts.
    pub failed: u64,
    /// What is left of [`WorkerOptions::max_jobs`](super::options::WorkerOptions::max_jobs),
    /// when set.
    pub takes_left: Option<u64>,
    /// Takes of `max_jobs` reserved by calls whose reply is not in yet: each
    /// ends as a job held (in `active`) or a take given back (in
    /// `takes_left`). 0 without `max_jobs`.
    pub takes_in_flight: u64,
}

impl WorkerCounts {
    /// True once a worker with `max_jobs` has taken them all and holds none:
    /// nothing left to take, no take on its way, no job running.
    pub fn max_jobs_done(&self) -> bool {
        self.takes_left == Some(0) && self.takes_in_flight == 0 && self.active == 0
    }
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
    /// A snapshot of the worker (with the id of every held job).
    GetStatus(RpcReplyPort<WorkerStatus>),
    /// The worker's counters only: O(1), whatever it holds.
    GetCounts(RpcReplyPort<WorkerCounts>),
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
pub struct Internal(pub(crate) InternalKind);

#[derive(Debug)]
pub(crate) enum InternalKind {
    Beat,
    SlotFreed,
    Watchdog,
    CloseDeadline,
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
