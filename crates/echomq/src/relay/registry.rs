//! The endpoints of a relay node, held outside the actor so that they
//! survive its restart (as QueueEvents' `Subscribers`).
//!
//! Each subscription is an endpoint: an id (what Redis routes to), its
//! pattern and where its messages go. The registry also keeps the inbox
//! cursor (the id of the last entry delivered) and the registration epoch,
//! so a node restarted from the same [`RelayArgs`](super::RelayArgs) resumes
//! after the last entry it delivered and re-subscribes every endpoint.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use ractor::{ActorId, ActorRef};
use tokio::sync::mpsc;

/// One message, as a subscriber gets it.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayMessage {
    /// The topic it was published on (for a retained message: the topic
    /// subscribed to).
    pub topic: String,
    /// Its message id: unique and increasing per namespace (decimal text).
    pub mid: String,
    /// Its publish timestamp, ms (the publisher's clock).
    pub ts: i64,
    /// Its data.
    pub data: serde_json::Value,
    /// `true` when it is the topic's retained message, delivered on subscribe.
    pub retained: bool,
}

/// What a subscriber receives.
#[derive(Clone, Debug, PartialEq)]
pub enum RelayDelivery {
    /// One message.
    Message(RelayMessage),
    /// This many messages were dropped for this subscriber because its
    /// buffer was full.
    Lagged(u64),
}

/// What the node itself reports (BullMQ's `Relay` events).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayNotice {
    /// The node's lease had run out (it was swept, or paused past it): it
    /// registered again and restored its subscriptions. Messages published
    /// in between were not routed to it.
    Recovered,
    /// A sweep removed these dead nodes.
    Swept(Vec<String>),
    /// The inbox holds this many unread entries, at least the lag threshold.
    Lag(u64),
    /// A step failed and will be retried (a Redis error, undecodable data).
    Error(String),
}

/// A bounded subscription for non-actor code. It ends (`recv` gives `None`)
/// when the node is closed, the endpoint unsubscribed, or the registry dropped.
#[derive(Debug)]
pub struct RelaySubscription {
    /// The endpoint id (for `Unsubscribe`).
    pub endpoint: String,
    /// The pattern.
    pub pattern: String,
    rx: mpsc::Receiver<RelayDelivery>,
}

impl RelaySubscription {
    /// The next delivery.
    pub async fn recv(&mut self) -> Option<RelayDelivery> {
        self.rx.recv().await
    }

    /// The next delivery if one is there, without waiting.
    pub fn try_recv(&mut self) -> Option<RelayDelivery> {
        self.rx.try_recv().ok()
    }
}

/// The node's notices, bounded: what does not fit is dropped (they are
/// reports, not data).
#[derive(Debug)]
pub struct RelayNotices {
    rx: mpsc::Receiver<RelayNotice>,
}

impl RelayNotices {
    /// The next notice; `None` once the node is closed.
    pub async fn recv(&mut self) -> Option<RelayNotice> {
        self.rx.recv().await
    }
}

/// A callback endpoint: `false` drops it.
pub(crate) type SinkFn = Box<dyn Fn(RelayDelivery) -> bool + Send + Sync>;

enum Sink {
    Channel {
        tx: mpsc::Sender<RelayDelivery>,
        missed: u64,
    },
    Callback(SinkFn),
}

impl Sink {
    /// Offers `d`; `false` when the receiver is gone.
    fn offer(&mut self, d: RelayDelivery) -> bool {
        match self {
            Sink::Callback(f) => f(d),
            Sink::Channel { tx, missed } => {
                use mpsc::error::TrySendError::{Closed, Full};
                // A lagging subscriber hears how much it missed first.
                if *missed > 0 {
                    match tx.try_send(RelayDelivery::Lagged(*missed)) {
                        Ok(()) => *missed = 0,
                        Err(Full(_)) => {
                            *missed += 1;
                            return true;
                        }
                        Err(Closed(_)) => return false,
                    }
                }
                match tx.try_send(d) {
                    Ok(()) => true,
                    Err(Full(_)) => {
                        *missed += 1;
                        true
                    }
                    Err(Closed(_)) => false,
                }
            }
        }
    }
}

pub(crate) struct Endpoint {
    pub(crate) pattern: String,
    sink: Sink,
}

#[derive(Default)]
struct Registry {
    /// By endpoint id, ordered so re-subscribing is deterministic.
    endpoints: BTreeMap<String, Endpoint>,
    /// Id of the last inbox entry delivered.
    cursor: Option<String>,
    /// Bumped when the node registered anew after a gap: a batch read under
    /// an older epoch is not delivered.
    epoch: u64,
    notices: Vec<mpsc::Sender<RelayNotice>>,
    owner: Option<ActorId>,
}

/// The endpoint registry of one relay node (and of its restarts). Cheap to
/// clone; clones are the same registry. Give each node its own.
#[derive(Clone, Default)]
pub struct RelaySubscribers {
    inner: Arc<Mutex<Registry>>,
}

impl std::fmt::Debug for RelaySubscribers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.lock();
        f.debug_struct("RelaySubscribers")
            .field("endpoints", &r.endpoints.len())
            .field("cursor", &r.cursor)
            .finish()
    }
}

impl RelaySubscribers {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Every update is one insert, remove or assignment: a poisoned lock
        // holds nothing half-written.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node's notices, through a buffer of `capacity` (at least 1).
    pub fn notices(&self, capacity: usize) -> RelayNotices {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.lock().notices.push(tx);
        RelayNotices { rx }
    }

    /// How many endpoints there are.
    pub fn len(&self) -> usize {
        self.lock().endpoints.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of the last inbox entry delivered.
    pub fn cursor(&self) -> Option<String> {
        self.lock().cursor.clone()
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    pub(crate) fn new_epoch(&self) {
        self.lock().epoch += 1;
    }

    /// Makes `owner` the node that delivers from now on.
    pub(crate) fn attach(&self, owner: ActorId) {
        self.lock().owner = Some(owner);
    }

    pub(crate) fn is_owner(&self, owner: ActorId) -> bool {
        self.lock().owner == Some(owner)
    }

    /// A channel endpoint, not yet subscribed in Redis.
    pub(crate) fn add_channel(
        &self,
        endpoint: &str,
        pattern: &str,
        capacity: usize,
    ) -> RelaySubscription {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.insert(endpoint, pattern, Sink::Channel { tx, missed: 0 });
        RelaySubscription {
            endpoint: endpoint.to_owned(),
            pattern: pattern.to_owned(),
            rx,
        }
    }

    /// A callback endpoint, not yet subscribed in Redis.
    pub(crate) fn add_callback(&self, endpoint: &str, pattern: &str, f: SinkFn) {
        self.insert(endpoint, pattern, Sink::Callback(f));
    }

    fn insert(&self, endpoint: &str, pattern: &str, sink: Sink) {
        self.lock().endpoints.insert(
            endpoint.to_owned(),
            Endpoint {
                pattern: pattern.to_owned(),
                sink,
            },
        );
    }

    /// Drops an endpoint; `true` when it was there.
    pub(crate) fn remove(&self, endpoint: &str) -> bool {
        self.lock().endpoints.remove(endpoint).is_some()
    }

    /// Every endpoint with its pattern.
    pub(crate) fn patterns(&self) -> Vec<(String, String)> {
        self.lock()
            .endpoints
            .iter()
            .map(|(id, e)| (id.clone(), e.pattern.clone()))
            .collect()
    }

    /// Delivers one message to one endpoint; `false` when the endpoint's
    /// receiver is gone (the endpoint is then dropped here).
    pub(crate) fn deliver_to(&self, endpoint: &str, message: RelayMessage) -> bool {
        let mut r = self.lock();
        let Some(e) = r.endpoints.get_mut(endpoint) else {
            return true;
        };
        if e.sink.offer(RelayDelivery::Message(message)) {
            return true;
        }
        r.endpoints.remove(endpoint);
        false
    }

    /// Whether an endpoint is here.
    pub(crate) fn has(&self, endpoint: &str) -> bool {
        self.lock().endpoints.contains_key(endpoint)
    }

    /// Moves the cursor past an entry that was delivered.
    pub(crate) fn advance(&self, owner: ActorId, cursor: &str) {
        let mut r = self.lock();
        if r.owner == Some(owner) {
            r.cursor = Some(cursor.to_owned());
        }
    }

    /// Reports a notice to every watcher that has room.
    pub(crate) fn notify(&self, notice: RelayNotice) {
        self.lock().notices.retain(|tx| {
            !matches!(
                tx.try_send(notice.clone()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        });
    }

    /// A clean close by `owner`: every subscription and the notices end.
    pub(crate) fn close(&self, owner: ActorId) {
        let mut r = self.lock();
        if r.owner == Some(owner) {
            r.endpoints.clear();
            r.notices.clear();
            r.owner = None;
        }
    }
}

/// A host actor as an endpoint's sink: `convert` maps a delivery to the
/// actor's message (or `None` to skip it); a stopped actor is dropped.
pub fn actor_sink<M: ractor::Message>(
    actor: ActorRef<M>,
    convert: impl Fn(RelayDelivery) -> Option<M> + Send + Sync + 'static,
) -> Box<dyn Fn(RelayDelivery) -> bool + Send + Sync> {
    Box::new(move |d| match convert(d) {
        Some(m) => actor.cast(m).is_ok(),
        None => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(mid: &str) -> RelayMessage {
        RelayMessage {
            topic: "a".into(),
            mid: mid.into(),
            ts: 0,
            data: serde_json::Value::Null,
            retained: false,
        }
    }

    #[test]
    fn a_full_subscriber_is_told_what_it_missed() {
        let r = RelaySubscribers::new();
        let mut s = r.add_channel("e1", "a", 2);
        for mid in ["1", "2", "3", "4"] {
            assert!(r.deliver_to("e1", msg(mid)));
        }
        let mid = |d: Option<RelayDelivery>| match d {
            Some(RelayDelivery::Message(m)) => m.mid,
            other => panic!("{other:?}"),
        };
        assert_eq!(mid(s.try_recv()), "1");
        assert_eq!(mid(s.try_recv()), "2");
        assert_eq!(s.try_recv(), None);
        // Told first, then the next message, once there is room.
        assert!(r.deliver_to("e1", msg("5")));
        assert_eq!(s.try_recv(), Some(RelayDelivery::Lagged(2)));
        assert_eq!(mid(s.try_recv()), "5");
        drop(s);
        assert!(!r.deliver_to("e1", msg("6")));
        assert!(r.is_empty());
    }

    #[test]
    fn only_the_owner_moves_the_cursor_and_closes() {
        let a = ActorId::Local(1);
        let b = ActorId::Local(2);
        let r = RelaySubscribers::new();
        let _s = r.add_channel("e1", "a", 4);
        r.attach(a);
        r.advance(a, "1-0");
        r.attach(b);
        r.advance(a, "2-0");
        assert_eq!(r.cursor().as_deref(), Some("1-0"));
        r.close(a);
        assert_eq!(r.len(), 1);
        r.close(b);
        assert!(r.is_empty());
    }
}
