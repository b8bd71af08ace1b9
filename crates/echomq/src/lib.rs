//! # EchoMQ
//!
//! A Redis job queue whose wire protocol is BullMQ 6.7.0's (prefix `emq`): a
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

pub mod audit;
pub mod clock;
pub mod config;
pub mod connect;
pub mod connection;
pub mod diagnose;
pub mod error;
pub mod flow_producer;
pub mod health;
pub mod host_supervisor;
pub mod job_scheduler;
pub mod lock_manager;
mod lock_protocol;
pub mod queue;
pub mod queue_events;
pub mod schedule;
pub mod schedulers;
pub mod stalled_checker;
pub mod supervision;
pub mod telemetry;
pub mod worker;

pub use config::ConnectionConfig;
pub use connect::RetryPolicy;
pub use connection::Connection;
pub use diagnose::{Diagnosis, FailureClass};
pub use echomq_protocol as protocol;
pub use echomq_protocol::{
    Backoff, Deduplication, EventKind, JobOptions, JobRecord as Job, KeepJobs,
};
pub use error::{Error, Result};
pub use flow_producer::{FlowJob, FlowProducer, JobNode, OnChildFailure, ParentRef};
pub use host_supervisor::{ChildId, HostStatus, HostSupervisor, HostSupervisorMsg, ShutdownReport};
pub use job_scheduler::{JobScheduler, JobSchedulerArgs, JobSchedulerMsg};
pub use lock_manager::{LockManager, LockManagerArgs, LockManagerMsg, LockStats, TrackedLock};
pub use queue::{
    Dependencies, Finished, FlowNode, JobCounts, JobFilter, JobLogs, JobState, NewJob, Queue,
    QueueOptions, RateLimit, RemoveOutcome, WorkerInfo,
};
pub use queue_events::{
    wait_until_finished, Delivery, QueueEvents, QueueEventsArgs, QueueEventsError, QueueEventsMsg,
    StartFrom, Subscribers, Subscription,
};
pub use schedule::{JobTemplate, Repeat, SchedulerError, SchedulerSpec};
pub use schedulers::{Iteration, IterationRestored, JobSchedulers, SchedulerInfo, SchedulerSweep};
pub use stalled_checker::{
    JobsRecovered, StalledChecker, StalledCheckerArgs, StalledCheckerMsg, StalledStats, SweepReport,
};
pub use supervision::{
    ChildKind, Member, RestartIntensity, SetCloseError, SetCloseReport, SupervisionDecision,
    SupervisionError, WorkerSet, WorkerSetSpec,
};
pub use worker::{
    processor_fn, ActiveJob, CloseReport, FinishFailed, FinishOutcome, JobContext, ProcessError,
    Processor, Worker, WorkerArgs, WorkerEvent, WorkerMsg, WorkerOptions, WorkerStatus,
};
