//! The queue side of groups: settings stored in Redis, so every feeder of
//! the fleet obeys them, and the getters.

use std::time::Duration;

use echomq_protocol::call::groups::{
    DefaultsChange, GetGroups, GroupDefaults, GroupInfo, GroupPage, GroupSelect, GroupSettings,
    QueueGroupDefaults, RemoveGroup, SettingsOp,
};
use echomq_protocol::group::{validate_group_id, GroupKeys};

use crate::error::{Error, Result};
use crate::queue::Groups;

/// Jobs one removeGroup call removes.
const REMOVE_CHUNK: u64 = 1000;

impl Groups<'_> {
    async fn group_settings(self, group: &str, op: SettingsOp) -> Result<bool> {
        validate_group_id(group)?;
        let keys = GroupKeys::new(self.queue.keys());
        self.queue
            .connection()
            .call(&GroupSettings {
                keys: self.queue.keys(),
                groups: &keys,
                group,
                op,
            })
            .await
    }

    /// At most `concurrency` jobs of `group` released and unfinished at once
    /// (in wait, active or retrying), whoever runs them. Refuses 0.
    pub async fn set_concurrency(self, group: &str, concurrency: u64) -> Result<()> {
        if concurrency == 0 {
            return Err(Error::Config(
                "a group's concurrency must be at least 1".into(),
            ));
        }
        self.group_settings(group, SettingsOp::Set(vec![("concurrency", concurrency)]))
            .await
            .map(drop)
    }

    /// The group's own concurrency, if set (otherwise the feeder's default applies).
    pub async fn get_concurrency(self, group: &str) -> Result<Option<u64>> {
        Ok(self.counts(group).await?.concurrency)
    }

    /// At most `max` of the group's jobs released per sliding `window`
    /// (Redis's clock). Refuses 0 and windows under 1 ms.
    pub async fn set_rate_limit(&self, group: &str, max: u64, window: Duration) -> Result<()> {
        let ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        if max == 0 || ms == 0 {
            return Err(Error::Config(
                "a group's rate limit needs max ≥ 1 and a window ≥ 1 ms".into(),
            ));
        }
        self.group_settings(group, SettingsOp::Set(vec![("max", max), ("duration", ms)]))
            .await
            .map(drop)
    }

    /// Removes the group's own concurrency and rate limit (the feeder's
    /// defaults apply again).
    pub async fn clear_limits(self, group: &str) -> Result<bool> {
        self.group_settings(
            group,
            SettingsOp::Unset(vec!["concurrency", "max", "duration"]),
        )
        .await
    }

    /// Adds to `group` are refused (`Error::GroupFull`, nothing written) while
    /// it holds `max_size` unreleased jobs. Refuses 0.
    pub async fn set_max_size(self, group: &str, max_size: u64) -> Result<()> {
        if max_size == 0 {
            return Err(Error::Config(
                "a group's max size must be at least 1".into(),
            ));
        }
        self.group_settings(group, SettingsOp::Set(vec![("maxSize", max_size)]))
            .await
            .map(drop)
    }

    /// Stops releasing the group's jobs (released ones run on). A group may be
    /// paused before it has jobs. `false` when it was paused already.
    pub async fn pause(self, group: &str) -> Result<bool> {
        self.group_settings(group, SettingsOp::Pause).await
    }

    /// Releases the group's jobs again. `false` when it was not paused.
    pub async fn resume(self, group: &str) -> Result<bool> {
        self.group_settings(group, SettingsOp::Resume).await
    }

    async fn queue_group_defaults(self, change: DefaultsChange) -> Result<GroupDefaults> {
        let keys = GroupKeys::new(self.queue.keys());
        self.queue
            .connection()
            .call(&QueueGroupDefaults {
                groups: &keys,
                change,
            })
            .await
    }

    /// Replaces the queue's group defaults — the concurrency and rate limit
    /// of every group without its own — for every feeder of the fleet (a
    /// feeder's own `GroupFeederArgs::defaults` apply only where these leave
    /// a setting unset). What a worker's `WorkerOptions::group` writes when
    /// it starts. Answers the defaults it replaced.
    pub async fn set_defaults(self, defaults: GroupDefaults) -> Result<GroupDefaults> {
        validate_defaults(&defaults)?;
        self.queue_group_defaults(DefaultsChange::Write(defaults))
            .await
    }

    /// The queue's group defaults (see [`Groups::set_defaults`]).
    pub async fn defaults(self) -> Result<GroupDefaults> {
        self.queue_group_defaults(DefaultsChange::Read).await
    }

    /// Removes the queue's group defaults; answers what they were.
    pub async fn clear_defaults(self) -> Result<GroupDefaults> {
        self.queue_group_defaults(DefaultsChange::Clear).await
    }

    /// One group's counts and settings (zeros for a group that has nothing).
    pub async fn counts(self, group: &str) -> Result<GroupInfo> {
        validate_group_id(group)?;
        let keys = GroupKeys::new(self.queue.keys());
        let page = self
            .queue
            .connection()
            .call(&GetGroups {
                keys: self.queue.keys(),
                groups: &keys,
                select: GroupSelect::One(group),
            })
            .await?;
        page.groups
            .into_iter()
            .next()
            .ok_or_else(|| Error::Protocol {
                context: "getGroups",
                detail: "no row for the group asked".into(),
            })
    }

    /// A page of the known groups in id order (`count` at most 1000), with
    /// the total.
    pub async fn page(self, start: u64, count: u64) -> Result<GroupPage> {
        let keys = GroupKeys::new(self.queue.keys());
        self.queue
            .connection()
            .call(&GetGroups {
                keys: self.queue.keys(),
                groups: &keys,
                select: GroupSelect::Page { start, count },
            })
            .await
    }

    /// The `count` groups (at most 1000) with the most released-and-unfinished
    /// jobs, busiest first, over all the queue's groups (one bounded read of
    /// `{P}gr:busy`), with the total of groups.
    pub async fn busiest(self, count: u64) -> Result<GroupPage> {
        let keys = GroupKeys::new(self.queue.keys());
        self.queue
            .connection()
            .call(&GetGroups {
                keys: self.queue.keys(),
                groups: &keys,
                select: GroupSelect::Busiest { count },
            })
            .await
    }

    /// Removes the group's unreleased jobs (1000 per call, a `removed` event
    /// each) and then the group; released jobs run on. Answers how many jobs
    /// were removed.
    pub async fn remove(self, group: &str) -> Result<u64> {
        validate_group_id(group)?;
        let keys = GroupKeys::new(self.queue.keys());
        let mut removed = 0;
        loop {
            let r = self
                .queue
                .connection()
                .call(&RemoveGroup {
                    keys: self.queue.keys(),
                    groups: &keys,
                    group,
                    limit: REMOVE_CHUNK,
                })
                .await?;
            removed += r.removed;
            if r.left == 0 {
                return Ok(removed);
            }
        }
    }
}

/// Refuses a concurrency of 0 and a rate limit with max 0 or an empty window
/// (a stored 0 would read as "no bound").
pub(crate) fn validate_defaults(defaults: &GroupDefaults) -> Result<()> {
    if defaults.concurrency == Some(0) {
        return Err(Error::Config(
            "the group defaults' concurrency must be at least 1".into(),
        ));
    }
    if let Some((max, ms)) = defaults.limit {
        if max == 0 || ms == 0 {
            return Err(Error::Config(
                "the group defaults' rate limit needs max ≥ 1 and a window ≥ 1 ms".into(),
            ));
        }
    }
    Ok(())
}
