//! Job locks: the [`LockManager`] actor that renews every lock one Worker
//! holds in one round trip per tick (`extendLocks` calls of at most
//! [`MAX_LOCKS_PER_CALL`] locks each), the messages between the two
//! (`protocol`), and the Worker's side of it, the set of held jobs the
//! LockManager reads (`seam`). Contract: `docs/lock-manager.md`.

pub(crate) mod manager;
pub(crate) mod protocol;
pub(crate) mod seam;

pub use self::manager::{LockManager, LockManagerArgs, LockManagerState, MAX_LOCKS_PER_CALL};
pub use self::protocol::{Internal, LockManagerMsg, LockStats, TrackedLock};
