//! The Worker: fetches jobs of one queue, locks them, runs a [`Processor`] on
//! each and finishes them, as BullMQ 6.7.0 workers do. The actor is `actor.rs`, its
//! settings `options.rs`, its messages `messages.rs`; the state it shares with
//! the tasks it owns is `shared.rs`. The contract is in `docs/worker.md`.
//!
//! The library ships no supervision tree: the host spawns the Worker and its
//! LockManager under its own supervisor (see [`spawn_linked`], or
//! `supervision::WorkerSetSpec`) and decides about restarts.

pub(crate) mod actor;
pub(crate) mod backoff;
pub(crate) mod backoff_strategy;
pub(crate) mod batch;
pub(crate) mod batch_processor;
pub(crate) mod blocking;
pub(crate) mod cancels;
pub(crate) mod due_timer;
pub(crate) mod fetcher;
pub(crate) mod finisher;
pub(crate) mod flow_ctx;
pub(crate) mod gate;
pub(crate) mod hints;
pub(crate) mod job;
pub(crate) mod limiter;
pub(crate) mod manual;
pub(crate) mod messages;
pub(crate) mod options;
pub(crate) mod processor;
pub(crate) mod run;
pub(crate) mod shared;
pub(crate) mod transition;
pub(crate) mod typed;

pub use self::actor::{spawn_linked, Worker, WorkerState};
pub use self::backoff_strategy::{BackoffInput, BackoffStrategy, CustomBackoff};
pub use self::batch_processor::{
    batch_processor_fn, each_job, BatchFuture, BatchOptions, BatchProcessor, BatchResults,
};
pub use self::flow_ctx::Parking;
pub use self::job::{ActiveJob, FinishFailed, FinishOutcome};
pub use self::manual::{Fetched, ManualJob, ManualParking, ManualWorker};
pub use self::messages::{
    CloseReport, Internal, WorkerCounts, WorkerEvent, WorkerMsg, WorkerStatus,
};
pub use self::options::{WorkerArgs, WorkerOptions};
pub use self::processor::{processor_fn, JobContext, ProcessError, ProcessFuture, Processor};
pub use self::typed::{typed_processor, DataError, TypedJob};
