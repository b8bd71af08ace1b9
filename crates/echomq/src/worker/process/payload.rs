//! The worker's side of payload codecs and offload: the processor sees the
//! decoded data and its return value is stored through the queue's codec,
//! offloaded when it is over the threshold (docs/operations.md §Memory).

use serde_json::Value;

use super::processor::ProcessError;
use crate::codec::offload;
use crate::codec::CodecError;
use crate::worker::finish::job::ActiveJob;
use crate::worker::shared::WorkerShared;

/// Decodes the job's data in place when it is an envelope or an offload
/// reference. A payload that cannot be decoded is the failure to record, for
/// good, since no retry would read it; a blob store out of reach is an
/// ordinary failure, retried by the job's attempts.
pub(crate) async fn open(core: &WorkerShared, job: &mut ActiveJob) -> Result<(), ProcessError> {
    let queue = core.queue_arc();
    match queue.options.codec.load(&job.job().data).await {
        None => Ok(()),
        Some(Ok(data)) => {
            job.replace_data(data);
            Ok(())
        }
        Some(Err(e)) => Err(unreadable(&e)),
    }
}

/// The return value as the queue stores it: through its codec, then, over
/// the offload threshold, a reference to a blob owned by this job.
pub(crate) async fn seal(
    core: &WorkerShared,
    job_id: &str,
    value: Value,
) -> Result<Value, ProcessError> {
    let queue = core.queue_arc();
    let codec = &queue.options.codec;
    let sealed = codec
        .encode_value(value)
        .map_err(|e| ProcessError::unrecoverable(format!("return value: {e}")))?;
    let Some(off) = &codec.offload else {
        return Ok(sealed);
    };
    let text = sealed.to_string();
    if text.len() <= off.threshold {
        return Ok(sealed);
    }
    // Boxed: the announce awaits a fred command (~6.7 KB), which would
    // otherwise size every job's finishing future, offloaded or not.
    Box::pin(offload_value(core, job_id, off, &text)).await
}

/// Writes a return value over the threshold to the blob store and answers
/// the reference the job stores instead.
async fn offload_value(
    core: &WorkerShared,
    job_id: &str,
    off: &offload::OffloadOptions,
    text: &str,
) -> Result<Value, ProcessError> {
    let failed = |e: String| ProcessError::failed(format!("return value offload: {e}"));
    let key = offload::new_key();
    offload::refs::announce(core.conn(), core.keys(), &key, Some(job_id))
        .await
        .map_err(|e| failed(e.to_string()))?;
    let reference = offload::write(off, &key, text)
        .await
        .map_err(|e| failed(e.to_string()))?;
    serde_json::from_str(&reference).map_err(|e| failed(e.to_string()))
}

fn unreadable(e: &CodecError) -> ProcessError {
    if e.is_transient() {
        ProcessError::failed(format!("job data: {e}"))
    } else {
        ProcessError::unrecoverable(format!("job data: {e}"))
    }
}
