//! Dead letters (issue 45, docs/operations.md §Dead letters): a queue names a
//! dead-letter queue, and a job that fails for good moves there in the same
//! script that fails it — one place, never two, never none.
//!
//! * [`DeadLetterQueue`] — the option (`WorkerOptions::dead_letter`, the
//!   follower's target): the dead-letter queue's name and bound.
//! * [`follower`] — the [`DeadLetterFollower`]: moves the final failures of
//!   other workers (BullMQ Node's) by following the queue's events stream.
//! * `queue.dead_letters()` ([`DeadLetters`](crate::queue::DeadLetters)) —
//!   list, show and replay by filter, a page at a time.
//!
//! A dead letter is a BullMQ job hash in the dead-letter queue's `failed`
//! set, scored by the time it was dead-lettered, with four fields more:
//! `dlq.queue` (`<prefix>:<source>`), `dlq.id` (its id there), `dlq.class`
//! (the reason class, [`REASON_CLASSES`]) and `dlq.at`.

pub(crate) mod admin;
pub mod follower;
pub(crate) mod target;

pub use self::admin::{
    DeadLetter, DeadLetterCursor, DeadLetterFilter, DeadLetterPage, ReplayOptions, ReplayReport,
    ReplaySkip,
};
pub use self::follower::{DeadLetterFollower, FollowerStats};
pub use self::target::{DeadLetterError, DeadLetterQueue};

/// The reason classes a dead letter is counted under (`dlq.class`), decided
/// by the script from the failure (docs/operations.md §Dead letters):
/// `unrecoverable` (an `UnrecoverableError`), `timeout` (a `TimeoutError`,
/// or "timed out" in the reason), `stalled` (stalled or started more than
/// the allowable limit), `cancelled` (a `CancelledError`/`AbortError`, or
/// "cancelled" in the reason), and `error` for anything else.
pub const REASON_CLASSES: [&str; 5] = ["unrecoverable", "timeout", "stalled", "cancelled", "error"];
