//! The producer and admin side of one queue: the [`Queue`] handle
//! (`handle.rs`) and its operations by topic.
//!
//! Every script runs through a typed call of `echomq_protocol::call`; this
//! module only chooses the call, validates input and maps replies to the
//! runtime's types.

pub(crate) mod add;
pub(crate) mod admin;
pub(crate) mod cancel;
pub(crate) mod chunked;
pub(crate) mod coalesce;
pub(crate) mod dedup;
pub(crate) mod edit;
pub(crate) mod getters;
pub(crate) mod handle;
pub(crate) mod handles;
pub(crate) mod limits;
pub(crate) mod paging;
pub(crate) mod range;
pub(crate) mod typed;
pub(crate) mod types;

pub use self::add::{ADD_BULK_CHUNK, ADD_BULK_GROUP};
pub use self::cancel::{CancelMode, CancelOutcome};
pub use self::chunked::{Chunked, Progress, DEFAULT_CHUNK};
pub use self::coalesce::ADDS_IN_FLIGHT;
pub use self::getters::{JobFilter, JobLogs, WorkerInfo, SEARCH_PAGE_MAX};
pub use self::handle::Queue;
pub use self::handles::{DeadLetters, Dedup, Flows, Groups, Limits, Telemetry};
pub use self::limits::RateLimit;
pub use self::range::READ_PAGE;
pub use self::typed::TypedQueue;
pub use self::types::{Finished, JobCounts, JobState, NewJob, QueueOptions, RemoveOutcome};
pub use crate::flows::reads::{Dependencies, FlowNode};
pub use echomq_protocol::call::admin::RangeOrder;
