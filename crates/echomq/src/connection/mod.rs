//! Connecting to Redis: the configuration ([`ConnectionConfig`]), the one
//! shared pool with the scripts loaded ([`Connection`], `pool.rs`), the first
//! connection retried while Redis is not there yet ([`RetryPolicy`]), TLS,
//! cluster redirects, the one reconnecting reader of every blocking loop
//! (`blocking_reader.rs`), and the checks that a server suits a queue
//! ([`check_server`]).

pub(crate) mod blocking_reader;
pub(crate) mod check;
pub(crate) mod config;
pub(crate) mod pool;
pub(crate) mod redirect;
pub(crate) mod retry;
pub(crate) mod server;
pub(crate) mod tls;

pub use self::check::{check_server, server_facts};
pub use self::config::{redacted_url, ConnectionConfig, Durability, TlsOptions};
pub use self::pool::Connection;
pub use self::retry::RetryPolicy;
pub use self::server::{
    host_port, one_slot, parse_version, ServerFacts, ServerProblem, MIN_REDIS_VERSION,
};
