//! The L1 key layout of one queue (docs/protocol.md §Key layout).

use std::sync::Arc;

use bytes::Bytes;

use crate::validate::{validate_prefix, validate_queue_name, ValidationError};
use crate::wire::Wire;

/// One Redis key as it goes on the wire: UTF-8 text, either shared
/// (reference counted: a queue's fixed keys are built once,
/// [`QueueKeys::fixed`], and handed to each call for a counter increment) or,
/// when short and made for one call (a job's key), held inline.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(Wire);

impl Key {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The key as text. Keys are only ever built from text, so the fallback
    /// (an empty string) cannot be reached.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// The bytes, owned (shared keys are not copied).
    pub fn into_bytes(self) -> Bytes {
        self.0.into_bytes()
    }

    pub(crate) fn into_wire(self) -> Wire {
        self.0
    }

    /// A key shared by every call that sends it.
    fn shared(s: String) -> Key {
        Key(Wire::Shared(Bytes::from(s)))
    }
}

impl From<String> for Key {
    fn from(s: String) -> Key {
        Key(Wire::concat(&[s.as_bytes()]))
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key(Wire::concat(&[s.as_bytes()]))
    }
}

impl From<&Key> for Key {
    fn from(k: &Key) -> Key {
        k.clone()
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<String> for Key {
    fn eq(&self, other: &String) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

/// `<base><a><b>`, made for one call.
fn joined(base: &str, a: &str, b: &str) -> Key {
    Key(Wire::concat(&[base.as_bytes(), a.as_bytes(), b.as_bytes()]))
}

/// `<base><a><b>`, shared by every call of the queue.
fn shared_joined(base: &str, a: &str, b: &str) -> Key {
    let mut s = String::with_capacity(base.len() + a.len() + b.len());
    s.push_str(base);
    s.push_str(a);
    s.push_str(b);
    Key::shared(s)
}

/// Every key of one queue, built once from the prefix and the queue name.
///
/// `{P}` in the specification is [`QueueKeys::prefix_key`]: `"<prefix>:<queue>:"`,
/// always ending with a colon; scripts append suffixes and job ids to it.
///
/// For Redis Cluster the queue name may carry a hash tag (`{orders}`) so that all
/// keys of the queue share one slot: `emq:{orders}:wait`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueKeys {
    prefix: String,
    name: String,
    base: String,
    fixed: Arc<FixedKeys>,
}

/// Declares the queue-level keys once: a `String` accessor on [`QueueKeys`]
/// for plain commands, and a prebuilt [`Key`] field of [`FixedKeys`] for
/// script calls.
macro_rules! queue_keys {
    ($($(#[$doc:meta])* $fn:ident => $suffix:literal),* $(,)?) => {
        impl QueueKeys {
            $( $(#[$doc])* pub fn $fn(&self) -> String { format!("{}{}", self.base, $suffix) } )*
        }

        /// A queue's fixed keys, built once per [`QueueKeys`] and shared by its
        /// clones; each is the same text as the [`QueueKeys`] method of that name.
        #[derive(Debug, PartialEq, Eq)]
        pub struct FixedKeys {
            /// `{P}` itself (the prefix argument of scripts).
            pub base: Key,
            /// `{P}metrics:completed`.
            pub metrics_completed: Key,
            /// `{P}metrics:failed`.
            pub metrics_failed: Key,
            $( $(#[$doc])* pub $fn: Key, )*
        }

        impl FixedKeys {
            fn new(base: &str) -> FixedKeys {
                FixedKeys {
                    base: shared_joined(base, "", ""),
                    metrics_completed: shared_joined(base, "metrics:", "completed"),
                    metrics_failed: shared_joined(base, "metrics:", "failed"),
                    $( $fn: shared_joined(base, $suffix, ""), )*
                }
            }
        }
    };
}

impl QueueKeys {
    /// Builds the keys of `name` under `prefix`, rejecting names and prefixes that
    /// would break the layout (empty, or containing `:` in the queue name).
    pub fn new(prefix: &str, name: &str) -> Result<Self, ValidationError> {
        validate_prefix(prefix)?;
        validate_queue_name(name)?;
        let base = format!("{prefix}:{name}:");
        Ok(Self {
            prefix: prefix.to_owned(),
            name: name.to_owned(),
            fixed: Arc::new(FixedKeys::new(&base)),
            base,
        })
    }

    /// The queue-level keys as prebuilt [`Key`]s, for script calls.
    pub fn fixed(&self) -> &FixedKeys {
        &self.fixed
    }

    /// The job hash `{P}<id>` as a [`Key`] (inline when short).
    pub fn job_key(&self, id: &str) -> Key {
        joined(&self.base, id, "")
    }

    /// The lock `{P}<id>:lock` as a [`Key`] (inline when short).
    pub fn lock_key(&self, id: &str) -> Key {
        joined(&self.base, id, ":lock")
    }

    /// The key prefix (`emq`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `{P}` = `"<prefix>:<queue>:"`, the prefix argument scripts take.
    pub fn prefix_key(&self) -> &str {
        &self.base
    }

    /// `"<prefix>:<queue>"`, the `queueKey` used in flow parent descriptors.
    pub fn queue_key(&self) -> String {
        format!("{}:{}", self.prefix, self.name)
    }

    /// A queue-level key by suffix (`wait`, `active`, …).
    pub fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base)
    }

    /// The job hash `{P}<id>`.
    pub fn job(&self, id: &str) -> String {
        format!("{}{id}", self.base)
    }

    /// The lock `{P}<id>:lock`.
    pub fn lock(&self, id: &str) -> String {
        format!("{}{id}:lock", self.base)
    }

    /// The log list `{P}<id>:logs`.
    pub fn logs(&self, id: &str) -> String {
        format!("{}{id}:logs", self.base)
    }

    /// The metrics hash of `completed` or `failed`.
    pub fn metrics(&self, target: &str) -> String {
        format!("{}metrics:{target}", self.base)
    }

    /// The deduplication owner key `{P}de:<id>`.
    pub fn dedup(&self, dedup_id: &str) -> String {
        format!("{}de:{dedup_id}", self.base)
    }

    /// The hash of job scheduler `id`.
    pub fn scheduler(&self, id: &str) -> String {
        format!("{}repeat:{id}", self.base)
    }

    /// The name the worker's blocking connection gives itself (`CLIENT SETNAME`),
    /// so that BullMQ's `Queue.getWorkers()` lists it: `<prefix>:<base64(queue)>`
    /// plus `:w:<worker>` when the worker is named.
    pub fn worker_client_name(&self, worker: Option<&str>) -> String {
        let b64 = base64_std(self.name.as_bytes());
        match worker {
            Some(w) => format!("{}:{b64}:w:{w}", self.prefix),
            None => format!("{}:{b64}", self.prefix),
        }
    }

    /// The name of a QueueEvents connection: `<prefix>:<base64(queue)>:qe`.
    pub fn events_client_name(&self) -> String {
        format!("{}:{}:qe", self.prefix, base64_std(self.name.as_bytes()))
    }
}

queue_keys! {
    /// LIST of ready job ids (priority 0).
    wait => "wait",
    /// LIST of jobs owned by a worker.
    active => "active",
    /// Legacy LIST, only drained by resume.
    paused => "paused",
    /// ZSET of ready jobs with priority > 0.
    prioritized => "prioritized",
    /// Priority counter.
    pc => "pc",
    /// ZSET of jobs waiting for a time.
    delayed => "delayed",
    /// ZSET of parents waiting for children.
    waiting_children => "waiting-children",
    /// ZSET of completed jobs by finishedOn.
    completed => "completed",
    /// ZSET of failed jobs by finishedOn.
    failed => "failed",
    /// SET of stall candidates marked by the previous stalled check.
    stalled => "stalled",
    /// Fleet-wide throttle of the stalled check.
    stalled_check => "stalled-check",
    /// HASH of queue configuration.
    meta => "meta",
    /// Job id counter.
    id => "id",
    /// STREAM of events.
    events => "events",
    /// ZSET wake-up marker for blocked workers.
    marker => "marker",
    /// Rate limiter counter.
    limiter => "limiter",
    /// ZSET index of job schedulers.
    repeat => "repeat",
    /// HASH of the queue's byte budget (EchoMQ extension, docs/protocol.md
    /// §Byte budgets).
    budget => "budget",
}

fn base64_std(input: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_documented_key_layout() {
        let k = QueueKeys::new("emq", "mail").unwrap();
        assert_eq!(k.prefix_key(), "emq:mail:");
        assert_eq!(k.wait(), "emq:mail:wait");
        assert_eq!(k.stalled_check(), "emq:mail:stalled-check");
        assert_eq!(k.waiting_children(), "emq:mail:waiting-children");
        assert_eq!(k.job("42"), "emq:mail:42");
        assert_eq!(k.lock("42"), "emq:mail:42:lock");
        assert_eq!(
            k.worker_client_name(Some("rust-1")),
            "emq:bWFpbA==:w:rust-1"
        );
        assert_eq!(k.worker_client_name(None), "emq:bWFpbA==");
        assert_eq!(k.events_client_name(), "emq:bWFpbA==:qe");
    }

    #[test]
    fn fixed_keys_are_the_same_text_as_the_methods() {
        let k = QueueKeys::new("emq", "{mail}").unwrap();
        let f = k.fixed();
        assert_eq!(f.base, k.prefix_key());
        assert_eq!(f.wait, k.wait());
        assert_eq!(f.waiting_children, k.waiting_children());
        assert_eq!(f.stalled_check, k.stalled_check());
        assert_eq!(f.repeat, k.repeat());
        assert_eq!(f.metrics_completed, k.metrics("completed"));
        assert_eq!(f.metrics_failed, k.metrics("failed"));
        assert_eq!(k.job_key("42"), k.job("42"));
        assert_eq!(k.lock_key("42"), k.lock("42"));
        assert_eq!(k.lock_key("42").to_string(), "emq:{mail}:42:lock");
        assert_eq!(format!("{:?}", f.meta), "\"emq:{mail}:meta\"");
    }

    #[test]
    fn hash_tagged_queue() {
        let k = QueueKeys::new("emq", "{orders}").unwrap();
        assert_eq!(k.wait(), "emq:{orders}:wait");
    }

    #[test]
    fn base64_padding() {
        assert_eq!(base64_std(b"a"), "YQ==");
        assert_eq!(base64_std(b"ab"), "YWI=");
        assert_eq!(base64_std(b"abc"), "YWJj");
        assert_eq!(base64_std(b""), "");
    }
}
