//! The ordered close of a worker set.
//!
//! Order matters for locks: the Worker stops fetching and lets its held jobs
//! finish while the LockManager keeps renewing them; at the deadline it moves
//! what is left back to `wait` and only then are the LockManager and the
//! StalledChecker stopped. Stopping the LockManager first would let a held
//! lock lapse and the job be recovered as stalled while it still runs.

use std::time::Duration;

use ractor::{call_t, RactorErr};
use tracing::{debug, info};

use super::decision::CLOSED;
use super::worker_set::WorkerSet;
use crate::worker::messages::{CloseReport, WorkerMsg};

/// How long past the close timeout the Worker may take to answer (its last
/// finishing calls, moving the rest back to `wait`).
const ANSWER_GRACE: Duration = Duration::from_secs(5);
/// How long a LockManager or StalledChecker may take to stop.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// What [`WorkerSet::close`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetCloseReport {
    /// The Worker's own report; `None` when it was no longer running.
    pub worker: Option<CloseReport>,
}

/// Why the Worker of a set could not be closed in order. The LockManager
/// and StalledChecker are stopped anyway.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetCloseError {
    /// The Worker did not answer `Close` within the timeout plus a grace.
    #[error("the worker did not answer Close within {0:?}")]
    NoAnswer(Duration),
}

impl WorkerSet {
    /// Closes the set in order: marks it closing (so [`WorkerSet::classify`]
    /// treats its members' stops as expected, in every clone of this set),
    /// sends the Worker `Close(timeout)` and waits for its report, then stops
    /// the LockManager and the StalledChecker.
    pub async fn close(&self, timeout: Duration) -> Result<SetCloseReport, SetCloseError> {
        self.mark_closing();
        let answer_within = timeout + ANSWER_GRACE;
        let worker = match call_t!(
            self.worker,
            WorkerMsg::Close,
            answer_within.as_millis() as u64,
            timeout
        ) {
            Ok(report) => {
                info!(
                    finished = report.finished_in_time,
                    moved_back = report.moved_back.len(),
                    "worker set closed"
                );
                // It answers, then stops itself: the set is closed once it has.
                let _ = self.worker.wait(Some(STOP_WAIT)).await;
                Some(report)
            }
            Err(RactorErr::Timeout) => {
                self.stop_helpers().await;
                return Err(SetCloseError::NoAnswer(answer_within));
            }
            // Not running (or gone mid-close): nothing holds jobs any more.
            Err(e) => {
                debug!(error = %e, "worker not running at close");
                None
            }
        };
        self.stop_helpers().await;
        Ok(SetCloseReport { worker })
    }

    async fn stop_helpers(&self) {
        // The Worker stops its LockManager after a completed Close (a Worker
        // that was gone did not); stopping a stopping actor is a no-op, and
        // waiting covers both.
        stop_and_wait(self.lock_manager.get_cell()).await;
        if let Some(sc) = &self.stalled_checker {
            stop_and_wait(sc.get_cell()).await;
        }
    }
}

/// Stops `cell` (reason `"closed"`) unless it is stopping already, and waits
/// for it to be gone.
pub(crate) async fn stop_and_wait(cell: ractor::ActorCell) {
    cell.stop(Some(CLOSED.into()));
    if cell.wait(Some(STOP_WAIT)).await.is_err() {
        debug!(actor = %cell.get_id(), "did not stop in time");
    }
}
