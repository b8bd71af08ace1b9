//! Liveness and readiness of a process running EchoMQ actors, as the
//! Kubernetes probes read them.
//!
//! * **live** — the actor tree is alive: the [`HostSupervisor`] and every
//!   watched worker set's Worker answer. A Redis outage does not make a
//!   process dead (it resumes by itself); a tree that gave up does.
//! * **ready** — the process can do its work now: Redis answers a PING, the
//!   script catalogue is loaded (loaded again when Redis lost it, e.g. after
//!   a restart), and each Worker is taking jobs or idle by choice (paused
//!   counts as ready; closing, or running without its LockManager, does not).
//!
//! [`HealthCheck`] is the library call, for hosts that serve their own
//! endpoints; with the `health-server` feature, `health::serve` exposes it as
//! `GET /livez` and `GET /readyz` (200 or 503, one line per check).
//!
//! [`HostSupervisor`]: crate::supervision::HostSupervisor

pub(crate) mod check;
#[cfg(feature = "health-server")]
pub(crate) mod http;

pub use self::check::{Check, HealthCheck, Probe};
#[cfg(feature = "health-server")]
pub use self::http::{serve, HealthServer};
