//! Groups (an EchoMQ extension, `docs/groups.md`): the job option, the group
//! id rules and the keys of the extension, all under the queue's `{P}` (so
//! under its hash tag in a cluster).

use serde_json::{Map, Value};

use crate::keys::QueueKeys;
use crate::validate::{ValidationError, MAX_PRIORITY};

/// Longest group id, in bytes.
pub const MAX_GROUP_ID_LEN: usize = 256;

/// The job option `group: {id, priority?}` (BullMQ Pro's name): the job runs
/// under its group's concurrency, rate limit and pause, round robin with the
/// other groups; `priority` orders jobs inside the group (lower first, 0 none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOptions {
    /// The group (a tenant, an account…).
    pub id: String,
    /// Priority inside the group, 0 (none) to 2 097 151.
    pub priority: Option<i64>,
}

impl GroupOptions {
    /// The group `id`, no priority.
    pub fn new(id: impl Into<String>) -> Self {
        GroupOptions {
            id: id.into(),
            priority: None,
        }
    }

    /// Sets the priority inside the group.
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Checks the id and the priority.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate_group_id(&self.id)?;
        if let Some(p) = self.priority {
            if !(0..=MAX_PRIORITY).contains(&p) {
                return Err(ValidationError::Option {
                    option: "group",
                    reason: format!("priority must be within 0..={MAX_PRIORITY} (got {p})"),
                });
            }
        }
        Ok(())
    }

    /// The stored (and public) form, `{"id": …, "priority": …}`.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), Value::from(self.id.clone()));
        if let Some(p) = self.priority {
            m.insert("priority".into(), Value::from(p));
        }
        Value::Object(m)
    }

    /// Reads the stored form; `None` when it is not one.
    pub fn from_value(v: &Value) -> Option<Self> {
        let m = v.as_object()?;
        let id = match m.get("id")? {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        let priority = match m.get("priority") {
            None | Some(Value::Null) => None,
            Some(p) => Some(p.as_i64()?),
        };
        Some(GroupOptions { id, priority })
    }
}

/// Checks a group id: 1 to [`MAX_GROUP_ID_LEN`] bytes, no `:` (it is part of
/// key names), no `{`/`}` (a hash tag would move its keys to another slot), no
/// whitespace or control characters.
pub fn validate_group_id(id: &str) -> Result<(), ValidationError> {
    let reason = if id.is_empty() {
        Some("must not be empty")
    } else if id.len() > MAX_GROUP_ID_LEN {
        Some("must be at most 256 bytes")
    } else if id.contains(':') {
        Some("must not contain ':'")
    } else if id.contains(['{', '}']) {
        Some("must not contain '{' or '}'")
    } else if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("must not contain whitespace or control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ValidationError::Option {
            option: "group",
            reason: format!("group id {id:?} {reason}"),
        }),
        None => Ok(()),
    }
}

/// The extension's keys of one queue (docs/groups.md §Keys).
#[derive(Clone, Debug)]
pub struct GroupKeys {
    /// `{P}gr:ready`: groups that may release, scored by round-robin turn.
    pub ready: String,
    /// `{P}gr:limited`: groups waiting for their rate window, scored by when.
    pub limited: String,
    /// `{P}gr:index`: every known group (score 0).
    pub index: String,
    /// `{P}gr:seq`: the round-robin turn counter.
    pub seq: String,
    /// `{P}gr:jobs`: released, unfinished job id → group id.
    pub jobs: String,
    /// `{P}gr:defaults`: the queue's concurrency and rate limit for groups
    /// without settings of their own.
    pub defaults: String,
}

impl GroupKeys {
    /// The keys of `queue`.
    pub fn new(queue: &QueueKeys) -> Self {
        GroupKeys {
            ready: queue.key("gr:ready"),
            limited: queue.key("gr:limited"),
            index: queue.key("gr:index"),
            seq: queue.key("gr:seq"),
            jobs: queue.key("gr:jobs"),
            defaults: queue.key("gr:defaults"),
        }
    }

    /// `{P}gr:g:<gid>`: the group's settings hash.
    pub fn group(queue: &QueueKeys, gid: &str) -> String {
        queue.key(&format!("gr:g:{gid}"))
    }

    /// `{P}gr:g:<gid>:wait`: the group's unreleased jobs.
    pub fn waiting(queue: &QueueKeys, gid: &str) -> String {
        queue.key(&format!("gr:g:{gid}:wait"))
    }

    /// `{P}gr:g:<gid>:active`: the group's released, unfinished jobs.
    pub fn active(queue: &QueueKeys, gid: &str) -> String {
        queue.key(&format!("gr:g:{gid}:active"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_that_would_break_keys_are_refused() {
        for bad in ["", "a:b", "{t}", "a b", "a\n", &"x".repeat(257)] {
            assert!(validate_group_id(bad).is_err(), "{bad:?}");
        }
        for good in ["tenant-1", "acme.com", "ü", &"x".repeat(256)] {
            assert!(validate_group_id(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn stored_form_round_trips() {
        let g = GroupOptions::new("t1").priority(3);
        assert_eq!(g.to_value(), json!({"id": "t1", "priority": 3}));
        assert_eq!(GroupOptions::from_value(&g.to_value()), Some(g));
        assert_eq!(
            GroupOptions::from_value(&json!({"id": 7})),
            Some(GroupOptions::new("7"))
        );
        assert_eq!(GroupOptions::from_value(&json!({"priority": 1})), None);
        assert!(GroupOptions::new("t").priority(-1).validate().is_err());
    }

    #[test]
    fn keys_share_the_queue_prefix() {
        let q = QueueKeys::new("emq", "{orders}").unwrap();
        let k = GroupKeys::new(&q);
        assert_eq!(k.ready, "emq:{orders}:gr:ready");
        assert_eq!(GroupKeys::waiting(&q, "t"), "emq:{orders}:gr:g:t:wait");
    }
}
