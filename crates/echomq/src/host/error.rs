//! The one error of the typed handles.

use std::time::Duration;

use ractor::SpawnErr;

/// Why a handle call did not give its answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// The actor did not answer in time. The request may still be acted on.
    #[error("{operation}: no answer within {after:?}")]
    Timeout {
        /// What was asked.
        operation: &'static str,
        /// The timeout that passed.
        after: Duration,
    },
    /// The actor (or the host that resolves it) is not running any more.
    #[error("{operation}: the actor is not running")]
    Stopped {
        /// What was asked.
        operation: &'static str,
    },
    /// The host no longer has that child: it was closed, or the host gave up.
    #[error("{operation}: the host has no such child any more")]
    ChildGone {
        /// What was asked.
        operation: &'static str,
    },
    /// A new actor did not start.
    #[error("starting the actor failed: {0}")]
    Spawn(#[source] SpawnErr),
    /// The actor answered with an error of its own (a scheduler's, a
    /// stalled sweep's).
    #[error(transparent)]
    Queue(#[from] crate::error::Error),
    /// A Relay node answered with an error of its own.
    #[error(transparent)]
    Relay(#[from] crate::relay::RelayError),
}
