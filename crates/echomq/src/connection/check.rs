//! Reading a server's facts and refusing one that does not suit a queue
//! ([`check_server`]), before any job is taken.

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand};

use super::pool::Connection;
use super::server::{host_port, ServerFacts};
use crate::error::{Error, Result};

/// Reads the server's version, eviction policy and mode.
pub async fn server_facts(conn: &Connection) -> Result<ServerFacts> {
    let client = conn.pool().next();
    let info: String = client.info(Some(fred::types::InfoKind::Server)).await?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned();
    // A raw command: fred's typed CONFIG needs a feature this crate leaves off.
    let config_get = CustomCommand::new_static("CONFIG", ClusterHash::Random, false);
    let policy: std::result::Result<Vec<String>, _> = client
        .custom(config_get, vec!["GET", "maxmemory-policy"])
        .await;
    let maxmemory_policy = match policy {
        Ok(pair) => pair.into_iter().nth(1),
        Err(e) => {
            tracing::debug!(error = %e, "CONFIG GET maxmemory-policy refused; eviction policy not checked");
            None
        }
    };
    Ok(ServerFacts {
        version,
        maxmemory_policy,
        clustered: client.is_clustered(),
    })
}

/// Refuses a server with any [`ServerProblem`](super::server::ServerProblem) for these queues (the first
/// one found, as [`Error::Server`]); answers its facts otherwise.
pub async fn check_server(conn: &Connection, queues: &[&str]) -> Result<ServerFacts> {
    let facts = server_facts(conn).await?;
    let at = host_port(&conn.config().url);
    match facts
        .problems(&at, conn.prefix(), queues)
        .into_iter()
        .next()
    {
        Some(p) => Err(Error::Server(p)),
        None => Ok(facts),
    }
}
