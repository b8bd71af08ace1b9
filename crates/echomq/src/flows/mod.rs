//! Flows, in one place: adding a tree of jobs (`producer.rs`, the public
//! `echomq::flow_producer`), reading a parent's children and a flow's tree
//! from a queue (`reads.rs`, methods of [`Queue`](crate::Queue)), and what a
//! processor sees of its job's children and how it waits for them
//! (`children.rs`). The contract is `docs/flows.md`.

pub(crate) mod children;
pub(crate) mod dag;
pub mod producer;
pub(crate) mod reads;
