//! Connecting: one URL names the topology — `redis://` (one server),
//! `rediss://` (TLS, always verified), `redis-cluster://host:port?node=…`
//! (Redis Cluster), `redis-sentinel://…?sentinelServiceName=NAME` — plus the
//! TLS files for a private CA or mutual TLS. The connection loads the
//! scripts on every primary; on a cluster, a queue's keys must share a slot,
//! so its name carries a hash tag (`{orders}`), as BullMQ Node users do.
//!
//! ```text
//! REDIS_URL=rediss://redis.internal:6380 TLS_CA_FILE=ca.pem cargo run -p echomq --example connection
//! REDIS_URL='redis-cluster://127.0.0.1:7201?node=127.0.0.1:7202' cargo run -p echomq --example connection
//! ```
//! (`just cluster` starts a local cluster on 7201–7206.)

use std::time::Duration;

use echomq::connection::{server_facts, TlsOptions};
use echomq::{Connection, ConnectionConfig, JobOptions, Queue, RetryPolicy};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut config = ConnectionConfig::with_url(&url);
    config.tls = TlsOptions {
        ca_file: std::env::var_os("TLS_CA_FILE").map(Into::into),
        cert_file: std::env::var_os("TLS_CERT_FILE").map(Into::into),
        key_file: std::env::var_os("TLS_KEY_FILE").map(Into::into),
        insecure: false,
    };
    // Wait up to 30 s for a server that is still starting (a container
    // beside this one); each failed attempt is logged with its reason.
    let policy = RetryPolicy::with_deadline(Duration::from_secs(30));
    let conn = Connection::connect_with_retry(config, &policy).await?;
    let facts = server_facts(&conn).await?;
    println!("connected: {facts:?}");

    // The hash tag keeps every key of the queue in one cluster slot; on a
    // single server it is just part of the name.
    let queue = Queue::new(&conn, "{orders}").await?;
    let id = queue
        .add("order", &json!({ "sku": "A-1" }), JobOptions::new())
        .await?;
    println!(
        "added job {id} to {{orders}}: {:?}",
        queue.get_job_state(&id).await?
    );
    queue.remove(&id, false).await?;
    conn.close().await;
    Ok(())
}
