//! Running jobs: the user's [`Processor`](processor::Processor) (`processor.rs`)
//! and its kinds — batches (`batch_processor.rs`, run by `batch.rs`) and typed
//! jobs (`typed.rs`) —, one slot's life from a job to the next (`run.rs`),
//! the remote cancels that stop a processor (`cancels.rs`), and payload
//! codecs on the way in and out (`payload.rs`).

pub(crate) mod batch;
pub(crate) mod batch_processor;
pub(crate) mod cancels;
#[cfg(feature = "codec")]
pub(crate) mod payload;
pub(crate) mod processor;
pub(crate) mod run;
pub(crate) mod typed;
