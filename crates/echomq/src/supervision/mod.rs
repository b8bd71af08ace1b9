//! The supervision policy, shipped as building blocks.
//!
//! EchoMQ spawns no tree of its own: the host's supervisor owns every actor
//! and sees its `SupervisionEvent`s. What the library ships is the policy, so
//! that every host applies the same one:
//!
//! * [`WorkerSetSpec`] spawns the usual set of one worker — the Worker, its
//!   LockManager and its StalledChecker — linked under the host's supervisor,
//!   and restarts one member so that it re-joins the others;
//! * [`WorkerSet::classify`] tells, for one supervision event, whether it is an
//!   expected stop, a member to restart, or the end of the restart budget
//!   ([`RestartIntensity`]) — the one place the restart policy lives;
//! * [`WorkerSet::close`] closes a set in order and marks it closing;
//! * [`HostSupervisor`] is a ready-made
//!   one-for-one supervisor built from these, to use as is or to copy.
//!
//! Restarting one member (one-for-one) is enough because each re-joins the
//! running others:
//!
//! * a restarted **Worker** is given the running LockManager, which it
//!   re-points at itself (`AttachWorker`);
//! * a restarted **LockManager** is given the running Worker, which answers
//!   by sharing the set of jobs it holds — no held lock goes unrenewed;
//! * a restarted **StalledChecker** needs nothing: its state lives in Redis.
//!
//! See `docs/architecture.md` and `examples/service.rs`.

pub(crate) mod close;
pub(crate) mod decision;
pub(crate) mod host;
pub(crate) mod intensity;
pub(crate) mod worker_set;

pub use self::close::{SetCloseError, SetCloseReport};
pub use self::decision::{ChildKind, SupervisionDecision, SupervisionError};
pub use self::host::{
    Added, ChildId, HostStatus, HostSupervisor, HostSupervisorMsg, ShutdownReport,
};
pub use self::intensity::RestartIntensity;
pub use self::worker_set::{Member, WorkerSet, WorkerSetSpec};
