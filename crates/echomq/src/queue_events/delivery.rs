//! What a QueueEvents subscriber receives ([`Delivery`]) and how: a bounded
//! channel ([`Subscription`]) or casts to a host actor ([`actor_subscriber`]).

use echomq_protocol::Event;
use ractor::ActorRef;
use tokio::sync::mpsc;

/// What a subscriber receives.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    /// One event, in stream order.
    Event(Event),
    /// This many events were dropped for this subscriber because its buffer was full.
    Lagged(u64),
    /// The stream was trimmed past the cursor: entries after `after` up to `next`
    /// (exclusive) are gone.
    Gap {
        /// The last id read before the gap.
        after: String,
        /// The first id still in the stream.
        next: String,
    },
}

/// A subscription handle for non-actor code: a bounded stream of [`Delivery`].
/// Made by [`Subscribers::subscribe`](super::Subscribers::subscribe) or
/// [`QueueEventsMsg::Subscribe`](super::QueueEventsMsg::Subscribe).
#[derive(Debug)]
pub struct Subscription {
    /// Its id, for [`QueueEventsMsg::Unsubscribe`](super::QueueEventsMsg::Unsubscribe).
    pub id: u64,
    pub(crate) rx: mpsc::Receiver<Delivery>,
}

impl Subscription {
    /// The next delivery; `None` once the QueueEvents was closed, or its
    /// registry dropped (an actor that is neither held by a host nor
    /// restarted drops it when it stops).
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.rx.recv().await
    }
}

/// Builds the converter for [`QueueEventsMsg::SubscribeActor`](super::QueueEventsMsg::SubscribeActor) from a host actor
/// and a conversion function.
pub fn actor_subscriber<M: ractor::Message>(
    actor: ActorRef<M>,
    convert: impl Fn(Delivery) -> Option<M> + Send + Sync + 'static,
) -> Box<dyn Fn(Delivery) -> bool + Send + Sync> {
    Box::new(move |d| match convert(d) {
        Some(m) => actor.cast(m).is_ok(),
        None => true,
    })
}
