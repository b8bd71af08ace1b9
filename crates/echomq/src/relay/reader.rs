//! The inbox reader: a task the actor owns. It reads batches with
//! `relayReadInbox-1` on the pool (the script marks them in flight) and,
//! when the inbox is empty, waits for the next entry with `XREAD BLOCK
//! COUNT 1` on a dedicated client used only as a wake-up, as BullMQ's node
//! does. Each batch goes to the actor with a `call`, so the reader never
//! runs ahead of delivery by more than one batch.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::relay::RelayReadInbox;
use echomq_protocol::relay::RelayKeys;
use fred::prelude::{Client, ClientInterface, ClientLike, StreamsInterface, Value};
use fred::types::ClientUnblockFlag;
use ractor::{ActorRef, ActorStatus};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::messages::{InboxBatch, RelayMsg};
use super::registry::{RelayNotice, RelaySubscribers};
use crate::connection::pool::{blocking_options, Connection};

/// Entries per read (BullMQ's batch).
pub(crate) const BATCH: u64 = 100;

/// Pause after a failed step before trying again (BullMQ's 1 s).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub(crate) struct Reader {
    pub conn: Connection,
    pub keys: Arc<RelayKeys>,
    pub node: String,
    pub block: Duration,
    pub subscribers: RelaySubscribers,
    pub cancel: CancellationToken,
}

/// The dedicated client of the wake-up reads, with its server-side id
/// (to unblock it on close).
struct Wakeup {
    client: Client,
    /// The id, and the cluster node that gave it (ids are per node).
    id: Option<(Option<fred::types::config::Server>, i64)>,
}

impl Reader {
    async fn open(&self) -> crate::error::Result<Wakeup> {
        let name = self.keys.inbox_client_name(&self.node);
        let client = self.conn.dedicated_client(Some(&name)).await?;
        let inbox = self.keys.inbox(&self.node);
        let id = match Connection::node_for_key(&client, &inbox) {
            Some(node) => client
                .with_cluster_node(&node)
                .client_id()
                .await
                .ok()
                .map(|id| (Some(node), id)),
            None => client.client_id().await.ok().map(|id| (None, id)),
        };
        Ok(Wakeup { client, id })
    }

    /// Ends a wake-up client that may be blocked: unblocked through the pool
    /// (its own connection is busy), then quit.
    async fn discard(&self, w: Wakeup) {
        if let Some((node, id)) = w.id {
            let next = self.conn.pool().next();
            let flag = Some(ClientUnblockFlag::Timeout);
            let _ = match node {
                Some(node) => {
                    next.with_cluster_node(&node)
                        .client_unblock::<Value, _>(id, flag)
                        .await
                }
                None => next.client_unblock::<Value, _>(id, flag).await,
            };
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), w.client.quit()).await;
    }

    fn gone(&self, me: &ActorRef<RelayMsg>) -> bool {
        // The task starts while the actor is still Starting.
        self.cancel.is_cancelled()
            || matches!(
                me.get_status(),
                ActorStatus::Stopping | ActorStatus::Stopped
            )
            || !self.subscribers.is_owner(me.get_id())
    }

    async fn pause(&self) {
        tokio::select! {
            _ = self.cancel.cancelled() => {}
            _ = tokio::time::sleep(RETRY_PAUSE) => {}
        }
    }

    pub(crate) async fn run(self, me: ActorRef<RelayMsg>) {
        let mut wakeup: Option<Wakeup> = None;
        let inbox = self.keys.inbox(&self.node);
        let opts = blocking_options(self.block);
        while !self.gone(&me) {
            let epoch = self.subscribers.epoch();
            let cursor = self.subscribers.cursor().unwrap_or_else(|| "0-0".into());
            let read = RelayReadInbox {
                keys: &self.keys,
                node: &self.node,
                cursor: &cursor,
                count: BATCH,
            };
            let entries = match self.conn.call(&read).await {
                Ok(e) => e,
                Err(e) => {
                    warn!(error = %e, node = %self.node, "relay inbox read failed; retrying");
                    self.subscribers.notify(RelayNotice::Error(e.to_string()));
                    self.pause().await;
                    continue;
                }
            };
            if !entries.is_empty() {
                let batch = InboxBatch { entries, epoch };
                if ractor::call!(me, RelayMsg::Batch, batch).is_err() {
                    break;
                }
                continue;
            }
            // Nothing there: wait for the next entry (or the block time),
            // then read again with the script.
            if wakeup.is_none() {
                match self.open().await {
                    Ok(w) => wakeup = Some(w),
                    Err(e) => {
                        debug!(error = %e, "relay wake-up client failed; retrying");
                        self.subscribers.notify(RelayNotice::Error(e.to_string()));
                        self.pause().await;
                        continue;
                    }
                }
            }
            let Some(w) = wakeup.as_ref() else { continue };
            let block_ms = self.block.as_millis() as u64;
            let blocking = w.client.with_options(&opts);
            let wait = blocking.xread::<Value, _, _>(
                Some(1),
                Some(block_ms),
                inbox.as_str(),
                cursor.as_str(),
            );
            let outcome = tokio::select! {
                _ = self.cancel.cancelled() => break,
                r = wait => r,
            };
            if let Err(e) = outcome {
                if !crate::connection::redirect::refused_by_cluster(&e) {
                    warn!(error = %e, node = %self.node, "relay inbox wait failed; reconnecting");
                    if let Some(w) = wakeup.take() {
                        self.discard(w).await;
                    }
                }
                self.pause().await;
            }
        }
        if let Some(w) = wakeup.take() {
            self.discard(w).await;
        }
    }
}
