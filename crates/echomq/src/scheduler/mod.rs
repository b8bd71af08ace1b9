//! Job schedulers (BullMQ's `upsertJobScheduler`: every N ms or a cron
//! pattern): what a scheduler is (`spec`, pure), when its cron occurrences
//! fall (`cron`, pure), the Redis side (`store`: upsert, remove, get, list,
//! the repair sweep; `iteration`: the next iteration a Worker creates when it
//! takes the current one) and the [`JobScheduler`] actor. Contract:
//! `docs/job-scheduler.md`.

pub(crate) mod actor;
pub(crate) mod cron;
pub(crate) mod error;
pub(crate) mod iteration;
pub(crate) mod spec;
pub(crate) mod store;
mod upsert;

pub use self::actor::{JobScheduler, JobSchedulerArgs, JobSchedulerMsg, JobSchedulerState};
pub use self::cron::{CronSchedule, CronZone};
pub use self::error::SchedulerError;
pub use self::iteration::create_next_iteration;
pub use self::spec::{JobTemplate, Repeat, SchedulerSpec};
pub use self::store::{IterationRestored, JobSchedulers, SchedulerSweep, SCHEDULER_PAGE};
pub use echomq_protocol::call::scheduler::{Iteration, SchedulerInfo};
