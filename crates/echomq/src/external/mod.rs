//! Processors that run a job outside the Rust process, over the JSON-lines
//! protocol of `docs/processors.md` (`wire.rs`): [`ExecProcessor`], a pool of
//! long-lived handler processes in any language (feature `exec-processor`),
//! and [`HttpProcessor`], each job POSTed to an endpoint (feature
//! `http-processor`). Both are ordinary [`Processor`](crate::Processor)s:
//! the worker renews locks, retries and cancels as for Rust code.

#[cfg(feature = "exec-processor")]
pub(crate) mod exec;
#[cfg(feature = "http-processor")]
pub(crate) mod http;
pub(crate) mod wire;

#[cfg(feature = "exec-processor")]
pub use self::exec::{CommandError, ExecCommand, ExecError, ExecOptions, ExecProcessor};
#[cfg(feature = "http-processor")]
pub use self::http::{HttpError, HttpHeader, HttpOptions, HttpProcessor};
