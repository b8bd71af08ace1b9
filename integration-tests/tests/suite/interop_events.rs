//! Events across clients: EchoMQ's QueueEvents receives what a BullMQ Node
//! worker emits, and Node's QueueEvents receives what an EchoMQ worker emits;
//! both are compared with one expected typed sequence per job.

use std::collections::BTreeMap;
use std::time::Duration;

use echomq::protocol::EventKind;
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    Backoff, Delivery, JobOptions, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg, WorkerArgs,
    WorkerMsg, WorkerSetSpec,
};
use echomq_integration_tests::{timeline, wait_until, NullSupervisor};
use echomq_integration_tests::{NodeBullmq, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

/// One event reduced to what both clients must agree on: name and the
/// job-specific field (`delayed` keeps no field: its due time is a clock).
type Ev = (String, String);

fn ev(name: &str, detail: &str) -> Ev {
    (name.to_owned(), detail.to_owned())
}

/// Per job id, the events it must see, in order.
fn expected() -> BTreeMap<String, Vec<Ev>> {
    let start = |name: &str| {
        vec![
            ev("added", name),
            ev("waiting", ""),
            ev("active", "waiting"),
        ]
    };
    let mut m = BTreeMap::new();
    let mut one = start("ok");
    one.push(ev("completed", r#"{"a":1}"#));
    m.insert("1".to_owned(), one);
    let mut two = start("progress");
    two.extend([ev("progress", r#"{"p":50}"#), ev("completed", r#""p""#)]);
    m.insert("2".to_owned(), two);
    let mut three = start("fail");
    three.extend([ev("failed", "nope"), ev("retries-exhausted", "1")]);
    m.insert("3".to_owned(), three);
    let mut four = start("retry");
    four.extend([
        ev("delayed", ""),
        ev("waiting", "delayed"),
        ev("active", "waiting"),
        ev("completed", r#""r""#),
    ]);
    m.insert("4".to_owned(), four);
    m
}

fn jobs() -> Vec<(&'static str, Json, Json)> {
    vec![
        ("ok", json!({"mode": "ok", "ret": {"a": 1}}), json!({})),
        (
            "progress",
            json!({"mode": "progress", "p": {"p": 50}, "ret": "p"}),
            json!({}),
        ),
        ("fail", json!({"mode": "fail", "reason": "nope"}), json!({})),
        (
            "retry",
            json!({"mode": "fail-until", "n": 1, "reason": "once", "ret": "r"}),
            json!({"attempts": 2, "backoff": 100}),
        ),
    ]
}

fn compact(v: &Json) -> String {
    serde_json::to_string(v).unwrap()
}

fn reduce_rust(kind: &EventKind) -> Option<(String, Ev)> {
    use EventKind::*;
    let id = kind.job_id()?.to_owned();
    let detail = match kind {
        Added { name, .. } => name.clone(),
        Waiting { prev, .. } | Active { prev, .. } => prev.clone().unwrap_or_default(),
        Progress { data, .. } => compact(data),
        Completed { return_value, .. } => compact(return_value),
        Failed { failed_reason, .. } => failed_reason.clone(),
        RetriesExhausted { attempts_made, .. } => attempts_made.to_string(),
        _ => String::new(),
    };
    Some((id, ev(kind.name(), &detail)))
}

fn reduce_node(name: &str, args: &Json) -> Option<(String, Ev)> {
    let id = args["jobId"].as_str()?.to_owned();
    let s = |k: &str| args[k].as_str().unwrap_or_default().to_owned();
    let detail = match name {
        "added" => s("name"),
        "waiting" | "active" => s("prev"),
        "progress" => compact(&args["data"]),
        "completed" => compact(&args["returnvalue"]),
        "failed" => s("failedReason"),
        "retries-exhausted" => s("attemptsMade"),
        _ => String::new(),
    };
    Some((id, ev(name, &detail)))
}

fn group(evs: impl IntoIterator<Item = (String, Ev)>) -> BTreeMap<String, Vec<Ev>> {
    let mut m: BTreeMap<String, Vec<Ev>> = BTreeMap::new();
    for (id, e) in evs {
        m.entry(id).or_default().push(e);
    }
    m
}

async fn settled(c: &Client, q: &str) -> bool {
    let completed: u64 = c.zcard(format!("emq:{q}:completed")).await.unwrap();
    let failed: u64 = c.zcard(format!("emq:{q}:failed")).await.unwrap();
    completed == 3 && failed == 1
}

async fn echomq_queue_events_receives_what_a_node_worker_emits(js: NodeBullmq) {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let mut args = QueueEventsArgs::new(conn.clone(), "ev1");
    args.block = Duration::from_millis(200);
    let (qe, _) = Actor::spawn(None, QueueEvents, args).await.unwrap();
    let mut sub = call_t!(qe, QueueEventsMsg::Subscribe, 2000, 1000).unwrap();

    let list: Vec<Json> = jobs()
        .into_iter()
        .map(|(n, d, o)| json!({"name": n, "data": d, "opts": o}))
        .collect();
    js.bullmq("add-jobs", &redis.url(), "ev1", json!({ "jobs": list }));
    let node = js.spawn("worker.js", &redis.url(), "ev1", json!({}));
    wait_until("jobs settled", Duration::from_secs(15), async || {
        settled(&c, "ev1").await
    })
    .await;
    node.finish();

    let mut got = Vec::new();
    let mut drained = 0;
    // Everything is in the stream by now: read up to its last entry.
    let last = timeline::stamps(&c, "emq:ev1:events")
        .await
        .pop()
        .expect("events")
        .id;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let d = tokio::time::timeout_at(deadline, sub.recv())
            .await
            .unwrap_or_else(|_| panic!("no delivery up to {last}: {got:?}"))
            .expect("the subscription lives");
        match d {
            Delivery::Event(e) => {
                if e.kind == EventKind::Drained {
                    drained += 1;
                }
                got.extend(reduce_rust(&e.kind));
                if e.id == last {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    qe.cast(QueueEventsMsg::Close).unwrap();
    assert_eq!(group(got), expected());
    assert!(drained >= 1, "the Node worker's drained arrived typed");
}

async fn node_queue_events_receives_what_an_echomq_worker_emits(js: NodeBullmq) {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    // Also waits for job 1 through Node's job.waitUntilFinished (item 43).
    let mut node = js.spawn("events.js", &redis.url(), "ev2", json!({"waitFor": "1"}));
    let queue = Queue::new(&conn, "ev2").await.unwrap();
    for (name, data, opts) in jobs() {
        let mut o = JobOptions::new();
        if let Some(a) = opts["attempts"].as_i64() {
            o = o.attempts(a).backoff(Backoff::Fixed {
                delay: opts["backoff"].as_u64().unwrap(),
                jitter: None,
            });
        }
        queue.add(name, &data, o).await.unwrap();
    }
    let processor =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    wait_until("jobs settled", Duration::from_secs(15), async || {
        settled(&c, "ev2").await
    })
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();

    let finished = node.wait_line(Duration::from_secs(10), |v| {
        v["ev"] == "finished" || v["ev"] == "finished-error"
    });
    assert_eq!(finished, json!({"ev": "finished", "value": {"a": 1}}));
    // Node has delivered everything once it delivered the stream's last entry
    // of a kind it listens to.
    let listened = [
        "added",
        "waiting",
        "active",
        "progress",
        "completed",
        "failed",
        "delayed",
        "retries-exhausted",
        "stalled",
        "drained",
        "removed",
        "paused",
        "resumed",
        "duplicated",
    ];
    let last = timeline::stamps(&c, "emq:ev2:events")
        .await
        .into_iter()
        .rfind(|s| listened.contains(&s.name.as_str()))
        .expect("events")
        .id;
    // (Lines read while waiting for `finished` count too.)
    let delivered = |v: &Json| v["ev"] == "event" && v["id"] == json!(last);
    if !node.drain().iter().any(delivered) {
        node.wait_line(Duration::from_secs(15), delivered);
    }
    let lines = node.drain().to_vec();
    let got = lines
        .iter()
        .filter(|v| v["ev"] == "event")
        .filter_map(|v| reduce_node(v["name"].as_str().unwrap(), &v["args"]));
    assert_eq!(group(got), expected());
    // Node delivers parsed values: the progress object is an object.
    let progress = lines
        .iter()
        .find(|v| v["name"] == "progress")
        .expect("progress event");
    assert_eq!(progress["args"]["data"], json!({"p": 50}));
    assert!(
        lines.iter().any(|v| v["name"] == "drained"),
        "the Rust worker's drained reached Node"
    );
    node.finish();
}

echomq_integration_tests::bullmq_matrix!(
    echomq_queue_events_receives_what_a_node_worker_emits,
    node_queue_events_receives_what_an_echomq_worker_emits,
);
