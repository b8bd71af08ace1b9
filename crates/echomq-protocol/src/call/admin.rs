//! Calls of the producer and admin side of a queue (the `Queue` handle),
//! one file per kind: reads, queue-wide commands, calls on one job.

mod job;
mod queue_wide;
mod read;

pub use job::{
    AddLog, ChangeDelay, ChangePriority, Promote, PushSide, RemoveJob, ReprocessJob, UpdateData,
    UpdateProgress,
};
pub use queue_wide::{
    BulkSource, CleanJobsInSet, Drain, MoveJobsToWait, Obliterate, ObliterateStep, Pause,
    PauseAction,
};
pub use read::{
    FinishedReply, GetCounts, GetRanges, GetState, GetStateBounded, IsFinished, RangeOrder,
};
