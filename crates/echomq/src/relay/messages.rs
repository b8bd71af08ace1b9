//! The messages of the [`Relay`](super::Relay) actor.

use std::time::Duration;

use echomq_protocol::call::relay::{InboxEntry, Published};
use ractor::RpcReplyPort;

use super::error::RelayError;
use super::registry::{RelayDelivery, RelaySubscription};

/// What [`RelayMsg::GetStatus`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayStatus {
    /// The node id.
    pub node_id: String,
    /// The namespace.
    pub namespace: String,
    /// Endpoints (subscriptions) of this node.
    pub endpoints: usize,
    /// Id of the last inbox entry delivered.
    pub cursor: Option<String>,
    /// Inbox entries delivered by this actor (not its predecessors).
    pub delivered: u64,
    /// Recoveries after a lost lease, by this actor.
    pub recoveries: u64,
}

/// A batch of inbox entries read by the reader task.
pub struct InboxBatch {
    pub(crate) entries: Vec<InboxEntry>,
    /// The registration epoch the batch was read under.
    pub(crate) epoch: u64,
}

/// Messages of the [`Relay`](super::Relay) actor.
pub enum RelayMsg {
    /// Subscribe to a pattern through a bounded buffer of `capacity`
    /// deliveries. An exact topic's retained message is the first delivery.
    Subscribe {
        /// The pattern (a topic, or with `*` / a trailing `>`).
        pattern: String,
        /// Buffer size (at least 1).
        capacity: usize,
        /// The subscription, or why it was refused.
        reply: RpcReplyPort<Result<RelaySubscription, RelayError>>,
    },
    /// Subscribe a host actor (or any callback): `sink` gets every delivery
    /// on the relay actor's task and returns `false` to be dropped; build it
    /// with [`actor_sink`](super::actor_sink). Answers the endpoint id.
    SubscribeActor {
        /// The pattern.
        pattern: String,
        /// Where deliveries go; must not block.
        sink: Box<dyn Fn(RelayDelivery) -> bool + Send + Sync>,
        /// The endpoint id, or why it was refused.
        reply: RpcReplyPort<Result<String, RelayError>>,
    },
    /// Drop a subscription by endpoint id; `true` when it was this node's.
    Unsubscribe(String, RpcReplyPort<Result<bool, RelayError>>),
    /// Publish JSON `data` on a topic, retained for `retain` when given.
    Publish {
        /// The topic.
        topic: String,
        /// The data.
        data: serde_json::Value,
        /// Retention.
        retain: Option<Duration>,
        /// What it reached.
        reply: RpcReplyPort<Result<Published, RelayError>>,
    },
    /// Forget a topic's retained message; `true` when it had one.
    DeleteRetained(String, RpcReplyPort<Result<bool, RelayError>>),
    /// The node's status.
    GetStatus(RpcReplyPort<RelayStatus>),
    /// Unregister the node (its subscriptions go with it), end every
    /// subscription and stop (reason `"closed"`).
    Close(RpcReplyPort<()>),
    /// Panics the actor (fault injection for supervision tests).
    #[cfg(feature = "fault-injection")]
    Crash,
    /// Timer (internal).
    #[doc(hidden)]
    Heartbeat,
    /// Timer (internal).
    #[doc(hidden)]
    Sweep,
    /// A batch from the reader task (internal); answered once delivered.
    #[doc(hidden)]
    Batch(InboxBatch, RpcReplyPort<()>),
}

impl std::fmt::Debug for RelayMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayMsg::Subscribe {
                pattern, capacity, ..
            } => {
                write!(f, "Subscribe({pattern:?}, {capacity})")
            }
            RelayMsg::SubscribeActor { pattern, .. } => write!(f, "SubscribeActor({pattern:?})"),
            RelayMsg::Unsubscribe(e, _) => write!(f, "Unsubscribe({e})"),
            RelayMsg::Publish { topic, retain, .. } => write!(f, "Publish({topic:?}, {retain:?})"),
            RelayMsg::DeleteRetained(t, _) => write!(f, "DeleteRetained({t:?})"),
            RelayMsg::GetStatus(_) => write!(f, "GetStatus"),
            RelayMsg::Close(_) => write!(f, "Close"),
            #[cfg(feature = "fault-injection")]
            RelayMsg::Crash => write!(f, "Crash"),
            RelayMsg::Heartbeat => write!(f, "Heartbeat"),
            RelayMsg::Sweep => write!(f, "Sweep"),
            RelayMsg::Batch(b, _) => write!(f, "Batch({} entries)", b.entries.len()),
        }
    }
}
