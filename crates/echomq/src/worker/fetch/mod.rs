//! Taking jobs: the fetch loop (`fetcher.rs`) takes a free slot from the
//! gate (`gate.rs`), waits on its blocking connection (`blocking.rs`) or the
//! due timer (`due_timer.rs`) as the fetch hints say (`hints.rs`), and takes a
//! job with moveToActive under the worker's rate limiter (`limiter.rs`).

pub(crate) mod blocking;
pub(crate) mod due_timer;
pub(crate) mod fetcher;
pub(crate) mod gate;
pub(crate) mod hints;
pub(crate) mod limiter;
pub(crate) mod takes;
