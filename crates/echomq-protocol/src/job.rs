//! The job hash (docs/protocol.md §Job hash): field names and decoding.

use std::collections::HashMap;

use serde_json::Value;
use thiserror::Error;

use crate::call::decode::parse_int;
use crate::options::JobOptions;

/// Names of the job hash fields, as stored by every runtime.
pub mod field {
    /// Job name.
    pub const NAME: &str = "name";
    /// Payload, JSON.
    pub const DATA: &str = "data";
    /// Stored options, JSON (cjson).
    pub const OPTS: &str = "opts";
    /// Creation time, ms.
    pub const TIMESTAMP: &str = "timestamp";
    /// Requested delay, ms.
    pub const DELAY: &str = "delay";
    /// Priority.
    pub const PRIORITY: &str = "priority";
    /// Start of the latest attempt, ms.
    pub const PROCESSED_ON: &str = "processedOn";
    /// End of the final attempt, ms.
    pub const FINISHED_ON: &str = "finishedOn";
    /// Result, JSON.
    pub const RETURN_VALUE: &str = "returnvalue";
    /// Last failure message, raw text.
    pub const FAILED_REASON: &str = "failedReason";
    /// Stack traces, JSON array of strings.
    pub const STACKTRACE: &str = "stacktrace";
    /// attemptsMade.
    pub const ATTEMPTS_MADE: &str = "atm";
    /// Legacy name of attemptsMade.
    pub const ATTEMPTS_MADE_LEGACY: &str = "attemptsMade";
    /// attemptsStarted.
    pub const ATTEMPTS_STARTED: &str = "ats";
    /// stalledCounter.
    pub const STALLED_COUNTER: &str = "stc";
    /// Deferred failure reason.
    pub const DEFERRED_FAILURE: &str = "defa";
    /// Name of the worker that took the latest attempt.
    pub const PROCESSED_BY: &str = "pb";
    /// Progress, JSON.
    pub const PROGRESS: &str = "progress";
    /// Full key of the parent job.
    pub const PARENT_KEY: &str = "parentKey";
    /// Parent descriptor, JSON.
    pub const PARENT: &str = "parent";
    /// Scheduler id of a scheduler iteration.
    pub const REPEAT_JOB_KEY: &str = "rjk";
    /// Deduplication id.
    pub const DEDUPLICATION_ID: &str = "deid";
}

/// A job hash that cannot be read as a job (foreign or corrupted data).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A field every job has is missing.
    #[error("job {id}: field `{field}` is missing")]
    MissingField {
        /// Job id.
        id: String,
        /// Field name.
        field: &'static str,
    },
    /// A field holds a value of the wrong encoding.
    #[error("job {id}: field `{field}` is not valid: {reason}")]
    InvalidField {
        /// Job id.
        id: String,
        /// Field name.
        field: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// A job as read from its hash, decoded the way BullMQ Node decodes it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    /// The job id (not stored in the hash: the part of the key after `{P}`).
    pub id: String,
    /// Job name.
    pub name: String,
    /// Payload (`{}` when absent).
    pub data: Value,
    /// Options in typed form.
    pub opts: JobOptions,
    /// Creation time, ms.
    pub timestamp: u64,
    /// Requested delay, ms (0 after promotion).
    pub delay: i64,
    /// Priority (0 = none).
    pub priority: i64,
    /// Start of the latest attempt, ms.
    pub processed_on: Option<u64>,
    /// End of the final attempt, ms.
    pub finished_on: Option<u64>,
    /// Result of a completed job (`None` when absent or unreadable, as Node does).
    pub return_value: Option<Value>,
    /// Last failure message.
    pub failed_reason: Option<String>,
    /// Stack traces of failed attempts.
    pub stacktrace: Vec<String>,
    /// attemptsMade (`atm`, or legacy `attemptsMade`).
    pub attempts_made: u64,
    /// attemptsStarted (`ats`).
    pub attempts_started: u64,
    /// stalledCounter (`stc`).
    pub stalled_counter: u64,
    /// Progress (`0` when absent).
    pub progress: Value,
    /// Deferred failure: the next worker fails the job with this reason.
    pub deferred_failure: Option<String>,
    /// Worker that took the latest attempt.
    pub processed_by: Option<String>,
    /// Full key of the parent job (flows).
    pub parent_key: Option<String>,
    /// Parent descriptor (flows).
    pub parent: Option<Value>,
    /// Scheduler id when the job is a scheduler iteration.
    pub repeat_job_key: Option<String>,
    /// Deduplication id.
    pub deduplication_id: Option<String>,
}

impl JobRecord {
    /// Decodes a job hash (field → value). Strict where a reader cannot go on
    /// (`name`, `data`, `opts`, numeric fields), lenient where Node is lenient
    /// (`returnvalue`, `stacktrace`, `progress`).
    pub fn from_hash(id: &str, mut hash: HashMap<String, String>) -> Result<Self, DecodeError> {
        let invalid = |field: &'static str, reason: String| DecodeError::InvalidField {
            id: id.to_owned(),
            field,
            reason,
        };
        let name = hash.remove(field::NAME).ok_or(DecodeError::MissingField {
            id: id.to_owned(),
            field: field::NAME,
        })?;
        let data = match hash.remove(field::DATA) {
            Some(s) => serde_json::from_str(&s).map_err(|e| invalid(field::DATA, e.to_string()))?,
            None => Value::Object(Default::default()),
        };
        let opts = match hash.remove(field::OPTS) {
            Some(s) => match serde_json::from_str::<Value>(&s) {
                Ok(Value::Object(m)) => JobOptions::from_stored(&m),
                // cjson encodes an empty table as `{}` but a foreign writer may store `[]`.
                Ok(Value::Array(a)) if a.is_empty() => JobOptions::default(),
                Ok(other) => return Err(invalid(field::OPTS, format!("not an object: {other}"))),
                Err(e) => return Err(invalid(field::OPTS, e.to_string())),
            },
            None => JobOptions::default(),
        };
        let mut int = |f: &'static str| -> Result<Option<i64>, DecodeError> {
            match hash.remove(f) {
                None => Ok(None),
                Some(s) if s.is_empty() => Ok(None),
                Some(s) => parse_int(&s)
                    .map(Some)
                    .ok_or_else(|| invalid(f, format!("not an integer: {s:?}"))),
            }
        };
        let timestamp = int(field::TIMESTAMP)?.unwrap_or(0).max(0) as u64;
        let delay = int(field::DELAY)?.unwrap_or(0);
        let priority = int(field::PRIORITY)?.unwrap_or(0);
        let processed_on = int(field::PROCESSED_ON)?.map(|v| v.max(0) as u64);
        let finished_on = int(field::FINISHED_ON)?.map(|v| v.max(0) as u64);
        let atm = int(field::ATTEMPTS_MADE)?;
        let legacy_atm = int(field::ATTEMPTS_MADE_LEGACY)?;
        let attempts_made = legacy_atm.or(atm).unwrap_or(0).max(0) as u64;
        let attempts_started = int(field::ATTEMPTS_STARTED)?.unwrap_or(0).max(0) as u64;
        let stalled_counter = int(field::STALLED_COUNTER)?.unwrap_or(0).max(0) as u64;
        let return_value = hash
            .remove(field::RETURN_VALUE)
            .and_then(|s| serde_json::from_str(&s).ok());
        let stacktrace = hash
            .remove(field::STACKTRACE)
            .and_then(|s| serde_json::from_str::<Vec<Value>>(&s).ok())
            .map(|v| {
                v.into_iter()
                    .map(|e| {
                        e.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| e.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let progress = hash
            .remove(field::PROGRESS)
            .map(|s| serde_json::from_str(&s).unwrap_or(Value::String(s)))
            .unwrap_or(Value::from(0));
        let parent = hash
            .remove(field::PARENT)
            .and_then(|s| serde_json::from_str(&s).ok());
        Ok(JobRecord {
            id: id.to_owned(),
            name,
            data,
            opts,
            timestamp,
            delay,
            priority,
            processed_on,
            finished_on,
            return_value,
            failed_reason: hash.remove(field::FAILED_REASON),
            stacktrace,
            attempts_made,
            attempts_started,
            stalled_counter,
            progress,
            deferred_failure: hash.remove(field::DEFERRED_FAILURE),
            processed_by: hash.remove(field::PROCESSED_BY),
            parent_key: hash.remove(field::PARENT_KEY),
            parent,
            repeat_job_key: hash.remove(field::REPEAT_JOB_KEY),
            deduplication_id: hash.remove(field::DEDUPLICATION_ID),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn decodes_a_completed_job() {
        let j = JobRecord::from_hash(
            "7",
            hash(&[
                ("name", "n"),
                ("data", r#"{"a":1}"#),
                ("opts", r#"{"attempts":3,"backoff":2000}"#),
                ("timestamp", "1700000000000"),
                ("delay", "0"),
                ("priority", "0"),
                ("atm", "1"),
                ("ats", "1"),
                ("returnvalue", "42"),
                ("finishedOn", "1700000000100"),
            ]),
        )
        .unwrap();
        assert_eq!(j.data["a"], 1);
        assert_eq!(j.opts.attempts, Some(3));
        assert_eq!(j.return_value, Some(Value::from(42)));
        assert_eq!(j.attempts_made, 1);
        assert_eq!(j.progress, Value::from(0));
    }

    #[test]
    fn foreign_data_is_a_typed_error() {
        let e =
            JobRecord::from_hash("1", hash(&[("name", "n"), ("data", "not json")])).unwrap_err();
        assert!(matches!(e, DecodeError::InvalidField { field: "data", .. }));
        let e = JobRecord::from_hash("1", hash(&[("data", "{}")])).unwrap_err();
        assert!(matches!(e, DecodeError::MissingField { field: "name", .. }));
        let e = JobRecord::from_hash("1", hash(&[("name", "n"), ("atm", "x")])).unwrap_err();
        assert!(matches!(e, DecodeError::InvalidField { field: "atm", .. }));
    }
}
