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
pub struct Job {
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

impl Job {
    /// Decodes a job hash (field → value). Strict where a reader cannot go on
    /// (`name`, `data`, `opts`, numeric fields), lenient where Node is lenient
    /// (`returnvalue`, `stacktrace`, `progress`).
    pub fn from_hash(id: &str, hash: HashMap<String, String>) -> Result<Self, DecodeError> {
        Self::from_fields(id, hash.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// Decodes a job hash given as borrowed field/value pairs (HGETALL's
    /// order), as [`Job::from_hash`] does; a field given twice reads as
    /// its last value. The worker decodes every job it takes this way: no
    /// map is built (and hashed into) first, numbers and JSON are read from
    /// the borrowed text, and only the text fields kept are copied.
    pub fn from_fields<'a>(
        id: &str,
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, DecodeError> {
        let mut h = HashReader {
            id,
            slots: Default::default(),
        };
        for (name, value) in fields {
            if let Some(i) = slot(name) {
                h.slots[i] = Some(value);
            }
        }
        // Struct fields are evaluated in the order written: the strict reads
        // keep the order that decides which error a doubly broken hash gets.
        Ok(Job {
            id: id.to_owned(),
            name: h.name()?,
            data: h.data()?,
            opts: h.opts()?,
            timestamp: h.count(field::TIMESTAMP)?,
            delay: h.int(field::DELAY)?.unwrap_or(0),
            priority: h.int(field::PRIORITY)?.unwrap_or(0),
            processed_on: h.time(field::PROCESSED_ON)?,
            finished_on: h.time(field::FINISHED_ON)?,
            attempts_made: h.attempts_made()?,
            attempts_started: h.count(field::ATTEMPTS_STARTED)?,
            stalled_counter: h.count(field::STALLED_COUNTER)?,
            return_value: h.lenient_json(field::RETURN_VALUE),
            failed_reason: h.text(field::FAILED_REASON),
            stacktrace: h.stacktrace(),
            progress: h.progress(),
            deferred_failure: h.text(field::DEFERRED_FAILURE),
            processed_by: h.text(field::PROCESSED_BY),
            parent_key: h.text(field::PARENT_KEY),
            parent: h.lenient_json(field::PARENT),
            repeat_job_key: h.text(field::REPEAT_JOB_KEY),
            deduplication_id: h.text(field::DEDUPLICATION_ID),
        })
    }
}

/// The fields a [`Job`] is read from, in slot order; others are ignored.
pub const READ: [&str; 22] = [
    field::NAME,
    field::DATA,
    field::OPTS,
    field::TIMESTAMP,
    field::DELAY,
    field::PRIORITY,
    field::PROCESSED_ON,
    field::FINISHED_ON,
    field::RETURN_VALUE,
    field::FAILED_REASON,
    field::STACKTRACE,
    field::ATTEMPTS_MADE,
    field::ATTEMPTS_MADE_LEGACY,
    field::ATTEMPTS_STARTED,
    field::STALLED_COUNTER,
    field::DEFERRED_FAILURE,
    field::PROCESSED_BY,
    field::PROGRESS,
    field::PARENT_KEY,
    field::PARENT,
    field::REPEAT_JOB_KEY,
    field::DEDUPLICATION_ID,
];

/// The slot of a field name in [`READ`] (a `match`, which the compiler turns
/// into a length switch, rather than a search).
fn slot(name: &str) -> Option<usize> {
    Some(match name {
        field::NAME => 0,
        field::DATA => 1,
        field::OPTS => 2,
        field::TIMESTAMP => 3,
        field::DELAY => 4,
        field::PRIORITY => 5,
        field::PROCESSED_ON => 6,
        field::FINISHED_ON => 7,
        field::RETURN_VALUE => 8,
        field::FAILED_REASON => 9,
        field::STACKTRACE => 10,
        field::ATTEMPTS_MADE => 11,
        field::ATTEMPTS_MADE_LEGACY => 12,
        field::ATTEMPTS_STARTED => 13,
        field::STALLED_COUNTER => 14,
        field::DEFERRED_FAILURE => 15,
        field::PROCESSED_BY => 16,
        field::PROGRESS => 17,
        field::PARENT_KEY => 18,
        field::PARENT => 19,
        field::REPEAT_JOB_KEY => 20,
        field::DEDUPLICATION_ID => 21,
        _ => return None,
    })
}

/// A field whose value must be its exact text, as [`READ`] spells it, with
/// its place in [`READ`]: the fields read strictly, and the texts that name
/// keys (the parent's, the scheduler's, the deduplication key's). The
/// others are read as lossy text from bytes that are not UTF-8, as Node's
/// client reads them: the lenient JSON fields then read as text that is not
/// JSON does, and messages and names shown stay readable.
pub(crate) fn exact_text_field(name: &str) -> Option<(usize, &'static str)> {
    let i = slot(name)?;
    let lossy = [
        field::RETURN_VALUE,
        field::FAILED_REASON,
        field::STACKTRACE,
        field::DEFERRED_FAILURE,
        field::PROCESSED_BY,
        field::PROGRESS,
        field::PARENT,
    ];
    (!lossy.contains(&READ[i])).then_some((i, READ[i]))
}

/// A job hash being decoded: each read takes its field out of its slot.
struct HashReader<'i, 'a> {
    id: &'i str,
    slots: [Option<&'a str>; READ.len()],
}

impl<'a> HashReader<'_, 'a> {
    /// Takes field `f` (one of [`READ`]).
    fn take(&mut self, f: &'static str) -> Option<&'a str> {
        slot(f).and_then(|i| self.slots[i].take())
    }

    fn invalid(&self, field: &'static str, reason: String) -> DecodeError {
        DecodeError::InvalidField {
            id: self.id.to_owned(),
            field,
            reason,
        }
    }

    /// The one field every job has.
    fn name(&mut self) -> Result<String, DecodeError> {
        self.take(field::NAME)
            .map(str::to_owned)
            .ok_or_else(|| DecodeError::MissingField {
                id: self.id.to_owned(),
                field: field::NAME,
            })
    }

    /// The payload: `{}` when absent, an error when it is not JSON.
    fn data(&mut self) -> Result<Value, DecodeError> {
        match self.take(field::DATA) {
            Some(s) => {
                serde_json::from_str(s).map_err(|e| self.invalid(field::DATA, e.to_string()))
            }
            None => Ok(Value::Object(Default::default())),
        }
    }

    /// The stored options: defaults when absent, an error unless a JSON object.
    fn opts(&mut self) -> Result<JobOptions, DecodeError> {
        let Some(s) = self.take(field::OPTS) else {
            return Ok(JobOptions::default());
        };
        match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => Ok(JobOptions::from_stored(&m)),
            // cjson encodes an empty table as `{}` but a foreign writer may store `[]`.
            Ok(Value::Array(a)) if a.is_empty() => Ok(JobOptions::default()),
            Ok(other) => Err(self.invalid(field::OPTS, format!("not an object: {other}"))),
            Err(e) => Err(self.invalid(field::OPTS, e.to_string())),
        }
    }

    /// A numeric field: absent or empty is `None`, anything else must be an integer.
    fn int(&mut self, f: &'static str) -> Result<Option<i64>, DecodeError> {
        match self.take(f) {
            None => Ok(None),
            Some("") => Ok(None),
            Some(s) => parse_int(s)
                .map(Some)
                .ok_or_else(|| self.invalid(f, format!("not an integer: {s:?}"))),
        }
    }

    /// A counter or creation time: 0 when absent, negatives clamped to 0.
    fn count(&mut self, f: &'static str) -> Result<u64, DecodeError> {
        Ok(self.int(f)?.unwrap_or(0).max(0) as u64)
    }

    /// An optional time in ms, negatives clamped to 0.
    fn time(&mut self, f: &'static str) -> Result<Option<u64>, DecodeError> {
        Ok(self.int(f)?.map(|v| v.max(0) as u64))
    }

    /// attemptsMade: the legacy field wins when both are present.
    fn attempts_made(&mut self) -> Result<u64, DecodeError> {
        let atm = self.int(field::ATTEMPTS_MADE)?;
        let legacy_atm = self.int(field::ATTEMPTS_MADE_LEGACY)?;
        Ok(legacy_atm.or(atm).unwrap_or(0).max(0) as u64)
    }

    /// A raw text field.
    fn text(&mut self, f: &'static str) -> Option<String> {
        self.take(f).map(str::to_owned)
    }

    /// A JSON field Node reads as absent when it does not parse.
    fn lenient_json(&mut self, f: &'static str) -> Option<Value> {
        self.take(f).and_then(|s| serde_json::from_str(s).ok())
    }

    /// Stack traces: a JSON array, entries that are not strings kept as their JSON.
    fn stacktrace(&mut self) -> Vec<String> {
        self.take(field::STACKTRACE)
            .and_then(|s| serde_json::from_str::<Vec<Value>>(s).ok())
            .map(|v| {
                v.into_iter()
                    .map(|e| {
                        e.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| e.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Progress: JSON when it parses, the raw text otherwise, `0` when absent.
    fn progress(&mut self) -> Value {
        self.take(field::PROGRESS)
            .map(|s| serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_owned())))
            .unwrap_or(Value::from(0))
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
        let j = Job::from_hash(
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
    fn every_read_field_has_its_own_slot() {
        for (i, f) in READ.iter().enumerate() {
            assert_eq!(slot(f), Some(i), "{f}");
        }
        assert_eq!(slot("unknown"), None);
    }

    #[test]
    fn pairs_decode_as_the_map_does_and_the_last_duplicate_wins() {
        let pairs = [
            ("name", "n"),
            ("data", r#"{"a":1}"#),
            ("x-foreign", "ignored"),
            ("atm", "1"),
            ("atm", "2"),
        ];
        let from_pairs = Job::from_fields("3", pairs).unwrap();
        let owned = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let from_map = Job::from_hash("3", owned.collect()).unwrap();
        assert_eq!(from_pairs, from_map);
        assert_eq!(from_pairs.attempts_made, 2);
    }

    #[test]
    fn foreign_data_is_a_typed_error() {
        let e = Job::from_hash("1", hash(&[("name", "n"), ("data", "not json")])).unwrap_err();
        assert!(matches!(e, DecodeError::InvalidField { field: "data", .. }));
        let e = Job::from_hash("1", hash(&[("data", "{}")])).unwrap_err();
        assert!(matches!(e, DecodeError::MissingField { field: "name", .. }));
        let e = Job::from_hash("1", hash(&[("name", "n"), ("atm", "x")])).unwrap_err();
        assert!(matches!(e, DecodeError::InvalidField { field: "atm", .. }));
    }
}
