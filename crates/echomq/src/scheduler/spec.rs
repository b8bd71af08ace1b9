//! Job-scheduler definitions, pure: what a scheduler is ([`SchedulerSpec`],
//! [`Repeat`], [`JobTemplate`]) and why one is refused ([`SchedulerError`]).
//!
//! Nothing here talks to Redis or knows the runtime's error type, so the
//! runtime's `Error` can wrap [`SchedulerError`] without a module cycle; the
//! cron engine is `cron.rs`, the Redis side `store.rs`, the actor `actor.rs`.
//! Contract: `docs/job-scheduler.md`.

use std::time::Duration;

use echomq_protocol::JobOptions;
use serde_json::Value as Json;

use super::cron::CronSchedule;
use super::error::SchedulerError;

/// How a scheduler repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// Every `ms` milliseconds. Iterations fall on slots `k × ms + offset`;
    /// without an offset the first iteration runs at once and fixes the phase.
    Every {
        /// The interval, ms (> 0).
        ms: u64,
        /// Phase of the slots inside the interval, ms.
        offset: Option<u64>,
    },
    /// At the occurrences of a cron pattern (5 fields, or 6 with seconds).
    Cron {
        /// The pattern, as npm `cron-parser` reads it.
        pattern: String,
        /// IANA zone; `None` = the process's local zone (always set it).
        tz: Option<String>,
    },
}

/// The job every iteration is made from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobTemplate {
    /// Job name; defaults to the scheduler id, as in BullMQ.
    pub name: Option<String>,
    /// Job data; `Null` is stored as `{}`.
    pub data: Json,
    /// Options of every iteration.
    pub options: JobOptions,
}

/// A scheduler definition (the Upsert message, `queue.upsertJobScheduler`):
/// [`SchedulerSpec::every`] or [`SchedulerSpec::cron`], then the builders.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SchedulerSpec {
    /// Scheduler id: avoid `:` (it is part of the iteration ids `repeat:<id>:<millis>`).
    pub id: String,
    /// How it repeats.
    pub repeat: Repeat,
    /// No iteration before this time (ms).
    pub start_date: Option<u64>,
    /// No iteration after this time (ms).
    pub end_date: Option<u64>,
    /// At most this many iterations (counted from this upsert).
    pub limit: Option<u64>,
    /// Cron only: the first iteration runs now instead of at the next occurrence.
    pub immediately: bool,
    /// The job to produce.
    pub template: JobTemplate,
}

impl SchedulerSpec {
    /// An `every` scheduler with an empty template.
    pub fn every(id: impl Into<String>, every: Duration) -> Self {
        Self::new(
            id,
            Repeat::Every {
                ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
                offset: None,
            },
        )
    }

    /// An `every` scheduler whose slots fall at `k × every + offset`.
    pub fn every_with_offset(id: impl Into<String>, every: Duration, offset: Duration) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self::new(
            id,
            Repeat::Every {
                ms: ms(every),
                offset: Some(ms(offset)),
            },
        )
    }

    /// A cron scheduler with an empty template.
    pub fn cron(id: impl Into<String>, pattern: impl Into<String>, tz: Option<&str>) -> Self {
        Self::new(
            id,
            Repeat::Cron {
                pattern: pattern.into(),
                tz: tz.map(str::to_owned),
            },
        )
    }

    fn new(id: impl Into<String>, repeat: Repeat) -> Self {
        SchedulerSpec {
            id: id.into(),
            repeat,
            start_date: None,
            end_date: None,
            limit: None,
            immediately: false,
            template: JobTemplate::default(),
        }
    }

    /// Sets the template job.
    pub fn template(mut self, name: impl Into<String>, data: Json, options: JobOptions) -> Self {
        self.template = JobTemplate {
            name: Some(name.into()),
            data,
            options,
        };
        self
    }

    /// Cron only: the first iteration runs now rather than at the next
    /// occurrence (refused with a start date).
    pub fn immediately(mut self) -> Self {
        self.immediately = true;
        self
    }

    /// Sets `limit`.
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets the start date (ms).
    pub fn start_date(mut self, ms: u64) -> Self {
        self.start_date = Some(ms);
        self
    }

    /// Sets the end date (ms).
    pub fn end_date(mut self, ms: u64) -> Self {
        self.end_date = Some(ms);
        self
    }

    /// Checks the definition; `now` decides "end date in the past".
    pub fn validate(&self, now: u64) -> std::result::Result<(), SchedulerError> {
        if self.id.is_empty() {
            return Err(SchedulerError::EmptyId);
        }
        match &self.repeat {
            Repeat::Every { ms, .. } if *ms == 0 => return Err(SchedulerError::InvalidEvery),
            Repeat::Every { .. } => {}
            Repeat::Cron { pattern, tz } => {
                CronSchedule::new(pattern, tz.as_deref())?;
            }
        }
        if self.limit == Some(0) {
            return Err(SchedulerError::InvalidLimit);
        }
        if let (Some(start), Some(end)) = (self.start_date, self.end_date) {
            if end <= start {
                return Err(SchedulerError::EndBeforeStart { start, end });
            }
        }
        if let Some(end) = self.end_date {
            if end < now {
                return Err(SchedulerError::EndInPast(end));
            }
        }
        if self.immediately && self.start_date.is_some() {
            return Err(SchedulerError::ImmediatelyWithStartDate);
        }
        Ok(())
    }
}

/// BullMQ 6's test for v5 repeat keys `name:id:endDate:tz:<cron|every>`.
pub(crate) fn has_legacy_repeat_key_shape(key: &str) -> bool {
    let parts: Vec<&str> = key.splitn(5, ':').collect();
    if parts.len() < 5 {
        return false;
    }
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !parts[2].is_empty() && !numeric(parts[2]) {
        return false;
    }
    let suffix = parts[4];
    !suffix.is_empty() && (suffix.contains(' ') || numeric(suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_shape() {
        assert!(has_legacy_repeat_key_shape("n:id::UTC:0 * * * *"));
        assert!(has_legacy_repeat_key_shape("n:id:123::5000"));
        assert!(!has_legacy_repeat_key_shape("my-scheduler"));
        assert!(!has_legacy_repeat_key_shape("a:b:c:d"));
    }

    #[test]
    fn validation() {
        let now = 1_000;
        assert_eq!(
            SchedulerSpec::every("s", Duration::ZERO).validate(now),
            Err(SchedulerError::InvalidEvery)
        );
        assert_eq!(
            SchedulerSpec::every("s", Duration::from_secs(1))
                .limit(0)
                .validate(now),
            Err(SchedulerError::InvalidLimit)
        );
        assert!(matches!(
            SchedulerSpec::cron("s", "nope", Some("UTC")).validate(now),
            Err(SchedulerError::InvalidPattern { .. })
        ));
        assert_eq!(
            SchedulerSpec::every("s", Duration::from_secs(1))
                .start_date(5_000)
                .end_date(4_000)
                .validate(now),
            Err(SchedulerError::EndBeforeStart {
                start: 5_000,
                end: 4_000
            })
        );
    }
}
