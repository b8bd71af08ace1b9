//! The runtime's error type.
//!
//! Bad input is a [`ValidationError`] raised before anything is written; a
//! script's negative reply is a [`ScriptErrorCode`]; anything Redis itself
//! refuses is a [`RedisError`](fred::error::Error).

use echomq_protocol::{DecodeError, ScriptErrorCode, ValidationError};
use thiserror::Error;

use crate::connection::server::ServerProblem;
use crate::scheduler::error::SchedulerError;

/// Everything a Queue, Worker or actor operation can fail with.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The input was refused before anything reached Redis.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// A script answered with one of the protocol's error codes.
    #[error("script {script} refused: {code}")]
    Script {
        /// The script's name.
        script: &'static str,
        /// The code it returned.
        code: ScriptErrorCode,
    },
    /// Data in Redis could not be read as the protocol describes it.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A reply did not have the shape the protocol specifies (foreign or
    /// corrupted data, or a script of another version).
    #[error("unexpected reply from {context}: {detail}")]
    Protocol {
        /// What was being read.
        context: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A script of the catalogue was not compiled in (the build found no file).
    #[error("script {0} is missing from the catalogue")]
    MissingScript(&'static str),
    /// The job does not exist.
    #[error("job {0} not found")]
    JobNotFound(String),
    /// Redis refused or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// A write was sent (or may have been) but its reply never came: the
    /// connection timed out or broke while waiting. Redis may have applied
    /// it, entirely (every script is atomic) or not at all; only a look at
    /// the queue tells. Retrying blindly may do it twice (an add with a
    /// generated id stores a second job). See [`Error::is_outcome_unknown`].
    #[error("the outcome of {operation} is unknown: {source} (it may have been applied; check before retrying)")]
    OutcomeUnknown {
        /// What was sent (a script name, or `MULTI/EXEC` of a flow).
        operation: &'static str,
        /// What the connection reported.
        source: fred::error::Error,
    },
    /// Part of a batch that was never sent because an earlier part failed on
    /// the connection (the reason): nothing of it was written.
    #[error("not sent: an earlier part of the batch failed ({0})")]
    NotSent(String),
    /// Obliterate found active jobs and was not forced.
    #[error("the queue has active jobs; obliterate refused without force")]
    ActiveJobs,
    /// A configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A job scheduler definition was refused before anything was written.
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// The server does not suit a queue (version, eviction policy, cluster
    /// slots): see [`check_server`](crate::connection::check_server).
    #[error(transparent)]
    Server(#[from] ServerProblem),
    /// `echomq adopt` refused a queue; nothing was written.
    #[error(transparent)]
    Adopt(#[from] crate::adopt::AdoptError),
    /// A group job was refused: its group holds its max size of unreleased
    /// jobs (docs/groups.md). Nothing was written.
    #[error("group {group:?} is full ({max_size} jobs waiting)")]
    GroupFull {
        /// The group.
        group: String,
        /// Its max size.
        max_size: u64,
    },
}

impl From<echomq_protocol::ReplyError> for Error {
    fn from(e: echomq_protocol::ReplyError) -> Self {
        match e {
            echomq_protocol::ReplyError::Code { script, code } => Error::Script { script, code },
            echomq_protocol::ReplyError::Shape { script, detail } => Error::Protocol {
                context: script,
                detail,
            },
            // ReplyError is non-exhaustive; a future variant is a shape problem.
            #[allow(unreachable_patterns)]
            other => Error::Protocol {
                context: "script reply",
                detail: other.to_string(),
            },
        }
    }
}

impl Error {
    pub(crate) fn protocol(context: &'static str, detail: impl Into<String>) -> Self {
        Error::Protocol {
            context,
            detail: detail.into(),
        }
    }

    /// The script error code, when the error is one.
    pub fn script_code(&self) -> Option<ScriptErrorCode> {
        match self {
            Error::Script { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when Redis refused the command because `maxmemory` is reached
    /// under `noeviction` (`OOM …`): the command did not run, so nothing was
    /// written; it may succeed once memory is freed.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Redis(e) if e.details().starts_with("OOM"))
    }

    /// True when a write may have been applied although its reply never came
    /// (a timeout or a broken connection after it was sent): the caller must
    /// look before retrying. An error that proves the command never reached
    /// Redis (refused connection, unknown host, TLS handshake) is not one, nor
    /// is a read's timeout (reads are sent again safely).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::OutcomeUnknown { .. })
    }

    /// `e` from a call of `operation`: an error after which a write may have
    /// run becomes [`Error::OutcomeUnknown`], anything else stays
    /// [`Error::Redis`]. fred reports no "written to the socket" flag, so
    /// the test is on what the error proves: a timeout, a cancelled command
    /// or a broken connection may all come after the bytes left; a refused
    /// connection, a failed name lookup, a TLS handshake or fred's own
    /// back-pressure refusal all come before.
    pub(crate) fn after_send(e: fred::error::Error, operation: &'static str, writes: bool) -> Self {
        use fred::error::ErrorKind::*;
        if !writes || !matches!(e.kind(), Timeout | IO | Canceled) {
            return Error::Redis(e);
        }
        let lower = e.details().to_ascii_lowercase();
        let never_sent = [
            "connection refused",
            "connectionrefused",
            "failed to lookup address",
            "name or service not known",
            "temporary failure in name resolution",
        ]
        .iter()
        .any(|s| lower.contains(s));
        if never_sent {
            Error::Redis(e)
        } else {
            Error::OutcomeUnknown {
                operation,
                source: e,
            }
        }
    }

    /// True when the error came from the connection, or from a server that
    /// cannot serve commands for now, rather than from a decision of Redis or
    /// of a script: the command did not run or its connection failed, and
    /// retrying later may succeed. This is the crate's one retry classifier:
    /// the worker's fetch and finish retries, the LockManager, the first
    /// connection ([`Connection::connect_with_retry`](crate::Connection::connect_with_retry))
    /// and the CLI's exit code all ask it.
    ///
    /// The connection side is fred's IO, timeout, cancellation, back-pressure,
    /// cluster, TLS and Sentinel errors, a refused or unresolvable address, and
    /// fred's "too many failed write attempts" (the connection went down with
    /// the command written or queued: the pool allows one attempt, so fred
    /// does not replay it; like a timeout, it may or may not have run), and
    /// fred's "failed to route command" (no connection to send it on while
    /// the client reconnects: nothing was sent; seen in the soak when Redis
    /// restarted). The server states are Redis's transient refusals: `LOADING` (a
    /// restarted server reading its AOF/RDB), `BUSY` (a script runs too long),
    /// `MASTERDOWN` and `READONLY` (a failover in progress), `TRYAGAIN` and
    /// `CLUSTERDOWN` (a slot moving or not served).
    pub fn is_connection(&self) -> bool {
        use fred::error::ErrorKind::*;
        const TRANSIENT: [&str; 6] = [
            "LOADING",
            "BUSY",
            "MASTERDOWN",
            "READONLY",
            "TRYAGAIN",
            "CLUSTERDOWN",
        ];
        let e = match self {
            Error::Redis(e) => e,
            // Still a connection failure for the retry policies: the
            // worker's finish and the LockManager's renewals are fenced by
            // the lock token, so sending them again is safe.
            Error::OutcomeUnknown { .. } => return true,
            _ => return false,
        };
        if matches!(
            e.kind(),
            IO | Timeout | Canceled | Backpressure | Cluster | Tls | Sentinel
        ) {
            return true;
        }
        let details = e.details();
        // The first word of the reply, exactly: BUSYGROUP, BUSYKEY are decisions.
        if details
            .split_whitespace()
            .next()
            .is_some_and(|word| TRANSIENT.contains(&word))
        {
            return true;
        }
        let lower = details.to_ascii_lowercase();
        [
            "connection refused",
            "connectionrefused",
            "failed to lookup address",
            "name or service not known",
            "temporary failure in name resolution",
            "too many failed write attempts",
            "failed to route command",
        ]
        .iter()
        .any(|s| lower.contains(s))
    }
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::Error;
    use fred::error::{Error as RedisError, ErrorKind};

    fn reply(text: &str) -> Error {
        Error::Redis(RedisError::new(ErrorKind::Unknown, text.to_owned()))
    }

    #[test]
    fn transient_server_refusals_count_as_connection_errors() {
        for text in [
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "READONLY You can't write against a read only replica.",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN Hash slot not served",
        ] {
            assert!(reply(text).is_connection(), "{text}");
        }
        for text in [
            "BUSYGROUP Consumer Group name already exists",
            "BUSYKEY Target key name already exists.",
            "ERR unknown command",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "NOSCRIPT No matching script.",
        ] {
            assert!(!reply(text).is_connection(), "{text}");
        }
        assert!(Error::Redis(RedisError::new(ErrorKind::IO, "reset")).is_connection());
        assert!(Error::Redis(RedisError::new(ErrorKind::Tls, "handshake")).is_connection());
        assert!(Error::Redis(RedisError::new(
            ErrorKind::Unknown,
            r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#
        ))
        .is_connection());
        // What every pending call gets when a half-open pool is rebuilt
        // (chaos F41: the LockManager failed on it instead of retrying).
        assert!(Error::Redis(RedisError::new(
            ErrorKind::Unknown,
            "Too many failed write attempts."
        ))
        .is_connection());
        // No connection to send on while the client reconnects (the soak,
        // a Redis SIGKILL + restart).
        assert!(Error::Redis(RedisError::new(
            ErrorKind::Unknown,
            "Failed to route command."
        ))
        .is_connection());
        assert!(!Error::Redis(RedisError::new(ErrorKind::Auth, "WRONGPASS")).is_connection());
        assert!(!Error::Redis(RedisError::new(ErrorKind::Url, "bad url")).is_connection());
    }

    #[test]
    fn a_lost_reply_of_a_write_is_outcome_unknown() {
        let timeout = || RedisError::new(ErrorKind::Timeout, "Request timed out.");
        let e = Error::after_send(timeout(), "addStandardJob", true);
        assert!(e.is_outcome_unknown() && e.is_connection(), "{e}");
        assert!(e.to_string().contains("addStandardJob"));
        // A read is sent again safely; a refused connection never ran anything.
        assert!(!Error::after_send(timeout(), "getCounts", false).is_outcome_unknown());
        let refused = RedisError::new(
            ErrorKind::IO,
            r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#,
        );
        assert!(!Error::after_send(refused, "addStandardJob", true).is_outcome_unknown());
        let reset = RedisError::new(ErrorKind::IO, "Connection reset by peer");
        assert!(Error::after_send(reset, "addStandardJob", true).is_outcome_unknown());
        let refusal = RedisError::new(ErrorKind::Unknown, "OOM command not allowed");
        assert!(!Error::after_send(refusal, "addStandardJob", true).is_outcome_unknown());
    }
}
