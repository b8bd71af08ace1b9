//! Waiting for one job's end through a QueueEvents.

use std::time::Duration;

use ractor::ActorRef;

use super::actor::QueueEventsMsg;
use echomq_protocol::Event;

use super::delivery::Delivery;
use crate::error::{Error, Result};
use crate::queue::handle::Queue;
use crate::queue::types::Finished;

/// Waits until job `job_id` of `queue` completes or finally fails, like
/// BullMQ's `job.waitUntilFinished(queueEvents)`: subscribes first, then asks
/// `isFinished` once (covering a finish before the subscription), then waits
/// for the job's `completed` or `failed` event. `None` on timeout.
pub async fn wait_until_finished(
    events: &ActorRef<QueueEventsMsg>,
    queue: &Queue,
    job_id: &str,
    timeout: Duration,
) -> Result<Option<Finished>> {
    use echomq_protocol::EventKind;
    let mut sub = ractor::call_t!(events, QueueEventsMsg::Subscribe, 5000, 1024)
        .map_err(|e| Error::Config(format!("QueueEvents unavailable: {e}")))?;
    let sub_id = sub.id;
    let result = async {
        match queue.is_finished(job_id).await? {
            Finished::No => {}
            done => return Ok(Some(done)),
        }
        let wait = async {
            while let Some(d) = sub.recv().await {
                match d {
                    Delivery::Event(Event {
                        kind:
                            EventKind::Completed {
                                job_id: id,
                                return_value,
                                ..
                            },
                        ..
                    }) if id == job_id => {
                        return Ok(Some(Finished::Completed(queue.decoded(return_value).await)))
                    }
                    Delivery::Event(Event {
                        kind:
                            EventKind::Failed {
                                job_id: id,
                                failed_reason,
                                ..
                            },
                        ..
                    }) if id == job_id => return Ok(Some(Finished::Failed(failed_reason))),
                    // Missed events may have held the finish: ask Redis again.
                    Delivery::Lagged(_) | Delivery::Gap { .. } => {
                        match queue.is_finished(job_id).await? {
                            Finished::No => {}
                            done => return Ok(Some(done)),
                        }
                    }
                    _ => {}
                }
            }
            Err(Error::Config("QueueEvents stopped".into()))
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(r) => r,
            Err(_) => Ok(None),
        }
    }
    .await;
    let _ = events.cast(QueueEventsMsg::Unsubscribe(sub_id));
    result
}
