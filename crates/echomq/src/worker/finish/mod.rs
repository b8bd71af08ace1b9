//! Letting jobs go: the handle that owns a job's token (`job.rs`), the
//! transitions out of `active` and their script calls (`transition.rs`),
//! the retry decision and backoff (`backoff.rs`, custom strategies in
//! `backoff_strategy.rs`) and group commit (`finisher.rs`).

pub(crate) mod backoff;
pub(crate) mod backoff_strategy;
pub(crate) mod finisher;
pub(crate) mod job;
pub(crate) mod transition;
