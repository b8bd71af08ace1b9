//! Handler processes: the command (`command.rs`), one process and its
//! protocol exchange (`handler.rs`), the pool that is the processor
//! (`pool.rs`).

pub(crate) mod command;
pub(crate) mod handler;
pub(crate) mod pool;

pub use self::command::{CommandError, ExecCommand, ExecOptions};
pub use self::pool::{ExecError, ExecProcessor};
