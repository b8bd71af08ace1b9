//! A worker's `group` option (BullMQ Pro's `group: {concurrency, limit}`):
//! written to the queue's group defaults in Redis when the worker starts, so
//! that every feeder of the fleet obeys one value (docs/decisions.md §15).

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::groups::GroupDefaults;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::queue::handle::Queue;

/// Pause between tries while Redis cannot be reached.
const RETRY: Duration = Duration::from_millis(500);

/// Writes `defaults` as the queue's group defaults, retrying connection
/// errors until written or `stop` is cancelled. The last writer holds: a
/// different value written by another worker is replaced, with a warning.
pub(crate) fn publish(
    queue: Arc<Queue>,
    defaults: GroupDefaults,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let attempt = tokio::select! {
                _ = stop.cancelled() => return,
                r = queue.groups().set_defaults(defaults) => r,
            };
            match attempt {
                Ok(before) if before == defaults => return,
                Ok(before) if before == GroupDefaults::default() => {
                    info!(queue = %queue.name(), ?defaults, "group defaults written");
                    return;
                }
                Ok(before) => {
                    warn!(
                        queue = %queue.name(),
                        ?before,
                        ?defaults,
                        "group defaults of this queue replaced: workers disagree, the last started holds"
                    );
                    return;
                }
                Err(e) if e.is_connection() => {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(RETRY) => {}
                    }
                }
                Err(e) => {
                    warn!(queue = %queue.name(), error = %e, "group defaults not written");
                    return;
                }
            }
        }
    })
}
