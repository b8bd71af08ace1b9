//! The L1 key layout of one queue (docs/protocol.md §Key layout).

use crate::validate::{validate_prefix, validate_queue_name, ValidationError};

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
}

macro_rules! queue_key {
    ($($(#[$doc:meta])* $fn:ident => $suffix:literal),* $(,)?) => {
        $( $(#[$doc])* pub fn $fn(&self) -> String { format!("{}{}", self.base, $suffix) } )*
    };
}

impl QueueKeys {
    /// Builds the keys of `name` under `prefix`, rejecting names and prefixes that
    /// would break the layout (empty, or containing `:` in the queue name).
    pub fn new(prefix: &str, name: &str) -> Result<Self, ValidationError> {
        validate_prefix(prefix)?;
        validate_queue_name(name)?;
        Ok(Self {
            prefix: prefix.to_owned(),
            name: name.to_owned(),
            base: format!("{prefix}:{name}:"),
        })
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

    queue_key! {
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
