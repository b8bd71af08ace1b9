//! The arguments of a [`Relay`](super::Relay) node, with BullMQ's defaults.

use std::time::Duration;

use echomq_protocol::relay::{check_id, RelayKeys, DEFAULT_NAMESPACE};

use super::error::RelayError;
use super::registry::RelaySubscribers;
use crate::connection::pool::Connection;

/// Longest node name (BullMQ's limit).
pub const MAX_NAME_LEN: usize = 256;

/// Largest duration or count option, as BullMQ bounds them (2^31 − 1).
const MAX_OPTION: u64 = i32::MAX as u64;

/// Arguments of a [`Relay`](super::Relay): [`RelayArgs::new`], then the
/// builder methods. Keep them to restart the node: clones share the
/// [`RelaySubscribers`] registry and the node id, so a node restarted from
/// them keeps its identity and every subscription.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RelayArgs {
    /// The shared connection (a dedicated blocking client is made from it).
    pub connection: Connection,
    /// The namespace (an id). Default `default`, as BullMQ.
    pub namespace: String,
    /// This node's id (an id). Default: a random 32-hex-digit one, fixed at
    /// [`RelayArgs::new`] so restarts keep it.
    pub node_id: String,
    /// A name shown by dashboards (at most 256 bytes).
    pub name: Option<String>,
    /// Lease: a node not heard of for this long is swept. Default 30 s.
    pub lease: Duration,
    /// Time between heartbeats. Default a third of the lease.
    pub heartbeat_interval: Option<Duration>,
    /// Time between sweeps of dead nodes. Default the lease.
    pub sweep_interval: Option<Duration>,
    /// XREAD block time of the inbox reader. Default 5 s.
    pub block: Duration,
    /// Inbox cap: older unread entries are dropped beyond it. Default 10000.
    pub inbox_max_length: u64,
    /// Backlog at which [`RelayNotice::Lag`](super::RelayNotice::Lag) is
    /// reported. Default half the inbox cap.
    pub lag_threshold: Option<u64>,
    /// Largest serialised data published, bytes. Default 512 KiB.
    pub max_message_size: usize,
    /// The subscribers, shared by every node spawned from these arguments.
    pub subscribers: RelaySubscribers,
}

impl RelayArgs {
    /// BullMQ's defaults, namespace `default`, a new node id.
    pub fn new(connection: Connection) -> Self {
        Self {
            connection,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            node_id: uuid::Uuid::new_v4().simple().to_string(),
            name: None,
            lease: Duration::from_secs(30),
            heartbeat_interval: None,
            sweep_interval: None,
            block: Duration::from_secs(5),
            inbox_max_length: 10_000,
            lag_threshold: None,
            max_message_size: 512 * 1024,
            subscribers: RelaySubscribers::new(),
        }
    }

    /// Sets [`RelayArgs::namespace`].
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Sets [`RelayArgs::node_id`].
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = id.into();
        self
    }

    /// Sets [`RelayArgs::name`].
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets [`RelayArgs::lease`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`RelayArgs::heartbeat_interval`].
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat_interval = Some(every);
        self
    }

    /// Sets [`RelayArgs::sweep_interval`].
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_interval = Some(every);
        self
    }

    /// Sets [`RelayArgs::block`].
    pub fn block(mut self, block: Duration) -> Self {
        self.block = block;
        self
    }

    /// Sets [`RelayArgs::inbox_max_length`].
    pub fn inbox_max_length(mut self, n: u64) -> Self {
        self.inbox_max_length = n;
        self
    }

    /// Sets [`RelayArgs::lag_threshold`].
    pub fn lag_threshold(mut self, n: u64) -> Self {
        self.lag_threshold = Some(n);
        self
    }

    /// Sets [`RelayArgs::max_message_size`].
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`RelayArgs::subscribers`].
    pub fn subscribers(mut self, subscribers: RelaySubscribers) -> Self {
        self.subscribers = subscribers;
        self
    }

    /// The namespace's keys under the connection's prefix.
    pub fn keys(&self) -> Result<RelayKeys, RelayError> {
        Ok(RelayKeys::new(self.connection.prefix(), &self.namespace)?)
    }

    /// Checks every option as BullMQ does; what [`Relay`](super::Relay)'s
    /// start refuses.
    pub fn validate(&self) -> Result<(), RelayError> {
        self.keys()?;
        check_id("node id", &self.node_id)?;
        if self.name.as_ref().is_some_and(|n| n.len() > MAX_NAME_LEN) {
            return Err(RelayError::option("name", "longer than 256 bytes"));
        }
        let ms = |option: &'static str, d: Duration| {
            let ms = d.as_millis();
            if ms == 0 || ms > u128::from(MAX_OPTION) {
                Err(RelayError::option(option, "must be 1 ms to 2^31-1 ms"))
            } else {
                Ok(())
            }
        };
        ms("lease", self.lease)?;
        ms("heartbeat_interval", self.heartbeat_every())?;
        ms("sweep_interval", self.sweep_every())?;
        ms("block", self.block)?;
        let n = |option: &'static str, v: u64| {
            if v == 0 || v > MAX_OPTION {
                Err(RelayError::option(option, "must be 1 to 2^31-1"))
            } else {
                Ok(())
            }
        };
        n("inbox_max_length", self.inbox_max_length)?;
        n("lag_threshold", self.lag())?;
        n("max_message_size", self.max_message_size as u64)?;
        if self.lag() > self.inbox_max_length {
            return Err(RelayError::option(
                "lag_threshold",
                "must not exceed inbox_max_length",
            ));
        }
        Ok(())
    }

    pub(crate) fn heartbeat_every(&self) -> Duration {
        self.heartbeat_interval
            .unwrap_or_else(|| (self.lease / 3).max(Duration::from_millis(1)))
    }

    pub(crate) fn sweep_every(&self) -> Duration {
        self.sweep_interval.unwrap_or(self.lease)
    }

    pub(crate) fn lag(&self) -> u64 {
        self.lag_threshold
            .unwrap_or_else(|| (self.inbox_max_length / 2).max(1))
    }

    /// The node's info as dashboards show it (BullMQ's fields: name, host,
    /// pid, version).
    pub(crate) fn info_json(&self) -> String {
        let mut info = serde_json::Map::new();
        if let Some(name) = &self.name {
            info.insert("name".into(), name.clone().into());
        }
        info.insert("host".into(), hostname().into());
        info.insert("pid".into(), std::process::id().into());
        info.insert(
            "version".into(),
            format!("echomq:{}", env!("CARGO_PKG_VERSION")).into(),
        );
        serde_json::Value::Object(info).to_string()
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default()
}
