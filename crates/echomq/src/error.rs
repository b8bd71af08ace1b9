//! The runtime's error type.
//!
//! Bad input is a [`ValidationError`] raised before anything is written; a
//! script's negative reply is a [`ScriptErrorCode`]; anything Redis itself
//! refuses is a [`RedisError`](fred::error::Error).

use echomq_protocol::{DecodeError, ScriptErrorCode, ValidationError};
use thiserror::Error;

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
    /// Obliterate found active jobs and was not forced.
    #[error("the queue has active jobs; obliterate refused without force")]
    ActiveJobs,
    /// A configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A job scheduler definition was refused before anything was written.
    #[error(transparent)]
    Scheduler(#[from] crate::schedule::SchedulerError),
    /// The server does not suit a queue (version, eviction policy, cluster
    /// slots): see [`crate::diagnose::check_server`].
    #[error(transparent)]
    Server(#[from] crate::diagnose::ServerProblem),
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

    /// True when the error came from the connection rather than from a
    /// decision of Redis or of a script: retrying later may succeed.
    pub fn is_connection(&self) -> bool {
        use fred::error::ErrorKind::*;
        matches!(self, Error::Redis(e) if matches!(e.kind(), IO | Timeout | Canceled | Backpressure | Cluster))
    }
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
