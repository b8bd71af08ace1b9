//! The handle of a Relay node under a [`Host`].

use std::time::Duration;

use ractor::ActorRef;
use serde::Serialize;

use super::call::ask;
use super::error::HandleError;
use super::{ChildId, Host};
use crate::relay::{Published, RelayError, RelayMsg, RelayStatus, RelaySubscription};
use crate::supervision::HostSupervisorMsg;

/// A Relay node under a [`Host`]. Cheap to clone; valid across restarts (a
/// restarted node keeps its id and its subscriptions).
#[derive(Clone, Debug)]
pub struct RelayHandle {
    host: Host,
    id: ChildId,
}

impl RelayHandle {
    pub(super) fn new(host: Host, id: ChildId) -> Self {
        Self { host, id }
    }

    /// Its id in the host.
    pub fn id(&self) -> ChildId {
        self.id
    }

    /// The node's current actor.
    pub async fn actor(&self) -> Result<ActorRef<RelayMsg>, HandleError> {
        let id = self.id;
        self.host
            .resolve("relay", |r| HostSupervisorMsg::GetRelay(id, r))
            .await
    }

    /// Subscribes to `pattern` (a topic, or with `*` / a trailing `>`)
    /// through a bounded buffer of `capacity` deliveries.
    pub async fn subscribe(
        &self,
        pattern: &str,
        capacity: usize,
    ) -> Result<RelaySubscription, HandleError> {
        let pattern = pattern.to_owned();
        Ok(ask(
            &self.actor().await?,
            "subscribe",
            self.host.timeout(),
            |reply| RelayMsg::Subscribe {
                pattern,
                capacity,
                reply,
            },
        )
        .await??)
    }

    /// Ends a subscription by its endpoint id; `true` when it was this
    /// node's.
    pub async fn unsubscribe(&self, endpoint: &str) -> Result<bool, HandleError> {
        let endpoint = endpoint.to_owned();
        Ok(ask(
            &self.actor().await?,
            "unsubscribe",
            self.host.timeout(),
            |r| RelayMsg::Unsubscribe(endpoint, r),
        )
        .await??)
    }

    /// Publishes `data` on `topic`, retained for `retain` when given.
    pub async fn publish<T: Serialize + ?Sized>(
        &self,
        topic: &str,
        data: &T,
        retain: Option<Duration>,
    ) -> Result<Published, HandleError> {
        let data = serde_json::to_value(data)
            .map_err(|e| RelayError::option("data", format!("not JSON: {e}")))?;
        let topic = topic.to_owned();
        Ok(ask(
            &self.actor().await?,
            "publish",
            self.host.timeout(),
            |reply| RelayMsg::Publish {
                topic,
                data,
                retain,
                reply,
            },
        )
        .await??)
    }

    /// The node's status.
    pub async fn status(&self) -> Result<RelayStatus, HandleError> {
        ask(
            &self.actor().await?,
            "relay status",
            self.host.timeout(),
            RelayMsg::GetStatus,
        )
        .await
    }
}
