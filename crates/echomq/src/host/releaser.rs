//! The handle of a DagReleaser under a [`Host`].

use ractor::ActorRef;

use super::call::ask;
use super::error::HandleError;
use super::{ChildId, Host};
use crate::flows::dag::releaser::{DagReleaserMsg, DagReleaserStats};
use crate::supervision::HostSupervisorMsg;

/// A DagReleaser under a [`Host`]. Cheap to clone; valid across restarts.
#[derive(Clone, Debug)]
pub struct DagReleaserHandle {
    host: Host,
    id: ChildId,
}

impl DagReleaserHandle {
    pub(super) fn new(host: Host, id: ChildId) -> Self {
        Self { host, id }
    }

    /// Its id in the host.
    pub fn id(&self) -> ChildId {
        self.id
    }

    /// The releaser's current actor.
    pub async fn actor(&self) -> Result<ActorRef<DagReleaserMsg>, HandleError> {
        let id = self.id;
        self.host
            .resolve("dag_releaser", |r| HostSupervisorMsg::GetDagReleaser(id, r))
            .await
    }

    /// The releaser's counters (since its last start).
    pub async fn stats(&self) -> Result<DagReleaserStats, HandleError> {
        ask(
            &self.actor().await?,
            "dag releaser stats",
            self.host.timeout(),
            DagReleaserMsg::GetStats,
        )
        .await
    }
}
