//! The Golden Rule for single jobs: the same mix of jobs (plain, delayed,
//! prioritized, lifo, custom id, retries with fixed and exponential backoff,
//! removeOnComplete/removeOnFail, unrecoverable, no return value) produced by
//! one side and processed by the other ends in the same Redis state, read back
//! the same by both clients.

use std::time::Duration;

use echomq::protocol::EventKind;
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    Backoff, JobOptions, JobState, KeepJobs, Queue, WorkerArgs, WorkerMsg, WorkerSetSpec,
};
use echomq_integration_tests::{bullmq, events, NodeChild, RedisServer};
use echomq_integration_tests::{wait_until, NullSupervisor};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

/// `(name, data, Node opts)`; ids come out as `IDS` on both sides.
fn mix() -> Vec<(&'static str, Json, Json)> {
    vec![
        ("plain", json!({"mode": "ok", "ret": {"v": 1}}), json!({})),
        (
            "delayed",
            json!({"mode": "ok", "ret": "late"}),
            json!({"delay": 300}),
        ),
        (
            "prio",
            json!({"mode": "ok", "ret": 3}),
            json!({"priority": 5}),
        ),
        (
            "lifo",
            json!({"mode": "ok", "ret": [4]}),
            json!({"lifo": true}),
        ),
        (
            "custom",
            json!({"mode": "ok", "ret": "c"}),
            json!({"jobId": "custom-1", "removeOnComplete": true}),
        ),
        (
            "fail",
            json!({"mode": "fail", "reason": "bad input"}),
            json!({}),
        ),
        (
            "retry-fixed",
            json!({"mode": "fail-until", "n": 2, "reason": "flaky", "ret": "third time"}),
            json!({"attempts": 3, "backoff": 200}),
        ),
        (
            "retry-exp",
            json!({"mode": "fail", "reason": "always"}),
            json!({"attempts": 2, "backoff": {"type": "exponential", "delay": 100}}),
        ),
        (
            "gone-on-fail",
            json!({"mode": "fail", "reason": "x"}),
            json!({"removeOnFail": true}),
        ),
        ("nothing", json!({"mode": "ok"}), json!({})),
        (
            "unrecoverable",
            json!({"mode": "unrecoverable", "reason": "fatal"}),
            json!({"attempts": 5}),
        ),
        (
            "retry-nobackoff",
            json!({"mode": "fail-until", "n": 1, "reason": "once", "ret": "ok2"}),
            json!({"attempts": 2}),
        ),
    ]
}

const IDS: [&str; 12] = [
    "1", "2", "3", "4", "custom-1", "6", "7", "8", "9", "10", "11", "12",
];

/// The Rust producer's spelling of the same options.
fn rust_opts(node: &Json) -> JobOptions {
    let mut o = JobOptions::new();
    if let Some(d) = node["delay"].as_u64() {
        o = o.delay(Duration::from_millis(d));
    }
    if let Some(p) = node["priority"].as_i64() {
        o = o.priority(p);
    }
    if node["lifo"] == json!(true) {
        o = o.lifo(true);
    }
    if let Some(id) = node["jobId"].as_str() {
        o = o.job_id(id);
    }
    if let Some(a) = node["attempts"].as_i64() {
        o = o.attempts(a);
    }
    match &node["backoff"] {
        Json::Number(n) => {
            o = o.backoff(Backoff::Fixed {
                delay: n.as_u64().unwrap(),
                jitter: None,
            })
        }
        Json::Object(b) => {
            o = o.backoff(Backoff::Exponential {
                delay: b["delay"].as_u64().unwrap(),
                jitter: None,
            })
        }
        _ => {}
    }
    if node["removeOnComplete"] == json!(true) {
        o = o.remove_on_complete(KeepJobs::Remove(true));
    }
    if node["removeOnFail"] == json!(true) {
        o = o.remove_on_fail(KeepJobs::Remove(true));
    }
    o
}

async fn settled(c: &Client, q: &str) -> bool {
    let completed: u64 = c.zcard(format!("emq:{q}:completed")).await.unwrap();
    let failed: u64 = c.zcard(format!("emq:{q}:failed")).await.unwrap();
    let active: u64 = c.llen(format!("emq:{q}:active")).await.unwrap();
    completed == 7 && failed == 3 && active == 0
}

/// The outcome of every job of the mix, as `(id, state, returnvalue,
/// failedReason, attemptsMade, stacktrace length)`, whoever reads it.
type Outcome = (String, String, Json, Option<String>, u64, usize);

fn expected() -> Vec<Outcome> {
    let done = |id: &str, rv: Json, atm: u64, traces: usize| {
        (id.to_owned(), "completed".to_owned(), rv, None, atm, traces)
    };
    let failed = |id: &str, reason: &str, atm: u64, traces: usize| {
        (
            id.to_owned(),
            "failed".to_owned(),
            Json::Null,
            Some(reason.to_owned()),
            atm,
            traces,
        )
    };
    vec![
        done("1", json!({"v": 1}), 1, 0),
        done("2", json!("late"), 1, 0),
        done("3", json!(3), 1, 0),
        done("4", json!([4]), 1, 0),
        failed("6", "bad input", 1, 1),
        // A retried job that then completes keeps its last failedReason.
        (
            "7".into(),
            "completed".into(),
            json!("third time"),
            Some("flaky".into()),
            3,
            2,
        ),
        failed("8", "always", 2, 2),
        done("10", Json::Null, 1, 0),
        failed("11", "fatal", 1, 1),
        (
            "12".into(),
            "completed".into(),
            json!("ok2"),
            Some("once".into()),
            2,
            1,
        ),
    ]
}

/// Redis state both directions must leave behind.
async fn assert_redis_state(c: &Client, q: &str) {
    // removeOnComplete / removeOnFail left nothing of those jobs.
    for gone in ["custom-1", "9"] {
        let n: u64 = c.exists(format!("emq:{q}:{gone}")).await.unwrap();
        assert_eq!(n, 0, "job {gone} should have been removed");
    }
    let completed: Vec<String> = c
        .zrange(
            format!("emq:{q}:completed"),
            0,
            -1,
            None,
            false,
            None,
            false,
        )
        .await
        .unwrap();
    let mut completed = completed;
    completed.sort();
    assert_eq!(completed, ["1", "10", "12", "2", "3", "4", "7"]);
    // Counts add up: 12 added = 7 completed + 1 removed on complete + 3 failed
    // + 1 removed on fail, nothing pending.
    for k in ["wait", "active", "delayed", "prioritized", "stalled"] {
        let key = format!("emq:{q}:{k}");
        let t: String = c.r#type(&key).await.unwrap();
        assert_eq!(t, "none", "{key} should be empty");
    }
    for id in ["1", "7", "8", "11"] {
        let lock: u64 = c.exists(format!("emq:{q}:{id}:lock")).await.unwrap();
        assert_eq!(lock, 0, "lock of {id} left behind");
    }
    // failedReason is the raw message; stacktrace a JSON array of strings.
    let reason: String = c.hget(format!("emq:{q}:6"), "failedReason").await.unwrap();
    assert_eq!(reason, "bad input");
    let trace: String = c.hget(format!("emq:{q}:8"), "stacktrace").await.unwrap();
    let trace: Vec<String> = serde_json::from_str(&trace).unwrap();
    assert_eq!(trace.len(), 2);
    let rv: String = c.hget(format!("emq:{q}:10"), "returnvalue").await.unwrap();
    assert_eq!(rv, "null");

    let evs = events(c, &format!("emq:{q}:events")).await;
    let of = |id: &str| -> Vec<String> {
        evs.iter()
            .filter(|(_, f)| f.iter().any(|(k, v)| k == "jobId" && v == id))
            .map(|(n, _)| n.clone())
            .collect()
    };
    // A final failure: failed then retries-exhausted (item 25).
    let six = of("6");
    assert!(
        six.ends_with(&["failed".into(), "retries-exhausted".into()]),
        "{six:?}"
    );
    let fields_of = |name: &str, id: &str| -> Vec<(String, String)> {
        evs.iter()
            .find(|(n, f)| n == name && f.iter().any(|(k, v)| k == "jobId" && v == id))
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("no {name} event for {id}"))
    };
    let failed_six = fields_of("failed", "6");
    assert!(
        failed_six.contains(&("failedReason".into(), "bad input".into()))
            && failed_six.contains(&("prev".into(), "active".into())),
        "{failed_six:?}"
    );
    let exhausted_six = fields_of("retries-exhausted", "6");
    assert!(
        exhausted_six.contains(&("attemptsMade".into(), "1".into())),
        "{exhausted_six:?}"
    );
    let atm: String = c.hget(format!("emq:{q}:6"), "atm").await.unwrap();
    assert_eq!(atm, "1");
    let trace: String = c.hget(format!("emq:{q}:6"), "stacktrace").await.unwrap();
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&trace).unwrap().len(),
        1
    );
    // Every finished set is scored by the job's finishedOn (item 25 for failed,
    // item 18 for completed).
    for set in ["failed", "completed"] {
        let scored: Vec<(String, f64)> = c
            .zrange(format!("emq:{q}:{set}"), 0, -1, None, false, None, true)
            .await
            .unwrap();
        for (id, score) in scored {
            let finished: String = c.hget(format!("emq:{q}:{id}"), "finishedOn").await.unwrap();
            assert_eq!(
                score,
                finished.parse::<f64>().unwrap(),
                "{set} score of {id} is its finishedOn"
            );
        }
    }
    // An unrecoverable error never emits retries-exhausted (item 29).
    assert!(
        !of("11").contains(&"retries-exhausted".to_owned()),
        "{:?}",
        of("11")
    );
    assert!(of("11").contains(&"failed".to_owned()));
    // Fixed backoff goes through delayed, no failed event in between (item 26).
    let seven = of("7");
    assert_eq!(
        seven.iter().filter(|n| *n == "delayed").count(),
        2,
        "{seven:?}"
    );
    assert!(!seven.contains(&"failed".to_owned()), "{seven:?}");
    // Without backoff a retry goes straight back to wait (item 28).
    let twelve = of("12");
    assert!(!twelve.contains(&"delayed".to_owned()), "{twelve:?}");
    assert_eq!(twelve.iter().filter(|n| *n == "waiting").count(), 2);
    // The removed-on-complete job still emitted completed (item 21).
    assert!(of("custom-1").contains(&"completed".to_owned()));
    let (_, completed_fields) = evs
        .iter()
        .find(|(n, f)| n == "completed" && f.iter().any(|(k, v)| k == "jobId" && v == "1"))
        .unwrap();
    let rv = &completed_fields
        .iter()
        .find(|(k, _)| k == "returnvalue")
        .unwrap()
        .1;
    assert_eq!(serde_json::from_str::<Json>(rv).unwrap(), json!({"v": 1}));
    assert!(completed_fields.contains(&("prev".into(), "active".into())));
}

fn check_timestamps(id: &str, timestamp: u64, processed: u64, finished: u64) {
    assert!(timestamp > 1_600_000_000_000, "{id}: timestamp {timestamp}");
    assert!(processed >= timestamp, "{id}: processedOn before timestamp");
    assert!(finished >= processed, "{id}: finishedOn before processedOn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_produces_the_mix_and_an_echomq_worker_processes_it() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let jobs: Vec<Json> = mix()
        .into_iter()
        .map(|(n, d, o)| json!({"name": n, "data": d, "opts": o}))
        .collect();
    let ids = bullmq("add-jobs", &redis.url(), "mix1", json!({ "jobs": jobs }));
    assert_eq!(ids, json!(IDS));

    let queue = Queue::new(&conn, "mix1").await.unwrap();
    let processor =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.concurrency = 4;
    args.options.name = Some("r1".into());
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    wait_until("the mix settled", Duration::from_secs(20), async || {
        settled(&c, "mix1").await
    })
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();

    assert_redis_state(&c, "mix1").await;
    // Node reads the Rust worker's results back.
    let read = bullmq("read-jobs", &redis.url(), "mix1", json!({ "ids": IDS }));
    assert!(read["custom-1"].is_null() && read["9"].is_null());
    for (id, state, rv, reason, atm, traces) in expected() {
        let j = &read[id.as_str()];
        assert_eq!(j["state"], json!(state), "{id}");
        assert_eq!(j["returnvalue"], rv, "{id}");
        assert_eq!(
            j["failedReason"].as_str().map(str::to_owned),
            reason,
            "{id}"
        );
        assert_eq!(j["attemptsMade"], json!(atm), "{id}");
        assert_eq!(j["stacktrace"].as_array().unwrap().len(), traces, "{id}");
        assert_eq!(j["processedBy"], json!("r1"), "{id}");
        check_timestamps(
            &id,
            j["timestamp"].as_u64().unwrap(),
            j["processedOn"].as_u64().unwrap(),
            j["finishedOn"].as_u64().unwrap(),
        );
    }
    // The delayed job did not start before its delay was over.
    let d = &read["2"];
    assert!(d["processedOn"].as_u64().unwrap() >= d["timestamp"].as_u64().unwrap() + 300);
    let counts = bullmq("counts", &redis.url(), "mix1", json!({}));
    assert_eq!(counts["completed"], 7);
    assert_eq!(counts["failed"], 3);
    for k in ["waiting", "active", "delayed", "prioritized"] {
        assert_eq!(counts[k], 0, "{k}");
    }
    // Node leaves `paused` out of its default counts (item 46).
    assert!(counts.get("paused").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echomq_produces_the_mix_and_a_node_worker_processes_it() {
    let (redis, _conn, queue) = RedisServer::with_queue("mix2").await;
    let c = redis.client().await;
    let mut ids = Vec::new();
    for (name, data, node_opts) in mix() {
        ids.push(queue.add(name, &data, rust_opts(&node_opts)).await.unwrap());
    }
    assert_eq!(ids, IDS);
    // The options were stored the way Node stores them.
    let read = bullmq(
        "read-jobs",
        &redis.url(),
        "mix2",
        json!({ "ids": ["7", "8"] }),
    );
    assert_eq!(
        read["7"]["opts"]["backoff"],
        json!({"type": "fixed", "delay": 200})
    );
    assert_eq!(
        read["8"]["opts"]["backoff"],
        json!({"type": "exponential", "delay": 100})
    );

    let node = NodeChild::spawn(
        "worker.js",
        &redis.url(),
        "mix2",
        json!({"concurrency": 4, "name": "n1"}),
    );
    wait_until("the mix settled", Duration::from_secs(20), async || {
        settled(&c, "mix2").await
    })
    .await;
    let summary = node.finish().expect("node worker summary");
    // Every job ran as often as its attempts say, none more.
    let runs = &summary["runs"];
    for (id, n) in [
        ("1", 1),
        ("7", 3),
        ("8", 2),
        ("11", 1),
        ("12", 2),
        ("custom-1", 1),
    ] {
        assert_eq!(runs[id], json!(n), "runs of {id}");
    }

    assert_redis_state(&c, "mix2").await;
    // EchoMQ reads the Node worker's results back.
    assert!(queue.get_job("custom-1").await.unwrap().is_none());
    assert!(queue.get_job("9").await.unwrap().is_none());
    for (id, state, rv, reason, atm, traces) in expected() {
        let j = queue.get_job(&id).await.unwrap().expect(&id);
        let st = queue.get_job_state(&id).await.unwrap();
        let want = if state == "completed" {
            JobState::Completed
        } else {
            JobState::Failed
        };
        assert_eq!(st, want, "{id}");
        assert_eq!(j.return_value.unwrap_or(Json::Null), rv, "{id}");
        assert_eq!(j.failed_reason, reason, "{id}");
        assert_eq!(j.attempts_made, atm, "{id}");
        assert_eq!(j.stacktrace.len(), traces, "{id}");
        assert_eq!(j.processed_by.as_deref(), Some("n1"), "{id}");
        check_timestamps(
            &id,
            j.timestamp,
            j.processed_on.unwrap(),
            j.finished_on.unwrap(),
        );
    }
    let d = queue.get_job("2").await.unwrap().unwrap();
    assert!(d.processed_on.unwrap() >= d.timestamp + 300);
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.completed, counts.failed, counts.pending()),
        (7, 3, 0)
    );
    let _ = EventKind::Drained; // the typed events are compared in interop_events.rs
}
