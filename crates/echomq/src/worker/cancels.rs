//! Remote cancels: the Worker listens on its queue's cancel channel
//! ([`Queue::cancel`](crate::queue::handle::Queue::cancel) publishes there
//! after it ended the job in Redis) and stops the processor of a job it
//! holds, within a round trip. The message only saves time: a holder that
//! misses it finds the job's lock gone at its next renewal and stops then.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{ClientLike, EventInterface, PubsubInterface};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use super::shared::WorkerShared;
use crate::locks::seam::CancelReason;

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
    loop {
        let client = tokio::select! {
            _ = stop.cancelled() => return,
            c = core.conn().subscriber() => c,
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot open the cancel subscription; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        let mut messages = client.message_rx();
        if let Err(e) = client.subscribe(channel.as_str()).await {
            warn!(error = %e, "cannot subscribe to the cancel channel; retrying");
            let _ = client.quit().await;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
            }
        }
        loop {
            let message = tokio::select! {
                _ = stop.cancelled() => {
                    let _ = client.quit().await;
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
        let _ = client.quit().await;
    }
}
