//! The blocking connection of one worker instance: opened and named at start
//! (so `getWorkers()` lists the worker), renamed after fred reconnects it,
//! discarded when a read on it is overdue or failed, and watched by the
//! actor's watchdog through its deadline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use fred::prelude::{Client, ClientInterface, ClientLike, EventInterface, Value};
use fred::types::config::Server;
use fred::types::ClientUnblockFlag;
use tokio::sync::broadcast::Receiver;
use tracing::info;

use super::seam::lock;
use crate::connection::Connection;

/// The dedicated client and the liveness of the read it runs.
pub(crate) struct BlockingConn {
    conn: Connection,
    client: Mutex<Option<(Client, Option<i64>)>>,
    /// ms after which a pending BZPOPMIN is overdue; 0 when none is pending.
    deadline: AtomicU64,
    /// Last time the fetcher went round its loop, ms.
    heartbeat: AtomicU64,
}

impl BlockingConn {
    pub fn new(conn: Connection) -> Self {
        BlockingConn {
            conn,
            client: Mutex::new(None),
            deadline: AtomicU64::new(0),
            heartbeat: AtomicU64::new(0),
        }
    }

    pub fn beat(&self) {
        self.heartbeat
            .store(crate::clock::now_ms(), Ordering::Relaxed);
    }

    /// A read is pending until `deadline_ms`; 0 = none pending.
    pub fn set_deadline(&self, deadline_ms: u64) {
        self.deadline.store(deadline_ms, Ordering::Relaxed);
    }

    pub fn deadline(&self) -> u64 {
        self.deadline.load(Ordering::Relaxed)
    }

    /// The client, opened (and named `name`) when there is none; renamed when
    /// fred reconnected it, since the new connection has no name.
    pub async fn client(
        &self,
        name: &str,
        reconnects: &mut Option<Receiver<Server>>,
    ) -> crate::Result<Client> {
        let current = lock(&self.client).as_ref().map(|(c, _)| c.clone());
        if let Some(client) = current {
            if drain_reconnects(reconnects) {
                let _ = client.client_setname(name).await;
                let id: Option<i64> = client.client_id().await.ok();
                if let Some(entry) = lock(&self.client).as_mut() {
                    entry.1 = id;
                }
                info!(client_id = ?id, name, "blocking connection reconnected and renamed");
            }
            return Ok(client);
        }
        let client = self.conn.dedicated_client(Some(name)).await?;
        *reconnects = Some(client.reconnect_rx());
        let id: Option<i64> = client.client_id().await.ok();
        info!(client_id = ?id, name, "blocking connection opened");
        *lock(&self.client) = Some((client.clone(), id));
        Ok(client)
    }

    /// Drops the client: unblocks it server-side (through the pool, since the
    /// connection itself may be stuck) and quits it in the background.
    pub fn discard(&self) {
        let Some((client, id)) = lock(&self.client).take() else {
            return;
        };
        let pool = self.conn.pool().clone();
        tokio::spawn(async move {
            if let Some(id) = id {
                let _ = pool
                    .next()
                    .client_unblock::<Value, _>(id, Some(ClientUnblockFlag::Timeout))
                    .await;
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), client.quit()).await;
        });
    }
}

fn drain_reconnects(reconnects: &mut Option<Receiver<Server>>) -> bool {
    let mut reconnected = false;
    if let Some(rx) = reconnects.as_mut() {
        while rx.try_recv().is_ok() {
            reconnected = true;
        }
    }
    reconnected
}
