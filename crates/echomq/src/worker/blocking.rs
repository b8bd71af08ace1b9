//! The blocking connection of one worker instance: opened and named at start
//! (so `getWorkers()` lists the worker), renamed after fred reconnects it,
//! discarded when a read on it is overdue or failed, and watched by the
//! actor's watchdog through its deadline. A marker read runs as an
//! [`ArmedRead`], in its own task, so it stays armed while the fetcher takes a
//! due job on the pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::{Client, ClientInterface, ClientLike, EventInterface, Value};
use fred::types::config::Server;
use fred::types::{ClientUnblockFlag, ClusterHash, CustomCommand};
use tokio::sync::broadcast::Receiver;
use tracing::{debug, info};

use crate::connection::pool::{blocking_options, Connection};
use crate::connection::redirect::{pause as refusal_pause, refused_by_cluster};
use crate::sync::lock;

/// How long past its timeout a blocking read may stay unanswered before the
/// connection is declared dead and replaced.
pub(crate) const WATCHDOG_MARGIN: Duration = Duration::from_millis(2000);

/// The server-side id of the blocking connection, and the cluster node that
/// gave it (`None` on a single server): ids are per node, so after the
/// marker's slot moved the id is asked again from the new owner.
type ClientId = (Option<Server>, i64);

/// The dedicated client and the liveness of the read it runs.
pub(crate) struct BlockingConn {
    conn: Connection,
    /// The key the reads block on (the marker): on a cluster, the node that
    /// serves it is the one that knows this connection's id.
    route_key: String,
    client: Mutex<Option<(Client, Option<ClientId>)>>,
    /// ms after which a pending BZPOPMIN is overdue; 0 when none is pending.
    deadline: AtomicU64,
    /// Last time the fetcher went round its loop, ms.
    heartbeat: AtomicU64,
}

impl BlockingConn {
    pub fn new(conn: Connection, route_key: String) -> Self {
        BlockingConn {
            conn,
            route_key,
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
    ) -> crate::error::Result<Client> {
        let current = lock(&self.client)
            .as_ref()
            .map(|(c, id)| (c.clone(), id.as_ref().and_then(|(node, _)| node.clone())));
        if let Some((client, id_node)) = current {
            if drain_reconnects(reconnects) {
                self.conn.name_client(&client, name).await;
                let id = self.client_id(&client).await;
                if let Some(entry) = lock(&self.client).as_mut() {
                    entry.1 = id.clone();
                }
                info!(client_id = ?id.map(|(_, id)| id), name, "blocking connection reconnected and renamed");
            } else if id_node != Connection::node_for_key(&client, &self.route_key) {
                // The slot moved: the read now blocks on another node.
                let id = self.client_id(&client).await;
                if let Some(entry) = lock(&self.client).as_mut() {
                    entry.1 = id;
                }
            }
            return Ok(client);
        }
        let client = self.conn.dedicated_client(Some(name)).await?;
        *reconnects = Some(client.reconnect_rx());
        let id = self.client_id(&client).await;
        info!(client_id = ?id.as_ref().map(|(_, id)| *id), name, "blocking connection opened");
        *lock(&self.client) = Some((client.clone(), id));
        Ok(client)
    }

    /// The server-side id of the connection that blocks on the route key,
    /// with the node that serves it.
    async fn client_id(&self, client: &Client) -> Option<ClientId> {
        match Connection::node_for_key(client, &self.route_key) {
            Some(node) => {
                let id = client.with_cluster_node(&node).client_id().await.ok()?;
                Some((Some(node), id))
            }
            None => Some((None, client.client_id().await.ok()?)),
        }
    }

    /// Drops the client: unblocks it server-side (through the pool, since the
    /// connection itself may be stuck, and on a cluster through the node that
    /// gave the id, the only one that knows it) and quits it in the
    /// background.
    pub fn discard(&self) {
        let Some((client, id)) = lock(&self.client).take() else {
            return;
        };
        let pool = self.conn.pool().clone();
        tokio::spawn(async move {
            if let Some((node, id)) = id {
                let next = pool.next();
                let flag = Some(ClientUnblockFlag::Timeout);
                // The node that gave the id, the only one that knows it.
                let _ = match node {
                    Some(node) => {
                        next.with_cluster_node(&node)
                            .client_unblock::<Value, _>(id, flag)
                            .await
                    }
                    None => next.client_unblock::<Value, _>(id, flag).await,
                };
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

/// What a marker read answered: the popped `[key, member, score]` or nil, a
/// connection error, or nothing before the watchdog's deadline.
pub(crate) type ReadOutcome =
    Result<Result<Value, fred::error::Error>, tokio::time::error::Elapsed>;

/// One BZPOPMIN on the blocking connection, running in its own task until it
/// answers. The fetcher collects the answer when it next waits, so the read
/// can outlive a wait that the due timer ended first: a new-job marker is
/// never missed, and no second read is ever sent on the connection.
pub(crate) struct ArmedRead {
    conn: Arc<BlockingConn>,
    task: tokio::task::JoinHandle<ReadOutcome>,
}

impl ArmedRead {
    /// Sends BZPOPMIN with `timeout` (s) on `client`, under the watchdog's
    /// deadline, cleared when the read answers.
    pub fn arm(conn: Arc<BlockingConn>, client: Client, timeout: f64) -> Self {
        let block = Duration::from_secs_f64(timeout);
        let deadline = crate::clock::now_ms() + (block + WATCHDOG_MARGIN).as_millis() as u64;
        conn.set_deadline(deadline);
        let key = conn.route_key.clone();
        let owner = conn.clone();
        let task = tokio::spawn(async move {
            let with_opts = client.with_options(&blocking_options(block));
            // A raw command rather than fred's typed `bzpopmin`, which turns
            // the server's nil (the block time passed, no marker) into a
            // `Timeout` error indistinguishable from its own client-side
            // timeout: the fetcher would take every quiet read for a broken
            // connection and replace it.
            let bzpopmin = CustomCommand::new_static("BZPOPMIN", ClusterHash::FirstKey, true);
            let read = with_opts
                .custom::<Value, _>(bzpopmin, vec![Value::from(key), Value::from(timeout)]);
            let mut outcome = tokio::time::timeout(block + WATCHDOG_MARGIN, read).await;
            if let Ok(Err(e)) = &outcome {
                if refused_by_cluster(e) {
                    // The marker's slot is moving (or failing over). The
                    // connection is fine and fred has refreshed its slot map
                    // after a MOVED: answer as a read that timed out, so the
                    // fetcher tries moveToActive (which waits for the slot to
                    // settle) and keeps this client for the next read.
                    debug!(error = %e, "marker read refused by the cluster");
                    tokio::time::sleep(refusal_pause(1)).await;
                    outcome = Ok(Ok(Value::Null));
                }
            }
            owner.set_deadline(0);
            outcome
        });
        ArmedRead { conn, task }
    }

    /// The read's answer; a task that died answers as a failed read.
    pub async fn outcome(&mut self) -> ReadOutcome {
        match (&mut self.task).await {
            Ok(outcome) => outcome,
            Err(e) => Ok(Err(fred::error::Error::new(
                fred::error::ErrorKind::Unknown,
                format!("marker read task: {e}"),
            ))),
        }
    }
}

impl Drop for ArmedRead {
    fn drop(&mut self) {
        if !self.task.is_finished() {
            // The fetcher stopped (or was replaced) with the read in flight:
            // nobody waits for it any more, and the connection is discarded
            // by whoever stopped the fetcher.
            self.task.abort();
            self.conn.set_deadline(0);
        }
    }
}
