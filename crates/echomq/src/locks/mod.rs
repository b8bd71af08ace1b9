//! Job locks: the [`LockManager`] actor that renews every lock one Worker
//! holds in one `extendLocks` call per tick, the messages between the two
//! (`protocol`), and the Worker's side of it, the set of held jobs the
//! LockManager reads (`seam`). Contract: `docs/lock-manager.md`.

pub(crate) mod manager;
pub(crate) mod protocol;
pub(crate) mod seam;

pub use self::manager::{LockManager, LockManagerArgs, LockManagerState};
pub use self::protocol::{Internal, LockManagerMsg, LockStats, TrackedLock};
