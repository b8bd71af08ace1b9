//! Groups, an EchoMQ extension (`docs/groups.md`): one call type per script
//! of `lua/addGroupJob-10.lua` … `lua/removeGroup-7.lua`.

use serde_json::{Map, Value};

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::group::GroupKeys;
use crate::keys::{Key, QueueKeys};
use crate::packing::{pack_map, AddArgs};
use crate::scripts::ScriptId;

/// What [`AddGroupJob`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupAdded {
    /// Stored (or the existing id of a duplicate custom id).
    Added(String),
    /// Refused: the group already holds its `max_size` unreleased jobs.
    /// Nothing was written.
    Full {
        /// The group's max size.
        max_size: u64,
    },
}

/// addGroupJob-10: stores a job in its group's set (not in wait).
#[derive(Debug, Clone)]
pub struct AddGroupJob<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// The group.
    pub group: &'a str,
    /// Priority inside the group (0 none).
    pub priority: i64,
    /// Name, id, timestamp, parent and deduplication key of the job, as
    /// addStandardJob takes them; with `defer_parent_release` (a flow
    /// insert) the group's max size is not checked.
    pub args: AddArgs<'a>,
    /// The payload as JSON text.
    pub data: &'a str,
    /// The stored options.
    pub opts: &'a Map<String, Value>,
}

impl ScriptCall for AddGroupJob<'_> {
    type Output = GroupAdded;

    fn script(&self) -> ScriptId {
        ScriptId::AddGroupJob
    }

    fn keys(&self) -> Vec<Key> {
        let f = self.keys.fixed();
        keys![
            &f.meta,
            &f.id,
            &f.completed,
            &f.delayed,
            &f.events,
            self.groups.ready.clone(),
            self.groups.index.clone(),
            self.groups.seq.clone(),
            GroupKeys::group(self.keys, self.group),
            GroupKeys::waiting(self.keys, self.group),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::packed(self.args.pack()),
            Arg::str(self.data),
            Arg::packed(pack_map(self.opts)),
            Arg::str(self.group),
            Arg::int(self.priority),
            Arg::str(if self.args.defer_parent_release {
                "1"
            } else {
                ""
            }),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<GroupAdded, ReplyError> {
        match reply {
            Reply::Int(n) => {
                decode::code(self.script(), n).map(|n| GroupAdded::Added(n.to_string()))
            }
            Reply::Array(parts) => match parts.as_slice() {
                [tag, max] if tag.to_text().as_deref() == Some("full") => Ok(GroupAdded::Full {
                    max_size: max.as_i64().unwrap_or(0).max(0) as u64,
                }),
                _ => Err(ReplyError::shape(self.script(), format!("{parts:?}"))),
            },
            r => decode::text(self.script(), &r).map(GroupAdded::Added),
        }
    }
}

/// Defaults for groups without settings of their own (a feeder's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupDefaults {
    /// Released-and-unfinished jobs per group; `None`: no bound.
    pub concurrency: Option<u64>,
    /// At most `.0` releases per `.1` ms (a sliding window); `None`: no limit.
    pub limit: Option<(u64, u64)>,
}

/// What one release answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// Jobs moved into wait.
    pub released: u64,
    /// When (Redis ms) a rate-limited group may release again.
    pub next_due_ms: Option<u64>,
}

/// releaseGroupJobs-10: the feeder's step.
#[derive(Debug, Clone)]
pub struct ReleaseGroupJobs<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// Most jobs released by the call.
    pub count: u64,
    /// Release only while wait holds fewer ids (0: no bound).
    pub max_ready: u64,
    /// For groups without settings.
    pub defaults: GroupDefaults,
}

impl ScriptCall for ReleaseGroupJobs<'_> {
    type Output = Released;

    fn script(&self) -> ScriptId {
        ScriptId::ReleaseGroupJobs
    }

    fn keys(&self) -> Vec<Key> {
        let f = self.keys.fixed();
        keys![
            self.groups.ready.clone(),
            self.groups.limited.clone(),
            self.groups.jobs.clone(),
            self.groups.seq.clone(),
            &f.wait,
            &f.meta,
            &f.marker,
            &f.events,
            &f.active,
            self.groups.defaults.clone(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let (max, duration) = self.defaults.limit.unwrap_or((0, 0));
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::int(self.count),
            Arg::int(self.max_ready),
            Arg::int(self.defaults.concurrency.unwrap_or(0)),
            Arg::int(max),
            Arg::int(duration),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Released, ReplyError> {
        let parts = decode::array(self.script(), reply)?;
        match parts.as_slice() {
            [n, next] => Ok(Released {
                released: n.as_i64().unwrap_or(0).max(0) as u64,
                next_due_ms: next.as_i64().filter(|t| *t >= 0).map(|t| t as u64),
            }),
            _ => Err(ReplyError::shape(
                self.script(),
                "expected {released, next}",
            )),
        }
    }
}

/// What a [`QueueGroupDefaults`] call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultsChange {
    /// Only read them.
    Read,
    /// Replace them (a `None` field becomes unset).
    Write(GroupDefaults),
    /// Remove them (each feeder's own apply).
    Clear,
}

/// groupDefaults-1: reads or replaces the queue's group defaults; answers
/// the defaults as they were before the call.
#[derive(Debug, Clone)]
pub struct QueueGroupDefaults<'a> {
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// The change.
    pub change: DefaultsChange,
}

impl ScriptCall for QueueGroupDefaults<'_> {
    type Output = GroupDefaults;

    fn script(&self) -> ScriptId {
        ScriptId::GroupDefaults
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.groups.defaults.clone()]
    }

    fn args(&self) -> Vec<Arg> {
        match self.change {
            DefaultsChange::Read => vec![Arg::from_static("get")],
            DefaultsChange::Clear => vec![Arg::from_static("clear")],
            DefaultsChange::Write(d) => {
                let opt = |v: Option<u64>| v.map_or_else(Arg::empty, Arg::int);
                vec![
                    Arg::from_static("set"),
                    opt(d.concurrency),
                    opt(d.limit.map(|l| l.0)),
                    opt(d.limit.map(|l| l.1)),
                ]
            }
        }
    }

    fn decode(&self, reply: Reply) -> Result<GroupDefaults, ReplyError> {
        let parts = decode::array(self.script(), reply)?;
        let num = |r: &Reply| {
            r.to_text()
                .and_then(|t| t.parse::<u64>().ok())
                .filter(|n| *n > 0)
        };
        match parts.as_slice() {
            [conc, max, duration] => Ok(GroupDefaults {
                concurrency: num(conc),
                limit: num(max).zip(num(duration)),
            }),
            _ => Err(ReplyError::shape(
                self.script(),
                "expected {concurrency, max, duration}",
            )),
        }
    }
}

/// Which released jobs [`AccountGroupJobs`] checks.
#[derive(Debug, Clone)]
pub enum AccountScope<'a> {
    /// These ids (from `completed`/`failed`/`removed` events).
    Ids(&'a [String]),
    /// One HSCAN page of `{P}gr:jobs` from a cursor ("0" to start).
    Scan {
        /// The cursor.
        cursor: &'a str,
        /// HSCAN COUNT.
        count: u64,
    },
}

/// What one accounting answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accounted {
    /// The next HSCAN cursor, `"0"` at the end (`""` for ids).
    pub cursor: String,
    /// Group slots freed.
    pub freed: u64,
}

/// accountGroupJobs-3: frees the slots of finished released jobs (idempotent).
#[derive(Debug, Clone)]
pub struct AccountGroupJobs<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// Which jobs.
    pub scope: AccountScope<'a>,
}

impl ScriptCall for AccountGroupJobs<'_> {
    type Output = Accounted;

    fn script(&self) -> ScriptId {
        ScriptId::AccountGroupJobs
    }

    fn keys(&self) -> Vec<Key> {
        keys![
            self.groups.jobs.clone(),
            self.groups.ready.clone(),
            self.groups.seq.clone(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let mut a = vec![Arg::str(self.keys.prefix_key())];
        match &self.scope {
            AccountScope::Ids(ids) => {
                a.push(Arg::empty());
                a.push(Arg::int(0));
                a.extend(ids.iter().map(|id| Arg::str(id)));
            }
            AccountScope::Scan { cursor, count } => {
                a.push(Arg::str(cursor));
                a.push(Arg::int(*count));
            }
        }
        a
    }

    fn decode(&self, reply: Reply) -> Result<Accounted, ReplyError> {
        let parts = decode::array(self.script(), reply)?;
        match parts.as_slice() {
            [cursor, freed] => Ok(Accounted {
                cursor: cursor.to_text().unwrap_or_default(),
                freed: freed.as_i64().unwrap_or(0).max(0) as u64,
            }),
            _ => Err(ReplyError::shape(self.script(), "expected {cursor, freed}")),
        }
    }
}

/// One change of [`GroupSettings`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingsOp {
    /// Set fields (`concurrency`, `max`, `duration`, `maxSize`) to values.
    Set(Vec<(&'static str, u64)>),
    /// Remove fields (back to the feeder's defaults / no bound).
    Unset(Vec<&'static str>),
    /// Pause the group (no release until resumed).
    Pause,
    /// Resume it.
    Resume,
}

/// groupSettings-6: changes a group's settings; answers whether anything changed.
#[derive(Debug, Clone)]
pub struct GroupSettings<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// The group.
    pub group: &'a str,
    /// The change.
    pub op: SettingsOp,
}

impl ScriptCall for GroupSettings<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::GroupSettings
    }

    fn keys(&self) -> Vec<Key> {
        keys![
            GroupKeys::group(self.keys, self.group),
            GroupKeys::waiting(self.keys, self.group),
            self.groups.ready.clone(),
            self.groups.index.clone(),
            self.groups.seq.clone(),
            self.groups.limited.clone(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let mut a = vec![Arg::str(self.group)];
        match &self.op {
            SettingsOp::Set(fields) => {
                a.push(Arg::from_static("set"));
                for (f, v) in fields {
                    a.push(Arg::from_static(f));
                    a.push(Arg::int(*v));
                }
            }
            SettingsOp::Unset(fields) => {
                a.push(Arg::from_static("unset"));
                a.extend(fields.iter().map(|f| Arg::from_static(f)));
            }
            SettingsOp::Pause => a.push(Arg::from_static("pause")),
            SettingsOp::Resume => a.push(Arg::from_static("resume")),
        }
        a
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? == 1)
    }
}

/// One group's counts and settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The group id.
    pub id: String,
    /// Jobs not released yet (in the group's set; the delayed ones not due
    /// are [`GroupInfo::delayed`]).
    pub waiting: u64,
    /// Delayed jobs not due yet (docs/groups.md §Delayed jobs).
    pub delayed: u64,
    /// Released jobs not finished yet (in wait, active, retrying).
    pub active: u64,
    /// Whether the group is paused.
    pub paused: bool,
    /// Its own concurrency, if set.
    pub concurrency: Option<u64>,
    /// Its own rate limit `(max, duration ms)`, if set.
    pub rate_limit: Option<(u64, u64)>,
    /// Its max size, if set.
    pub max_size: Option<u64>,
}

/// A page of groups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupPage {
    /// Groups known to the queue.
    pub total: u64,
    /// The rows asked for.
    pub groups: Vec<GroupInfo>,
}

/// Which groups [`GetGroups`] reads.
#[derive(Debug, Clone, Copy)]
pub enum GroupSelect<'a> {
    /// One group (a row even when it has nothing).
    One(&'a str),
    /// `count` groups (≤ 1000) from index `start`, in id order.
    Page {
        /// First index.
        start: u64,
        /// How many.
        count: u64,
    },
    /// The `count` groups (≤ 1000) with the most released-and-unfinished
    /// jobs (`{P}gr:busy`), busiest first.
    Busiest {
        /// How many.
        count: u64,
    },
}

/// getGroups-1: read-only counts and settings.
#[derive(Debug, Clone)]
pub struct GetGroups<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// Which.
    pub select: GroupSelect<'a>,
}

impl ScriptCall for GetGroups<'_> {
    type Output = GroupPage;

    fn script(&self) -> ScriptId {
        ScriptId::GetGroups
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.groups.index.clone()]
    }

    fn args(&self) -> Vec<Arg> {
        let mut a = vec![Arg::str(self.keys.prefix_key())];
        match self.select {
            GroupSelect::One(g) => {
                a.push(Arg::from_static("one"));
                a.push(Arg::str(g));
            }
            GroupSelect::Page { start, count } => {
                a.push(Arg::from_static("page"));
                a.push(Arg::int(start));
                a.push(Arg::int(count.min(1000)));
            }
            GroupSelect::Busiest { count } => {
                a.push(Arg::from_static("busy"));
                a.push(Arg::int(count.min(1000)));
            }
        }
        a
    }

    fn decode(&self, reply: Reply) -> Result<GroupPage, ReplyError> {
        let script = self.script();
        let mut parts = decode::array(script, reply)?.into_iter();
        let total = parts
            .next()
            .and_then(|t| t.as_i64())
            .ok_or_else(|| ReplyError::shape(script, "missing total"))?;
        let num = |r: &Reply| r.as_i64().filter(|n| *n >= 0).map(|n| n as u64);
        let mut groups = Vec::new();
        for row in parts {
            let row = decode::array(script, row)?;
            let [id, waiting, active, paused, conc, max, duration, size, delayed] = row.as_slice()
            else {
                return Err(ReplyError::shape(script, "a group row has 9 fields"));
            };
            groups.push(GroupInfo {
                id: id.to_text().unwrap_or_default(),
                waiting: num(waiting).unwrap_or(0),
                active: num(active).unwrap_or(0),
                paused: num(paused) == Some(1),
                concurrency: num(conc),
                rate_limit: num(max).zip(num(duration)),
                max_size: num(size),
                delayed: num(delayed).unwrap_or(0),
            });
        }
        Ok(GroupPage {
            total: total.max(0) as u64,
            groups,
        })
    }
}

/// What one [`RemoveGroup`] call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRemoval {
    /// Jobs removed by this call.
    pub removed: u64,
    /// Unreleased jobs left (call again while > 0).
    pub left: u64,
}

/// removeGroup-7: removes up to `limit` unreleased jobs, then the group.
#[derive(Debug, Clone)]
pub struct RemoveGroup<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// The group.
    pub group: &'a str,
    /// Jobs per call.
    pub limit: u64,
}

impl ScriptCall for RemoveGroup<'_> {
    type Output = GroupRemoval;

    fn script(&self) -> ScriptId {
        ScriptId::RemoveGroup
    }

    fn keys(&self) -> Vec<Key> {
        let f = self.keys.fixed();
        keys![
            GroupKeys::group(self.keys, self.group),
            GroupKeys::waiting(self.keys, self.group),
            self.groups.ready.clone(),
            self.groups.index.clone(),
            self.groups.limited.clone(),
            &f.events,
            &f.meta,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::str(self.group),
            Arg::int(self.limit.max(1)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<GroupRemoval, ReplyError> {
        let parts = decode::array(self.script(), reply)?;
        let n = |r: &Reply| r.as_i64().unwrap_or(0).max(0) as u64;
        match parts.as_slice() {
            [removed, left] => Ok(GroupRemoval {
                removed: n(removed),
                left: n(left),
            }),
            _ => Err(ReplyError::shape(self.script(), "expected {removed, left}")),
        }
    }
}

/// How a `{P}gr:jobs` entry's job was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleasedState {
    /// Its hash is gone.
    Gone,
    /// Its hash has `finishedOn`.
    Finished,
    /// Neither: still the group's.
    Open,
}

/// Which bounded read of the group structures an [`AuditGroups`] call makes.
#[derive(Debug, Clone, Copy)]
pub enum GroupAuditStep<'a> {
    /// Groups of the index from an offset.
    Groups {
        /// Offset in the index.
        from: u64,
    },
    /// A page of one group's unreleased ids.
    Wait {
        /// The group.
        group: &'a str,
        /// Offset in its set.
        from: u64,
    },
    /// A page of one group's delayed ids.
    Delayed {
        /// The group.
        group: &'a str,
        /// Offset in its delayed set.
        from: u64,
    },
    /// One SSCAN step of a group's active set.
    Active {
        /// The group.
        group: &'a str,
        /// The cursor ("0" to begin).
        cursor: &'a str,
    },
    /// One HSCAN step of `{P}gr:jobs`.
    Jobs {
        /// The cursor ("0" to begin).
        cursor: &'a str,
    },
}

/// What one [`AuditGroups`] call answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupAuditPage {
    /// (group id, paused) per group.
    Groups(Vec<(String, bool)>),
    /// Unreleased ids of the group.
    Wait(Vec<String>),
    /// Whether the group is in `{P}gr:delayed`, and its delayed ids.
    Delayed(bool, Vec<String>),
    /// The next cursor ("0" when done) and released ids of the group.
    Active(String, Vec<String>),
    /// The next cursor ("0" when done) and (job id, group id, state) rows.
    Jobs(String, Vec<(String, String, ReleasedState)>),
}

/// auditGroups-2: one bounded, read-only step over the group structures for
/// the audit (the caller pages).
#[derive(Debug, Clone)]
pub struct AuditGroups<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The extension's keys.
    pub groups: &'a GroupKeys,
    /// What to read.
    pub step: GroupAuditStep<'a>,
    /// Most elements read.
    pub count: u64,
}

impl ScriptCall for AuditGroups<'_> {
    type Output = GroupAuditPage;

    fn script(&self) -> ScriptId {
        ScriptId::AuditGroups
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.groups.index.clone(), self.groups.jobs.clone()]
    }

    fn args(&self) -> Vec<Arg> {
        let (step, at, group) = match self.step {
            GroupAuditStep::Groups { from } => ("groups", from.to_string(), ""),
            GroupAuditStep::Wait { group, from } => ("wait", from.to_string(), group),
            GroupAuditStep::Delayed { group, from } => ("delayed", from.to_string(), group),
            GroupAuditStep::Active { group, cursor } => ("active", cursor.to_owned(), group),
            GroupAuditStep::Jobs { cursor } => ("jobs", cursor.to_owned(), ""),
        };
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::str(step),
            Arg::str(&at),
            Arg::int(self.count.max(1)),
            Arg::str(group),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<GroupAuditPage, ReplyError> {
        let script = self.script();
        let scanned = |reply: Reply| -> Result<(String, Reply), ReplyError> {
            let [cursor, items] = <[Reply; 2]>::try_from(decode::array(script, reply)?)
                .map_err(|_| ReplyError::shape(script, "expected {cursor, items}"))?;
            Ok((cursor.to_text().unwrap_or_else(|| "0".into()), items))
        };
        Ok(match self.step {
            GroupAuditStep::Groups { .. } => {
                let mut rows = Vec::new();
                for row in decode::array(script, reply)? {
                    let [id, paused] = <[Reply; 2]>::try_from(decode::array(script, row)?)
                        .map_err(|_| ReplyError::shape(script, "a group row has 2 fields"))?;
                    rows.push((id.to_text().unwrap_or_default(), paused.as_i64() == Some(1)));
                }
                GroupAuditPage::Groups(rows)
            }
            GroupAuditStep::Wait { .. } => GroupAuditPage::Wait(decode::strings(script, reply)?),
            GroupAuditStep::Delayed { .. } => {
                let [indexed, ids] = <[Reply; 2]>::try_from(decode::array(script, reply)?)
                    .map_err(|_| ReplyError::shape(script, "expected {indexed, ids}"))?;
                GroupAuditPage::Delayed(indexed.as_i64() == Some(1), decode::strings(script, ids)?)
            }
            GroupAuditStep::Active { .. } => {
                let (cursor, ids) = scanned(reply)?;
                GroupAuditPage::Active(cursor, decode::strings(script, ids)?)
            }
            GroupAuditStep::Jobs { .. } => {
                let (cursor, rows) = scanned(reply)?;
                let mut out = Vec::new();
                for row in decode::array(script, rows)? {
                    let row = decode::strings(script, row)?;
                    let [id, gid, state] = <[String; 3]>::try_from(row)
                        .map_err(|_| ReplyError::shape(script, "a released row has 3 fields"))?;
                    let state = match state.as_str() {
                        "gone" => ReleasedState::Gone,
                        "finished" => ReleasedState::Finished,
                        _ => ReleasedState::Open,
                    };
                    out.push((id, gid, state));
                }
                GroupAuditPage::Jobs(cursor, out)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn keys_counts_match_the_files() {
        let q = QueueKeys::new("emq", "q").unwrap();
        let g = GroupKeys::new(&q);
        let opts = Map::new();
        let add = AddGroupJob {
            keys: &q,
            groups: &g,
            group: "t",
            priority: 2,
            args: AddArgs {
                prefix_key: q.prefix_key(),
                name: "n",
                timestamp: 1,
                ..Default::default()
            },
            data: "{}",
            opts: &opts,
        };
        assert_eq!(argv_text(&add)[3..], ["t", "2", ""]);
        assert_eq!(add.keys()[9], "emq:q:gr:g:t:wait");
        let rel = ReleaseGroupJobs {
            keys: &q,
            groups: &g,
            count: 10,
            max_ready: 4,
            defaults: GroupDefaults {
                concurrency: Some(2),
                limit: Some((5, 1000)),
            },
        };
        assert_eq!(argv_text(&rel), ["emq:q:", "10", "4", "2", "5", "1000"]);
        assert_eq!(rel.keys()[9], "emq:q:gr:defaults");
        let set_defaults = QueueGroupDefaults {
            groups: &g,
            change: DefaultsChange::Write(GroupDefaults {
                concurrency: None,
                limit: Some((3, 500)),
            }),
        };
        assert_eq!(argv_text(&set_defaults), ["set", "", "3", "500"]);
        let ids = vec!["1".to_owned(), "2".to_owned()];
        let acc = AccountGroupJobs {
            keys: &q,
            groups: &g,
            scope: AccountScope::Ids(&ids),
        };
        assert_eq!(argv_text(&acc), ["emq:q:", "", "0", "1", "2"]);
        let set = GroupSettings {
            keys: &q,
            groups: &g,
            group: "t",
            op: SettingsOp::Set(vec![("concurrency", 3)]),
        };
        assert_eq!(argv_text(&set), ["t", "set", "concurrency", "3"]);
        let get = GetGroups {
            keys: &q,
            groups: &g,
            select: GroupSelect::Page {
                start: 0,
                count: 5000,
            },
        };
        assert_eq!(argv_text(&get), ["emq:q:", "page", "0", "1000"]);
        let rm = RemoveGroup {
            keys: &q,
            groups: &g,
            group: "t",
            limit: 0,
        };
        assert_eq!(argv_text(&rm), ["emq:q:", "t", "1"]);
    }

    #[test]
    fn add_reads_full_and_ids() {
        let q = QueueKeys::new("emq", "q").unwrap();
        let g = GroupKeys::new(&q);
        let opts = Map::new();
        let add = AddGroupJob {
            keys: &q,
            groups: &g,
            group: "t",
            priority: 0,
            args: AddArgs::default(),
            data: "{}",
            opts: &opts,
        };
        assert_eq!(
            add.decode(Reply::Int(7)).unwrap(),
            GroupAdded::Added("7".into())
        );
        assert_eq!(
            add.decode(Reply::Array(vec![Reply::text("full"), Reply::Int(3)]))
                .unwrap(),
            GroupAdded::Full { max_size: 3 }
        );
    }
}
