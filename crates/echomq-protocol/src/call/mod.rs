//! One type per script call, as mini-redis has one type per command.
//!
//! A call type names its script, yields its KEYS and ARGV in the frozen order
//! from typed fields, and decodes the script's reply into a typed result. The
//! runtime runs any of them through one method (`Connection::call`), so the
//! order of a script's KEYS and ARGV is written exactly once, here, and unit
//! tests check it against the script's file name and `docs/protocol.md`.
//!
//! Nothing in this module does I/O: [`Arg`] and [`Reply`] are the wire values
//! the runtime translates to and from its Redis client.

/// `vec!` of [`Key`]s from any mix of owned `String`s and prebuilt `&Key`s
/// (a [`crate::keys::FixedKeys`] entry is a counter increment).
macro_rules! keys {
    ($($k:expr),* $(,)?) => {
        vec![$($crate::keys::Key::from($k)),*]
    };
}

pub mod add;
pub mod add_group;
pub mod admin;
pub mod audit;
pub mod budget;
pub mod chunked;
pub mod dag;
pub mod dead_letter;
pub mod decode;
pub mod dedup;
pub mod fetch_batch;
pub mod flow;
pub mod getters;
pub mod group_commit;
pub mod groups;
pub mod lifecycle;
pub mod limits;
pub mod metrics;
pub mod offload;
pub mod relay;
pub mod scheduler;
pub mod script;
pub mod stalled;

pub use self::decode::{Reply, ReplyError};
pub use self::script::{call_parts, Arg, ScriptCall};
