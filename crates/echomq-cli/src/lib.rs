//! The parts of the `echomq` command that its tests and other tools share:
//! the readable error lines and exit codes ([`diagnose`]).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod diagnose;
