//! # EchoMQ
//!
//! A Redis job queue whose wire protocol is BullMQ 6.7.6's (prefix `emq`): a
//! BullMQ Node client and this runtime work on the same queues, both ways.
//!
//! ## Layout
//!
//! * [`Connection`] — one fred pool shared by everything, with the frozen Lua
//!   scripts loaded into Redis; dedicated clients for blocking reads.
//! * [`Queue`] — the producer and admin API of one queue.
//! * The protocol itself (keys, job fields, options, events, scripts) lives in
//!   the `echomq-protocol` crate, re-exported here as [`protocol`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), echomq::Error> {
//! use echomq::{Connection, JobOptions, Queue};
//! let conn = Connection::connect_url("redis://127.0.0.1:6379").await?;
//! let queue = Queue::new(&conn, "mail").await?;
//! let id = queue.add("welcome", &serde_json::json!({"to": "a@b.c"}), JobOptions::new().attempts(3)).await?;
//! println!("added job {id}");
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod adopt;
pub mod audit;
pub mod budget;
pub mod capacity;
pub mod clock;
#[cfg(feature = "codec")]
pub mod codec;
pub mod connection;
pub mod dead_letter;
mod error;
#[cfg(any(feature = "exec-processor", feature = "http-processor"))]
pub mod external;
mod flows;
pub mod groups;
pub mod health;
pub mod host;
#[cfg(any(feature = "health-server", feature = "prometheus"))]
mod http;
pub mod locks;
pub mod queue;
pub mod queue_events;
pub mod relay;
pub mod scheduler;
pub mod stalled_checker;
pub mod supervision;
mod sync;
pub mod telemetry;
#[cfg(test)]
mod test_redis;
pub mod worker;

pub use connection::{Connection, ConnectionConfig, RetryPolicy};
pub use echomq_protocol as protocol;
pub use echomq_protocol::{Backoff, Deduplication, EventKind, Job, JobOptions, KeepJobs};
pub use error::{AuthFailure, Error, RedisCondition, Result};
pub use flows::producer as flow_producer;
pub use flows::producer::{FlowJob, FlowProducer, JobNode};
pub use host::{HandleError, Host};
pub use locks::{LockManager, LockManagerArgs, LockManagerMsg};
pub use queue::{JobCounts, JobState, NewJob, Queue, QueueOptions, RangeOrder, RateLimit};
pub use queue_events::{
    Delivery, QueueEvents, QueueEventsArgs, QueueEventsMsg, StartFrom, Subscribers,
};
pub use scheduler::{
    JobScheduler, JobSchedulerArgs, JobSchedulerMsg, JobSchedulers, Repeat, SchedulerSpec,
};
pub use stalled_checker::{StalledChecker, StalledCheckerArgs, StalledCheckerMsg};
pub use supervision::{
    HostSupervisor, HostSupervisorMsg, RestartIntensity, WorkerSet, WorkerSetSpec,
};
pub use worker::{
    processor_fn, typed_processor, JobContext, ProcessError, Processor, TypedJob, Worker,
    WorkerArgs, WorkerEvent, WorkerMsg, WorkerOptions, WorkerProcessor,
};
