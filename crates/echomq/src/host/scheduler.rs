//! The handle of a JobScheduler under a [`Host`].

use ractor::ActorRef;

use super::call::ask;
use super::error::HandleError;
use super::{ChildId, Host};
use crate::scheduler::actor::JobSchedulerMsg;
use crate::scheduler::{Iteration, SchedulerInfo, SchedulerSpec, SchedulerSweep};
use crate::supervision::HostSupervisorMsg;

/// A JobScheduler under a [`Host`]. Cheap to clone; valid across restarts.
#[derive(Clone, Debug)]
pub struct SchedulerHandle {
    host: Host,
    id: ChildId,
}

impl SchedulerHandle {
    pub(super) fn new(host: Host, id: ChildId) -> Self {
        Self { host, id }
    }

    /// Its id in the host.
    pub fn id(&self) -> ChildId {
        self.id
    }

    /// The scheduler's current actor.
    pub async fn actor(&self) -> Result<ActorRef<JobSchedulerMsg>, HandleError> {
        let id = self.id;
        self.host
            .resolve("scheduler", |r| HostSupervisorMsg::GetJobScheduler(id, r))
            .await
    }

    /// Creates or replaces a scheduler; answers its pending iteration.
    pub async fn upsert(&self, spec: SchedulerSpec) -> Result<Option<Iteration>, HandleError> {
        let spec = Box::new(spec);
        Ok(
            ask(&self.actor().await?, "upsert", self.host.timeout(), |r| {
                JobSchedulerMsg::Upsert(spec, r)
            })
            .await??,
        )
    }

    /// Removes a scheduler; answers whether it existed.
    pub async fn remove(&self, id: &str) -> Result<bool, HandleError> {
        let id = id.to_owned();
        Ok(
            ask(&self.actor().await?, "remove", self.host.timeout(), |r| {
                JobSchedulerMsg::Remove(id, r)
            })
            .await??,
        )
    }

    /// Reads one scheduler.
    pub async fn get(&self, id: &str) -> Result<Option<SchedulerInfo>, HandleError> {
        let id = id.to_owned();
        Ok(ask(&self.actor().await?, "get", self.host.timeout(), |r| {
            JobSchedulerMsg::Get(id, r)
        })
        .await??)
    }

    /// Every scheduler, earliest next run first.
    pub async fn list(&self) -> Result<Vec<SchedulerInfo>, HandleError> {
        Ok(ask(
            &self.actor().await?,
            "list",
            self.host.timeout(),
            JobSchedulerMsg::List,
        )
        .await??)
    }

    /// Runs a reconciliation sweep now (the sweep timer is not moved).
    pub async fn sweep_now(&self) -> Result<SchedulerSweep, HandleError> {
        Ok(ask(
            &self.actor().await?,
            "sweep_now",
            self.host.timeout(),
            JobSchedulerMsg::SweepNow,
        )
        .await??)
    }
}
