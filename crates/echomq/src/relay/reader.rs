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
use fred::prelude::{ClientLike, StreamsInterface, Value};
use ractor::{ActorRef, ActorStatus};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::messages::{InboxBatch, RelayMsg};
use super::registry::{RelayNotice, RelaySubscribers};
use crate::connection::blocking_reader::{BlockingReader, Read};
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

impl Reader {
    /// The dedicated client of the wake-up reads, named for the node and
    /// unblocked (its read is busy) when the reader ends.
    fn wakeup(&self) -> BlockingReader {
        BlockingReader::new(self.conn.clone())
            .named(self.keys.inbox_client_name(&self.node))
            .unblocks_on(self.keys.inbox(&self.node))
            .first_pause(RETRY_PAUSE)
            .stop_on(self.cancel.clone())
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
        let wakeup = self.wakeup();
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
            // then read again with the script. The wake-up client is opened
            // here, after its backoff when the last one failed.
            match wakeup.client().await {
                Read::Value(_) | Read::Refused => {}
                Read::Failed(e) => {
                    debug!(error = %e, "relay wake-up client failed; retrying");
                    self.subscribers.notify(RelayNotice::Error(e.to_string()));
                    continue;
                }
                Read::Stopped => break,
            }
            let block_ms = self.block.as_millis() as u64;
            let (key, from, opts) = (inbox.clone(), cursor.clone(), &opts);
            let wait = wakeup
                .read(|client| async move {
                    client
                        .with_options(opts)
                        .xread::<Value, _, _>(Some(1), Some(block_ms), key.as_str(), from.as_str())
                        .await
                })
                .await;
            match wait {
                Read::Value(_) | Read::Refused => {}
                Read::Failed(e) => {
                    warn!(error = %e, node = %self.node, "relay inbox wait failed; reconnecting");
                }
                Read::Stopped => break,
            }
        }
        wakeup.close().await;
    }
}
