//! The wire value a script returns, and the lenient readings every call type
//! shares (Lua numbers come back as integers or as text, HGETALL as a flat
//! field/value array).

use bytes::Bytes;

use thiserror::Error;

use crate::reply::ScriptErrorCode;
use crate::scripts::ScriptId;

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

/// A script's reply, as RESP carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Nil (Lua `false` or `nil`).
    Nil,
    /// An integer.
    Int(i64),
    /// A double (RESP3 only).
    Double(f64),
    /// A bulk or simple string.
    Bulk(Bytes),
    /// An array.
    Array(Vec<Reply>),
}

impl Reply {
    /// A bulk reply from text (tests and tools).
    pub fn text(s: &str) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    /// An integer, also read from decimal text or a double.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(b) => parse_int(std::str::from_utf8(b).ok()?.trim()),
            Reply::Double(d) => Some(*d as i64),
            _ => None,
        }
    }

    /// Text of a bulk reply (numbers as decimal text).
    pub fn to_text(&self) -> Option<String> {
        match self {
            Reply::Bulk(b) => String::from_utf8(b.to_vec()).ok(),
            Reply::Int(n) => Some(n.to_string()),
            Reply::Double(d) => Some(d.to_string()),
            _ => None,
        }
    }

    /// The elements of an array; nil reads as the empty array.
    pub fn into_array(self) -> Option<Vec<Reply>> {
        match self {
            Reply::Array(a) => Some(a),
            Reply::Nil => Some(Vec::new()),
            _ => None,
        }
    }

    /// True for nil.
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }
}

/// An integer as Lua and Node write them: decimal text, or a float rendering
/// (`"12.0"`, `1e3`) that a Lua number or a JS number can produce. Every
/// lenient number of the protocol (replies, hash fields, stored options) is
/// read here.
pub fn parse_int(s: &str) -> Option<i64> {
    s.parse::<i64>().ok().or_else(|| {
        s.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| f as i64)
    })
}

/// A negative integer as the script's error code.
pub fn code(script: ScriptId, n: i64) -> Result<i64, ReplyError> {
    if n >= 0 {
        return Ok(n);
    }
    match ScriptErrorCode::from_code(n) {
        Some(code) => Err(ReplyError::Code {
            script: script.name(),
            code,
        }),
        None => Err(ReplyError::shape(script, format!("unknown error code {n}"))),
    }
}

/// An integer reply, negative codes as errors.
pub fn int_or_code(script: ScriptId, reply: &Reply) -> Result<i64, ReplyError> {
    let n = reply
        .as_i64()
        .ok_or_else(|| ReplyError::shape(script, format!("expected an integer, got {reply:?}")))?;
    code(script, n)
}

/// An array reply.
pub fn array(script: ScriptId, reply: Reply) -> Result<Vec<Reply>, ReplyError> {
    reply
        .into_array()
        .ok_or_else(|| ReplyError::shape(script, "expected an array"))
}

/// A text reply.
pub fn text(script: ScriptId, reply: &Reply) -> Result<String, ReplyError> {
    reply
        .to_text()
        .ok_or_else(|| ReplyError::shape(script, format!("expected text, got {reply:?}")))
}

/// An array of texts (ids).
pub fn strings(script: ScriptId, reply: Reply) -> Result<Vec<String>, ReplyError> {
    array(script, reply)?
        .iter()
        .map(|e| text(script, e))
        .collect()
}

/// A flat field/value array (HGETALL inside a script) as pairs.
pub fn pairs(script: ScriptId, reply: Reply) -> Result<Vec<(String, String)>, ReplyError> {
    let items = array(script, reply)?;
    if items.len() % 2 != 0 {
        // Which error an odd list with a non-text entry gets: the entry's.
        for item in &items {
            text(script, item)?;
        }
        return Err(ReplyError::shape(script, "odd field/value list"));
    }
    // Every job taken goes through here: the pairs are built straight from
    // the reply, without an intermediate list of strings.
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((text(script, k)?, text(script, v)?));
    }
    Ok(out)
}

/// Nothing to read: any non-error reply is success.
pub fn unit(script: ScriptId, reply: &Reply) -> Result<(), ReplyError> {
    if let Some(n) = reply.as_i64() {
        code(script, n)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_numbers_and_pairs() {
        assert_eq!(Reply::text(" 12").as_i64(), Some(12));
        assert_eq!(Reply::Double(3.0).as_i64(), Some(3));
        let s = ScriptId::GetCounts;
        assert_eq!(
            int_or_code(s, &Reply::Int(-2)).unwrap_err().code(),
            Some(ScriptErrorCode::JobLockNotExist)
        );
        let p = pairs(
            s,
            Reply::Array(vec![
                Reply::text("a"),
                Reply::Int(1),
                Reply::text("b"),
                Reply::text("x"),
            ]),
        )
        .unwrap();
        assert_eq!(p, vec![("a".into(), "1".into()), ("b".into(), "x".into())]);
        assert!(pairs(s, Reply::Array(vec![Reply::text("a")])).is_err());
        let odd_and_foreign = Reply::Array(vec![Reply::text("a"), Reply::Nil, Reply::text("c")]);
        let e = pairs(s, odd_and_foreign).unwrap_err();
        assert!(e.to_string().contains("expected text"), "{e}");
        assert_eq!(strings(s, Reply::Nil).unwrap(), Vec::<String>::new());
    }
}
