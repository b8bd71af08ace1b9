//! Publishing and the dashboard getters: what needs no node. Any process
//! may publish or read a namespace (the CLI's `relay publish` and `relay
//! show`, the dashboard); only a subscriber needs a registered node.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::relay::{
    Published, RelayCounts, RelayDeleteRetained, RelayGetCounts, RelayGetNamespaces, RelayGetNodes,
    RelayGetPatterns, RelayGetRetained, RelayGetSubscriptions, RelayGetUsed, RelayNodeRow,
    RelayPatternRow, RelayPublish, RelayRetainedRow, RelaySubscriptionRow, RelayTouchNamespace,
    SubscriptionFilter,
};
use echomq_protocol::relay::{check_topic, registry_key, RelayKeys, DEFAULT_NAMESPACE};
use serde::Serialize;

use super::error::{refused, RelayError};
use crate::connection::pool::Connection;

/// Default data limit, as BullMQ's (512 KiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 512 * 1024;

/// Default inbox cap of a node that recorded none (BullMQ's 10000).
pub const DEFAULT_INBOX_MAX_LENGTH: u64 = 10_000;

/// Most rows a getter answers when no end is given: the dashboard and the
/// CLI page through the rest.
pub const PAGE: u64 = 100;

/// A namespace of the relay, for publishing and reading. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RelayClient {
    conn: Connection,
    keys: Arc<RelayKeys>,
    max_message_size: usize,
    inbox_max_length: u64,
}

impl RelayClient {
    /// The client of `namespace` on `conn`'s prefix.
    pub fn new(conn: &Connection, namespace: &str) -> Result<Self, RelayError> {
        Ok(Self {
            keys: Arc::new(RelayKeys::new(conn.prefix(), namespace)?),
            conn: conn.clone(),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            inbox_max_length: DEFAULT_INBOX_MAX_LENGTH,
        })
    }

    /// The client of the `default` namespace.
    pub fn default_namespace(conn: &Connection) -> Result<Self, RelayError> {
        Self::new(conn, DEFAULT_NAMESPACE)
    }

    /// With another data limit (bytes of serialised JSON).
    pub fn with_max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// With another inbox cap for nodes that recorded none.
    pub fn with_inbox_max_length(mut self, n: u64) -> Self {
        self.inbox_max_length = n;
        self
    }

    /// The namespace's keys.
    pub fn keys(&self) -> &RelayKeys {
        &self.keys
    }

    /// Publishes `data` (as JSON) on `topic`; with `retain`, it also becomes
    /// the topic's retained message for that long.
    pub async fn publish<T: Serialize + ?Sized>(
        &self,
        topic: &str,
        data: &T,
        retain: Option<Duration>,
    ) -> Result<Published, RelayError> {
        check_topic(topic)?;
        let text = serde_json::to_string(data).map_err(|e| RelayError::Data(e.to_string()))?;
        if text.len() > self.max_message_size {
            return Err(RelayError::DataTooLarge {
                size: text.len(),
                limit: self.max_message_size,
            });
        }
        let retain_ms = retain.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let call = RelayPublish {
            keys: &self.keys,
            topic,
            data: &text,
            ts_ms: crate::clock::now_ms() as i64,
            retain_ms,
            max_bytes: self.max_message_size as u64,
            inbox_max: self.inbox_max_length,
        };
        let published = refused(call_name(&call), self.conn.call(&call).await?)?;
        if retain_ms > 0 {
            self.touch_namespace(retain_ms).await?;
        }
        Ok(published)
    }

    /// Forgets the retained message of `topic`; `false` when it had none.
    pub async fn delete_retained(&self, topic: &str) -> Result<bool, RelayError> {
        check_topic(topic)?;
        let call = RelayDeleteRetained {
            keys: &self.keys,
            topic,
        };
        refused(call_name(&call), self.conn.call(&call).await?)
    }

    /// Totals of the namespace.
    pub async fn counts(&self) -> Result<RelayCounts, RelayError> {
        Ok(self.conn.call(&RelayGetCounts { keys: &self.keys }).await?)
    }

    /// Whether a node is alive or a message retained.
    pub async fn is_used(&self) -> Result<bool, RelayError> {
        Ok(self.conn.call(&RelayGetUsed { keys: &self.keys }).await?)
    }

    /// Nodes by registration, positions `start..=end` (`None`: [`PAGE`] rows).
    pub async fn nodes(
        &self,
        start: u64,
        end: Option<u64>,
    ) -> Result<Vec<RelayNodeRow>, RelayError> {
        let end = Some(end.unwrap_or(start + PAGE - 1));
        Ok(self
            .conn
            .call(&RelayGetNodes {
                keys: &self.keys,
                start,
                end,
            })
            .await?)
    }

    /// Subscriptions (all, a node's or a pattern's), positions `start..=end`
    /// (`None`: [`PAGE`] rows).
    pub async fn subscriptions(
        &self,
        filter: SubscriptionFilter<'_>,
        start: u64,
        end: Option<u64>,
    ) -> Result<Vec<RelaySubscriptionRow>, RelayError> {
        let end = Some(end.unwrap_or(start + PAGE - 1));
        Ok(self
            .conn
            .call(&RelayGetSubscriptions {
                keys: &self.keys,
                filter,
                start,
                end,
            })
            .await?)
    }

    /// Subscribed patterns, positions `start..=end` (`None`: [`PAGE`] rows).
    pub async fn patterns(
        &self,
        start: u64,
        end: Option<u64>,
    ) -> Result<Vec<RelayPatternRow>, RelayError> {
        let end = Some(end.unwrap_or(start + PAGE - 1));
        Ok(self
            .conn
            .call(&RelayGetPatterns {
                keys: &self.keys,
                start,
                end,
            })
            .await?)
    }

    /// Retained messages by expiry, positions `start..=end` (`None`: [`PAGE`] rows).
    pub async fn retained(
        &self,
        start: u64,
        end: Option<u64>,
    ) -> Result<Vec<RelayRetainedRow>, RelayError> {
        let end = Some(end.unwrap_or(start + PAGE - 1));
        Ok(self
            .conn
            .call(&RelayGetRetained {
                keys: &self.keys,
                start,
                end,
            })
            .await?)
    }

    /// Notes the namespace in use for `for_ms` in the prefix's registry.
    pub(crate) async fn touch_namespace(&self, for_ms: u64) -> Result<(), RelayError> {
        Ok(self
            .conn
            .call(&RelayTouchNamespace {
                keys: &self.keys,
                for_ms,
            })
            .await?)
    }
}

/// The namespaces of `conn`'s prefix in use now (a live node or a retained
/// message), sorted. The registry says until when each may be in use; each
/// candidate is confirmed against its own keys.
pub async fn namespaces(conn: &Connection) -> Result<Vec<String>, RelayError> {
    let registry = registry_key(conn.prefix());
    let candidates = conn
        .call(&RelayGetNamespaces {
            registry: &registry,
        })
        .await?;
    let mut used = Vec::new();
    for ns in candidates {
        // A foreign entry that is no id cannot be a namespace we can read.
        let Ok(client) = RelayClient::new(conn, &ns) else {
            continue;
        };
        if client.is_used().await? {
            used.push(ns);
        }
    }
    Ok(used)
}

fn call_name<C: echomq_protocol::ScriptCall>(c: &C) -> &'static str {
    c.script().name()
}
