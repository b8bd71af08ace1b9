//! Reading script replies (fred `Value`s) into Rust types.

use echomq_protocol::ScriptErrorCode;
use fred::prelude::Value;

use crate::error::{Error, Result};

/// A script argument: text, a number, or packed bytes.
pub(crate) fn bytes(v: Vec<u8>) -> Value {
    Value::Bytes(v.into())
}

/// A script argument from anything printable (numbers as decimal text).
pub(crate) fn text(v: impl ToString) -> Value {
    Value::String(v.to_string().into())
}

/// An integer reply, or an error for the protocol's negative codes.
pub(crate) fn int_or_code(script: &'static str, v: &Value) -> Result<i64> {
    let n = as_i64(v)
        .ok_or_else(|| Error::protocol(script, format!("expected an integer, got {v:?}")))?;
    check_code(script, n)
}

/// Maps a negative integer to its script error.
pub(crate) fn check_code(script: &'static str, n: i64) -> Result<i64> {
    if n < 0 {
        return Err(match ScriptErrorCode::from_code(n) {
            Some(code) => Error::Script { script, code },
            None => Error::protocol(script, format!("unknown error code {n}")),
        });
    }
    Ok(n)
}

pub(crate) fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(n) => Some(*n),
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::Double(d) => Some(*d as i64),
        _ => None,
    }
}

pub(crate) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => String::from_utf8(b.to_vec()).ok(),
        Value::Integer(n) => Some(n.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

pub(crate) fn as_array(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(a) => Some(a),
        Value::Null => Some(Vec::new()),
        _ => None,
    }
}

/// A list of strings (ids).
pub(crate) fn strings(script: &'static str, v: Value) -> Result<Vec<String>> {
    as_array(v)
        .ok_or_else(|| Error::protocol(script, "expected an array"))?
        .iter()
        .map(|e| {
            as_string(e)
                .ok_or_else(|| Error::protocol(script, format!("expected a string, got {e:?}")))
        })
        .collect()
}
