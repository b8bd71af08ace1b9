//! The Worker: fetches jobs of one queue, locks them, runs a [`Processor`] on
//! each and finishes them, as BullMQ 6.7.0 workers do. The contract is in
//! `docs/worker.md`.
//!
//! * at the top: the actor (`actor.rs`), its settings (`options.rs`), its
//!   messages (`messages.rs`), the state it shares with the tasks it owns
//!   (`shared.rs`) and manual processing (`manual.rs`);
//! * `fetch/`: taking jobs — the fetch loop, its blocking connection, the
//!   slot gate, the fetch hints, the due timer's clock, the rate limiter;
//! * `process/`: running them — the [`Processor`] and its kinds (batches,
//!   typed jobs), one slot's life, remote cancels;
//! * `finish/`: letting them go — the job handle, the transitions out of
//!   `active`, retries and backoff, group commit.
//!
//! The library ships no supervision tree: the host spawns the Worker and its
//! LockManager under its own supervisor (`Host::add_worker`, or
//! `supervision::WorkerSetSpec` under a supervisor of the host's own) and
//! decides about restarts.

pub(crate) mod actor;
pub(crate) mod fetch;
pub(crate) mod finish;
pub(crate) mod manual;
pub(crate) mod messages;
pub(crate) mod options;
pub(crate) mod process;
pub(crate) mod shared;

pub use self::actor::{Worker, WorkerState};
pub use self::finish::backoff_strategy::{BackoffInput, BackoffStrategy, CustomBackoff};
pub use self::finish::job::{ActiveJob, FinishFailed, FinishOutcome};
pub use self::manual::{Fetched, ManualJob, ManualParking, ManualWorker};
pub use self::messages::{
    CloseReport, Internal, WorkerCounts, WorkerEvent, WorkerMsg, WorkerStatus,
};
pub use self::options::{WorkerArgs, WorkerOptions, WorkerProcessor};
pub use self::process::batch_processor::{
    batch_processor_fn, each_job, BatchFuture, BatchOptions, BatchProcessor, BatchResults,
};
pub use self::process::processor::{
    processor_fn, JobContext, ProcessError, ProcessFuture, Processor,
};
pub use self::process::typed::{typed_processor, DataError, TypedJob};
pub use crate::flows::children::Parking;
