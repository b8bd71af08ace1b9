//! The JSON-lines protocol between a worker and a handler outside the Rust
//! process (docs/processors.md): the `job` object the worker sends, the
//! messages a handler answers with, and what each message does to the job.

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};
use tracing::warn;

use crate::worker::process::processor::{JobContext, ProcessError};

/// Excerpts of handler output in failure reasons and logs stay this short.
const EXCERPT_CHARS: usize = 120;

/// The job as a handler receives it: one JSON object, on one line for the
/// `exec` mode, as the request body for the `http` mode.
#[derive(Serialize)]
struct JobMessage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    name: &'a str,
    data: &'a Value,
    attempt: u64,
    opts: Map<String, Value>,
    queue: &'a str,
}

/// The `job` message of `ctx` as JSON text (no newline). The options are
/// BullMQ's public names (`attempts`, `keepLogs`, …), as a Node job's
/// `opts` reads.
pub(crate) fn job_message(ctx: &JobContext) -> String {
    let message = JobMessage {
        kind: "job",
        id: ctx.id(),
        name: ctx.name(),
        data: ctx.data(),
        attempt: ctx.attempt(),
        opts: ctx.job().opts.to_public(),
        queue: ctx.queue().name(),
    };
    // A Value tree and string fields: serialization cannot fail.
    serde_json::to_string(&message).unwrap_or_default()
}

/// One message of a handler.
#[derive(Debug, PartialEq)]
pub(crate) enum Message {
    /// The handler is up (optional; carries nothing the worker needs).
    Ready,
    /// `{"type":"progress","value":V}`: stored as the job's progress.
    Progress(Value),
    /// `{"type":"log","line":"…"}`: appended to the job's logs.
    Log(String),
    /// `{"type":"update_data","data":V}`: replaces the job's data.
    UpdateData(Value),
    /// `{"type":"completed","value":V}`: the job's return value (`null`
    /// when absent).
    Completed(Value),
    /// `{"type":"failed","error":"…","unrecoverable":false,"stack":"…"}`.
    Failed {
        error: String,
        unrecoverable: bool,
        stack: Option<String>,
    },
    /// A JSON object whose `type` this worker does not know: skipped, so a
    /// handler written for a later protocol still works here.
    Unknown(String),
}

/// Why a line of handler output is not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineError {
    /// Not JSON at all (a stray `print`, a traceback on stdout).
    NotJson { excerpt: String },
    /// JSON, but not an object with a string `type`.
    NotAMessage { excerpt: String },
    /// A known `type` with a missing or mistyped field.
    Malformed { kind: String, problem: &'static str },
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineError::NotJson { excerpt } => write!(f, "the line {excerpt:?} is not JSON"),
            LineError::NotAMessage { excerpt } => write!(
                f,
                "the line {excerpt:?} is not a message (a JSON object with a string \"type\")"
            ),
            LineError::Malformed { kind, problem } => {
                write!(f, "a {kind:?} message {problem}")
            }
        }
    }
}

/// The first characters of `text`, for reasons and logs.
pub(crate) fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// Reads one line; `Ok(None)` for a blank line (ignored).
pub(crate) fn parse(line: &str) -> Result<Option<Message>, LineError> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(line).map_err(|_| LineError::NotJson {
        excerpt: excerpt(line),
    })?;
    let Value::Object(mut fields) = value else {
        return Err(LineError::NotAMessage {
            excerpt: excerpt(line),
        });
    };
    let Some(Value::String(kind)) = fields.remove("type") else {
        return Err(LineError::NotAMessage {
            excerpt: excerpt(line),
        });
    };
    let malformed = |problem| LineError::Malformed {
        kind: kind.clone(),
        problem,
    };
    let message = match kind.as_str() {
        "ready" => Message::Ready,
        "progress" => Message::Progress(
            fields
                .remove("value")
                .ok_or_else(|| malformed("has no \"value\""))?,
        ),
        "log" => match fields.remove("line") {
            Some(Value::String(line)) => Message::Log(line),
            _ => return Err(malformed("needs a string \"line\"")),
        },
        "update_data" => Message::UpdateData(
            fields
                .remove("data")
                .ok_or_else(|| malformed("has no \"data\""))?,
        ),
        "completed" => Message::Completed(fields.remove("value").unwrap_or(Value::Null)),
        "failed" => {
            let error = match fields.remove("error") {
                Some(Value::String(e)) => e,
                None | Some(Value::Null) => "the handler failed the job without a reason".into(),
                Some(_) => return Err(malformed("needs a string \"error\"")),
            };
            let unrecoverable = match fields.remove("unrecoverable") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => b,
                Some(_) => return Err(malformed("needs a boolean \"unrecoverable\"")),
            };
            let stack = match fields.remove("stack") {
                Some(Value::String(s)) => Some(s),
                None | Some(Value::Null) => None,
                Some(_) => return Err(malformed("needs a string \"stack\"")),
            };
            Message::Failed {
                error,
                unrecoverable,
                stack,
            }
        }
        _ => Message::Unknown(kind),
    };
    Ok(Some(message))
}

/// What a message means for the job under way.
pub(crate) enum Step {
    /// An intermediate message: more are to come.
    Continue,
    /// The job's answer.
    Done(Result<Value, ProcessError>),
}

/// Carries out `message` for the job of `ctx`. Progress, logs and data
/// updates are written before the next line is read, so they land in the
/// order the handler sent them; a write that fails (Redis away) is logged
/// and the job goes on, as a Rust processor ignoring the error would.
pub(crate) async fn apply(ctx: &JobContext, message: Message) -> Step {
    match message {
        Message::Ready => {}
        Message::Progress(value) => {
            if let Err(e) = ctx.update_progress(&value).await {
                warn!(job_id = ctx.id(), error = %e, "handler progress not stored");
            }
        }
        Message::Log(line) => {
            if let Err(e) = ctx.log(&line).await {
                warn!(job_id = ctx.id(), error = %e, "handler log line not stored");
            }
        }
        Message::UpdateData(data) => {
            if let Err(e) = ctx.update_data(&data).await {
                warn!(job_id = ctx.id(), error = %e, "handler data update not stored");
            }
        }
        Message::Completed(value) => return Step::Done(Ok(value)),
        Message::Failed {
            error,
            unrecoverable,
            stack,
        } => {
            let e = if unrecoverable {
                ProcessError::unrecoverable(error)
            } else {
                ProcessError::Failed {
                    message: error,
                    stack,
                }
            };
            return Step::Done(Err(e));
        }
        Message::Unknown(kind) => {
            warn!(
                job_id = ctx.id(),
                kind, "handler message of an unknown type skipped"
            );
        }
    }
    Step::Continue
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_core_lines_read_as_messages() {
        assert_eq!(
            parse(r#"{"type":"progress","value":50}"#),
            Ok(Some(Message::Progress(json!(50))))
        );
        assert_eq!(
            parse(r#"{"type":"log","line":"hi"}"#),
            Ok(Some(Message::Log("hi".into())))
        );
        assert_eq!(
            parse(r#" {"type":"completed"} "#),
            Ok(Some(Message::Completed(Value::Null)))
        );
        assert_eq!(
            parse(r#"{"type":"failed","error":"no","unrecoverable":true}"#),
            Ok(Some(Message::Failed {
                error: "no".into(),
                unrecoverable: true,
                stack: None
            }))
        );
        assert_eq!(parse("   "), Ok(None));
        assert_eq!(
            parse(r#"{"type":"later","x":1}"#),
            Ok(Some(Message::Unknown("later".into())))
        );
    }

    #[test]
    fn garbage_is_a_typed_error_with_an_excerpt() {
        assert_eq!(
            parse("hello world"),
            Err(LineError::NotJson {
                excerpt: "hello world".into()
            })
        );
        assert!(matches!(parse("[1,2]"), Err(LineError::NotAMessage { .. })));
        assert!(matches!(
            parse(r#"{"value":1}"#),
            Err(LineError::NotAMessage { .. })
        ));
        assert!(matches!(
            parse(r#"{"type":"log","line":5}"#),
            Err(LineError::Malformed { .. })
        ));
        let long = "x".repeat(500);
        let Err(LineError::NotJson { excerpt }) = parse(&long) else {
            panic!()
        };
        assert_eq!(excerpt.chars().count(), EXCERPT_CHARS + 1);
    }
}
