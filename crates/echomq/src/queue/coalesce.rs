//! Concurrent single adds of one queue handle, sent together (issue 42).
//!
//! A service that calls [`Queue::add`](super::Queue::add) from many tasks at
//! once paid one script call per job: Redis's per-call cost (the EVALSHA
//! parse, the script's setup) and a round trip each. Here the first
//! [`ADDS_IN_FLIGHT`] adds go out alone, as before; an add that finds that
//! many calls in flight waits, and when a call returns, everything that
//! waited goes as one `addStandardJobs` call (up to the handle's
//! [`QueueOptions::add_group`](super::QueueOptions::add_group) jobs), each
//! entry with the effects and answer of its own `addStandardJob` — the
//! equality `add_group_equality` proves. A lone add never waits, so a
//! sequential producer sees no change.
//!
//! The state has one owner, this struct behind the handle's `Arc`; the slot
//! a direct add holds is given back by a guard's `Drop`, so a caller that
//! drops its future mid-call cannot leave the waiting adds without a sender.

use std::collections::VecDeque;
use std::sync::Mutex;

use echomq_protocol::call::groups::GroupAdded;
use tokio::sync::oneshot;

use super::add::Prepared;
use super::handle::Queue;
use crate::error::{Error, Result};

/// Calls of one handle's adds in flight at once before adds wait to be
/// grouped: two, so that Redis runs one while the next is on the wire.
pub const ADDS_IN_FLIGHT: usize = 2;

/// An add waiting for a group, and where its answer goes.
struct Waiting {
    job: Prepared,
    reply: oneshot::Sender<Result<GroupAdded>>,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Waiting>,
    in_flight: usize,
}

/// The adds of one handle (and its clones) in flight and waiting.
#[derive(Default)]
pub(crate) struct AddGroups {
    state: Mutex<State>,
}

impl std::fmt::Debug for AddGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("AddGroups")
            .field("waiting", &st.waiting.len())
            .field("in_flight", &st.in_flight)
            .finish()
    }
}

/// A direct add's slot; given back (and the waiting adds sent) on drop.
struct Slot<'q> {
    queue: &'q Queue,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        release(self.queue);
    }
}

impl AddGroups {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent counts: every
        // critical section below is a few pushes and pops.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where one add goes: out now in a free slot, or into the next group.
// On the stack for one call: boxing the job would cost an allocation per add.
#[allow(clippy::large_enum_variant)]
enum Turn {
    Alone(Prepared),
    Grouped(oneshot::Receiver<Result<GroupAdded>>),
}

impl Queue {
    /// Sends one standard add (no delay, priority or group; the caller
    /// checks): alone when a slot is free, else with the adds that wait
    /// beside it. One critical section decides and queues, so a slot freed
    /// in between cannot miss a job that then waits with no sender.
    pub(super) async fn add_coalesced(&self, job: Prepared) -> Result<GroupAdded> {
        let turn = {
            let mut st = self.adds.lock();
            if st.in_flight < ADDS_IN_FLIGHT && st.waiting.is_empty() {
                st.in_flight += 1;
                Turn::Alone(job)
            } else {
                let (reply, rx) = oneshot::channel();
                st.waiting.push_back(Waiting { job, reply });
                Turn::Grouped(rx)
            }
        };
        match turn {
            Turn::Alone(job) => {
                let _slot = Slot { queue: self };
                self.conn.call(&self.add_call(&job)).await
            }
            Turn::Grouped(rx) => rx.await.unwrap_or_else(|_| {
                // Only a runtime shutting down drops a group unanswered, and
                // its call may have been sent.
                Err(Error::OutcomeUnknown {
                    operation: "addStandardJobs",
                    source: fred::error::Error::new(
                        fred::error::ErrorKind::Canceled,
                        "the add's group was dropped before its answer",
                    ),
                })
            }),
        }
    }
}

/// The next group when adds wait; else the slot is given back.
fn next_group(queue: &Queue) -> Option<Vec<Waiting>> {
    let mut st = queue.adds.lock();
    if st.waiting.is_empty() {
        st.in_flight -= 1;
        return None;
    }
    let n = st.waiting.len().min(queue.options.add_group.max(1));
    Some(st.waiting.drain(..n).collect())
}

/// A finished call's slot: passed on to the adds that waited, sent by a task
/// of their own (the finished caller returns at once).
fn release(queue: &Queue) {
    let Some(group) = next_group(queue) else {
        return;
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(send_groups(queue.clone(), group));
        }
        // No runtime to send them: every waiter sees its add dropped (an
        // unknown outcome to it), and the slot is free for a later runtime.
        Err(_) => {
            drop(group);
            let mut st = queue.adds.lock();
            st.waiting.clear();
            st.in_flight -= 1;
        }
    }
}

/// Sends groups until none waits, answering each add.
async fn send_groups(queue: Queue, mut group: Vec<Waiting>) {
    loop {
        let (jobs, replies): (Vec<Prepared>, Vec<_>) =
            group.into_iter().map(|w| (w.job, w.reply)).unzip();
        let answers = queue.send_adds(&jobs).await;
        for (reply, answer) in replies.into_iter().zip(answers) {
            // A caller that stopped waiting does not want its answer.
            let _ = reply.send(answer);
        }
        match next_group(&queue) {
            Some(next) => group = next,
            None => return,
        }
    }
}
