//! Stalled jobs across clients: a worker process of one side is SIGKILLed
//! mid-job and the other side's stalled checker recovers the job; a `defa`
//! (stalled past maxStalledCount) set by one side is applied by the other
//! side's worker without running its processor; and EchoMQ's lock renewal
//! holds against Node's stalled checker sweeping every 100 ms.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{processor_fn, JobContext};
use echomq::{
    stalled_checker::JobsRecovered, JobOptions, ProcessError, Queue, StalledChecker,
    StalledCheckerArgs, WorkerArgs, WorkerMsg, WorkerSetSpec,
};
use echomq_integration_tests::{events, NodeBullmq, NodeChild, RedisServer};
use echomq_integration_tests::{wait_until, NullSupervisor};
use fred::prelude::*;
use ractor::{call_t, Actor, ActorRef};
use serde_json::{json, Value as Json};

const WORKER_PROCESS: &str = env!("CARGO_BIN_EXE_worker_process");
const DEFA: &str = "job stalled more than allowable limit";

async fn field(c: &Client, key: &str, f: &str) -> Option<String> {
    c.hget(key, f).await.unwrap()
}

async fn in_set(c: &Client, key: &str, id: &str) -> bool {
    c.zscore::<Option<f64>, _, _>(key, id)
        .await
        .unwrap()
        .is_some()
}

/// Starts a process of `side` that takes one job and hangs in it.
fn hanging(js: NodeBullmq, side: &str, url: &str, queue: &str) -> NodeChild {
    // A short lock so that the dead holder's lock expires quickly; no stalled
    // check of its own, so recoveries are the other side's.
    let opts = json!({"hang": true, "verbose": true, "lockDuration": 1000,
                      "skipStalledCheck": true, "stalledChecker": false});
    match side {
        "node" => js.spawn("worker.js", url, queue, opts),
        _ => NodeChild::spawn_rust_worker(WORKER_PROCESS, url, queue, opts),
    }
}

/// The process takes the job, then dies holding its lock.
fn take_and_die(js: NodeBullmq, side: &str, url: &str, queue: &str, id: &str) {
    let mut p = hanging(js, side, url, queue);
    p.wait_line(Duration::from_secs(20), |v| {
        v["ev"] == "start" && v["id"] == id
    });
    p.kill();
}

/// A Rust StalledChecker sweeping every 200 ms; the ids it recovered.
async fn rust_checker(
    conn: &echomq::Connection,
    queue: &str,
) -> (ActorRef<echomq::StalledCheckerMsg>, Arc<Mutex<Vec<String>>>) {
    let recovered: Arc<Mutex<Vec<String>>> = Default::default();
    let r = recovered.clone();
    let mut args = StalledCheckerArgs::new(conn.clone(), queue);
    args.interval = Duration::from_millis(200);
    args.max_stalled_count = 1;
    args.on_recovered = Some(Arc::new(move |j: JobsRecovered| {
        r.lock().unwrap().extend(j.job_ids);
    }));
    let (checker, _) = Actor::spawn(None, StalledChecker, args).await.unwrap();
    (checker, recovered)
}

async fn a_killed_node_worker_is_recovered_by_echomq_and_completed_by_rust(js: NodeBullmq) {
    let (redis, _conn, queue) = RedisServer::with_queue("kn").await;
    let c = redis.client().await;
    let id = queue
        .add(
            "j",
            &json!({"mode": "ok", "ret": "rescued"}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    take_and_die(js, "node", &redis.url(), "kn", &id);
    let active: Vec<String> = c.lrange("emq:kn:active", 0, -1).await.unwrap();
    assert_eq!(
        active,
        std::slice::from_ref(&id),
        "the dead worker's job stays active"
    );

    // The usual Rust set: its StalledChecker recovers, its Worker completes.
    let processor =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.name = Some("r1".into());
    args.options.stalled_interval = Duration::from_millis(300);
    args.options.drain_delay = Duration::from_millis(200);
    let recovered: Arc<Mutex<Vec<String>>> = Default::default();
    let r = recovered.clone();
    let mut spec = WorkerSetSpec::new(args);
    spec.stalled_checker.as_mut().unwrap().on_recovered =
        Some(Arc::new(move |j: JobsRecovered| {
            r.lock().unwrap().extend(j.job_ids)
        }));
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    wait_until(
        "recovered and completed",
        Duration::from_secs(15),
        async || in_set(&c, "emq:kn:completed", &id).await,
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();

    assert_eq!(*recovered.lock().unwrap(), std::slice::from_ref(&id));
    let key = format!("emq:kn:{id}");
    assert_eq!(field(&c, &key, "stc").await.as_deref(), Some("1"));
    assert_eq!(field(&c, &key, "ats").await.as_deref(), Some("2"));
    assert_eq!(field(&c, &key, "atm").await.as_deref(), Some("1"));
    assert_eq!(field(&c, &key, "pb").await.as_deref(), Some("r1"));
    assert_eq!(
        field(&c, &key, "returnvalue").await.as_deref(),
        Some("\"rescued\"")
    );
    let names: Vec<String> = events(&c, "emq:kn:events")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let stalled_at = names
        .iter()
        .position(|n| n == "stalled")
        .expect("stalled event");
    assert_eq!(
        names[stalled_at - 1],
        "waiting",
        "waiting then stalled (item 38)"
    );
}

async fn a_killed_rust_worker_is_recovered_by_node_and_completed_by_node(js: NodeBullmq) {
    let (redis, _conn, queue) = RedisServer::with_queue("kr").await;
    let c = redis.client().await;
    let id = queue
        .add(
            "j",
            &json!({"mode": "ok", "ret": "rescued"}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    take_and_die(js, "rust", &redis.url(), "kr", &id);
    let lock: u64 = c.exists(format!("emq:kr:{id}:lock")).await.unwrap();
    assert_eq!(lock, 1, "the dead Rust worker still holds the lock");

    let node = js.spawn(
        "worker.js",
        &redis.url(),
        "kr",
        json!({"name": "n1", "stalledInterval": 300, "verbose": true}),
    );
    wait_until(
        "recovered and completed",
        Duration::from_secs(15),
        async || in_set(&c, "emq:kr:completed", &id).await,
    )
    .await;
    let mut node = node;
    let seen = node.drain().to_vec();
    assert!(
        seen.iter()
            .any(|v| v["ev"] == "stalled" && v["id"] == json!(id)),
        "Node's checker recovered it: {seen:?}"
    );
    node.finish();
    let key = format!("emq:kr:{id}");
    assert_eq!(field(&c, &key, "stc").await.as_deref(), Some("1"));
    assert_eq!(field(&c, &key, "ats").await.as_deref(), Some("2"));
    assert_eq!(field(&c, &key, "pb").await.as_deref(), Some("n1"));
    assert_eq!(
        field(&c, &key, "returnvalue").await.as_deref(),
        Some("\"rescued\"")
    );
}

async fn defa_set_by_echomq_is_applied_by_a_node_worker(js: NodeBullmq) {
    let (redis, conn, queue) = RedisServer::with_queue("dr").await;
    let c = redis.client().await;
    let id = queue
        .add(
            "j",
            &json!({"mode": "ok", "ret": "must not run"}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    let (checker, recovered) = rust_checker(&conn, "dr").await;
    let key = format!("emq:dr:{id}");
    // Two Node workers die holding the job: two recoveries by Rust.
    take_and_die(js, "node", &redis.url(), "dr", &id);
    take_and_die(js, "node", &redis.url(), "dr", &id);
    wait_until("defa set", Duration::from_secs(15), async || {
        field(&c, &key, "defa").await.is_some()
    })
    .await;
    assert_eq!(field(&c, &key, "defa").await.as_deref(), Some(DEFA));
    assert_eq!(field(&c, &key, "stc").await.as_deref(), Some("2"));
    assert_eq!(*recovered.lock().unwrap(), [id.clone(), id.clone()]);
    checker.stop(None);

    let node = js.spawn(
        "worker.js",
        &redis.url(),
        "dr",
        json!({"skipStalledCheck": true, "verbose": true}),
    );
    wait_until("failed by node", Duration::from_secs(15), async || {
        in_set(&c, "emq:dr:failed", &id).await
    })
    .await;
    let summary = node.finish().unwrap();
    assert_eq!(summary["runs"], json!({}), "the processor must not run");
    assert_eq!(field(&c, &key, "failedReason").await.as_deref(), Some(DEFA));
    assert_eq!(field(&c, &key, "defa").await, None, "defa is consumed");
    assert_eq!(field(&c, &key, "returnvalue").await, None);
}

async fn defa_set_by_node_is_applied_by_an_echomq_worker(js: NodeBullmq) {
    let (redis, _conn, queue) = RedisServer::with_queue("dn").await;
    let c = redis.client().await;
    let id = queue
        .add(
            "j",
            &json!({"mode": "ok", "ret": "must not run"}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    let mut sweeper = js.spawn(
        "worker.js",
        &redis.url(),
        "dn",
        json!({"sweepOnly": true, "stalledInterval": 200, "maxStalledCount": 1}),
    );
    let key = format!("emq:dn:{id}");
    // Two Rust worker processes die holding the job: two recoveries by Node.
    take_and_die(js, "rust", &redis.url(), "dn", &id);
    take_and_die(js, "rust", &redis.url(), "dn", &id);
    wait_until("defa set", Duration::from_secs(15), async || {
        field(&c, &key, "defa").await.is_some()
    })
    .await;
    assert_eq!(field(&c, &key, "defa").await.as_deref(), Some(DEFA));
    assert_eq!(field(&c, &key, "stc").await.as_deref(), Some("2"));
    // Node prints its `stalled` lines after its script answered, so the
    // second may still be on its way when `stc` reads 2: wait for it.
    let mut stalled = 0;
    sweeper.wait_line(Duration::from_secs(15), |v| {
        stalled += usize::from(v["ev"] == "stalled");
        stalled == 2
    });
    // Every line so far, the two above included.
    let all = sweeper
        .drain()
        .iter()
        .filter(|v| v["ev"] == "stalled")
        .count();
    assert_eq!(all, 2, "Node's checker did both recoveries and no other");
    sweeper.finish();

    // A Rust worker without a checker of its own fails it on pick-up.
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let processor = processor_fn(move |_job: JobContext| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (worker, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    wait_until("failed by rust", Duration::from_secs(15), async || {
        in_set(&c, "emq:dn:failed", &id).await
    })
    .await;
    call_t!(worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the processor must not run");
    assert_eq!(field(&c, &key, "failedReason").await.as_deref(), Some(DEFA));
    assert_eq!(field(&c, &key, "defa").await, None, "defa is consumed");
}

async fn echomq_lock_renewal_survives_a_node_checker_sweeping_every_100ms(js: NodeBullmq) {
    let (redis, _conn, queue) = RedisServer::with_queue("lr").await;
    let c = redis.client().await;
    let mut sweeper = js.spawn(
        "worker.js",
        &redis.url(),
        "lr",
        json!({"sweepOnly": true, "stalledInterval": 100, "maxStalledCount": 1}),
    );
    // Runs four lock durations long.
    let id = queue
        .add(
            "long",
            &json!({"mode": "sleep", "ms": 4000, "ret": "held"}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let processor = processor_fn(move |job: JobContext| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            echomq_integration_tests::behave(&job).await
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.lock_duration = Duration::from_millis(1000);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (worker, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    let key = format!("emq:lr:{id}");
    wait_until("completed", Duration::from_secs(15), async || {
        in_set(&c, "emq:lr:completed", &id).await
    })
    .await;
    call_t!(worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    let recovered: Vec<Json> = sweeper
        .drain()
        .iter()
        .filter(|v| v["ev"] == "stalled")
        .cloned()
        .collect();
    sweeper.finish();
    assert!(recovered.is_empty(), "false stall: {recovered:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(field(&c, &key, "stc").await, None, "stc absent");
    assert_eq!(field(&c, &key, "ats").await.as_deref(), Some("1"));
    assert_eq!(
        field(&c, &key, "returnvalue").await.as_deref(),
        Some("\"held\"")
    );
    let names: Vec<String> = events(&c, "emq:lr:events")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(!names.contains(&"stalled".to_owned()), "{names:?}");
}

async fn is_marked(c: &Client, q: &str, id: &str) -> bool {
    c.sismember(format!("emq:{q}:stalled"), id).await.unwrap()
}

/// Item 33: a Node sweep marks a job an EchoMQ worker holds, and the next lock
/// renewal (extendLocks) takes the mark away again, so the sweep after it
/// would not recover the job.
async fn echomq_lock_renewal_clears_the_mark_of_a_node_sweep(js: NodeBullmq) {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    // While this throttle key exists no sweep runs: the test opens the gate
    // for the Node sweeps right after a renewal and closes it again once the
    // job is marked, so the mark is there long enough to be seen and only a
    // renewal can take it away.
    let gate = "emq:cm:stalled-check";
    let close_gate = async || {
        let _: () = c
            .set(gate, "test", Some(Expiration::PX(60_000)), None, false)
            .await
            .unwrap();
    };
    close_gate().await;
    let queue = Queue::new(&conn, "cm").await.unwrap();
    let id = queue
        .add(
            "long",
            &json!({"mode": "sleep", "ms": 6000, "ret": "held"}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    // Returns once the Node side is ready (its first sweep met the gate).
    let mut sweeper = js.spawn(
        "worker.js",
        &redis.url(),
        "cm",
        json!({"sweepOnly": true, "stalledInterval": 100}),
    );
    let processor =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    // Renewals 0.5-1 s apart.
    args.options.lock_duration = Duration::from_millis(2000);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (worker, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    let lock = format!("emq:cm:{id}:lock");
    wait_until("the job is held", Duration::from_secs(10), async || {
        c.exists::<u64, _>(&lock).await.unwrap() == 1
    })
    .await;
    let mut last: i64 = c.pttl(&lock).await.unwrap();
    wait_until("a renewal", Duration::from_secs(5), async || {
        let now: i64 = c.pttl(&lock).await.unwrap();
        let renewed = now > last;
        last = now;
        renewed
    })
    .await;
    let _: u64 = c.del(gate).await.unwrap();
    wait_until(
        "marked by a Node sweep",
        Duration::from_secs(5),
        async || is_marked(&c, "cm", &id).await,
    )
    .await;
    close_gate().await;
    wait_until(
        "mark cleared by a renewal",
        Duration::from_secs(5),
        async || !is_marked(&c, "cm", &id).await,
    )
    .await;
    // Still held and running: the renewal cleared the mark, not a finish.
    let active: Vec<String> = c.lrange("emq:cm:active", 0, -1).await.unwrap();
    assert_eq!(active, std::slice::from_ref(&id));
    let pttl: i64 = c.pttl(&lock).await.unwrap();
    assert!(pttl > 0, "lock PTTL {pttl}");
    assert!(!in_set(&c, "emq:cm:completed", &id).await);

    wait_until("completed", Duration::from_secs(15), async || {
        in_set(&c, "emq:cm:completed", &id).await
    })
    .await;
    call_t!(worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    let recovered = sweeper
        .drain()
        .iter()
        .filter(|v| v["ev"] == "stalled")
        .count();
    sweeper.finish();
    assert_eq!(recovered, 0, "the held job was never recovered");
    assert_eq!(field(&c, &format!("emq:cm:{id}"), "stc").await, None);
}

/// Item 38: the sweep that recovers a dead Node worker's job pushes it at the
/// tail of `wait` (the end workers take from, so it runs before older waiting
/// jobs), records `stc`=1, appends `waiting{prev:active}` then `stalled`, and
/// leaves in `stalled` exactly the ids active after it.
async fn a_recovered_job_runs_next_and_the_stalled_set_is_refreshed(js: NodeBullmq) {
    let (redis, conn, queue) = RedisServer::with_queue("rn").await;
    let c = redis.client().await;
    let add = async |name: &str| {
        queue
            .add(name, &json!({"mode": "ok"}), JobOptions::new())
            .await
            .unwrap()
    };
    let dead = add("dead").await;
    take_and_die(js, "node", &redis.url(), "rn", &dead);
    let held = add("held").await;
    let waiting = add("waiting").await;
    // `held` is taken by a holder that never renews nor dies: its lock lasts
    // the whole test, so it stays active and unrecovered across every sweep.
    let taken: String = c.rpoplpush("emq:rn:wait", "emq:rn:active").await.unwrap();
    assert_eq!(taken, held);
    let _: () = c
        .set(
            format!("emq:rn:{held}:lock"),
            "another-holder",
            Some(Expiration::PX(60_000)),
            None,
            false,
        )
        .await
        .unwrap();

    let (checker, recovered) = rust_checker(&conn, "rn").await;
    wait_until("recovered", Duration::from_secs(15), async || {
        !recovered.lock().unwrap().is_empty()
    })
    .await;
    checker.stop(None);
    assert_eq!(*recovered.lock().unwrap(), std::slice::from_ref(&dead));

    // Tail = taken next by RPOPLPUSH, ahead of the job that was waiting.
    let wait: Vec<String> = c.lrange("emq:rn:wait", 0, -1).await.unwrap();
    assert_eq!(wait, [waiting.clone(), dead.clone()]);
    let next: String = c.lindex("emq:rn:wait", -1).await.unwrap();
    assert_eq!(next, dead);
    let active: Vec<String> = c.lrange("emq:rn:active", 0, -1).await.unwrap();
    assert_eq!(active, std::slice::from_ref(&held));
    let marked: Vec<String> = c.smembers("emq:rn:stalled").await.unwrap();
    assert_eq!(
        marked, active,
        "stalled holds the ids active after the sweep"
    );
    assert_eq!(
        field(&c, &format!("emq:rn:{dead}"), "stc").await.as_deref(),
        Some("1")
    );
    let evs = events(&c, "emq:rn:events").await;
    let of_dead: Vec<&(String, Vec<(String, String)>)> = evs
        .iter()
        .filter(|(_, f)| f.contains(&("jobId".into(), dead.clone())))
        .collect();
    let at = of_dead
        .iter()
        .position(|(n, _)| n == "stalled")
        .expect("stalled event");
    let (before, fields) = of_dead[at - 1];
    assert_eq!(before, "waiting");
    assert!(
        fields.contains(&("prev".into(), "active".into())),
        "{fields:?}"
    );
}

echomq_integration_tests::bullmq_matrix!(
    a_killed_node_worker_is_recovered_by_echomq_and_completed_by_rust,
    a_killed_rust_worker_is_recovered_by_node_and_completed_by_node,
    defa_set_by_echomq_is_applied_by_a_node_worker,
    defa_set_by_node_is_applied_by_an_echomq_worker,
    echomq_lock_renewal_survives_a_node_checker_sweeping_every_100ms,
    echomq_lock_renewal_clears_the_mark_of_a_node_sweep,
    a_recovered_job_runs_next_and_the_stalled_set_is_refreshed,
);
