//! Cancelling a job from any process ([`Queue::cancel`]).
//!
//! The canceller ends the job itself, so a cancel takes effect whether or not
//! its holder hears of it: a running job is failed (or retried, as the
//! caller chose) with the holder's own lock token — exactly the holder's own
//! failed attempt, through BullMQ's scripts, fenced by the token, so nobody
//! finishes the job after it — and a job not running yet is removed. Then one
//! `PUBLISH` on the queue's cancel channel tells an EchoMQ holder to stop the
//! processor at once; a holder that missed it (disconnected) finds its lock
//! gone at its next renewal and stops then. A BullMQ Node holder runs on: its
//! own finish is refused (the lock is gone) and its result discarded
//! (docs/worker.md §Cancelling a job).

use echomq_protocol::call::lifecycle::{EpochMs, Refusal, Verdict};
use fred::prelude::{KeysInterface, PubsubInterface};

use super::handle::Queue;
use super::types::{JobState, RemoveOutcome};
use crate::error::{Error, Result};
use crate::worker::finish::transition::{failed_attempt, Finishing};
use crate::worker::options::WorkerOptions;

/// How a cancelled running job ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelMode {
    /// Failed for good with the reason, whatever its attempts say.
    Fail,
    /// This attempt fails with the reason and the job is retried per its
    /// `attempts` and `backoff` (failed once they are spent).
    Retry,
}

/// What [`Queue::cancel`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The job was running: its attempt was failed (or retried) with the
    /// reason, and its holder told to stop the processor.
    Stopped {
        /// Whether the job will run again.
        retrying: bool,
    },
    /// The job had not run yet (waiting, delayed, prioritized, waiting for
    /// children): it was removed.
    Removed,
    /// The job had already finished; nothing changed.
    AlreadyFinished(JobState),
    /// No such job.
    NotFound,
}

/// How often the job may change state under a cancel before it gives up.
const TRIES: usize = 20;

impl Queue {
    /// The channel an EchoMQ worker listens on for cancels of this queue's
    /// jobs (EchoMQ's own, docs/protocol.md §Cancels).
    pub(crate) fn cancel_channel(&self) -> String {
        self.keys.key("cancel")
    }

    /// Cancels job `id` from any process: a running job is stopped and its
    /// attempt failed with `reason` (for good, or retried, per `mode`); a job
    /// not running yet is removed; a finished one is left alone.
    pub async fn cancel(&self, id: &str, reason: &str, mode: CancelMode) -> Result<CancelOutcome> {
        let options = WorkerOptions::default();
        for _ in 0..TRIES {
            match self.get_job_state(id).await? {
                JobState::Completed => {
                    return Ok(CancelOutcome::AlreadyFinished(JobState::Completed))
                }
                JobState::Failed => return Ok(CancelOutcome::AlreadyFinished(JobState::Failed)),
                JobState::Unknown => return Ok(CancelOutcome::NotFound),
                JobState::Active => {
                    let Some(job) = self.get_job(id).await? else {
                        return Ok(CancelOutcome::NotFound);
                    };
                    // The holder's token ("0" for a job nobody holds, stalled):
                    // if the lock changes under us, the script refuses.
                    let token: Option<String> = self.conn.pool().get(self.keys.lock(id)).await?;
                    let token = token.unwrap_or_else(|| "0".to_owned());
                    let (t, retrying) = failed_attempt(
                        &job,
                        reason,
                        Some(format!("CancelledError: {reason}")),
                        mode == CancelMode::Fail,
                        None,
                    );
                    let finishing = Finishing {
                        keys: &self.keys,
                        job: &job,
                        token: &token,
                        options: &options,
                        now: EpochMs(crate::clock::now_ms()),
                        fetch_next: false,
                    };
                    match finishing.run(&self.conn, &t).await?.verdict {
                        Verdict::Done(_) => {
                            let _: i64 = self
                                .conn
                                .pool()
                                .next()
                                .publish(self.cancel_channel(), id)
                                .await?;
                            return Ok(CancelOutcome::Stopped { retrying });
                        }
                        Verdict::Refused(Refusal::Missing) => return Ok(CancelOutcome::NotFound),
                        // Taken, let go or finished meanwhile: look again.
                        Verdict::Refused(_) => continue,
                    }
                }
                _ => match self.remove(id, false).await? {
                    RemoveOutcome::Removed => return Ok(CancelOutcome::Removed),
                    // Taken meanwhile: cancel it as a running job.
                    RemoveOutcome::Locked => continue,
                },
            }
        }
        Err(Error::protocol(
            "cancel",
            format!("job {id} kept changing state while it was being cancelled"),
        ))
    }
}
