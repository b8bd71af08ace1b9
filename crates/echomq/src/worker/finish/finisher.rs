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

use echomq_protocol::call::group_commit::{
    GroupEntry, MoveJobsToFinished, GROUP_OVERHEAD, MAX_BYTES, MAX_ENTRIES,
};
use echomq_protocol::call::lifecycle::{MoveToFinished, NextJob, Verdict};
use tokio::sync::oneshot;
use tracing::warn;

use crate::connection::pool::Connection;
use crate::error::{Error, Result};

/// Finishes one group call carries, below the script's own bound of
/// [`MAX_ENTRIES`]: at concurrency 100 a group of 32 (each entry a finish and
/// its fetch-next) ran up to 11.6–18.3 ms inside Redis (docs/benchmarks.md
/// §Scale), past the few ms any one call may hold it; 16 halves that.
const GROUP_SIZE: usize = if MAX_ENTRIES < 16 { MAX_ENTRIES } else { 16 };

/// One finish on its own: moveToFinished, or for a DAG node a group of one,
/// whose script also hands the node to its extra parents.
async fn alone(conn: &Connection, call: &MoveToFinished<'_>, dag: bool) -> Answer {
    if !dag {
        return conn.call(call).await;
    }
    let group = MoveJobsToFinished::from_entries(call.keys, &[GroupEntry::of(call)])
        .map_err(|e| Error::protocol("moveJobsToFinished", e.to_string()))?;
    conn.call(&group)
        .await?
        .into_iter()
        .next()
        .map(Ok)
        .unwrap_or_else(|| Err(Error::protocol("moveJobsToFinished", "no reply".to_owned())))
}

/// What a finishing call answered for one job.
pub(crate) type Answer = Result<Verdict<Option<NextJob>>>;

/// A finish queued behind the call in flight.
struct Waiting {
    entry: GroupEntry,
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
    /// `dag`: the job is a DAG node with extra parents, whose finish goes
    /// through the group script even alone, so that its extra parents are
    /// handed the outcome in the same call (docs/flows.md §DAGs).
    pub(crate) async fn finish(
        &self,
        conn: &Connection,
        call: &MoveToFinished<'_>,
        dag: bool,
    ) -> Answer {
        let queued = {
            let mut state = self.state();
            if state.in_flight < self.max_in_flight {
                state.in_flight += 1;
                None
            } else {
                let (wake, woken) = oneshot::channel();
                let entry = GroupEntry::of(call);
                state.queue.push_back(Waiting {
                    size: entry.size(),
                    entry,
                    wake,
                });
                Some(woken)
            }
        };
        let Some(woken) = queued else {
            let _leading = Leading(self);
            return alone(conn, call, dag).await;
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
                self.send_group(conn, call, rest, dag).await
            }
            Ok(Wake::Alone) => alone(conn, call, dag).await,
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
        dag: bool,
    ) -> Answer {
        if rest.is_empty() {
            return alone(conn, call, dag).await;
        }
        let mut entries = Vec::with_capacity(1 + rest.len());
        entries.push(GroupEntry::of(call));
        let mut wakes = Vec::with_capacity(rest.len());
        for w in rest {
            entries.push(w.entry);
            wakes.push(w.wake);
        }
        let group = match MoveJobsToFinished::from_entries(call.keys, &entries) {
            Ok(group) => group,
            Err(e) => {
                // The queue keeps to the bounds; should it not, nothing is lost.
                warn!(error = %e, "group commit refused its own group; finishing singly");
                return self.each_alone(conn, call, wakes, dag).await;
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
                self.each_alone(conn, call, wakes, dag).await
            }
        }
    }

    async fn each_alone(
        &self,
        conn: &Connection,
        call: &MoveToFinished<'_>,
        wakes: Vec<oneshot::Sender<Wake>>,
        dag: bool,
    ) -> Answer {
        for wake in wakes {
            let _ = wake.send(Wake::Alone);
        }
        alone(conn, call, dag).await
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
            let mut size = first.size + GROUP_OVERHEAD;
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

#[cfg(test)]
mod tests {
    //! The finisher against a real server: finishes queued behind a call in
    //! flight leave in groups cut by count and by bytes, each owner gets its
    //! own verdict, a group Redis refuses goes again entry by entry, and an
    //! owner dropped with the lead in hand passes it on.

    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    use std::time::Duration;

    use echomq_protocol::call::lifecycle::{EpochMs, FinishTarget, Refusal};
    use echomq_protocol::packing::{FinishOpts, MetricsSize};
    use echomq_protocol::{QueueKeys, ScriptErrorCode, ScriptId};
    use fred::prelude::*;

    use super::*;
    use crate::test_redis::TestRedis;

    const TOKEN: &str = "the-token";

    type Pending<'a> = Pin<Box<dyn Future<Output = Answer> + 'a>>;

    /// Job `id` in `active` under TOKEN's lock, as moveToActive leaves it.
    async fn held(conn: &Connection, keys: &QueueKeys, id: &str) {
        let c = conn.pool().next();
        let fields = [
            ("name", "t"),
            ("data", "{}"),
            ("opts", "{}"),
            ("processedOn", "1"),
        ];
        let _: () = c.hset(keys.job(id), fields.to_vec()).await.unwrap();
        let _: () = c.lpush(keys.fixed().active.as_str(), id).await.unwrap();
        let _: () = c
            .set(keys.lock(id), TOKEN, None, None, false)
            .await
            .unwrap();
    }

    fn completion<'a>(keys: &'a QueueKeys, id: &'a str, value: &'a str) -> MoveToFinished<'a> {
        MoveToFinished {
            keys,
            id,
            now: EpochMs(1_700_000_000_000),
            target: FinishTarget::Completed,
            value,
            fetch_next: false,
            opts: FinishOpts {
                token: TOKEN,
                name: None,
                keep_jobs: None,
                limiter: None,
                lock_duration: 30_000,
                attempts: 0,
                max_metrics_size: MetricsSize::Off,
            },
            fields: &[],
        }
    }

    /// a, c and d held; b's job key a string (foreign data), so that b's
    /// first read raises WRONGTYPE; every command logged from now on.
    async fn held_with_foreign_b(conn: &Connection, keys: &QueueKeys) {
        for id in ["a", "c", "d"] {
            held(conn, keys, id).await;
        }
        let c = conn.pool().next();
        let _: () = c
            .set(keys.job("b"), "foreign", None, None, false)
            .await
            .unwrap();
        log_every_command(c).await;
    }

    /// Completions of `ids`, in order.
    fn completions<'a>(keys: &'a QueueKeys, ids: &[&'a str]) -> Vec<MoveToFinished<'a>> {
        ids.iter().map(|id| completion(keys, id, "1")).collect()
    }

    async fn command(c: &fred::clients::Client, name: &'static str, args: Vec<&str>) -> Value {
        use fred::types::{ClusterHash, CustomCommand};
        let args: Vec<Value> = args.into_iter().map(Value::from).collect();
        c.custom(
            CustomCommand::new_static(name, ClusterHash::Random, false),
            args,
        )
        .await
        .unwrap()
    }

    /// Every command from now on is kept in the slow log.
    async fn log_every_command(c: &fred::clients::Client) {
        for (key, value) in [
            ("slowlog-max-len", "100000"),
            ("slowlog-log-slower-than", "0"),
        ] {
            command(c, "CONFIG", vec!["SET", key, value]).await;
        }
        command(c, "SLOWLOG", vec!["RESET"]).await;
    }

    /// (single moveToFinished calls, moveJobsToFinished calls) in the slow log.
    async fn calls(c: &fred::clients::Client) -> (usize, usize) {
        let sha = |id: ScriptId| id.def().unwrap().sha1;
        let (single, group) = (
            sha(ScriptId::MoveToFinished),
            sha(ScriptId::MoveJobsToFinished),
        );
        let Value::Array(log) = command(c, "SLOWLOG", vec!["GET", "100000"]).await else {
            panic!("SLOWLOG GET answers an array")
        };
        let count = |want: &str| {
            log.iter()
                .filter(|entry| {
                    let Value::Array(parts) = entry else {
                        return false;
                    };
                    let Some(Value::Array(args)) = parts.get(3) else {
                        return false;
                    };
                    let text = |v: &Value| v.as_str().map(|s| s.to_string()).unwrap_or_default();
                    args.len() > 1
                        && text(&args[0]).eq_ignore_ascii_case("evalsha")
                        && text(&args[1]) == want
                })
                .count()
        };
        (count(single), count(group))
    }

    /// The finishes of `calls`, each polled once in order: the first sends
    /// its call, the others find it in flight and queue behind it.
    async fn sent_together<'a>(
        finisher: &'a Finisher,
        conn: &'a Connection,
        calls: &'a [MoveToFinished<'a>],
    ) -> Vec<Pending<'a>> {
        let mut pending: Vec<Pending<'a>> = calls
            .iter()
            .map(|call| Box::pin(finisher.finish(conn, call, false)) as Pending<'a>)
            .collect();
        poll_once_each(&mut pending).await;
        pending
    }

    async fn poll_once_each(pending: &mut [Pending<'_>]) {
        std::future::poll_fn(|cx| {
            for p in pending.iter_mut() {
                assert!(p.as_mut().poll(cx).is_pending(), "answered before its call");
            }
            Poll::Ready(())
        })
        .await;
    }

    async fn all(pending: Vec<Pending<'_>>) -> Vec<Answer> {
        tokio::time::timeout(
            Duration::from_secs(10),
            futures_util::future::join_all(pending),
        )
        .await
        .expect("every finish answered")
    }

    fn done(a: &Answer) -> bool {
        matches!(a, Ok(Verdict::Done(None)))
    }

    /// A slot's finish awaits its call four futures deep, and a future is
    /// copied whole each time it moves: fred's command future (~6.7 KB) is
    /// boxed inside `Connection::call` so that a finish stays small.
    #[tokio::test]
    async fn a_finish_future_stays_small() {
        let redis = TestRedis::start();
        let conn = redis.connect().await;
        let keys = QueueKeys::new("emq", "size").unwrap();
        let call = completion(&keys, "a", "1");
        let finisher = Finisher::new(1);
        let single = std::mem::size_of_val(&conn.call(&call));
        let finish = std::mem::size_of_val(&finisher.finish(&conn, &call, false));
        eprintln!("Connection::call {single} bytes, Finisher::finish {finish} bytes");
        assert!(
            single <= 1024,
            "Connection::call's future is {single} bytes"
        );
        assert!(
            finish <= 2048,
            "Finisher::finish's future is {finish} bytes"
        );
    }

    #[tokio::test]
    async fn queued_finishes_leave_in_one_group_and_each_gets_its_own_verdict() {
        let redis = TestRedis::start();
        let conn = redis.connect().await;
        let keys = QueueKeys::new("emq", "fin").unwrap();
        for id in ["a", "c", "d"] {
            held(&conn, &keys, id).await;
        }
        // c's lock is another worker's now.
        let _: () = conn
            .pool()
            .next()
            .set(keys.lock("c"), "another", None, None, false)
            .await
            .unwrap();
        log_every_command(conn.pool().next()).await;
        let finisher = Finisher::new(1);
        let calls_of: Vec<MoveToFinished<'_>> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| completion(&keys, id, "1"))
            .collect();
        let pending = sent_together(&finisher, &conn, &calls_of).await;
        let answers = all(pending).await;
        assert!(done(&answers[0]), "{:?}", answers[0]);
        assert!(
            matches!(answers[1], Ok(Verdict::Refused(Refusal::Missing))),
            "{:?}",
            answers[1]
        );
        assert!(
            matches!(
                answers[2],
                Ok(Verdict::Refused(Refusal::LockLost(
                    ScriptErrorCode::JobLockMismatch
                )))
            ),
            "{:?}",
            answers[2]
        );
        assert!(done(&answers[3]), "{:?}", answers[3]);
        // a alone (nothing in flight), then b, c and d together.
        assert_eq!(calls(conn.pool().next()).await, (1, 1));
        assert_eq!(finisher.state().in_flight, 0);
    }

    #[tokio::test]
    async fn groups_are_cut_at_the_group_size_and_at_the_byte_bound() {
        let redis = TestRedis::start();
        let conn = redis.connect().await;
        let keys = QueueKeys::new("emq", "cut").unwrap();
        let ids: Vec<String> = (0..21).map(|i| format!("j{i}")).collect();
        for id in &ids {
            held(&conn, &keys, id).await;
        }
        log_every_command(conn.pool().next()).await;
        let finisher = Finisher::new(1);
        // One in flight, 20 behind it: a group of GROUP_SIZE, then the rest.
        let small: Vec<MoveToFinished<'_>> =
            ids.iter().map(|id| completion(&keys, id, "1")).collect();
        let pending = sent_together(&finisher, &conn, &small).await;
        assert!(all(pending).await.iter().all(done));
        assert_eq!(calls(conn.pool().next()).await, (1, 2));

        // Values of 400 KB: two fit under MAX_BYTES, three do not.
        let big = format!("\"{}\"", "x".repeat(400 * 1024));
        let ids: Vec<String> = (0..4).map(|i| format!("big{i}")).collect();
        for id in &ids {
            held(&conn, &keys, id).await;
        }
        log_every_command(conn.pool().next()).await;
        let large: Vec<MoveToFinished<'_>> =
            ids.iter().map(|id| completion(&keys, id, &big)).collect();
        let pending = sent_together(&finisher, &conn, &large).await;
        assert!(all(pending).await.iter().all(done));
        // big0 alone, big1 + big2 grouped, big3 alone: no call over the bound.
        assert_eq!(calls(conn.pool().next()).await, (2, 1));
        assert_eq!(finisher.state().in_flight, 0);
    }

    #[tokio::test]
    async fn a_group_redis_refuses_goes_again_entry_by_entry() {
        let redis = TestRedis::start();
        let conn = redis.connect().await;
        let keys = QueueKeys::new("emq", "err").unwrap();
        // b first in the group: the whole call fails before writing anything.
        held_with_foreign_b(&conn, &keys).await;
        let c = conn.pool().next();
        let finisher = Finisher::new(1);
        let calls_of = completions(&keys, &["a", "b", "c", "d"]);
        let pending = sent_together(&finisher, &conn, &calls_of).await;
        let answers = all(pending).await;
        assert!(done(&answers[0]));
        let refused = answers[1].as_ref().expect_err("b's own call fails too");
        assert!(refused.to_string().contains("WRONGTYPE"), "{refused}");
        assert!(done(&answers[2]), "{:?}", answers[2]);
        assert!(done(&answers[3]), "{:?}", answers[3]);
        // a; the group (refused); then b, c and d each alone.
        assert_eq!(calls(c).await, (4, 1));
        assert_eq!(finisher.state().in_flight, 0);
    }

    #[tokio::test]
    async fn a_group_failing_midway_still_makes_the_writes_its_earlier_entries_deferred() {
        let redis = TestRedis::start();
        let conn = redis.connect().await;
        let keys = QueueKeys::new("emq", "mid").unwrap();
        held_with_foreign_b(&conn, &keys).await;
        let c = conn.pool().next();
        // c was marked by a stalled check: its finish takes it out again.
        let _: () = c.sadd(keys.fixed().stalled.as_str(), "c").await.unwrap();
        let finisher = Finisher::new(1);
        // a alone; then c, b, d in one group: c finishes, b raises WRONGTYPE.
        let calls_of = completions(&keys, &["a", "c", "b", "d"]);
        let pending = sent_together(&finisher, &conn, &calls_of).await;
        let answers = all(pending).await;
        assert!(done(&answers[0]), "{:?}", answers[0]);
        assert!(done(&answers[3]), "{:?}", answers[3]);
        // c's finish was written by the failed group (its resend alone finds
        // the lock gone): its deferred ZADD and SREM were made too, so it is
        // in completed and nowhere else, as after a single call.
        let score: Option<f64> = c
            .zscore(keys.fixed().completed.as_str(), "c")
            .await
            .unwrap();
        assert!(score.is_some(), "c is in completed");
        let stalled: bool = c
            .sismember(keys.fixed().stalled.as_str(), "c")
            .await
            .unwrap();
        assert!(!stalled, "c is out of stalled");
        let active: Vec<String> = c.lrange(keys.fixed().active.as_str(), 0, -1).await.unwrap();
        assert!(active.is_empty(), "{active:?}");
        assert_eq!(calls(c).await, (4, 1));
        assert_eq!(finisher.state().in_flight, 0);
    }

    #[tokio::test]
    async fn an_owner_dropped_with_the_lead_passes_it_on() {
        let redis = TestRedis::start();
        let conn = redis.connect().await;
        let keys = QueueKeys::new("emq", "drop").unwrap();
        for id in ["a", "b", "c"] {
            held(&conn, &keys, id).await;
        }
        let finisher = Finisher::new(1);
        let calls_of: Vec<MoveToFinished<'_>> = ["a", "b", "c"]
            .iter()
            .map(|id| completion(&keys, id, "1"))
            .collect();
        let mut pending = sent_together(&finisher, &conn, &calls_of).await;
        let c_finish = pending.pop().unwrap();
        let b_finish = pending.pop().unwrap();
        let a_finish = pending.pop().unwrap();
        // a returns and hands the lead (with c's finish) to b…
        assert!(done(&a_finish.await));
        // …whose task ends before it takes it: c must not wait forever.
        drop(b_finish);
        let answer = tokio::time::timeout(Duration::from_secs(10), c_finish)
            .await
            .expect("c's finish went after b's owner was dropped");
        assert!(done(&answer), "{answer:?}");
        assert_eq!(finisher.state().in_flight, 0);
        // b was never sent: its job is still held.
        let still: bool = conn.pool().next().exists(keys.lock("b")).await.unwrap();
        assert!(still);
    }
}
