//! Taking order across clients: jobs one side adds are taken by the other
//! side's worker in BullMQ's order — lifo first, then FIFO, then plain
//! waiting jobs before prioritized ones (lower priority first), then delayed
//! jobs in due order — plus events-stream trimming by maxLenEvents and
//! isFinished on jobs the other side finished.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{processor_fn, JobContext};
use echomq::{
    queue::Finished, JobOptions, NewJob, ProcessError, Queue, QueueOptions, WorkerArgs, WorkerMsg,
};
use echomq_integration_tests::{bullmq, events, NodeChild, RedisServer};
use echomq_integration_tests::{wait_until, NullSupervisor};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `(name, Node opts)` in adding order; names are taken in `ORDER`.
fn jobs(t: u64) -> Vec<(&'static str, Json)> {
    // The delayed jobs share one due time far ahead: none can come due while
    // the others are taken however slow the machine is; once those five
    // were taken, `make_due` brings them to a due time close by.
    let d = json!({"delay": PARKED_MS, "timestamp": t});
    vec![
        ("D1", d.clone()),
        ("A", json!({})),
        ("P5", json!({"priority": 5})),
        ("B", json!({})),
        ("D2", d.clone()),
        ("L", json!({"lifo": true})),
        ("P1", json!({"priority": 1})),
        ("D3", d),
    ]
}

const ORDER: [&str; 8] = ["L", "A", "B", "P1", "P5", "D1", "D2", "D3"];

/// The delay the delayed jobs are added with: longer than any test run.
const PARKED_MS: u64 = 3_600_000;

/// D1, D2, D3 by id (adding order).
const DELAYED_IDS: [&str; 3] = ["1", "5", "8"];

/// Called once the five other jobs were taken: changes the delay of D1, D2,
/// D3 (in that order, so their due order stays theirs) to 1500 ms from now
/// and answers each one's due time, read back from its `delayed` score.
async fn make_due(queue: &Queue, c: &Client, q: &str) -> Vec<u64> {
    let mut due = Vec::new();
    for id in DELAYED_IDS {
        queue
            .change_delay(id, Duration::from_millis(1500))
            .await
            .unwrap();
        let score: Option<f64> = c.zscore(format!("emq:{q}:delayed"), id).await.unwrap();
        due.push(score.expect("still delayed") as u64 / 0x1000);
    }
    due
}

async fn assert_after(c: &Client, q: &str, due: &[u64]) {
    // prioritized emptied: its counter is gone (item 12).
    let pc: u64 = c.exists(format!("emq:{q}:pc")).await.unwrap();
    assert_eq!(pc, 0);
    // Delayed jobs were promoted (waiting{prev:delayed}) and not run early.
    let evs = events(c, &format!("emq:{q}:events")).await;
    let promoted = evs
        .iter()
        .filter(|(n, f)| n == "waiting" && f.contains(&("prev".into(), "delayed".into())))
        .count();
    assert_eq!(promoted, 3);
    // An idle worker takes them at about their due time D = timestamp + delay
    // (item 53): never before it, and late by at most the blocking wait's
    // granularity (Redis checks blocking timeouts on its ~100 ms tick; 102-117
    // ms measured for an idle EchoMQ worker, 44-106 ms for a Node one) plus the
    // run of the jobs due with it.
    for (id, &due) in DELAYED_IDS.iter().zip(due) {
        let p: String = c
            .hget(format!("emq:{q}:{id}"), "processedOn")
            .await
            .unwrap();
        let p = p.parse::<u64>().unwrap();
        assert!(p >= due, "job {id} ran early");
        assert!(
            p - due < LATE_BOUND_MS,
            "job {id} taken {} ms after due",
            p - due
        );
    }
}

/// How late after its due time an idle worker may take a delayed job.
const LATE_BOUND_MS: u64 = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echomq_worker_takes_node_jobs_in_bullmq_order() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let t = now_ms();
    let list: Vec<Json> = jobs(t)
        .into_iter()
        .map(|(n, o)| json!({"name": n, "data": {}, "opts": o}))
        .collect();
    bullmq("add-jobs", &redis.url(), "or1", json!({ "jobs": list }));
    let queue = Queue::new(&conn, "or1").await.unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Default::default();
    let s = seen.clone();
    let p = processor_fn(move |job: JobContext| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push(job.name().to_owned());
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), p);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    wait_until("5 taken", Duration::from_secs(30), async || {
        seen.lock().unwrap().len() >= 5
    })
    .await;
    let due = make_due(&queue, &c, "or1").await;
    wait_until("8 completed", Duration::from_secs(30), async || {
        c.zcard::<u64, _>("emq:or1:completed").await.unwrap() == 8
    })
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(1)).unwrap();
    assert_eq!(*seen.lock().unwrap(), ORDER);
    assert_after(&c, "or1", &due).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_worker_takes_echomq_jobs_in_bullmq_order() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let t = now_ms();
    let queue = Queue::new(&conn, "or2").await.unwrap();
    let mut names = std::collections::HashMap::new();
    for (name, o) in jobs(t) {
        let mut opts = JobOptions::new();
        if let Some(d) = o["delay"].as_u64() {
            opts = opts
                .delay(Duration::from_millis(d))
                .timestamp(o["timestamp"].as_u64().unwrap());
        }
        if let Some(p) = o["priority"].as_i64() {
            opts = opts.priority(p);
        }
        if o["lifo"] == json!(true) {
            opts = opts.lifo(true);
        }
        let id = queue.add(name, &json!({}), opts).await.unwrap();
        names.insert(id, name);
    }
    let mut node = NodeChild::spawn(
        "worker.js",
        &redis.url(),
        "or2",
        json!({"verbose": true, "skipStalledCheck": true}),
    );
    let mut order = Vec::new();
    let mut due = Vec::new();
    for i in 0..8 {
        if i == 5 {
            due = make_due(&queue, &c, "or2").await;
        }
        let v = node.wait_line(Duration::from_secs(30), |v| v["ev"] == "start");
        order.push(names[v["id"].as_str().unwrap()]);
    }
    wait_until("8 completed", Duration::from_secs(30), async || {
        c.zcard::<u64, _>("emq:or2:completed").await.unwrap() == 8
    })
    .await;
    node.finish();
    assert_eq!(order, ORDER);
    assert_after(&c, "or2", &due).await;
}

/// Item 45: a Node worker's scripts trim the stream to the maxLenEvents an
/// EchoMQ queue wrote to meta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_worker_trims_events_to_the_rust_queues_max_len() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let opts = QueueOptions::default().max_len_events(100);
    let queue = Queue::with_options(&conn, "ml", opts).await.unwrap();
    let jobs = (0..1000)
        .map(|i| NewJob {
            name: "n".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    queue.add_bulk(jobs).await.unwrap();
    let node = NodeChild::spawn(
        "worker.js",
        &redis.url(),
        "ml",
        json!({"concurrency": 20, "skipStalledCheck": true}),
    );
    wait_until("1000 completed", Duration::from_secs(30), async || {
        c.zcard::<u64, _>("emq:ml:completed").await.unwrap() == 1000
    })
    .await;
    node.finish();
    let len: u64 = c.xlen("emq:ml:events").await.unwrap();
    // Approximate trimming (MAXLEN ~) keeps whole radix-tree nodes: close to
    // 100, far below the ~4000 entries written.
    assert!((100..=300).contains(&len), "XLEN {len}");
}

/// Item 48: isFinished (EchoMQ) on jobs a Node worker finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_finished_reads_node_results() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let list = json!([
        {"name": "ok", "data": {"mode": "ok", "ret": {"r": 1}}},
        {"name": "bad", "data": {"mode": "fail", "reason": "nope"}},
        {"name": "later", "data": {}, "opts": {"delay": 60000}},
    ]);
    bullmq("add-jobs", &redis.url(), "fin", json!({ "jobs": list }));
    let node = NodeChild::spawn("worker.js", &redis.url(), "fin", json!({}));
    wait_until("2 finished", Duration::from_secs(10), async || {
        let a: u64 = c.zcard("emq:fin:completed").await.unwrap();
        let b: u64 = c.zcard("emq:fin:failed").await.unwrap();
        a + b == 2
    })
    .await;
    node.finish();
    let queue = Queue::new(&conn, "fin").await.unwrap();
    assert_eq!(
        queue.is_finished("1").await.unwrap(),
        Finished::Completed(json!({"r": 1}))
    );
    assert_eq!(
        queue.is_finished("2").await.unwrap(),
        Finished::Failed("nope".into())
    );
    assert_eq!(queue.is_finished("3").await.unwrap(), Finished::No);
    assert!(matches!(
        queue.is_finished("404").await,
        Err(echomq::Error::JobNotFound(_))
    ));
    let node_view = bullmq("is-finished", &redis.url(), "fin", json!({"id": "2"}));
    assert_eq!(node_view, json!({"completed": false, "failed": true}));
}
