//! Group commit (docs/decisions.md §16): the finishes of a worker's slots
//! that arrive while a finishing call is in flight leave together, in one
//! moveJobsToFinished call, when it returns. No timer: a finish that finds
//! no call in flight goes at once, alone, as the moveToFinished it always
//! was; the window is the round trip of the call in flight, and only
//! finishes made inside it share a call.
//!
//! There is no finisher task: the slot whose call returns hands the queued
//! finishes to the oldest of their owners, who sends them with its own. So a
//! lone finish costs no hop between tasks, and a group is sent by a slot
//! that had nothing else to do.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use echomq_protocol::call::group_commit::{argv_size, MoveJobsToFinished, MAX_BYTES, MAX_ENTRIES};
use echomq_protocol::call::lifecycle::{MoveToFinished, NextJob, Verdict};
use echomq_protocol::call::{Arg, ScriptCall};
use tokio::sync::oneshot;
use tracing::warn;

use crate::connection::pool::Connection;
use crate::error::{Error, Result};

/// Finishes one group call carries, below the script's own bound of
/// [`MAX_ENTRIES`]: at concurrency 100 a group of 32 (each entry a finish and
/// its fetch-next) ran up to 11.6–18.3 ms inside Redis (docs/benchmarks.md
/// §Scale), past the few ms any one call may hold it; 16 halves that.
const GROUP_SIZE: usize = if MAX_ENTRIES < 16 { MAX_ENTRIES } else { 16 };

/// What a finishing call answered for one job.
pub(crate) type Answer = Result<Verdict<Option<NextJob>>>;

/// A finish queued behind the call in flight.
struct Waiting {
    argv: Vec<Arg>,
    size: usize,
    wake: oneshot::Sender<Wake>,
}

/// What a queued finish's owner is told.
enum Wake {
    /// Its finish went in another slot's group call: the answer.
    Answered(Answer),
    /// The call in flight returned: send your finish, these after it.
    Lead(Vec<Waiting>),
    /// The group call failed with a Redis error (not the connection's):
    /// nothing of it was applied, send your finish alone.
    Alone,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    queue: VecDeque<Waiting>,
}

/// One worker's group commit.
pub(crate) struct Finisher {
    state: Mutex<State>,
    max_in_flight: usize,
}

impl Finisher {
    /// At most `max_in_flight` finishing calls at once (at least 1).
    pub(crate) fn new(max_in_flight: usize) -> Self {
        Finisher {
            state: Mutex::default(),
            max_in_flight: max_in_flight.max(1),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The lock guards plain queue operations that cannot panic midway.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `call` now when fewer than the bound are in flight, else with
    /// the finishes queued meanwhile once a call returns; answers this job's
    /// verdict as moveToFinished alone would.
    pub(crate) async fn finish(&self, conn: &Connection, call: &MoveToFinished<'_>) -> Answer {
        let queued = {
            let mut state = self.state();
            if state.in_flight < self.max_in_flight {
                state.in_flight += 1;
                None
            } else {
                let (wake, woken) = oneshot::channel();
                let argv = call.args();
                state.queue.push_back(Waiting {
                    size: argv_size(&argv),
                    argv,
                    wake,
                });
                Some(woken)
            }
        };
        let Some(woken) = queued else {
            let _leading = Leading(self);
            return conn.call(call).await;
        };
        let mut queued = Queued {
            finisher: self,
            woken,
            taken: false,
        };
        let wake = (&mut queued.woken).await;
        queued.taken = true;
        match wake {
            Ok(Wake::Answered(answer)) => answer,
            Ok(Wake::Lead(rest)) => {
                let _leading = Leading(self);
                self.send_group(conn, call, rest).await
            }
            Ok(Wake::Alone) => conn.call(call).await,
            // The slot that held this finish was dropped mid-call (its task
            // ended): whether the call ran is unknown, as with a lost reply.
            Err(_) => Err(Error::OutcomeUnknown {
                operation: "moveJobsToFinished",
                source: fred::error::Error::new(
                    fred::error::ErrorKind::Canceled,
                    "the group call's sender stopped",
                ),
            }),
        }
    }

    async fn send_group(
        &self,
        conn: &Connection,
        call: &MoveToFinished<'_>,
        rest: Vec<Waiting>,
    ) -> Answer {
        if rest.is_empty() {
            return conn.call(call).await;
        }
        let mut argvs = Vec::with_capacity(1 + rest.len());
        argvs.push(call.args());
        let mut wakes = Vec::with_capacity(rest.len());
        for w in rest {
            argvs.push(w.argv);
            wakes.push(w.wake);
        }
        let group = match MoveJobsToFinished::from_argvs(call.keys, &argvs) {
            Ok(group) => group,
            Err(e) => {
                // The queue keeps to the bounds; should it not, nothing is lost.
                warn!(error = %e, "group commit refused its own group; finishing singly");
                return self.each_alone(conn, call, wakes).await;
            }
        };
        match conn.call(&group).await {
            Ok(verdicts) => {
                let mut verdicts = verdicts.into_iter();
                let own = verdicts.next();
                for (wake, verdict) in wakes.into_iter().zip(verdicts) {
                    let _ = wake.send(Wake::Answered(Ok(verdict)));
                }
                // decode checked one verdict per entry.
                own.map(Ok).unwrap_or_else(|| {
                    Err(Error::protocol("moveJobsToFinished", "no reply".to_owned()))
                })
            }
            Err(e) if e.is_connection() => {
                // The reply is lost, or Redis was busy: each owner retries its
                // own finish as after a single call's (fenced by its token).
                for wake in wakes {
                    let _ = wake.send(Wake::Answered(Err(copy_connection_error(&e))));
                }
                Err(e)
            }
            Err(e) => {
                warn!(error = %e, "group commit call failed; finishing singly");
                self.each_alone(conn, call, wakes).await
            }
        }
    }

    async fn each_alone(
        &self,
        conn: &Connection,
        call: &MoveToFinished<'_>,
        wakes: Vec<oneshot::Sender<Wake>>,
    ) -> Answer {
        for wake in wakes {
            let _ = wake.send(Wake::Alone);
        }
        conn.call(call).await
    }

    /// A call returned: the queued finishes go to the oldest owner still
    /// waiting, up to the bounds; with none queued, one call fewer is in flight.
    fn hand_off(&self) {
        let mut state = self.state();
        loop {
            let Some(first) = state.queue.pop_front() else {
                state.in_flight = state.in_flight.saturating_sub(1);
                return;
            };
            let mut size = first.size + 5;
            let mut rest = Vec::new();
            while rest.len() + 1 < GROUP_SIZE {
                match state.queue.front() {
                    Some(w) if size + w.size <= MAX_BYTES => {
                        size += w.size;
                        rest.extend(state.queue.pop_front());
                    }
                    _ => break,
                }
            }
            match first.wake.send(Wake::Lead(rest)) {
                Ok(()) => return,
                // That owner is gone (its task ended): the others wait on.
                Err(Wake::Lead(rest)) => {
                    for w in rest.into_iter().rev() {
                        state.queue.push_front(w);
                    }
                }
                Err(_) => {}
            }
        }
    }
}

/// A finish waiting in the queue. Should its owner be dropped after the lead
/// was handed to it but before it took it, the lead (and the finishes that
/// came with it) passes on, so the call in flight it stands for is never
/// counted forever.
struct Queued<'a> {
    finisher: &'a Finisher,
    woken: oneshot::Receiver<Wake>,
    /// The wake was read: its owner acts on it.
    taken: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        // No send succeeds after this; one made before is still read.
        self.woken.close();
        if let Ok(Wake::Lead(rest)) = self.woken.try_recv() {
            {
                let mut state = self.finisher.state();
                for w in rest.into_iter().rev() {
                    state.queue.push_front(w);
                }
            }
            self.finisher.hand_off();
        }
    }
}

/// Passes the lead on when the call it sent has returned, or when its
/// sender is dropped midway, so queued finishes never wait on nothing.
struct Leading<'a>(&'a Finisher);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.hand_off();
    }
}

fn copy_connection_error(e: &Error) -> Error {
    match e {
        Error::Redis(source) => Error::Redis(source.clone()),
        Error::OutcomeUnknown { operation, source } => Error::OutcomeUnknown {
            operation,
            source: source.clone(),
        },
        other => Error::OutcomeUnknown {
            operation: "moveJobsToFinished",
            source: fred::error::Error::new(fred::error::ErrorKind::IO, other.to_string()),
        },
    }
}
