//! What every call is made of: the [`ScriptCall`] trait, its argument values
//! ([`Arg`]), and the bytes a client sends for one call ([`call_parts`]).

use bytes::{Bytes, BytesMut};

use super::decode::{Reply, ReplyError};
use crate::keys::Key;
use crate::scripts::ScriptId;
use crate::wire::{Wire, INLINE};

/// One ARGV entry: a bulk string on the wire (short values held inline,
/// see [`crate::wire`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Arg(Wire);

impl Arg {
    /// Text as is.
    pub fn text(s: impl Into<String>) -> Arg {
        let s = s.into();
        if s.len() <= INLINE {
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

    /// Bytes already shared (a packed argument built once), not copied.
    pub fn shared(bytes: Bytes) -> Arg {
        Arg(Wire::Shared(bytes))
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

/// The bytes of a call's KEYS then ARGV, in order, for the client to send:
/// shared values as they are, the short inline ones as slices of one buffer
/// made for the call.
pub fn call_parts(keys: Vec<Key>, args: Vec<Arg>) -> Vec<Bytes> {
    let wires: Vec<Wire> = keys
        .into_iter()
        .map(Key::into_wire)
        .chain(args.into_iter().map(Arg::into_wire))
        .collect();
    let inline: usize = wires
        .iter()
        .map(|w| match w {
            Wire::Inline { len, .. } => *len as usize,
            Wire::Shared(_) => 0,
        })
        .sum();
    let mut arena = BytesMut::with_capacity(inline);
    for w in &wires {
        if let Wire::Inline { .. } = w {
            arena.extend_from_slice(w.as_bytes());
        }
    }
    let arena = arena.freeze();
    let mut at = 0;
    wires
        .into_iter()
        .map(|w| match w {
            Wire::Shared(b) => b,
            Wire::Inline { len, .. } => {
                let part = arena.slice(at..at + len as usize);
                at += len as usize;
                part
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_the_values_in_order() {
        let long = "x".repeat(100);
        let keys = vec![Key::from("emq:q:wait"), Key::from(long.clone())];
        let args = vec![
            Arg::str("42"),
            Arg::int(-7),
            Arg::from_static("completed"),
            Arg::str(&long),
            Arg::empty(),
            Arg::packed(vec![0x80]),
        ];
        let parts = call_parts(keys, args);
        let text: Vec<&[u8]> = parts.iter().map(|b| &b[..]).collect();
        assert_eq!(
            text,
            [
                &b"emq:q:wait"[..],
                long.as_bytes(),
                b"42",
                b"-7",
                b"completed",
                long.as_bytes(),
                b"",
                &[0x80],
            ]
        );
    }
}
