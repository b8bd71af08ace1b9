//! Which queue a queue's dead letters go to, and the checks that make it
//! usable: not the queue itself, and one hash slot with it in a cluster.

use echomq_protocol::QueueKeys;
use fred::prelude::ClientLike;
use thiserror::Error;

use crate::connection::pool::Connection;
use crate::error::Result;

/// Why a dead-letter operation was refused; nothing was moved.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterError {
    /// A queue cannot be its own dead-letter queue.
    #[error("queue {queue:?} cannot be its own dead-letter queue")]
    SameQueue {
        /// The queue.
        queue: String,
    },
    /// In Redis Cluster a script reaches the keys of one slot only: the
    /// dead-letter queue must carry the source queue's hash tag
    /// (`{orders}` and `{orders}-dead`).
    #[error("in Redis Cluster the dead-letter queue {dlq:?} must share the hash tag of {queue:?} (one slot), e.g. \"{{tag}}-dead\" for \"{{tag}}\"")]
    CrossSlot {
        /// The source queue.
        queue: String,
        /// The dead-letter queue.
        dlq: String,
    },
    /// The source queue does not exist (no meta hash).
    #[error("source queue {queue:?} does not exist")]
    NoSource {
        /// The queue.
        queue: String,
    },
    /// No dead letter matches the filter.
    #[error("no dead letter of {dlq:?} matches the filter")]
    NoMatch {
        /// The dead-letter queue.
        dlq: String,
    },
    /// No dead letter has this id.
    #[error("dead letter {id:?} not found in {dlq:?}")]
    NotFound {
        /// The dead-letter queue.
        dlq: String,
        /// The id asked.
        id: String,
    },
}

/// A queue's dead-letter queue: where its jobs go when they fail for good.
/// Default for a worker: none (final failures stay in `failed`, as BullMQ).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterQueue {
    /// The dead-letter queue's name (same prefix as the source).
    pub queue: String,
    /// Keep at most this many dead letters, dropping the oldest first (at
    /// most 100 per dead-lettering call). Default 0: no bound.
    pub max_len: u64,
    /// The resolved keys (set when a worker or follower starts).
    pub(crate) keys: Option<QueueKeys>,
}

impl DeadLetterQueue {
    /// Dead letters go to `queue`, unbounded.
    pub fn new(queue: impl Into<String>) -> Self {
        DeadLetterQueue {
            queue: queue.into(),
            max_len: 0,
            keys: None,
        }
    }

    /// Sets [`max_len`](Self::max_len).
    pub fn max_len(mut self, max_len: u64) -> Self {
        self.max_len = max_len;
        self
    }

    /// Resolves the keys for `source` on `conn`, refusing the queue itself
    /// and, in a cluster, a queue of another slot.
    pub(crate) fn resolve(&mut self, conn: &Connection, source: &QueueKeys) -> Result<QueueKeys> {
        let keys = check(conn, source, &self.queue)?;
        self.keys = Some(keys.clone());
        Ok(keys)
    }
}

/// The dead-letter queue `dlq` of `source`, checked.
pub(crate) fn check(conn: &Connection, source: &QueueKeys, dlq: &str) -> Result<QueueKeys> {
    let keys = QueueKeys::new(conn.prefix(), dlq)?;
    if keys.name() == source.name() {
        return Err(DeadLetterError::SameQueue {
            queue: source.name().to_owned(),
        }
        .into());
    }
    let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
    if conn.pool().next().is_clustered() && slot(&keys.wait()) != slot(&source.wait()) {
        return Err(DeadLetterError::CrossSlot {
            queue: source.name().to_owned(),
            dlq: keys.name().to_owned(),
        }
        .into());
    }
    Ok(keys)
}
