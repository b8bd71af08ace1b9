//! The relay: fleet-wide publish/subscribe with retained messages, on the
//! keys and scripts of BullMQ 6.7.0's `Relay` (docs/protocol.md §Relay), so
//! EchoMQ nodes and BullMQ Node nodes share one namespace both ways.
//!
//! Queues are for work; the relay tells other processes that something
//! happened, or what the current state of something is. A topic is a dot
//! path (`orders.42.status`); a subscription's pattern may use `*` (one
//! segment) and a trailing `>` (one or more). A message published with a
//! retention becomes its topic's retained message: a later subscriber of
//! that exact topic gets it first.
//!
//! * [`Relay`] — one node: an actor a host supervises. It registers the node
//!   with a lease and heartbeats it, reads its inbox stream in a task it
//!   owns (blocking reads on a dedicated client), sweeps dead nodes, and
//!   delivers each subscription's messages as [`RelayDelivery`] values to a
//!   bounded channel ([`RelaySubscription`]) or a host actor ([`actor_sink`]),
//!   lag reported as [`RelayDelivery::Lagged`].
//! * [`RelayClient`] — what needs no node: publish, delete a retained
//!   message, and the dashboard getters; [`namespaces`] lists the
//!   namespaces in use.
//! * [`RelaySubscribers`] — the endpoints of a node, held in [`RelayArgs`]
//!   outside the actor: a restarted node keeps every subscription.
//!
//! Contract: `docs/relay.md`.

mod actor;
mod args;
mod client;
mod error;
mod messages;
mod reader;
mod registry;

pub use actor::{Relay, RelayState};
pub use args::{RelayArgs, MAX_NAME_LEN};
pub use client::{
    namespaces, RelayClient, DEFAULT_INBOX_MAX_LENGTH, DEFAULT_MAX_MESSAGE_SIZE, PAGE,
};
pub use echomq_protocol::call::relay::{
    Published, RelayCounts, RelayNodeRow, RelayPatternRow, RelayRetainedRow, RelaySubscriptionRow,
    SubscriptionFilter,
};
pub use echomq_protocol::relay::{RelayCode, RelayInputError, DEFAULT_NAMESPACE};
pub use error::RelayError;
pub use messages::{InboxBatch, RelayMsg, RelayStatus};
pub use registry::{
    actor_sink, RelayDelivery, RelayMessage, RelayNotice, RelayNotices, RelaySubscribers,
    RelaySubscription,
};
