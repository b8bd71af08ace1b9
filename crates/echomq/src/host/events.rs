//! The handle of a QueueEvents under a [`Host`].

use ractor::ActorRef;

use super::call::ask;
use super::error::HandleError;
use super::{ChildId, Host};
use crate::queue_events::{Delivery, QueueEventsMsg, Subscribers, Subscription};
use crate::supervision::HostSupervisorMsg;

/// A QueueEvents under a [`Host`]. Its subscriptions live in the registry
/// the actor was started with, so they outlive the actor's restarts (a
/// restarted QueueEvents resumes after the last event they got).
#[derive(Clone, Debug)]
pub struct EventsHandle {
    host: Host,
    id: ChildId,
    subscribers: Subscribers,
}

impl EventsHandle {
    pub(super) fn new(host: Host, id: ChildId, subscribers: Subscribers) -> Self {
        Self {
            host,
            id,
            subscribers,
        }
    }

    /// Its id in the host.
    pub fn id(&self) -> ChildId {
        self.id
    }

    /// Subscribes through a bounded buffer of `capacity` deliveries (an
    /// overflow is reported as [`Delivery::Lagged`]).
    pub fn subscribe(&self, capacity: usize) -> Subscription {
        self.subscribers.subscribe(capacity)
    }

    /// Subscribes a host actor: `convert` maps each delivery to one of its
    /// messages (or `None` to skip it); deliveries are cast. Answers the
    /// subscription's id.
    pub fn subscribe_actor<M: ractor::Message>(
        &self,
        actor: ActorRef<M>,
        convert: impl Fn(Delivery) -> Option<M> + Send + Sync + 'static,
    ) -> u64 {
        self.subscribers.subscribe_actor(actor, convert)
    }

    /// Ends a subscription.
    pub fn unsubscribe(&self, id: u64) {
        self.subscribers.unsubscribe(id)
    }

    /// The id of the last events-stream entry delivered: where a restart
    /// resumes.
    pub async fn last_id(&self) -> Result<String, HandleError> {
        let id = self.id;
        let actor = self
            .host
            .resolve("queue_events", |r| HostSupervisorMsg::GetQueueEvents(id, r))
            .await?;
        ask(
            &actor,
            "last_id",
            self.host.timeout(),
            QueueEventsMsg::GetLastId,
        )
        .await
    }
}
