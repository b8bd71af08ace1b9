//! The LockManager against a real Redis: one `extendLocks` EVALSHA per tick
//! whatever the number of held jobs (counted by the actor and by `INFO
//! commandstats`), lost locks cancel their job, long jobs never stall, and a
//! LockManager killed and restarted by a supervisor keeps every lock alive.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::locks::{LockStats, TrackedLock, MAX_LOCKS_PER_CALL};
use echomq::worker::{processor_fn, CloseReport, JobContext, ProcessError};
use echomq::{
    Connection, JobOptions, LockManager, LockManagerArgs, LockManagerMsg, NewJob, Queue, Worker,
    WorkerArgs, WorkerEvent, WorkerMsg, WorkerOptions,
};
use echomq_integration_tests::RedisServer;
use echomq_integration_tests::{timeline, wait_until};
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::{json, Value as Json};

use echomq_integration_tests::evalsha_calls;

async fn stats(lm: &ActorRef<LockManagerMsg>) -> LockStats {
    call_t!(lm, LockManagerMsg::GetStats, 5000).unwrap()
}

/// The manager's counters and the server's EVALSHA count at one moment: a
/// tick may start between reading one and the other (its call then counts
/// on one side only), so the pair is read again until the counters are the
/// same on both sides of the server's count. A call counted in the stats has
/// run on the server (the actor answers between handlers, after the call),
/// and one not yet counted had not started when the server was read.
async fn stats_with_evalsha(
    lm: &ActorRef<LockManagerMsg>,
    c: &fred::prelude::Client,
) -> (LockStats, u64) {
    loop {
        let first = stats(lm).await;
        let evalsha = evalsha_calls(c).await;
        let second = stats(lm).await;
        if first.extend_calls == second.extend_calls && first.ticks == second.ticks {
            return (first, evalsha);
        }
    }
}

/// N held jobs, on the path production uses: a Worker takes N jobs whose
/// processors wait to be released, and shares its held set with its
/// LockManager; the locks are then renewed for three lock lifetimes.
async fn one_call_per_tick(n: usize) {
    let (redis, _conn, q) = RedisServer::with_queue("lm").await;
    let c = redis.client().await;
    // A tick comes a renew window (lock/2) after the previous call ended,
    // so a lock must outlive the window plus one call and the scheduling
    // delay of a starved machine. With 10000 locks that call takes hundreds
    // of ms on a loaded 2-core box (measured: 1 s locks were lost there from
    // 6000 held on), so N = 10000 runs with 4 s locks (2 s of slack).
    let lock_ms = if n >= 10_000 { 4000u64 } else { 1000 };
    let (release, released) = tokio::sync::watch::channel(false);
    let processor = processor_fn(move |_job: JobContext| {
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|go| *go).await;
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(n)
        .lock_duration(Duration::from_millis(lock_ms));
    let lm_args = args.lock_manager_args(None);
    let (worker, _) = Actor::spawn(None, Worker, args).await.unwrap();
    let (lm, _) = Actor::spawn(None, LockManager, lm_args.reporting_to(&worker))
        .await
        .unwrap();
    for start in (0..n).step_by(5000) {
        let batch: Vec<NewJob> = (start..(start + 5000).min(n))
            .map(|i| NewJob {
                name: "held".into(),
                data: json!({ "i": i }),
                options: JobOptions::new(),
            })
            .collect();
        q.add_bulk(batch).await.unwrap();
    }
    wait_until("every job held", Duration::from_secs(120), async || {
        let tracked: Vec<TrackedLock> = call_t!(lm, LockManagerMsg::GetTracked, 5000).unwrap();
        tracked.len() == n
    })
    .await;
    // From the next tick on, the Worker has no free slot and sends nothing:
    // a fetch still in flight when the last job was taken has answered.
    let held_at = stats(&lm).await.ticks;
    wait_until(
        "a tick with every job held",
        Duration::from_secs(30),
        async || stats(&lm).await.ticks > held_at,
    )
    .await;
    let (before, evalsha_before) = stats_with_evalsha(&lm, &c).await;
    // The observation window is the claim: three lock lifetimes, after which
    // every lock would be gone without renewal.
    tokio::time::sleep(Duration::from_millis(3 * lock_ms)).await;
    let (after, evalsha_after) = stats_with_evalsha(&lm, &c).await;
    let ticks = after.ticks - before.ticks;
    let calls = after.extend_calls - before.extend_calls;
    let evalsha = evalsha_after - evalsha_before;
    eprintln!(
        "N={n}: {ticks} ticks, {calls} extendLocks calls, {evalsha} EVALSHA on the server, last batch {}, renewed {}",
        after.last_batch,
        after.renewed - before.renewed
    );
    // The timer re-arms a renew window (lockDuration/2) after each call
    // ends, so a tick comes every window plus the call's time (4 to 5 in 3
    // lock lives here, fewer on a loaded machine). What must hold
    // is the bound a lock's life sets: each lock renewed at least once per
    // lock life, so at least 3 ticks in 3 lock lives (with `lost` 0 and
    // every lock alive below).
    assert!(ticks >= 3, "{ticks} ticks in 3 lock lives");
    // Every tick renews every held lock, in one call per
    // MAX_LOCKS_PER_CALL locks (one round trip), so no call holds Redis for
    // more than a chunk's worth of locks.
    let per_tick = n.div_ceil(MAX_LOCKS_PER_CALL) as u64;
    assert!(
        calls == ticks * per_tick || calls + per_tick == ticks * per_tick,
        "{calls} calls for {ticks} ticks of {per_tick} calls"
    );
    assert_eq!(
        evalsha, calls,
        "every EVALSHA on the server is one extendLocks call"
    );
    assert_eq!(after.last_batch, n, "every held lock in the last round");
    assert_eq!(after.last_calls as u64, per_tick, "calls of the last round");
    assert_eq!(after.lost, 0);
    // Every lock is alive and was renewed by the next tick, on Redis's
    // clock: `t0` is read before that tick's call is sent (the actor answers
    // GetStats between handlers, so a tick counted after `ticked` started
    // after `t0`), and a renewal sets a lock's expiry to its script's time
    // plus a lock life. So each lock's PEXPIRETIME is at least `t0` + the
    // lock life, however long the machine took to read them, and it lies
    // ahead of Redis's time once they were all read.
    let t0 = timeline::now_ms(&c).await;
    let ticked = stats(&lm).await.ticks;
    wait_until("the next tick", Duration::from_secs(30), async || {
        stats(&lm).await.ticks > ticked
    })
    .await;
    let held: Vec<TrackedLock> = call_t!(lm, LockManagerMsg::GetTracked, 5000).unwrap();
    assert_eq!(held.len(), n);
    let pipe = c.pipeline();
    for lock in &held {
        let pexpiretime = CustomCommand::new_static("PEXPIRETIME", ClusterHash::FirstKey, false);
        let _: () = pipe
            .custom(pexpiretime, vec![format!("emq:lm:{}:lock", lock.id)])
            .await
            .unwrap();
    }
    let expiries: Vec<i64> = pipe.all().await.unwrap();
    let read_at = timeline::now_ms(&c).await as i64;
    let first = *expiries.iter().min().unwrap();
    let renewed_from = (t0 + lock_ms) as i64;
    assert!(
        first >= renewed_from,
        "a lock expires at {first}, before {renewed_from} = {t0} + {lock_ms}: not renewed by the \
         tick after {t0} (Redis ms)"
    );
    assert!(
        first > read_at,
        "a lock expired at {first}, Redis's time is {read_at}"
    );
    release.send_replace(true);
    let _: CloseReport =
        call_t!(worker, WorkerMsg::Close, 60_000, Duration::from_secs(30)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_extend_locks_call_per_tick_1_job() {
    one_call_per_tick(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_extend_locks_call_per_tick_10_jobs() {
    one_call_per_tick(10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_extend_locks_call_per_tick_100_jobs() {
    one_call_per_tick(100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_extend_locks_call_per_tick_1000_jobs() {
    one_call_per_tick(1000).await;
}

/// 2 500 locks: three calls of at most 1 000 per tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_locks_calls_per_tick_2500_jobs() {
    one_call_per_tick(2_500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_locks_calls_per_tick_10000_jobs() {
    one_call_per_tick(10_000).await;
}

/// A host supervisor that restarts the LockManager with the same arguments
/// whenever it dies (the Worker re-registers its jobs with the new one).
struct Supervisor {
    lm_args: LockManagerArgs,
}

struct SupState {
    lm: Option<ActorRef<LockManagerMsg>>,
    restarts: Arc<AtomicUsize>,
}

enum SupMsg {
    Spawn(Arc<AtomicUsize>),
    Current(ractor::RpcReplyPort<Option<ActorRef<LockManagerMsg>>>),
}

impl Actor for Supervisor {
    type Msg = SupMsg;
    type State = SupState;
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<SupMsg>, _: ()) -> Result<SupState, ActorProcessingErr> {
        Ok(SupState {
            lm: None,
            restarts: Arc::default(),
        })
    }
    async fn handle(
        &self,
        myself: ActorRef<SupMsg>,
        msg: SupMsg,
        state: &mut SupState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupMsg::Spawn(counter) => {
                state.restarts = counter;
                let (lm, _) =
                    Actor::spawn_linked(None, LockManager, self.lm_args.clone(), myself.get_cell())
                        .await?;
                state.lm = Some(lm);
            }
            SupMsg::Current(reply) => {
                let _ = reply.send(state.lm.clone());
            }
        }
        Ok(())
    }
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupMsg>,
        evt: SupervisionEvent,
        state: &mut SupState,
    ) -> Result<(), ActorProcessingErr> {
        match evt {
            SupervisionEvent::ActorTerminated(cell, ..)
            | SupervisionEvent::ActorFailed(cell, _)
                if state
                    .lm
                    .as_ref()
                    .is_some_and(|lm| lm.get_id() == cell.get_id()) =>
            {
                state.restarts.fetch_add(1, Ordering::SeqCst);
                let (lm, _) =
                    Actor::spawn_linked(None, LockManager, self.lm_args.clone(), myself.get_cell())
                        .await?;
                state.lm = Some(lm);
            }
            _ => {}
        }
        Ok(())
    }
}

struct Setup {
    _redis: RedisServer,
    c: Client,
    q: Queue,
    worker: ActorRef<WorkerMsg>,
    sup: ActorRef<SupMsg>,
    restarts: Arc<AtomicUsize>,
    events: tokio::sync::mpsc::Receiver<WorkerEvent>,
}

async fn setup(
    name: &str,
    lock_ms: u64,
    concurrency: usize,
    processor: Arc<dyn echomq::Processor>,
) -> Setup {
    setup_renewing(name, lock_ms, None, concurrency, processor).await
}

async fn setup_renewing(
    name: &str,
    lock_ms: u64,
    renew_ms: Option<u64>,
    concurrency: usize,
    processor: Arc<dyn echomq::Processor>,
) -> Setup {
    let redis = RedisServer::start();
    let conn: Connection = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, name).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(1000);
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(concurrency)
        .lock_duration(Duration::from_millis(lock_ms))
        .drain_delay(Duration::from_millis(300));
    args.options.lock_renew_time = renew_ms.map(Duration::from_millis);
    args.events = Some(tx);
    let lm_args_template = args.lock_manager_args(None);
    let (worker, _) = Actor::spawn(None, Worker, args).await.unwrap();
    let sup_actor = Supervisor {
        lm_args: lm_args_template.reporting_to(&worker),
    };
    let (sup, _) = Actor::spawn(None, sup_actor, ()).await.unwrap();
    let restarts = Arc::new(AtomicUsize::new(0));
    sup.cast(SupMsg::Spawn(restarts.clone())).unwrap();
    Setup {
        _redis: redis,
        c,
        q,
        worker,
        sup,
        restarts,
        events: rx,
    }
}

/// A processor that waits for its cancellation and counts it.
fn wait_for_cancel(cancelled: Arc<AtomicUsize>) -> Arc<dyn echomq::Processor> {
    processor_fn(move |job: JobContext| {
        let cancelled = cancelled.clone();
        async move {
            tokio::select! {
                _ = job.cancelled() => { cancelled.fetch_add(1, Ordering::SeqCst); }
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            Ok::<_, ProcessError>(json!("should not be stored"))
        }
    })
}

async fn lost_lock_case(overwrite: bool) {
    let lock_ms = 1000;
    let cancelled = Arc::new(AtomicUsize::new(0));
    let mut s = setup("lost", lock_ms, 1, wait_for_cancel(cancelled.clone())).await;
    let id = s.q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    let lock_key = format!("emq:lost:{id}:lock");
    let c = s.c.clone();
    wait_until("job locked", Duration::from_secs(3), async || {
        c.exists::<u64, _>(&lock_key).await.unwrap() == 1
    })
    .await;
    // Until the LockManager tracks it.
    wait_until("the lock tracked", Duration::from_secs(5), async || {
        let lm = call_t!(s.sup, SupMsg::Current, 2000).unwrap().unwrap();
        let t: Vec<TrackedLock> = call_t!(lm, LockManagerMsg::GetTracked, 2000).unwrap();
        t.iter().any(|l| l.id == id)
    })
    .await;
    let t0 = Instant::now();
    if overwrite {
        let _: () =
            s.c.set(
                &lock_key,
                "someone-else",
                Some(Expiration::PX(60_000)),
                None,
                false,
            )
            .await
            .unwrap();
    } else {
        let _: () = s.c.del(&lock_key).await.unwrap();
    }
    // One tick is lockDuration/4 = 250 ms; the threshold adds at most one more.
    let lost = tokio::time::timeout(Duration::from_millis(800), async {
        loop {
            match s.events.recv().await {
                Some(WorkerEvent::LockLost { job_id }) => return job_id,
                Some(_) => continue,
                None => panic!("event channel closed"),
            }
        }
    })
    .await
    .expect("LockLost within a tick");
    eprintln!("lock loss reported after {:?}", t0.elapsed());
    assert_eq!(lost, id);
    let c = s.c.clone();
    let cn = cancelled.clone();
    wait_until("processor cancelled", Duration::from_secs(1), async || {
        cn.load(Ordering::SeqCst) == 1
    })
    .await;
    // The worker let it go (it holds nothing) without finishing it: still in
    // active, no returnvalue, no completed/failed entry; the foreign lock is
    // untouched.
    wait_until("the job let go", Duration::from_secs(5), async || {
        call_t!(s.worker, WorkerMsg::GetStatus, 2000)
            .unwrap()
            .active_jobs
            .is_empty()
    })
    .await;
    let active: Vec<String> = c.lrange("emq:lost:active", 0, -1).await.unwrap();
    assert_eq!(active, vec![id.clone()]);
    let h: HashMap<String, String> = c.hgetall(format!("emq:lost:{id}")).await.unwrap();
    assert!(!h.contains_key("returnvalue") && !h.contains_key("finishedOn"));
    let done: u64 = c.zcard("emq:lost:completed").await.unwrap();
    assert_eq!(done, 0);
    if overwrite {
        let v: String = c.get(&lock_key).await.unwrap();
        assert_eq!(v, "someone-else");
    }
    let st: echomq::worker::WorkerStatus = call_t!(s.worker, WorkerMsg::GetStatus, 2000).unwrap();
    assert!(st.active_jobs.is_empty());
    let lm = call_t!(s.sup, SupMsg::Current, 2000).unwrap().unwrap();
    let tracked: Vec<TrackedLock> = call_t!(lm, LockManagerMsg::GetTracked, 2000).unwrap();
    assert!(tracked.is_empty());
    let _: CloseReport = call_t!(s.worker, WorkerMsg::Close, 5000, Duration::from_secs(1)).unwrap();
}

#[tokio::test]
async fn deleted_lock_is_reported_lost_and_the_processor_cancelled() {
    lost_lock_case(false).await;
}

#[tokio::test]
async fn overwritten_lock_is_reported_lost_and_the_processor_cancelled() {
    lost_lock_case(true).await;
}

fn sleeper(ms: u64) -> Arc<dyn echomq::Processor> {
    processor_fn(move |_job: JobContext| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<_, ProcessError>(Json::Null)
    })
}

/// Runs the stalled check (two-phase, throttled by its own key) every
/// `every` until `stop`.
fn stalled_checker(
    conn: Connection,
    q: &Queue,
    every: Duration,
    stop: tokio_util_like::Stop,
) -> tokio::task::JoinHandle<u64> {
    let k = q.keys().clone();
    tokio::spawn(async move {
        let mut runs = 0;
        while !stop.is_set() {
            conn.call(&echomq::protocol::call::stalled::MoveStalledJobsToWait {
                keys: &k,
                max_stalled_count: 1,
                now: echomq::clock::now_ms(),
                interval: (every / 2).max(Duration::from_millis(1)),
            })
            .await
            .unwrap();
            runs += 1;
            tokio::time::sleep(every).await;
        }
        runs
    })
}

mod tokio_util_like {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[derive(Clone, Default)]
    pub struct Stop(Arc<AtomicBool>);

    impl Stop {
        pub fn set(&self) {
            self.0.store(true, Ordering::SeqCst)
        }
        pub fn is_set(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_running_ten_lock_durations_is_never_stalled() {
    let lock_ms = 400;
    let s = setup("long", lock_ms, 1, sleeper(10 * lock_ms)).await;
    let conn = s.q.connection().clone();
    let stop = tokio_util_like::Stop::default();
    let checker = stalled_checker(conn, &s.q, Duration::from_millis(150), stop.clone());
    let id = s.q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    let c = s.c.clone();
    wait_until("completed", Duration::from_secs(10), async || {
        c.zcard::<u64, _>("emq:long:completed").await.unwrap() == 1
    })
    .await;
    stop.set();
    let runs = checker.await.unwrap();
    assert!(runs > 20, "the stalled check ran {runs} times");
    let h: HashMap<String, String> = s.c.hgetall(format!("emq:long:{id}")).await.unwrap();
    assert!(!h.contains_key("stc"), "stalled counter set: {h:?}");
    assert_eq!(h["ats"], "1");
    let finished: u64 = h["finishedOn"].parse().unwrap();
    let started: u64 = h["processedOn"].parse().unwrap();
    assert!(finished - started >= 10 * lock_ms);
    let names = echomq_integration_tests::event_names(&s.c, "emq:long:events").await;
    assert!(!names.contains(&"stalled".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_lock_manager_restarted_by_supervisor_loses_no_lock() {
    // A renew window of two thirds of the lock: killed just before its tick,
    // the manager leaves locks with a third of their life, less than the
    // window a restarted manager would wait before its first tick.
    let lock_ms = 600u64;
    let renew = Duration::from_millis(400);
    let (release, released) = tokio::sync::watch::channel(false);
    let held = processor_fn(move |_job: JobContext| {
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|go| *go).await;
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut s = setup_renewing("rs", lock_ms, Some(400), 5, held).await;
    let conn = s.q.connection().clone();
    let stop = tokio_util_like::Stop::default();
    let checker = stalled_checker(conn, &s.q, Duration::from_millis(150), stop.clone());
    for _ in 0..5 {
        s.q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    }
    let c = s.c.clone();
    let lock_keys: Vec<String> = (1..=5).map(|id| format!("emq:rs:{id}:lock")).collect();
    wait_until("5 locks", Duration::from_secs(5), async || {
        let lm = call_t!(s.sup, SupMsg::Current, 2000).unwrap().unwrap();
        let t: Vec<TrackedLock> = call_t!(lm, LockManagerMsg::GetTracked, 2000).unwrap();
        t.len() == 5
    })
    .await;
    // Every lock's PTTL, read every few ms from here to the end: a lock that
    // expires stays gone (nobody sets it again), so the smallest value seen
    // tells whether any lock lapsed, however the polls fall.
    let watching = tokio_util_like::Stop::default();
    let watcher = {
        let (c, keys, watching) = (c.clone(), lock_keys.clone(), watching.clone());
        tokio::spawn(async move {
            let mut min = i64::MAX;
            while !watching.is_set() {
                let pipe = c.pipeline();
                for k in &keys {
                    let _: () = pipe.pttl(k).await.unwrap();
                }
                let pttls: Vec<i64> = pipe.all().await.unwrap();
                min = min.min(*pttls.iter().min().unwrap());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            min
        })
    };
    // Kill twice, each time just before the manager's next tick, when the
    // locks are a whole renew window old; the supervisor restarts it.
    for round in 1..=2 {
        let lm = call_t!(s.sup, SupMsg::Current, 2000).unwrap().unwrap();
        let seen = stats(&lm).await.ticks;
        wait_until("a tick", Duration::from_secs(5), async || {
            stats(&lm).await.ticks > seen
        })
        .await;
        let ticked = Instant::now();
        // The fault's place: 40 ms before the next tick is due.
        tokio::time::sleep_until((ticked + renew - Duration::from_millis(40)).into()).await;
        lm.kill();
        let r = s.restarts.clone();
        wait_until("restart", Duration::from_secs(2), async || {
            r.load(Ordering::SeqCst) == round
        })
        .await;
        let lm = call_t!(s.sup, SupMsg::Current, 2000).unwrap().unwrap();
        let new_lm = lm.clone();
        wait_until(
            "the handed-over locks renewed",
            Duration::from_secs(2),
            async || {
                let st = stats(&new_lm).await;
                let t: Vec<TrackedLock> =
                    call_t!(new_lm, LockManagerMsg::GetTracked, 2000).unwrap();
                st.extend_calls >= 1 && st.last_batch == 5 && t.len() == 5
            },
        )
        .await;
        eprintln!(
            "round {round}: killed {} ms after a tick, renewed by the new manager {} ms after that tick",
            (renew - Duration::from_millis(40)).as_millis(),
            ticked.elapsed().as_millis()
        );
        // Two more windows under the new manager.
        let st = stats(&lm).await.ticks;
        wait_until("two ticks", Duration::from_secs(5), async || {
            stats(&lm).await.ticks >= st + 2
        })
        .await;
    }
    watching.set();
    let min_pttl = watcher.await.unwrap();
    assert!(min_pttl > 0, "a lock lapsed: smallest PTTL seen {min_pttl}");
    release.send_replace(true);
    wait_until("all completed", Duration::from_secs(10), async || {
        c.zcard::<u64, _>("emq:rs:completed").await.unwrap() == 5
    })
    .await;
    stop.set();
    checker.await.unwrap();
    while let Ok(e) = s.events.try_recv() {
        assert!(
            matches!(e, WorkerEvent::Completed { .. }),
            "unexpected {e:?}"
        );
    }
    for id in 1..=5 {
        let h: HashMap<String, String> = s.c.hgetall(format!("emq:rs:{id}")).await.unwrap();
        assert!(!h.contains_key("stc"), "job {id} stalled");
        assert_eq!(h["ats"], "1");
    }
    let st: echomq::worker::WorkerStatus = call_t!(s.worker, WorkerMsg::GetStatus, 2000).unwrap();
    assert!(st.lock_manager_attached);
    assert_eq!(s.restarts.load(Ordering::SeqCst), 2, "both kills happened");
}

/// A renewal that reaches Redis after the job's own finish finds its lock
/// deleted. The Worker let that job go before sending the finish, so it is no
/// loss: the LockManager counts it `let_go`, not `lost`, and reports nothing.
/// The order is forced on the LockManager's own one-client connection: a
/// BLPOP sent there as a plain command (so fred writes the renewal right
/// behind it, where Redis keeps it unread) holds the renewal back until the
/// finish has applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_overtaken_by_the_jobs_own_finish_is_no_loss() {
    const LIMIT: Duration = Duration::from_secs(10);
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "letgo").await.unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let r = release.clone();
    let processor = processor_fn(move |_job: JobContext| {
        let r = r.clone();
        async move {
            r.notified().await;
            Ok::<_, ProcessError>(json!("done"))
        }
    });
    let (tx, mut events) = tokio::sync::mpsc::channel(100);
    let mut args = WorkerArgs::new(q.clone(), processor);
    // No timer tick inside the test: the one renewal is the RenewNow below.
    args.options = WorkerOptions::default()
        .concurrency(1)
        .lock_renew_time(Duration::from_secs(600));
    args.events = Some(tx);
    let mut lm_args = args.lock_manager_args(None);
    let mut one_client = echomq::ConnectionConfig::with_url(redis.url());
    one_client.pool_size = 1;
    let lm_conn = Connection::connect(one_client).await.unwrap();
    lm_args.connection = lm_conn.clone();
    let (worker, _) = Actor::spawn(None, Worker, args).await.unwrap();
    let (lm, _) = Actor::spawn(None, LockManager, lm_args.reporting_to(&worker))
        .await
        .unwrap();

    let id = q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    wait_until("the lock tracked", LIMIT, async || {
        let t: Vec<TrackedLock> = call_t!(lm, LockManagerMsg::GetTracked, 2000).unwrap();
        t.iter().any(|l| l.id == id)
    })
    .await;
    let before = stats(&lm).await;

    let gate = lm_conn.pool().next().clone();
    let blpop = tokio::spawn(async move {
        let _: Value = gate
            .custom(
                CustomCommand::new_static("BLPOP", ClusterHash::FirstKey, false),
                vec!["letgo-gate", "0"],
            )
            .await
            .unwrap();
    });
    let lm_client_line = async || -> Option<String> {
        let list: String =
            echomq_integration_tests::state::cmd(&c, "CLIENT", vec!["LIST".into()]).await;
        list.lines()
            .find(|l| l.contains("cmd=blpop") && l.contains(" flags=b "))
            .map(str::to_owned)
    };
    wait_until("the BLPOP blocks", LIMIT, async || {
        lm_client_line().await.is_some()
    })
    .await;
    lm.cast(LockManagerMsg::RenewNow).unwrap();
    // The renewal, with the job in it, waits unread behind the BLPOP.
    wait_until("the renewal queued behind the BLPOP", LIMIT, async || {
        lm_client_line()
            .await
            .is_some_and(|l| !l.contains(" qbuf=0 "))
    })
    .await;

    release.notify_one();
    wait_until("the job completed", LIMIT, async || {
        c.zcard::<u64, _>("emq:letgo:completed").await.unwrap() == 1
    })
    .await;
    let lock: Option<String> = c.get(format!("emq:letgo:{id}:lock")).await.unwrap();
    assert_eq!(lock, None, "the finish deleted the lock");
    let _: u64 = c.lpush("letgo-gate", "go").await.unwrap();
    blpop.await.unwrap();

    let after = stats(&lm).await;
    assert_eq!(after.extend_calls, before.extend_calls + 1);
    assert_eq!(
        (after.renewed, after.lost, after.let_go),
        (before.renewed, before.lost, before.let_go + 1),
        "{after:?}"
    );
    let _: CloseReport = call_t!(worker, WorkerMsg::Close, 5000, Duration::from_secs(1)).unwrap();
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(event, WorkerEvent::LockLost { .. }),
            "no loss reported: {event:?}"
        );
    }
    lm.stop(None);
}
