//! Groups (issue 31, `docs/groups.md`, docs/decisions.md §15): per-tenant
//! round robin, concurrency, rate limits, pause and max size, as an extension
//! beside plain BullMQ workers.
//!
//! A group job is kept in its group's own set; the [`GroupFeeder`] (an actor
//! the host supervises) releases group jobs into the standard `wait` list
//! while their group is under its budget, so that any worker — EchoMQ or
//! BullMQ Node — runs them unchanged. The queue-side operations
//! (`queue.groups()`: `Groups::set_concurrency`, `pause`, `page`, …) are in
//! `admin.rs`.

pub(crate) mod add;
pub(crate) mod admin;
pub(crate) mod defaults;
pub(crate) mod feeder;

pub use self::feeder::{FeederStats, GroupFeeder, GroupFeederArgs, GroupFeederMsg};
pub use echomq_protocol::call::groups::{GroupDefaults, GroupInfo, GroupPage};
pub use echomq_protocol::GroupOptions;
