//! The worker's side of payload codecs: the processor sees the decoded data
//! and its return value is stored through the queue's codec
//! (docs/operations.md §Memory).

use serde_json::Value;

use super::processor::ProcessError;
use crate::worker::finish::job::ActiveJob;
use crate::worker::shared::WorkerShared;

/// Decodes the job's data in place when it is an envelope; a payload that
/// cannot be decoded is the failure to record, for good, since no retry
/// would read it.
pub(crate) fn open(core: &WorkerShared, job: &mut ActiveJob) -> Result<(), ProcessError> {
    match core.queue_arc().options.codec.decode(&job.job().data) {
        None => Ok(()),
        Some(Ok(data)) => {
            job.replace_data(data);
            Ok(())
        }
        Some(Err(e)) => Err(unreadable(&e)),
    }
}

/// The return value as the queue stores it.
pub(crate) fn seal(core: &WorkerShared, value: Value) -> Result<Value, ProcessError> {
    core.queue_arc()
        .options
        .codec
        .encode_value(value)
        .map_err(|e| ProcessError::unrecoverable(format!("return value: {e}")))
}

fn unreadable(e: &crate::codec::CodecError) -> ProcessError {
    ProcessError::unrecoverable(format!("job data: {e}"))
}
