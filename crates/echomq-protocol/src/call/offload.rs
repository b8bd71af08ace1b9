//! Payload offload (EchoMQ extension, docs/operations.md §Memory): the keys
//! that track the blobs a queue's payloads were offloaded to, and
//! collectBlobs-2, one bounded page of the blobs no job uses any more.

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::call::lifecycle::EpochMs;
use crate::keys::{Key, QueueKeys};
use crate::scripts::ScriptId;

/// `{P}blobs`: ZSET blob key -> ms it was written or last found in use.
pub fn blobs_key(keys: &QueueKeys) -> String {
    keys.key("blobs")
}

/// `{P}blobs:owner`: HASH blob key -> the id of the job holding it.
pub fn owners_key(keys: &QueueKeys) -> String {
    keys.key("blobs:owner")
}

/// The most blobs one collectBlobs call reads.
pub const COLLECT_PAGE_MAX: u64 = 1000;

/// What one collectBlobs call found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusedBlobs {
    /// Blobs read (at most the page): fewer than the page means none is due.
    pub read: u64,
    /// The keys of those no job uses.
    pub unused: Vec<String>,
}

/// collectBlobs-2: see `lua/collectBlobs-2.lua`.
#[derive(Debug, Clone)]
pub struct CollectBlobs<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Blobs stamped at or before this are looked at.
    pub cutoff: EpochMs,
    /// Now: the new stamp of a blob still in use.
    pub now: EpochMs,
    /// Most blobs read (clamped to 1..=[`COLLECT_PAGE_MAX`]).
    pub page: u64,
}

impl ScriptCall for CollectBlobs<'_> {
    type Output = UnusedBlobs;

    fn script(&self) -> ScriptId {
        ScriptId::CollectBlobs
    }

    fn keys(&self) -> Vec<Key> {
        keys![blobs_key(self.keys), owners_key(self.keys)]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::key(&self.keys.fixed().base),
            Arg::int(self.cutoff.0),
            Arg::int(self.now.0),
            Arg::int(self.page.clamp(1, COLLECT_PAGE_MAX)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<UnusedBlobs, ReplyError> {
        let mut items = decode::array(self.script(), reply)?.into_iter();
        let read = items
            .next()
            .and_then(|r| r.as_i64())
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| ReplyError::shape(self.script(), "expected a count first"))?;
        let unused = items
            .map(|r| {
                r.to_text()
                    .ok_or_else(|| ReplyError::shape(self.script(), "expected blob keys"))
            })
            .collect::<Result<_, _>>()?;
        Ok(UnusedBlobs { read, unused })
    }
}
