//! Why a scheduler definition is refused: its own module, pure, so that the
//! definitions, the cron engine and the runtime's `Error` all name it
//! without naming each other.

use thiserror::Error;

/// Why a scheduler definition was refused. Nothing is written when one of
/// these is returned.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The scheduler id is empty.
    #[error("job scheduler id must not be empty")]
    EmptyId,
    /// The cron pattern cannot be parsed (or uses syntax EchoMQ cannot
    /// evaluate exactly as BullMQ Node does).
    #[error("invalid cron pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not an IANA zone name.
    #[error("unknown time zone {0:?}")]
    InvalidTimeZone(String),
    /// `every` must be a positive number of milliseconds.
    #[error("`every` must be a positive number of milliseconds")]
    InvalidEvery,
    /// `limit` must be at least 1.
    #[error("`limit` must be at least 1")]
    InvalidLimit,
    /// The end date is not after the start date.
    #[error("end date {end} is not after start date {start}")]
    EndBeforeStart {
        /// Start, ms.
        start: u64,
        /// End, ms.
        end: u64,
    },
    /// The end date has passed already.
    #[error("end date {0} is in the past")]
    EndInPast(u64),
    /// `immediately` and a start date contradict each other.
    #[error("`immediately` and a start date cannot be combined")]
    ImmediatelyWithStartDate,
}
