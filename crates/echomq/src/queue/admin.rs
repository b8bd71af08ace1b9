//! Queue-wide commands: pause, drain, obliterate, clean, and the moves of
//! finished or delayed jobs back to wait.

use std::time::Duration;

use super::chunked::DEFAULT_CHUNK;
use super::handle::Queue;
use super::types::{JobState, RemoveOutcome};
use crate::error::{Error, Result};
use echomq_protocol::call::admin::{
    CleanJobsInSet, Pause, PauseAction, Promote, PushSide, RemoveJob, ReprocessJob,
};
use echomq_protocol::validate::ValidationError;
use echomq_protocol::{FinishTarget, ScriptErrorCode, ScriptId};

/// Jobs an obliterate call may delete before handing back (Node's chunk).
const OBLITERATE_CHUNK: u64 = 1000;

impl Queue {
    /// Pauses the queue: workers stop taking jobs (meta `paused`), jobs stay in `wait`.
    pub async fn pause(&self) -> Result<()> {
        let call = Pause {
            keys: &self.keys,
            action: PauseAction::Pause,
            emit_event: true,
        };
        self.conn.call(&call).await?;
        Ok(())
    }

    /// Resumes the queue (and migrates a legacy `paused` list, in chunks).
    pub async fn resume(&self) -> Result<()> {
        let mut call = Pause {
            keys: &self.keys,
            action: PauseAction::Resume,
            emit_event: true,
        };
        // Only the first chunk announces the resume.
        while self.conn.call(&call).await? > 0 {
            call.emit_event = false;
        }
        Ok(())
    }

    /// Removes every waiting and prioritized job (and delayed ones when asked),
    /// except current scheduler iterations. Active and finished jobs stay.
    /// Runs in bounded steps of [`DEFAULT_CHUNK`] (`queue.chunked(n).drain(..)`
    /// for another size or progress); each job is removed as BullMQ's drain
    /// removes it.
    pub async fn drain(&self, include_delayed: bool) -> Result<()> {
        self.chunked(DEFAULT_CHUNK)
            .drain(include_delayed)
            .await
            .map(|_| ())
    }

    /// Deletes the whole queue: pauses it, then removes jobs in chunks of 1000
    /// until nothing is left (`queue.chunked(n).obliterate(..)` for another
    /// size or progress). Refuses while jobs are active unless `force`.
    pub async fn obliterate(&self, force: bool) -> Result<()> {
        self.chunked(OBLITERATE_CHUNK).obliterate(force).await
    }

    /// Removes a job (and its children when `remove_children`). A locked job is
    /// left alone; the current iteration of a scheduler is refused.
    pub async fn remove(&self, id: &str, remove_children: bool) -> Result<RemoveOutcome> {
        let call = RemoveJob {
            keys: &self.keys,
            id,
            remove_children,
        };
        Ok(if self.conn.call(&call).await? {
            RemoveOutcome::Removed
        } else {
            RemoveOutcome::Locked
        })
    }

    /// Deletes jobs of `state` older than `grace` (by finishedOn, processedOn or
    /// timestamp), at most `limit` of them (0 = no limit). Returns the deleted
    /// ids. A limit above [`DEFAULT_CHUNK`] (or none) is worked through in
    /// calls of that many, each looking at the oldest candidates left, until
    /// one deletes fewer than it may (`queue.chunked(n).clean(..)` counts
    /// instead of listing, for large cleans).
    pub async fn clean(&self, grace: Duration, limit: u64, state: JobState) -> Result<Vec<String>> {
        if state == JobState::Unknown {
            return Err(ValidationError::Option {
                option: "state",
                reason: "cannot clean the unknown state".into(),
            }
            .into());
        }
        let cutoff_ms = crate::clock::now_ms().saturating_sub(grace.as_millis() as u64);
        let mut deleted = Vec::new();
        loop {
            let want = match limit {
                0 => DEFAULT_CHUNK,
                l => DEFAULT_CHUNK.min(l - deleted.len() as u64),
            };
            if want == 0 {
                break;
            }
            let call = CleanJobsInSet {
                keys: &self.keys,
                state: state.key_suffix(),
                cutoff_ms,
                limit: want,
            };
            let ids = self.conn.call(&call).await?;
            let n = ids.len() as u64;
            deleted.extend(ids);
            // A call that could not use its whole chunk found no more (one
            // call, one `cleaned` event, for a clean within one chunk).
            if n < want {
                break;
            }
        }
        Ok(deleted)
    }

    /// Moves a completed or failed job back to wait, or to prioritized when it
    /// has a priority (`job.retry()` in Node, BullMQ 6.7.0), optionally
    /// resetting its attempt counters.
    pub async fn retry_job(&self, id: &str, reset_attempts: bool) -> Result<()> {
        let from = match self.get_job_state(id).await? {
            JobState::Failed => FinishTarget::Failed,
            JobState::Completed => FinishTarget::Completed,
            JobState::Unknown => return Err(Error::JobNotFound(id.to_owned())),
            _ => {
                return Err(Error::Script {
                    script: ScriptId::ReprocessJob.name(),
                    code: ScriptErrorCode::JobNotInState,
                })
            }
        };
        let lifo = self
            .get_job(id)
            .await?
            .map(|j| j.opts.lifo)
            .unwrap_or(false);
        let call = ReprocessJob {
            keys: &self.keys,
            id,
            from,
            push: PushSide::for_lifo(lifo),
            reset_attempts_made: reset_attempts,
            reset_attempts_started: reset_attempts,
        };
        self.conn.call(&call).await
    }

    /// Moves one delayed job to wait now.
    pub async fn promote(&self, id: &str) -> Result<()> {
        let call = Promote {
            keys: &self.keys,
            id,
        };
        self.conn.call(&call).await
    }
}
