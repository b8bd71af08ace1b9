//! The handle of a GroupFeeder under a [`Host`].

use super::call::ask;
use super::error::HandleError;
use super::{ChildId, Host};
use crate::groups::feeder::{FeederStats, GroupFeederMsg};
use crate::supervision::HostSupervisorMsg;

/// A GroupFeeder under a [`Host`]. Cheap to clone; valid across restarts.
#[derive(Clone, Debug)]
pub struct FeederHandle {
    host: Host,
    id: ChildId,
}

impl FeederHandle {
    pub(super) fn new(host: Host, id: ChildId) -> Self {
        Self { host, id }
    }

    /// Its id in the host.
    pub fn id(&self) -> ChildId {
        self.id
    }

    /// The feeder's counters.
    pub async fn stats(&self) -> Result<FeederStats, HandleError> {
        let id = self.id;
        let actor = self
            .host
            .resolve("group_feeder", |r| HostSupervisorMsg::GetGroupFeeder(id, r))
            .await?;
        ask(
            &actor,
            "feeder stats",
            self.host.timeout(),
            GroupFeederMsg::GetStats,
        )
        .await
    }
}
