//! What scripts return: the negative error codes (docs/protocol.md §Error codes).

use thiserror::Error;

/// A negative integer reply of a script. Scripts return these instead of raising,
/// so effects made before the return stay (docs/protocol.md §Script conventions, Error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
#[non_exhaustive]
pub enum ScriptErrorCode {
    /// `-1`: the job hash is missing.
    #[error("job does not exist")]
    JobNotExist,
    /// `-2`: the job has no lock although a token was given.
    #[error("job lock does not exist")]
    JobLockNotExist,
    /// `-3`: the job is not in the expected state.
    #[error("job is not in the expected state")]
    JobNotInState,
    /// `-4`: a parent with unfinished children cannot complete.
    #[error("job has pending children")]
    JobPendingChildren,
    /// `-5`: the parent of a child being added does not exist.
    #[error("parent job does not exist")]
    ParentJobNotExist,
    /// `-6`: the lock holds another token.
    #[error("job lock is held by another token")]
    JobLockMismatch,
    /// `-7`: a duplicate child whose existing parent differs.
    #[error("parent job cannot be replaced")]
    ParentJobCannotBeReplaced,
    /// `-8`: the current iteration of a job scheduler cannot be removed.
    #[error("job belongs to a job scheduler")]
    JobBelongsToJobScheduler,
    /// `-9`: a parent with failed children cannot complete.
    #[error("job has failed children")]
    JobHasFailedChildren,
    /// `-10`: a cron iteration id already exists.
    #[error("scheduler job id collision")]
    SchedulerJobIdCollision,
    /// `-11`: 32 consecutive every-slots are taken.
    #[error("scheduler job slots busy")]
    SchedulerJobSlotsBusy,
}

impl ScriptErrorCode {
    /// The code for a negative reply, `None` for anything else.
    pub fn from_code(code: i64) -> Option<Self> {
        use ScriptErrorCode::*;
        Some(match code {
            -1 => JobNotExist,
            -2 => JobLockNotExist,
            -3 => JobNotInState,
            -4 => JobPendingChildren,
            -5 => ParentJobNotExist,
            -6 => JobLockMismatch,
            -7 => ParentJobCannotBeReplaced,
            -8 => JobBelongsToJobScheduler,
            -9 => JobHasFailedChildren,
            -10 => SchedulerJobIdCollision,
            -11 => SchedulerJobSlotsBusy,
            _ => return None,
        })
    }

    /// The integer on the wire.
    pub fn code(self) -> i64 {
        use ScriptErrorCode::*;
        match self {
            JobNotExist => -1,
            JobLockNotExist => -2,
            JobNotInState => -3,
            JobPendingChildren => -4,
            ParentJobNotExist => -5,
            JobLockMismatch => -6,
            ParentJobCannotBeReplaced => -7,
            JobBelongsToJobScheduler => -8,
            JobHasFailedChildren => -9,
            SchedulerJobIdCollision => -10,
            SchedulerJobSlotsBusy => -11,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for c in -11..=-1 {
            assert_eq!(ScriptErrorCode::from_code(c).unwrap().code(), c);
        }
        assert_eq!(ScriptErrorCode::from_code(0), None);
        assert_eq!(ScriptErrorCode::from_code(-12), None);
    }
}
