//! One type per script call, as mini-redis has one type per command.
//!
//! A call type names its script, yields its KEYS and ARGV in the frozen order
//! from typed fields, and decodes the script's reply into a typed result. The
//! runtime runs any of them through one method (`Connection::call`), so the
//! order of a script's KEYS and ARGV is written exactly once, here, and unit
//! tests check it against the script's file name and `docs/protocol.md`.
//!
//! Nothing in this module does I/O: [`Arg`] and [`Reply`] are the wire values
//! the runtime translates to and from its Redis client.

use bytes::Bytes;
use thiserror::Error;

use crate::keys::Key;
use crate::reply::ScriptErrorCode;
use crate::scripts::ScriptId;
use crate::wire::Wire;

/// `vec!` of [`Key`]s from any mix of owned `String`s and prebuilt `&Key`s
/// (a [`crate::keys::FixedKeys`] entry is a counter increment).
macro_rules! keys {
    ($($k:expr),* $(,)?) => {
        vec![$($crate::keys::Key::from($k)),*]
    };
}

pub mod add;
pub mod admin;
pub mod audit;
pub mod decode;
pub mod dedup;
pub mod flow;
pub mod getters;
pub mod lifecycle;
pub mod limits;
pub mod metrics;
pub mod relay;
pub mod scheduler;
pub mod stalled;

pub use decode::Reply;

/// One ARGV entry: a bulk string on the wire (short values held inline,
/// see [`crate::wire`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Arg(Wire);

impl Arg {
    /// Text as is.
    pub fn text(s: impl Into<String>) -> Arg {
        let s = s.into();
        if s.len() <= crate::wire::INLINE {
            Arg::str(&s)
        } else {
            Arg(Wire::Shared(Bytes::from(s)))
        }
    }

    /// A constant string, sent without a copy.
    pub fn from_static(s: &'static str) -> Arg {
        Arg(Wire::Shared(Bytes::from_static(s.as_bytes())))
    }

    /// A borrowed string, copied.
    pub fn str(s: &str) -> Arg {
        Arg(Wire::concat(&[s.as_bytes()]))
    }

    /// An integer in decimal, as scripts `tonumber` it (formatted on the
    /// stack, no allocation).
    pub fn int(n: impl Into<i128>) -> Arg {
        use std::io::Write as _;
        let mut buf = [0u8; 40];
        let mut cursor = std::io::Cursor::new(&mut buf[..]);
        // 40 bytes hold every i128 in decimal (39 digits and a sign).
        let _ = write!(cursor, "{}", n.into());
        let len = cursor.position() as usize;
        Arg(Wire::concat(&[&buf[..len]]))
    }

    /// A key sent as an argument (`{P}`, a job key).
    pub fn key(k: &Key) -> Arg {
        Arg(k.clone().into_wire())
    }

    /// A duration in whole milliseconds, as every script counts time.
    pub fn ms(d: std::time::Duration) -> Arg {
        Arg::int(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// A boolean flag the scripts compare with `"1"`.
    pub fn flag(on: bool) -> Arg {
        Arg(Wire::Shared(Bytes::from_static(if on {
            b"1"
        } else {
            b"0"
        })))
    }

    /// The empty string: "absent" where a script tests for `""`.
    pub fn empty() -> Arg {
        Arg(Wire::Shared(Bytes::new()))
    }

    /// Msgpack (or any binary) bytes.
    pub fn packed(bytes: Vec<u8>) -> Arg {
        Arg(Wire::Shared(Bytes::from(bytes)))
    }

    /// Packed bytes when present, `""` otherwise.
    pub fn packed_or_empty(bytes: Option<Vec<u8>>) -> Arg {
        bytes.map(Arg::packed).unwrap_or_else(Arg::empty)
    }

    /// The bytes sent.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The bytes sent, owned (shared bytes are not copied).
    pub fn into_bytes(self) -> Bytes {
        self.0.into_bytes()
    }

    pub(crate) fn into_wire(self) -> Wire {
        self.0
    }
}

impl std::fmt::Debug for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match std::str::from_utf8(self.as_bytes()) {
            Ok(s) => write!(f, "{s:?}"),
            Err(_) => write!(f, "<{} bytes>", self.as_bytes().len()),
        }
    }
}

/// A reply that is not what the script's contract says.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// The script answered one of the protocol's negative error codes.
    #[error("script {script} refused: {code}")]
    Code {
        /// The script's name.
        script: &'static str,
        /// The code.
        code: ScriptErrorCode,
    },
    /// The reply had another shape (foreign data, another script version).
    #[error("unexpected reply from {script}: {detail}")]
    Shape {
        /// The script's name.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl ReplyError {
    /// A shape error of `script`.
    pub fn shape(script: ScriptId, detail: impl Into<String>) -> Self {
        ReplyError::Shape {
            script: script.name(),
            detail: detail.into(),
        }
    }

    /// The script code, when the error is one.
    pub fn code(&self) -> Option<ScriptErrorCode> {
        match self {
            ReplyError::Code { code, .. } => Some(*code),
            ReplyError::Shape { .. } => None,
        }
    }
}

/// One call of one script: its KEYS and ARGV in the frozen order, and the
/// decoding of its reply.
pub trait ScriptCall {
    /// What the reply decodes to.
    type Output;

    /// The script called.
    fn script(&self) -> ScriptId;

    /// KEYS, exactly `self.script().num_keys()` of them.
    fn keys(&self) -> Vec<Key>;

    /// ARGV in the script's order.
    fn args(&self) -> Vec<Arg>;

    /// Reads the reply.
    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError>;
}

/// Test support: asserts a call's KEYS count matches its script's file name
/// and returns the ARGV as text for order checks.
#[cfg(test)]
pub(crate) fn argv_text<C: ScriptCall>(call: &C) -> Vec<String> {
    assert_eq!(
        call.keys().len(),
        call.script().num_keys(),
        "{} takes {} KEYS",
        call.script().file_name(),
        call.script().num_keys()
    );
    call.args()
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_bytes()).into_owned())
        .collect()
}
