//! The plain job life cycle both ways with BullMQ for Python 3.4.4 (PyPI
//! `bullmq`, prefix `emq`; it ships BullMQ 6.7.0's scripts): Python adds a mix
//! of jobs that an EchoMQ worker runs, and EchoMQ adds the same mix that a
//! Python worker runs. Both end in the same Redis state (sets, hashes, locks,
//! events), read back the same by both clients.
//!
//! Skipped with a printed line when the venv is missing, except under `CI=true`
//! (`just _ensure-python-packages` installs it).

use std::collections::BTreeMap;
use std::time::Duration;

use echomq::worker::{processor_fn, JobContext};
use echomq::{Backoff, JobOptions, JobState, Queue, WorkerArgs, WorkerMsg, WorkerSetSpec};
use echomq_integration_tests::{events, python_bullmq, python_driver, RedisServer};
use echomq_integration_tests::{wait_until, NullSupervisor};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

/// `(name, data, opts)` in BullMQ's public option names; ids 1..=8.
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
            "fail",
            json!({"mode": "fail", "reason": "bad input"}),
            json!({}),
        ),
        (
            "retry",
            json!({"mode": "fail-until", "n": 1, "reason": "flaky", "ret": "second"}),
            json!({"attempts": 2, "backoff": 100}),
        ),
        (
            "unrecoverable",
            json!({"mode": "unrecoverable", "reason": "fatal"}),
            json!({"attempts": 5}),
        ),
        ("nothing", json!({"mode": "ok"}), json!({})),
        (
            "lifo",
            json!({"mode": "ok", "ret": [8]}),
            json!({"lifo": true}),
        ),
    ]
}

const IDS: [&str; 8] = ["1", "2", "3", "4", "5", "6", "7", "8"];

fn rust_opts(o: &Json) -> JobOptions {
    let mut r = JobOptions::new();
    if let Some(d) = o["delay"].as_u64() {
        r = r.delay(Duration::from_millis(d));
    }
    if let Some(p) = o["priority"].as_i64() {
        r = r.priority(p);
    }
    if let Some(a) = o["attempts"].as_i64() {
        r = r.attempts(a);
    }
    if let Some(b) = o["backoff"].as_u64() {
        r = r.backoff(Backoff::Fixed {
            delay: b,
            jitter: None,
        });
    }
    if o["lifo"] == json!(true) {
        r = r.lifo(true);
    }
    r
}

/// `(state, returnvalue, failedReason, attemptsMade)` per id, as expected
/// whoever ran the jobs.
fn expected() -> BTreeMap<String, (String, Json, Option<String>, u64)> {
    let ok = |rv: Json, atm| ("completed".to_owned(), rv, None, atm);
    // A retried job that then completed keeps the reason of its failed attempt.
    let retried = (
        "completed".to_owned(),
        json!("second"),
        Some("flaky".to_owned()),
        2,
    );
    let failed = |why: &str| ("failed".to_owned(), Json::Null, Some(why.to_owned()), 1);
    IDS.iter()
        .map(|s| s.to_string())
        .zip([
            ok(json!({"v": 1}), 1),
            ok(json!("late"), 1),
            ok(json!(3), 1),
            failed("bad input"),
            retried,
            failed("fatal"),
            ok(Json::Null, 1),
            ok(json!([8]), 1),
        ])
        .collect()
}

/// The finished state in Redis, whoever produced and ran the mix: every job
/// in `completed` or `failed` scored by its `finishedOn`, no lock left, the
/// ready sets empty, `ats` as many as the runs, and one `completed` /
/// `failed` event per job.
async fn assert_redis_state(c: &Client, q: &str) {
    let p = format!("emq:{q}:");
    for list in ["wait", "active", "paused"] {
        let n: u64 = c.llen(format!("{p}{list}")).await.unwrap();
        assert_eq!(n, 0, "{list}");
    }
    for set in ["delayed", "prioritized"] {
        let n: u64 = c.zcard(format!("{p}{set}")).await.unwrap();
        assert_eq!(n, 0, "{set}");
    }
    for (id, (state, rv, reason, atm)) in expected() {
        let h: std::collections::HashMap<String, String> =
            c.hgetall(format!("{p}{id}")).await.unwrap();
        let score: Option<f64> = c.zscore(format!("{p}{state}"), &id).await.unwrap();
        assert_eq!(
            score.map(|s| s as u64).map(|s| s.to_string()).as_deref(),
            h.get("finishedOn").map(String::as_str),
            "job {id} is in {state}, scored by finishedOn"
        );
        assert_eq!(
            h.get("atm").map(String::as_str),
            Some(&*atm.to_string()),
            "{id}"
        );
        assert_eq!(
            h.get("ats").map(String::as_str),
            Some(&*atm.to_string()),
            "{id}"
        );
        assert_eq!(h.get("failedReason"), reason.as_ref(), "{id}");
        if state == "completed" {
            let stored: Json = serde_json::from_str(&h["returnvalue"]).unwrap();
            assert_eq!(stored, rv, "{id}");
        }
        let locked: bool = c.exists(format!("{p}{id}:lock")).await.unwrap();
        assert!(!locked, "job {id} still locked");
    }
    let mut finished: BTreeMap<String, String> = BTreeMap::new();
    for (name, fields) in events(c, &format!("{p}events")).await {
        if name == "completed" || name == "failed" {
            let id = fields.iter().find(|(k, _)| k == "jobId").unwrap().1.clone();
            finished.insert(id, name);
        }
    }
    let want: BTreeMap<String, String> = expected()
        .into_iter()
        .map(|(id, (state, ..))| (id, state))
        .collect();
    assert_eq!(finished, want, "the last completed/failed event per job");
}

/// Every job read back by EchoMQ.
async fn assert_read_by_rust(queue: &Queue) {
    for (id, (state, rv, reason, atm)) in expected() {
        let job = queue.get_job(&id).await.unwrap().expect("job exists");
        let want_state = if state == "completed" {
            JobState::Completed
        } else {
            JobState::Failed
        };
        assert_eq!(queue.get_job_state(&id).await.unwrap(), want_state, "{id}");
        assert_eq!(job.attempts_made, atm, "{id}");
        assert_eq!(job.failed_reason, reason, "{id}");
        if state == "completed" {
            assert_eq!(job.return_value, Some(rv), "{id}");
        }
    }
}

/// Every job read back by BullMQ for Python.
fn assert_read_by_python(python: &std::path::Path, url: &str, q: &str) {
    let read = python_driver(python, "read-jobs", url, q, json!({ "ids": IDS }));
    for (id, (state, rv, reason, atm)) in expected() {
        let j = &read[&id];
        assert_eq!(j["state"], json!(state), "{id}: {j}");
        assert_eq!(j["attemptsMade"], json!(atm), "{id}: {j}");
        assert_eq!(j["failedReason"], json!(reason), "{id}: {j}");
        assert_eq!(j["returnvalue"], rv, "{id}: {j}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_produces_and_an_echomq_worker_processes() {
    let Some(python) = python_bullmq() else {
        return;
    };
    let (redis, _conn, queue) = RedisServer::with_queue("py1").await;
    let c = redis.client().await;

    let jobs: Vec<Json> = mix()
        .into_iter()
        .map(|(name, data, opts)| json!({"name": name, "data": data, "opts": opts}))
        .collect();
    let ids = python_driver(
        &python,
        "add-jobs",
        &redis.url(),
        "py1",
        json!({ "jobs": jobs }),
    );
    assert_eq!(ids, json!(IDS));
    // As Python stored them, before any worker: in the sets their options say.
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.waiting, counts.delayed, counts.prioritized),
        (6, 1, 1)
    );
    let lifo_last: Option<String> = c.lindex("emq:py1:wait", -1).await.unwrap();
    assert_eq!(
        lifo_last.as_deref(),
        Some("8"),
        "lifo at the tail: taken first"
    );

    let processor =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.name = Some("rust".into());
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    wait_until("the mix finished", Duration::from_secs(30), async || {
        let done: u64 = c.zcard("emq:py1:completed").await.unwrap();
        let failed: u64 = c.zcard("emq:py1:failed").await.unwrap();
        let active: u64 = c.llen("emq:py1:active").await.unwrap();
        done == 6 && failed == 2 && active == 0
    })
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();

    assert_redis_state(&c, "py1").await;
    for id in IDS {
        let pb: Option<String> = c.hget(format!("emq:py1:{id}"), "pb").await.unwrap();
        assert_eq!(
            pb.as_deref(),
            Some("rust"),
            "{id} processed by the Rust worker"
        );
    }
    assert_read_by_rust(&queue).await;
    assert_read_by_python(&python, &redis.url(), "py1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echomq_produces_and_a_python_worker_processes() {
    let Some(python) = python_bullmq() else {
        return;
    };
    let (redis, _conn, queue) = RedisServer::with_queue("py2").await;
    let c = redis.client().await;
    for (name, data, opts) in mix() {
        queue.add(name, &data, rust_opts(&opts)).await.unwrap();
    }
    // As BullMQ for Python reads them before it runs them.
    let before = python_driver(
        &python,
        "read-jobs",
        &redis.url(),
        "py2",
        json!({ "ids": IDS }),
    );
    assert_eq!(before["2"]["state"], json!("delayed"), "{before}");
    assert_eq!(before["3"]["state"], json!("prioritized"), "{before}");
    assert_eq!(before["1"]["state"], json!("waiting"), "{before}");
    assert_eq!(before["5"]["opts"]["attempts"], json!(2), "{before}");

    let ran = python_driver(
        &python,
        "work",
        &redis.url(),
        "py2",
        json!({"count": IDS.len(), "name": "py"}),
    );
    let runs: BTreeMap<String, u64> = serde_json::from_value(ran["runs"].clone()).unwrap();
    let mut want: BTreeMap<String, u64> = IDS.iter().map(|id| (id.to_string(), 1)).collect();
    want.insert("5".into(), 2);
    assert_eq!(runs, want, "every job run once, the retried one twice");

    assert_redis_state(&c, "py2").await;
    assert_read_by_rust(&queue).await;
    assert_read_by_python(&python, &redis.url(), "py2");
}
