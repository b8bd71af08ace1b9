//! What a Worker and its LockManager say to each other, in one place so that
//! neither module names the other: the Worker sends [`LockManagerMsg`]s, the
//! LockManager reports back through the [`LockOwner`] it was given. Only the
//! host's control messages and the answers are public; the plumbing between
//! the two actors is the crate's.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{ActorRef, RpcReplyPort};

/// One tracked lock, as answered to [`LockManagerMsg::GetTracked`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedLock {
    /// Job id.
    pub id: String,
    /// Lock token.
    pub token: String,
    /// Time since the last renewal (or since tracking started).
    pub since_renewal: Duration,
}

/// Counters, answered to [`LockManagerMsg::GetStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Timer ticks handled.
    pub ticks: u64,
    /// `extendLocks` calls made: per tick (and per RenewNow), one per
    /// [`MAX_LOCKS_PER_CALL`](super::manager::MAX_LOCKS_PER_CALL) held locks,
    /// sent in one round trip.
    pub extend_calls: u64,
    /// Locks renewed, summed over all calls.
    pub renewed: u64,
    /// Locks found lost: missing or under another token while still held.
    pub lost: u64,
    /// Locks that came back missing because the Worker let their job go
    /// (finished it) while the renewal was on the way: not a loss.
    pub let_go: u64,
    /// Locks in the last round sent (every held lock).
    pub last_batch: usize,
    /// `extendLocks` calls the last round took (`last_batch` divided by
    /// `MAX_LOCKS_PER_CALL`, rounded up).
    pub last_calls: usize,
    /// Renewal calls that failed on Redis and were retried.
    pub redis_errors: u64,
}

/// Whoever holds the jobs whose locks a LockManager renews (the Worker).
pub(crate) trait LockOwner: Send + Sync + 'static {
    /// The lock of `job_id` (taken with `token`) could not be renewed.
    fn lock_lost(&self, job_id: String, token: String);

    /// This LockManager renews the owner's locks from now on: the owner
    /// answers by sharing its set of held jobs.
    fn attach(&self, lock_manager: ActorRef<LockManagerMsg>);
}

/// One lock in a [`HeldLocks`] set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldLock {
    /// Job id.
    pub id: String,
    /// The token the lock holds.
    pub token: String,
    /// When the job was taken (or put back under renewal).
    pub since: Instant,
}

/// The locks an owner holds, shared with its LockManager instead of reported
/// one message per job: taking and letting go of a job then cost a map update
/// in the owner, and the LockManager reads the set once per tick.
pub(crate) trait HeldLocks: Send + Sync + 'static {
    /// Every lock held now.
    fn snapshot(&self) -> Vec<HeldLock>;
}

/// A shared handle on a [`HeldLocks`] set.
#[derive(Clone)]
pub(crate) struct HeldLocksRef(Arc<dyn HeldLocks>);

impl HeldLocksRef {
    /// Shares `set`; the LockManager keeps it while anyone else does.
    pub fn new(set: Arc<dyn HeldLocks>) -> Self {
        HeldLocksRef(set)
    }

    /// Whether both handles are on the same set.
    pub fn same(&self, other: &HeldLocksRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether the LockManager is the set's last holder (its owner is gone).
    pub fn orphaned(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }
}

impl std::ops::Deref for HeldLocksRef {
    type Target = dyn HeldLocks;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for HeldLocksRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HeldLocksRef")
    }
}

/// A shared handle on a [`LockOwner`].
#[derive(Clone)]
pub(crate) struct LockOwnerRef(Arc<dyn LockOwner>);

impl LockOwnerRef {
    /// Wraps an owner.
    pub fn new(owner: impl LockOwner) -> Self {
        LockOwnerRef(Arc::new(owner))
    }
}

impl std::ops::Deref for LockOwnerRef {
    type Target = dyn LockOwner;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for LockOwnerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockOwnerRef")
    }
}

/// The LockManager's messages: the host's controls, and the plumbing
/// between the LockManager and its Worker ([`Internal`], opaque to hosts).
#[derive(Debug)]
pub enum LockManagerMsg {
    /// Renew every held lock now, due or not (one call); the timer is not
    /// affected.
    RenewNow,
    /// The held locks, with the time since each was last renewed.
    GetTracked(RpcReplyPort<Vec<TrackedLock>>),
    /// The counters.
    GetStats(RpcReplyPort<LockStats>),
    /// Panics the actor (fault injection for supervision and chaos tests).
    #[cfg(feature = "fault-injection")]
    Crash,
    /// Messages only the crate sends (the timer, the Worker's held set).
    Internal(Internal),
}

/// A message only the crate makes.
#[derive(Debug)]
pub struct Internal(pub(crate) InternalMsg);

#[derive(Debug)]
pub(crate) enum InternalMsg {
    /// The timer.
    Tick(u64),
    /// Renew every lock of this set at each tick, from now on (a Worker
    /// shares its held jobs this way instead of a message per job).
    Share(HeldLocksRef),
    /// Report lost locks to this owner from now on: a Worker restarted by the
    /// host's supervisor sends it when it starts with this LockManager.
    AttachWorker(LockOwnerRef),
}

impl LockManagerMsg {
    pub(crate) fn internal(msg: InternalMsg) -> Self {
        LockManagerMsg::Internal(Internal(msg))
    }
}
