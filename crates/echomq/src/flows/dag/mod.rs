//! DAG flows (docs/flows.md §DAGs): jobs that wait for several jobs and are
//! waited for by several, on BullMQ's keys. `graph.rs` checks a DAG and plans
//! its writing, `add.rs` writes it ([`FlowProducer::add_dag`]), and
//! `releaser.rs` hands finished nodes to the dependents BullMQ's own finish
//! does not know of.
//!
//! [`FlowProducer::add_dag`]: crate::flows::producer::FlowProducer::add_dag

pub(crate) mod add;
pub(crate) mod graph;
pub(crate) mod releaser;

#[cfg(feature = "fault-injection")]
pub use self::add::DagWriteStop;
pub use self::add::{DagAdded, DAG_CHUNK, DAG_WRITE_LEASE};
pub use self::graph::{DagError, DagNode};
pub use self::releaser::{DagReleaser, DagReleaserArgs, DagReleaserMsg, DagReleaserStats};
