//! The StalledChecker against real Redis: two-phase recovery, maxStalledCount,
//! the fleet-wide throttle, scheduler iterations, restarts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::protocol::call::lifecycle::ExtendLock;
use echomq::{
    Connection, JobOptions, Queue, StalledChecker, StalledCheckerArgs, StalledCheckerMsg,
};
use echomq_integration_tests::{events, simulated, timeline, wait_until, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::json;

/// Takes the next job as a worker would (moveToActive) and returns its id.
async fn take(conn: &Connection, q: &Queue, token: &str, lock_ms: u64) -> Option<String> {
    simulated::take(conn, q.keys(), token, Duration::from_millis(lock_ms))
        .await
        .map(|(id, _)| id)
}

/// Takes every waiting job, then "dies": deletes each lock, as an expired
/// lock of a dead worker would leave it.
async fn take_all_and_die(conn: &Connection, c: &Client, q: &Queue) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(id) = take(conn, q, "t", 30_000).await {
        c.del::<(), _>(q.keys().lock(&id)).await.unwrap();
        ids.push(id);
    }
    ids
}

fn args(
    conn: &Connection,
    queue: &str,
    recovered: Option<Arc<Mutex<Vec<String>>>>,
) -> StalledCheckerArgs {
    let mut a = StalledCheckerArgs::new(conn.clone(), queue);
    a.interval = Duration::from_millis(100);
    if let Some(sink) = recovered {
        a.on_recovered = Some(Arc::new(move |r| sink.lock().unwrap().extend(r.job_ids)));
    }
    a
}

async fn check_now(
    actor: &ractor::ActorRef<StalledCheckerMsg>,
) -> echomq::stalled_checker::SweepReport {
    call_t!(actor, StalledCheckerMsg::CheckNow, 5000)
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_dead_workers_job_is_recovered_after_two_sweeps() {
    let (redis, conn, q) = RedisServer::with_queue("s").await;
    let c = redis.client().await;
    q.add("j", &json!({}), JobOptions::new()).await.unwrap();
    let id = take(&conn, &q, "tok-1", 30_000).await.unwrap();
    // The worker dies: its lock expires.
    c.del::<(), _>(q.keys().lock(&id)).await.unwrap();

    let recovered = Arc::new(Mutex::new(Vec::new()));
    let mut a = args(&conn, "s", Some(recovered.clone()));
    a.interval = Duration::from_secs(3600); // drive it by hand
    let (actor, handle) = Actor::spawn(None, StalledChecker, a).await.unwrap();
    // The first sweep runs at start: it marks.
    wait_until("the first sweep", Duration::from_secs(10), async || {
        call_t!(actor, StalledCheckerMsg::GetStats, 1000)
            .unwrap()
            .sweeps
            >= 1
    })
    .await;
    assert!(c
        .sismember::<bool, _, _>(q.keys().stalled(), &id)
        .await
        .unwrap());
    // Throttled: the stalled-check key holds the fleet for one interval.
    let r = check_now(&actor).await;
    assert!(r.recovered.is_empty());
    assert_eq!(r.without_lock, vec![id.clone()]);
    c.del::<(), _>(q.keys().stalled_check()).await.unwrap();
    let r = check_now(&actor).await;
    assert_eq!(r.recovered, vec![id.clone()]);
    assert_eq!(*recovered.lock().unwrap(), vec![id.clone()]);

    let wait: Vec<String> = c.lrange(q.keys().wait(), 0, -1).await.unwrap();
    assert_eq!(wait, vec![id.clone()]);
    assert_eq!(c.llen::<u64, _>(q.keys().active()).await.unwrap(), 0);
    assert_eq!(
        c.hget::<String, _, _>(q.keys().job(&id), "stc")
            .await
            .unwrap(),
        "1"
    );
    assert!(!c
        .hexists::<bool, _, _>(q.keys().job(&id), "defa")
        .await
        .unwrap());
    let ev = events(&c, &q.keys().events()).await;
    let tail: Vec<(String, Vec<(String, String)>)> = ev[ev.len() - 2..].to_vec();
    assert_eq!(
        tail[0],
        (
            "waiting".into(),
            vec![
                ("jobId".into(), id.clone()),
                ("prev".into(), "active".into())
            ]
        )
    );
    assert_eq!(
        tail[1],
        ("stalled".into(), vec![("jobId".into(), id.clone())])
    );
    let stats = call_t!(actor, StalledCheckerMsg::GetStats, 1000).unwrap();
    assert_eq!(stats.recovered, 1);
    assert_eq!(stats.sweeps, 3);
    actor.stop(None);
    handle.await.unwrap();
}

#[tokio::test]
async fn stalling_twice_sets_the_deferred_failure() {
    let (redis, conn, q) = RedisServer::with_queue("s2").await;
    let c = redis.client().await;
    q.add("j", &json!({}), JobOptions::new()).await.unwrap();
    let (actor, _h) = Actor::spawn(None, StalledChecker, args(&conn, "s2", None))
        .await
        .unwrap();
    for round in 1..=2 {
        let id = take(&conn, &q, &format!("tok-{round}"), 30_000)
            .await
            .unwrap();
        c.del::<(), _>(q.keys().lock(&id)).await.unwrap();
        // Wait for the timer-driven sweeps (100 ms) to mark and recover it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while c.llen::<u64, _>(q.keys().wait()).await.unwrap() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: not recovered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let h: std::collections::HashMap<String, String> = c.hgetall(q.keys().job("1")).await.unwrap();
    assert_eq!(h["stc"], "2");
    assert_eq!(h["defa"], "job stalled more than allowable limit");
    actor.stop(None);
}

#[tokio::test]
async fn a_renewed_lock_is_never_recovered() {
    let (redis, conn, q) = RedisServer::with_queue("s3").await;
    let c = redis.client().await;
    q.add("j", &json!({}), JobOptions::new()).await.unwrap();
    const LOCK_MS: u64 = 1000;
    let taken_at = timeline::now_ms(&c).await;
    let id = take(&conn, &q, "alive", LOCK_MS).await.unwrap();
    let (actor, _h) = Actor::spawn(None, StalledChecker, args(&conn, "s3", None))
        .await
        .unwrap();
    // A live worker renews the lock every 100 ms (that cadence is the
    // behaviour under test, far inside the lock's 1 s), for 2.5 lock
    // durations on Redis's clock and at least 10 sweeps: a lock not renewed
    // would have been recovered by then.
    loop {
        let renewed = conn
            .call(&ExtendLock {
                keys: q.keys(),
                id: &id,
                token: "alive",
                duration: Duration::from_millis(LOCK_MS),
            })
            .await
            .unwrap();
        assert!(renewed, "the lock lapsed between two renewals");
        let sweeps = call_t!(actor, StalledCheckerMsg::GetStats, 1000)
            .unwrap()
            .sweeps;
        if sweeps >= 10 && timeline::now_ms(&c).await >= taken_at + 5 * LOCK_MS / 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stats = call_t!(actor, StalledCheckerMsg::GetStats, 1000).unwrap();
    assert!(stats.sweeps >= 10, "sweeps ran: {}", stats.sweeps);
    assert_eq!(stats.recovered, 0);
    assert_eq!(
        q.get_job_state(&id).await.unwrap(),
        echomq::JobState::Active
    );
    assert!(!c
        .hexists::<bool, _, _>(q.keys().job(&id), "stc")
        .await
        .unwrap());
    actor.stop(None);
}

#[tokio::test]
async fn fifty_racing_checkers_move_each_job_exactly_once() {
    let (redis, conn, q) = RedisServer::with_queue("race").await;
    let c = redis.client().await;
    for _ in 0..100 {
        q.add("j", &json!({}), JobOptions::new()).await.unwrap();
    }
    let ids = take_all_and_die(&conn, &c, &q).await;
    assert_eq!(ids.len(), 100);
    let recovered = Arc::new(Mutex::new(Vec::new()));
    let mut actors = Vec::new();
    for _ in 0..50 {
        let (a, _) = Actor::spawn(
            None,
            StalledChecker,
            args(&conn, "race", Some(recovered.clone())),
        )
        .await
        .unwrap();
        actors.push(a);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while c.llen::<u64, _>(q.keys().wait()).await.unwrap() < 100 {
        assert!(tokio::time::Instant::now() < deadline, "not all recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every checker sweeps twice more with nothing left to recover: no job
    // may be recovered a second time.
    let swept = |a: &ractor::ActorRef<StalledCheckerMsg>| {
        let a = a.clone();
        async move {
            call_t!(a, StalledCheckerMsg::GetStats, 1000)
                .unwrap()
                .sweeps
        }
    };
    let mut after = Vec::new();
    for a in &actors {
        after.push(swept(a).await + 2);
    }
    for (a, want) in actors.iter().zip(after) {
        wait_until("two more sweeps", Duration::from_secs(10), async || {
            swept(a).await >= want
        })
        .await;
    }
    let mut got = recovered.lock().unwrap().clone();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(
        got, want,
        "each job recovered exactly once across 50 checkers"
    );
    let stalled_events = events(&c, &q.keys().events())
        .await
        .into_iter()
        .filter(|(n, _)| n == "stalled")
        .count();
    assert_eq!(stalled_events, 100);
    for id in &ids {
        assert_eq!(
            c.hget::<String, _, _>(q.keys().job(id), "stc")
                .await
                .unwrap(),
            "1"
        );
    }
    for a in actors {
        a.stop(None);
    }
}

#[tokio::test]
async fn a_scheduler_iteration_that_stalls_is_requeued_never_failed() {
    let (redis, conn, q) = RedisServer::with_queue("sch").await;
    let c = redis.client().await;
    // A scheduler iteration as the scheduler scripts would store it.
    let id = "repeat:nightly:1700000000000";
    c.hset::<(), _, _>(
        q.keys().job(id),
        [
            ("name", "n"),
            ("data", "{}"),
            ("opts", "{}"),
            ("timestamp", "1700000000000"),
            ("delay", "0"),
            ("priority", "0"),
            ("rjk", "nightly"),
        ],
    )
    .await
    .unwrap();
    c.zadd::<(), _, _>(
        q.keys().repeat(),
        None,
        None,
        false,
        false,
        (1_700_000_000_000f64, "nightly"),
    )
    .await
    .unwrap();
    c.lpush::<(), _, _>(q.keys().wait(), id).await.unwrap();
    let (actor, _h) = Actor::spawn(None, StalledChecker, args(&conn, "sch", None))
        .await
        .unwrap();
    for round in 1..=3 {
        assert_eq!(take(&conn, &q, "t", 30_000).await.as_deref(), Some(id));
        c.del::<(), _>(q.keys().lock(id)).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while c.llen::<u64, _>(q.keys().wait()).await.unwrap() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: not recovered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let h: std::collections::HashMap<String, String> = c.hgetall(q.keys().job(id)).await.unwrap();
    assert_eq!(h["stc"], "3");
    assert!(!h.contains_key("defa"));
    actor.stop(None);
}

#[tokio::test]
async fn stopping_and_restarting_mid_run_loses_nothing() {
    let (redis, conn, q) = RedisServer::with_queue("restart").await;
    let c = redis.client().await;
    for _ in 0..20 {
        q.add("j", &json!({}), JobOptions::new()).await.unwrap();
    }
    let ids = take_all_and_die(&conn, &c, &q).await;
    for _ in 0..5 {
        let (a, h) = Actor::spawn(None, StalledChecker, args(&conn, "restart", None))
            .await
            .unwrap();
        // The fault: a kill at an arbitrary moment of its run (its first
        // sweep at start, the next 100 ms later), not a synchronisation.
        tokio::time::sleep(Duration::from_millis(70)).await;
        a.kill();
        let _ = h.await;
    }
    let (a, _h) = Actor::spawn(None, StalledChecker, args(&conn, "restart", None))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while c.llen::<u64, _>(q.keys().wait()).await.unwrap() < 20 {
        assert!(tokio::time::Instant::now() < deadline, "not all recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.waiting, counts.active), (20, 0));
    for id in &ids {
        assert_eq!(
            c.hget::<String, _, _>(q.keys().job(id), "stc")
                .await
                .unwrap(),
            "1"
        );
    }
    a.stop(None);
}

/// A Rust worker *process* killed with SIGKILL mid-job: its jobs are back in
/// wait within lockDuration + 2 × stalledInterval, another worker completes
/// them, stalled counter 1, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_process_loses_nothing() {
    use echomq::worker::{processor_fn, JobContext};
    use echomq::{WorkerArgs, WorkerMsg, WorkerSetSpec};
    use echomq_integration_tests::{NodeChild, NullSupervisor};

    let (redis, _conn, q) = RedisServer::with_queue("kill").await;
    let c = redis.client().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            q.add("j", &json!({"mode": "ok", "ret": 1}), JobOptions::new())
                .await
                .unwrap(),
        );
    }
    // The victim: takes jobs and hangs in them, with a 1 s lock and no checker.
    let opts = json!({"hang": true, "verbose": true, "concurrency": 3, "lockDuration": 1000, "stalledChecker": false});
    let mut victim = NodeChild::spawn_rust_worker(
        env!("CARGO_BIN_EXE_worker_process"),
        &redis.url(),
        "kill",
        opts,
    );
    let mut started = 0;
    victim.wait_line(Duration::from_secs(20), |v| {
        if v["ev"] == "start" {
            started += 1;
        }
        started == 3
    });
    victim.kill();
    let killed_at = tokio::time::Instant::now();
    assert_eq!(q.counts().await.unwrap().active, 3);

    // The survivor: the usual set, stalled interval 300 ms.
    let processor =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options.stalled_interval = Duration::from_millis(300);
    args.options.drain_delay = Duration::from_millis(100);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    loop {
        if q.counts().await.unwrap().completed == 3 {
            break;
        }
        // lockDuration 1 s + 2 × 300 ms, plus scheduling slack on a loaded machine.
        assert!(
            killed_at.elapsed() < Duration::from_secs(5),
            "not recovered in time: {:?}",
            q.counts().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = call_t!(set.worker, WorkerMsg::Close, 5000, Duration::from_secs(2));
    host.stop(None);
    let counts = q.counts().await.unwrap();
    assert_eq!(
        (counts.completed, counts.failed, counts.pending()),
        (3, 0, 0),
        "added = completed + failed + pending"
    );
    for id in &ids {
        assert_eq!(
            c.hget::<String, _, _>(q.keys().job(id), "stc")
                .await
                .unwrap(),
            "1"
        );
        assert_eq!(
            c.hget::<String, _, _>(q.keys().job(id), "ats")
                .await
                .unwrap(),
            "2"
        );
    }
}

/// A flow's child that stalls past maxStalledCount gets its deferred failure,
/// and the worker that picks it up fails it without running it; its
/// failParentOnFailure rule then fails the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_stalled_too_often_fails_and_its_rule_fails_the_parent() {
    use echomq::worker::processor_fn;
    use echomq::{
        flow_producer::OnChildFailure, FlowJob, FlowProducer, JobContext, JobState, WorkerArgs,
        WorkerSetSpec,
    };
    use echomq_integration_tests::NullSupervisor;

    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    FlowProducer::new(&conn)
        .add(
            FlowJob::new("p", "fp", json!({}))
                .options(JobOptions::new().job_id("p"))
                .child(
                    FlowJob::new("c", "fc", json!({}))
                        .options(JobOptions::new().job_id("c"))
                        .on_failure(OnChildFailure::FailParent),
                ),
        )
        .await
        .unwrap();
    let parents = Queue::new(&conn, "fp").await.unwrap();
    let q = Queue::new(&conn, "fc").await.unwrap();
    let (actor, _h) = Actor::spawn(None, StalledChecker, args(&conn, "fc", None))
        .await
        .unwrap();
    for round in 1..=2 {
        let id = take(&conn, &q, &format!("tok-{round}"), 30_000)
            .await
            .unwrap();
        c.del::<(), _>(q.keys().lock(&id)).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while c.llen::<u64, _>(q.keys().wait()).await.unwrap() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: not recovered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    actor.stop(None);
    assert_eq!(
        c.hget::<String, _, _>(q.keys().job("c"), "defa")
            .await
            .unwrap(),
        "job stalled more than allowable limit"
    );

    let ran = Arc::new(Mutex::new(0));
    let seen = ran.clone();
    let processor = processor_fn(move |_job: JobContext| {
        let seen = seen.clone();
        async move {
            *seen.lock().unwrap() += 1;
            Ok(json!("ran"))
        }
    });
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let _set = WorkerSetSpec::new(WorkerArgs::new(q.clone(), processor))
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while q.get_job_state("c").await.unwrap() != JobState::Failed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "child not failed: {:?}",
            q.get_job_state("c").await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host.stop(None);
    let child = q.get_job("c").await.unwrap().unwrap();
    assert_eq!(
        child.failed_reason.as_deref(),
        Some("job stalled more than allowable limit")
    );
    // fpof: the parent is failed through a deferred failure its next worker
    // applies, and the child is recorded as unsuccessful.
    assert_eq!(parents.get_job_state("p").await.unwrap(), JobState::Waiting);
    let parent = parents.get_job("p").await.unwrap().unwrap();
    assert!(
        parent
            .deferred_failure
            .as_deref()
            .is_some_and(|r| r.contains("emq:fc:c")),
        "{:?}",
        parent.deferred_failure
    );
    assert!(c
        .zscore::<Option<f64>, _, _>(
            format!("{}:unsuccessful", parents.keys().job("p")),
            "emq:fc:c"
        )
        .await
        .unwrap()
        .is_some());
    assert_eq!(*ran.lock().unwrap(), 0, "a deferred failure never runs");
}
