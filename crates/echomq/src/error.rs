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
    /// A payload could not be encoded (or decoded) through its codec.
    #[cfg(feature = "codec")]
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
    /// `echomq adopt` refused a queue; nothing was written.
    #[error(transparent)]
    Adopt(#[from] crate::adopt::AdoptError),
    /// A byte budget was refused; nothing was written.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetError),
    /// A dead-letter operation was refused; nothing was moved.
    #[error(transparent)]
    DeadLetter(#[from] crate::dead_letter::DeadLetterError),
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
        let never_sent = matches!(
            sign_of(e.details()),
            Some(RedisCondition::Refused | RedisCondition::UnknownHost)
        );
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
    /// cluster, TLS and Sentinel errors, and the [`RedisCondition`]s read from
    /// the error's text that say waiting may help
    /// ([`RedisCondition::is_transient`]): a refused or unresolvable address,
    /// a reset connection, fred's "too many failed write attempts" (the
    /// connection went down with the command written or queued: the pool
    /// allows one attempt, so fred does not replay it; like a timeout, it may
    /// or may not have run), and fred's "failed to route command" (no
    /// connection to send it on while the client reconnects: nothing was
    /// sent; seen in the soak when Redis restarted). The server states are
    /// Redis's transient refusals: `LOADING` (a restarted server reading its
    /// AOF/RDB), `BUSY` (a script runs too long), `MASTERDOWN` and `READONLY`
    /// (a failover in progress), `TRYAGAIN` and `CLUSTERDOWN` (a slot moving
    /// or not served).
    pub fn is_connection(&self) -> bool {
        use fred::error::ErrorKind::*;
        let e = match self {
            Error::Redis(e) => e,
            // Still a connection failure for the retry policies: the
            // worker's finish and the LockManager's renewals are fenced by
            // the lock token, so sending them again is safe.
            Error::OutcomeUnknown { .. } => return true,
            _ => return false,
        };
        matches!(
            e.kind(),
            IO | Timeout | Canceled | Backpressure | Cluster | Tls | Sentinel
        ) || sign_of(e.details()).is_some_and(RedisCondition::is_transient)
    }

    /// What Redis or the connection to it reported, as a typed condition:
    /// for a caller that explains an error (the `echomq` command's readable
    /// lines) rather than only retries it. Read from fred's error kind and
    /// the same signs [`is_connection`](Self::is_connection) reads, so the two
    /// never disagree on a word. `None` for an error that is not Redis's (a
    /// script's code, a validation) or that has no known sign; the condition
    /// of an [`OutcomeUnknown`](Error::OutcomeUnknown) is its source's.
    ///
    /// Redis's own replies come first (a refusal names itself), then what
    /// fred's kind proves (TLS, an unusable URL or setting, a timeout), then
    /// the socket's words, then a broken connection.
    pub fn redis_condition(&self) -> Option<RedisCondition> {
        use fred::error::ErrorKind::*;
        use RedisCondition as C;
        let e = match self {
            Error::Redis(e) | Error::OutcomeUnknown { source: e, .. } => e,
            _ => return None,
        };
        let sign = sign_of(e.details());
        if sign.is_some_and(RedisCondition::is_reply) {
            return sign;
        }
        match e.kind() {
            Tls => return Some(C::Tls),
            Url | Config | InvalidArgument => return Some(C::InvalidConfig),
            Timeout => return Some(C::Timeout),
            _ => {}
        }
        match sign {
            Some(c @ (C::Refused | C::UnknownHost)) => Some(c),
            _ if matches!(e.kind(), IO | Canceled) => Some(C::ConnectionLost),
            other => other,
        }
    }
}

/// Why a password was refused (see [`RedisCondition::Auth`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthFailure {
    /// A password (or user name) was sent and refused (`WRONGPASS`).
    WrongPass,
    /// The server requires a password and none was sent (`NOAUTH`).
    NoAuth,
    /// A password was sent to a server that has none set.
    NoPasswordSet,
    /// The user may not run the command or touch the key (`NOPERM`).
    NoPerm,
}

/// What Redis or the connection to it reported ([`Error::redis_condition`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisCondition {
    /// The address refused the connection: no server listens there.
    Refused,
    /// The host name did not resolve (DNS).
    UnknownHost,
    /// No reply in time.
    Timeout,
    /// The TLS handshake failed.
    Tls,
    /// The connection broke or the command was cancelled with it.
    ConnectionLost,
    /// fred had no connection to send on, or ran out of write attempts,
    /// while it reconnects.
    NotConnected,
    /// The URL or a client setting is unusable.
    InvalidConfig,
    /// The server refused the credentials.
    Auth(AuthFailure),
    /// A Redis Cluster refused keys of one call in different slots
    /// (`CROSSSLOT`).
    CrossSlot,
    /// The cluster is down or a slot is not served (`CLUSTERDOWN`).
    ClusterDown,
    /// A hash slot is moving (`TRYAGAIN`).
    TryAgain,
    /// The server is still loading its data set (`LOADING`).
    Loading,
    /// A script runs too long (`BUSY`).
    Busy,
    /// A read-only replica refused a write (`READONLY`).
    ReadOnly,
    /// A replica lost its primary (`MASTERDOWN`).
    MasterDown,
    /// `maxmemory` is reached under `noeviction` (`OOM`).
    OutOfMemory,
}

impl RedisCondition {
    /// Whether waiting may help: the condition counts as a connection
    /// failure for [`Error::is_connection`].
    pub fn is_transient(self) -> bool {
        use RedisCondition::*;
        !matches!(self, InvalidConfig | Auth(_) | CrossSlot | OutOfMemory)
    }

    /// Whether Redis itself answered with it (rather than the socket or fred).
    fn is_reply(self) -> bool {
        use RedisCondition::*;
        matches!(
            self,
            Auth(_)
                | CrossSlot
                | ClusterDown
                | TryAgain
                | Loading
                | Busy
                | ReadOnly
                | MasterDown
                | OutOfMemory
        )
    }
}

/// How a sign is found in fred's error text.
enum Sign {
    /// The first word of Redis's reply, exactly (`BUSYGROUP` and `BUSYKEY`
    /// are decisions, not `BUSY`).
    FirstWord(&'static str),
    /// Anywhere in the text, ignoring case (the OS's and fred's wording).
    Phrase(&'static str),
}

/// The runtime's one list of what an error's text says, in the order it is
/// read: the first sign found names the condition.
const SIGNS: [(Sign, RedisCondition); 26] = {
    use AuthFailure::*;
    use RedisCondition::*;
    use Sign::*;
    [
        (FirstWord("WRONGPASS"), Auth(WrongPass)),
        (Phrase("invalid password"), Auth(WrongPass)),
        (FirstWord("NOAUTH"), Auth(NoAuth)),
        (Phrase("authentication required"), Auth(NoAuth)),
        (
            Phrase("without any password configured"),
            Auth(NoPasswordSet),
        ),
        (FirstWord("NOPERM"), Auth(NoPerm)),
        (FirstWord("CROSSSLOT"), CrossSlot),
        (FirstWord("CLUSTERDOWN"), ClusterDown),
        (FirstWord("LOADING"), Loading),
        (FirstWord("BUSY"), Busy),
        (FirstWord("READONLY"), ReadOnly),
        (FirstWord("MASTERDOWN"), MasterDown),
        (FirstWord("TRYAGAIN"), TryAgain),
        (FirstWord("OOM"), OutOfMemory),
        (Phrase("connection refused"), Refused),
        (Phrase("connectionrefused"), Refused),
        // "failed to lookup address information" (getaddrinfo through std).
        (Phrase("lookup address"), UnknownHost),
        (Phrase("name or service not known"), UnknownHost),
        (Phrase("nodename nor servname"), UnknownHost),
        (Phrase("no address associated"), UnknownHost),
        (Phrase("temporary failure in name resolution"), UnknownHost),
        (Phrase("failed to resolve"), UnknownHost),
        (Phrase("connectionreset"), ConnectionLost),
        (Phrase("broken pipe"), ConnectionLost),
        (Phrase("too many failed write attempts"), NotConnected),
        (Phrase("failed to route command"), NotConnected),
    ]
};

/// The condition the first sign found in `details` names.
fn sign_of(details: &str) -> Option<RedisCondition> {
    let first = details.split_whitespace().next().unwrap_or_default();
    let lower = details.to_ascii_lowercase();
    SIGNS
        .iter()
        .find(|(sign, _)| match sign {
            Sign::FirstWord(w) => first == *w,
            Sign::Phrase(p) => lower.contains(p),
        })
        .map(|(_, c)| *c)
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
    fn conditions_name_what_redis_or_the_socket_said() {
        use super::{AuthFailure, RedisCondition as C};
        let of = |kind, text: &str| {
            Error::Redis(RedisError::new(kind, text.to_owned())).redis_condition()
        };
        for (text, c) in [
            (
                "WRONGPASS invalid username-password pair",
                C::Auth(AuthFailure::WrongPass),
            ),
            (
                "NOAUTH Authentication required.",
                C::Auth(AuthFailure::NoAuth),
            ),
            (
                "ERR AUTH <password> called without any password configured for the default user",
                C::Auth(AuthFailure::NoPasswordSet),
            ),
            (
                "NOPERM this user has no permissions",
                C::Auth(AuthFailure::NoPerm),
            ),
            (
                "CROSSSLOT Keys in request don't hash to the same slot",
                C::CrossSlot,
            ),
            ("CLUSTERDOWN Hash slot not served", C::ClusterDown),
            ("LOADING Redis is loading the dataset in memory", C::Loading),
            ("BUSY Redis is busy running a script.", C::Busy),
            (
                "READONLY You can't write against a read only replica.",
                C::ReadOnly,
            ),
            ("MASTERDOWN Link with MASTER is down", C::MasterDown),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot",
                C::TryAgain,
            ),
            (
                "OOM command not allowed when used memory > 'maxmemory'.",
                C::OutOfMemory,
            ),
            ("Too many failed write attempts.", C::NotConnected),
            ("Failed to route command.", C::NotConnected),
        ] {
            assert_eq!(of(ErrorKind::Unknown, text), Some(c), "{text}");
            assert_eq!(reply(text).is_connection(), c.is_transient(), "{text}");
        }
        // A refusal names itself whatever fred's kind; fred's kind comes
        // before the socket's words.
        assert_eq!(of(ErrorKind::Cluster, "CROSSSLOT Keys"), Some(C::CrossSlot));
        assert_eq!(of(ErrorKind::Tls, "connection refused"), Some(C::Tls));
        assert_eq!(of(ErrorKind::Url, "bad url"), Some(C::InvalidConfig));
        assert_eq!(
            of(ErrorKind::Timeout, "Request timed out."),
            Some(C::Timeout)
        );
        let refused = r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#;
        assert_eq!(of(ErrorKind::IO, refused), Some(C::Refused));
        let dns = r#"Custom { kind: Uncategorized, error: "failed to lookup address information: Name or service not known" }"#;
        assert_eq!(of(ErrorKind::IO, dns), Some(C::UnknownHost));
        assert_eq!(
            of(ErrorKind::IO, "Connection reset by peer"),
            Some(C::ConnectionLost)
        );
        assert_eq!(
            of(ErrorKind::IO, "Too many failed write attempts."),
            Some(C::ConnectionLost)
        );
        assert_eq!(
            of(
                ErrorKind::Unknown,
                "BUSYGROUP Consumer Group name already exists"
            ),
            None
        );
        assert_eq!(Error::JobNotFound("1".into()).redis_condition(), None);
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
