//! QueueEvents: the events stream `{P}events` as typed messages (seed E2.03.3).
//!
//! A reader task the actor owns runs `XREAD BLOCK` on a dedicated client and
//! casts each batch to the actor, which fans it out to subscribers. The start
//! position is fixed in `pre_start` (`$` is resolved to the stream's current
//! last id), so every event appended after `spawn` returns is delivered: the
//! actor is ready before its first event can exist.
//!
//! Subscribers get [`Delivery`] values through a bounded channel: a slow
//! subscriber is never buffered without bound — it is told how many events it
//! missed ([`Delivery::Lagged`]) once it has room again. A resume from an id the
//! stream has already trimmed is reported as [`Delivery::Gap`] instead of
//! skipping silently.
//!
//! The subscribers live in a [`Subscribers`] registry held in the arguments,
//! not in the actor: a QueueEvents restarted from the same arguments
//! re-attaches them and resumes after the last entry it delivered, so a
//! subscription survives a crash or kill of the actor. Contract:
//! `docs/queue-events.md`.

pub(crate) mod actor;
pub(crate) mod delivery;
pub(crate) mod subscribers;
pub(crate) mod wait;

pub use self::actor::{
    QueueEvents, QueueEventsArgs, QueueEventsError, QueueEventsMsg, QueueEventsState, StartFrom,
};
pub use self::delivery::{actor_subscriber, Delivery, Subscription};
pub use self::subscribers::Subscribers;
pub use self::wait::wait_until_finished;
