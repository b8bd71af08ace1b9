//! Remote cancels: the Worker listens on its queue's cancel channel
//! ([`Queue::cancel`](crate::queue::handle::Queue::cancel) publishes there
//! after it ended the job in Redis) and stops the processor of a job it
//! holds, within a round trip. The message only saves time: a holder that
//! misses it finds the job's lock gone at its next renewal and stops then.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::{EventInterface, PubsubInterface};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use crate::connection::blocking_reader::{BlockingReader, Read};
use crate::locks::seam::CancelReason;
use crate::worker::shared::WorkerShared;

/// Listens until `stop`, reconnecting on its own.
pub(crate) fn spawn(
    core: Arc<WorkerShared>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let span = tracing::debug_span!("cancels", queue = %core.keys().name());
    tokio::spawn(listen(core, stop).instrument(span))
}

async fn listen(core: Arc<WorkerShared>, stop: CancellationToken) {
    let channel = core.keys().key("cancel");
    let reader: BlockingReader<SubscriberClient> = BlockingReader::new(core.conn().clone())
        .first_pause(Duration::from_secs(1))
        .stop_on(stop.clone());
    loop {
        let client = match reader.client().await {
            Read::Value(c) => c,
            Read::Failed(e) => {
                warn!(error = %e, "cannot open the cancel subscription; retrying");
                continue;
            }
            Read::Refused => continue,
            Read::Stopped => return,
        };
        let mut messages = client.message_rx();
        let to = channel.clone();
        match reader
            .read(|c| async move { c.subscribe(to.as_str()).await })
            .await
        {
            Read::Value(()) => {}
            Read::Failed(e) => {
                warn!(error = %e, "cannot subscribe to the cancel channel; retrying");
                continue;
            }
            Read::Refused => continue,
            Read::Stopped => break,
        }
        loop {
            let message = tokio::select! {
                _ = stop.cancelled() => {
                    reader.close().await;
                    return;
                }
                m = messages.recv() => m,
            };
            match message {
                Ok(m) => {
                    let Some(id) = m.value.as_str() else { continue };
                    if let Some(held) = core.seam().get(&id) {
                        debug!(job_id = %id, "cancelled remotely: stopping the processor");
                        held.cancel(CancelReason::Cancelled);
                    }
                }
                // Messages dropped on a slow reader: their jobs' locks are
                // gone, so the next renewal stops those processors.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
        // The subscription ended: a fresh one at once.
        reader.discard();
    }
    reader.close().await;
}
