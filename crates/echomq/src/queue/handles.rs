//! The sub-handles of a [`Queue`]: the operations a producer rarely needs,
//! grouped by topic so that `Queue`'s own page shows the everyday ones.
//! Each borrows the queue (`queue.groups().pause("acme")`) and costs
//! nothing to make.

use super::handle::Queue;

/// Declares a borrowed sub-handle (Copy: its methods take it by value, so
/// a future made from `queue.groups()` holds no borrow of a temporary).
macro_rules! sub_handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<'q> {
            pub(crate) queue: &'q Queue,
        }
    };
}

sub_handle!(
    /// Groups of a queue (docs/groups.md): their settings, stored in Redis
    /// so that every feeder of the fleet obeys them, the queue's group
    /// defaults, and the getters. `queue.groups()`.
    Groups
);

sub_handle!(
    /// Queue-wide limits in the meta hash, honoured by every worker of the
    /// queue, Rust or Node: global concurrency, global rate limit and the
    /// rate limiter's window. `queue.limits()`.
    Limits
);

sub_handle!(
    /// The flow side of a queue (docs/flows.md): a parent's children, the
    /// tree of a flow, detaching children. `queue.flows()`.
    Flows
);

sub_handle!(
    /// Deduplication ids of a queue: who owns one, and freeing it
    /// (docs/protocol.md §Deduplication). `queue.dedup()`.
    Dedup
);

sub_handle!(
    /// What a dashboard or exporter reads of a queue: the per-minute
    /// metrics series, Prometheus samples and text, the workers in a
    /// `CLIENT LIST` read once. `queue.telemetry()`.
    Telemetry
);

sub_handle!(
    /// The dead letters of a dead-letter queue (docs/operations.md §Dead
    /// letters): list, show and replay by filter. `dlq.dead_letters()`.
    DeadLetters
);

impl Queue {
    /// The queue as a dead-letter queue: its dead letters, by page and
    /// filter, and their replay.
    pub fn dead_letters(&self) -> DeadLetters<'_> {
        DeadLetters { queue: self }
    }

    /// The queue's groups: per-group limits, pause, max size, defaults,
    /// counts and pages.
    pub fn groups(&self) -> Groups<'_> {
        Groups { queue: self }
    }

    /// The queue's global concurrency and rate limits.
    pub fn limits(&self) -> Limits<'_> {
        Limits { queue: self }
    }

    /// The queue's parents and children.
    pub fn flows(&self) -> Flows<'_> {
        Flows { queue: self }
    }

    /// The queue's deduplication ids.
    pub fn dedup(&self) -> Dedup<'_> {
        Dedup { queue: self }
    }

    /// The queue's metrics and exporter reads.
    pub fn telemetry(&self) -> Telemetry<'_> {
        Telemetry { queue: self }
    }
}
