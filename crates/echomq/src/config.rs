//! Connection configuration: a plain struct with documented defaults.

use std::time::Duration;

/// How to reach Redis and how many connections to share.
#[derive(Clone, Debug)]
pub struct ConnectionConfig {
    /// A fred URL: `redis://host:port/db`, `rediss://…`, `redis-cluster://…?node=h:p`,
    /// `redis-sentinel://…`. Default `redis://127.0.0.1:6379`.
    pub url: String,
    /// Key prefix of every queue. Default `emq` (DECISIONS.md §4).
    pub prefix: String,
    /// Clients in the shared pool. fred serialises EVALSHA per connection, so
    /// parallel script throughput needs several. Default 8.
    pub pool_size: usize,
    /// Timeout of ordinary (non-blocking) commands. Default 10 s.
    pub command_timeout: Duration,
    /// Timeout of establishing a connection. Default 10 s.
    pub connect_timeout: Duration,
    /// Delay between reconnection attempts (retried forever). Default 500 ms.
    pub reconnect_delay: Duration,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            prefix: echomq_protocol::DEFAULT_PREFIX.into(),
            pool_size: 8,
            command_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            reconnect_delay: Duration::from_millis(500),
        }
    }
}

impl ConnectionConfig {
    /// The defaults with another URL.
    pub fn with_url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }
}
