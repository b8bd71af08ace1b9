//! What a relay operation can fail with.

use echomq_protocol::relay::{RelayCode, RelayInputError};
use thiserror::Error;

/// A relay error: bad input is refused before anything reaches Redis; a
/// relay script's refusal keeps its [`RelayCode`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RelayError {
    /// A topic, pattern, id or namespace broke the grammar.
    #[error(transparent)]
    Input(#[from] RelayInputError),
    /// A relay option is out of its range.
    #[error("invalid relay option `{option}`: {reason}")]
    Option {
        /// The option's name.
        option: &'static str,
        /// Which rule it broke.
        reason: String,
    },
    /// The data could not be serialised to JSON.
    #[error("relay data is not serialisable to JSON: {0}")]
    Data(String),
    /// The serialised data is over the node's `max_message_size`.
    #[error("relay data is {size} bytes, over the limit of {limit} bytes")]
    DataTooLarge {
        /// Size of the serialised data.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A relay script refused (its own code: another client's rules may
    /// differ from ours, e.g. its size limit).
    #[error("relay script {script} refused: {code}")]
    Refused {
        /// The script's name.
        script: &'static str,
        /// Its code.
        code: RelayCode,
    },
    /// The relay node is closed (or its actor is gone).
    #[error("the relay is closed")]
    Closed,
    /// Redis failed, or answered something the protocol does not describe.
    #[error(transparent)]
    Runtime(#[from] crate::error::Error),
}

impl RelayError {
    pub(crate) fn option(option: &'static str, reason: impl Into<String>) -> Self {
        RelayError::Option {
            option,
            reason: reason.into(),
        }
    }

    /// The relay code, when a script refused.
    pub fn code(&self) -> Option<RelayCode> {
        match self {
            RelayError::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<fred::error::Error> for RelayError {
    fn from(e: fred::error::Error) -> Self {
        RelayError::Runtime(e.into())
    }
}

/// A script's typed answer, its relay code as an error.
pub(crate) fn refused<T>(script: &'static str, r: Result<T, RelayCode>) -> Result<T, RelayError> {
    r.map_err(|code| RelayError::Refused { script, code })
}
