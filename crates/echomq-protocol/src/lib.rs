//! # echomq-protocol
//!
//! The frozen layers of EchoMQ as plain types, with no I/O:
//!
//! * **L1** — [`keys`]: the key layout of a queue (`emq:<queue>:wait`, the job hash
//!   `emq:<queue>:<id>`, its lock `…:<id>:lock`); [`job`]: the job hash fields and
//!   their decoding; [`options`]: the job options in BullMQ's stored (short-name) form.
//! * **L2** — [`scripts`]: the catalogue of Lua scripts (name, KEYS count, expanded
//!   source, SHA1) compiled in from `lua/`; [`packing`]: the msgpack arguments they take;
//!   [`reply`]: the error codes and reply shapes they return; [`event`]: the entries they
//!   append to `emq:<queue>:events`.
//!
//! The wire format is BullMQ 6.7.0's with the prefix `emq`, so a BullMQ Node client
//! created with `{ prefix: 'emq' }` works on the same queues. Everything here is
//! specified in `docs/protocol.md`, EchoMQ's own choices in `docs/decisions.md`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod call;
pub mod event;
pub mod group;
pub mod job;
pub mod keys;
pub mod options;
pub mod packing;
pub mod relay;
pub mod reply;
pub mod scripts;
pub mod validate;
pub mod wire;

pub use call::lifecycle::FinishTarget;
pub use call::{Arg, Reply, ReplyError, ScriptCall};
pub use event::{Event, EventKind};
pub use group::GroupOptions;
pub use job::{DecodeError, Job};
pub use keys::QueueKeys;
pub use options::{Backoff, Deduplication, JobOptions, KeepJobs, OnChildFailure, ParentRef};
pub use reply::ScriptErrorCode;
pub use scripts::{ScriptDef, ScriptId};
pub use validate::ValidationError;

/// The key prefix EchoMQ uses by default (BullMQ's is `bull`).
pub const DEFAULT_PREFIX: &str = "emq";

/// The value written to the `version` field of a queue's meta hash: the wire
/// protocol spoken, not the library (docs/decisions.md §5 Meta version).
pub const PROTOCOL_VERSION: &str = "bullmq:6.7.6";

/// Default approximate length of the events stream (`opts.maxLenEvents`).
pub const DEFAULT_MAX_LEN_EVENTS: u64 = 10_000;
