//! Worker-side parity (issue 16): custom backoff strategies and manual
//! processing (getNextJob / moveToCompleted / moveToFailed / moveToDelayed /
//! extendLock), against a real Redis and read back by BullMQ Node.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{
    processor_fn, BackoffStrategy, CustomBackoff, Fetched, JobContext, ManualJob, ManualWorker,
    ProcessError,
};
use echomq::{Backoff, Error, JobOptions, JobState, Queue, WorkerArgs, WorkerOptions};
use echomq_integration_tests::{bullmq, wait_until, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::Actor;
use serde_json::{json, Value as Json};

/// A strategy dispatching on the type name, as BullMQ users write one.
fn linear() -> BackoffStrategy {
    BackoffStrategy::new(|i| match i.kind {
        "linear" => CustomBackoff::After(Duration::from_millis(
            i.attempts_made * i.backoff["delay"].as_u64().unwrap_or(0),
        )),
        "give-up" => CustomBackoff::Fail,
        _ => CustomBackoff::Fail,
    })
}

#[tokio::test]
async fn a_custom_backoff_type_is_computed_by_the_worker_strategy() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "cb").await.unwrap();

    // Node adds the job with its custom type; a Rust worker retries it.
    let ids = bullmq(
        "ops",
        &url,
        "cb",
        json!({"ops": [
            ["add", "lin", {}, {"attempts": 3, "backoff": {"type": "linear", "delay": 150}}],
            ["add", "stop", {}, {"attempts": 3, "backoff": {"type": "give-up"}}]
        ]}),
    );
    assert_eq!(ids, json!(["1", "2"]));
    let starts: Arc<Mutex<Vec<(String, u64)>>> = Default::default();
    let s = starts.clone();
    let processor = processor_fn(move |job: JobContext| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push((job.id().to_owned(), echomq::clock::now_ms()));
            if job.id() == "1" && job.job().attempts_made < 2 {
                return Err(ProcessError::failed("not yet"));
            }
            if job.id() == "2" {
                return Err(ProcessError::failed("never"));
            }
            Ok(json!("done"))
        }
    });
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .drain_delay(Duration::from_millis(200))
        .backoff_strategy(linear());
    let (worker, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    wait_until("both finished", Duration::from_secs(10), async || {
        let c = q.counts().await.unwrap();
        c.completed == 1 && c.failed == 1
    })
    .await;
    worker.stop(None);

    let of = |id: &str| -> Vec<u64> {
        starts
            .lock()
            .unwrap()
            .iter()
            .filter(|(i, _)| i == id)
            .map(|(_, t)| *t)
            .collect()
    };
    let lin = of("1");
    assert_eq!(lin.len(), 3);
    // Retry n waits n × 150 ms (the strategy), not a built-in formula.
    assert!(lin[1] - lin[0] >= 150 - 10, "{lin:?}");
    assert!(lin[2] - lin[1] >= 300 - 10, "{lin:?}");
    assert_eq!(of("2").len(), 1, "the strategy said fail: no retry");

    let read = bullmq("read-jobs", &url, "cb", json!({"ids": ["1", "2"]}));
    assert_eq!(read["1"]["state"], "completed");
    assert_eq!(read["1"]["attemptsMade"], 3);
    assert_eq!(read["2"]["state"], "failed");
    assert_eq!(read["2"]["failedReason"], "never");
    assert_eq!(read["2"]["attemptsMade"], 1);
}

#[tokio::test]
async fn without_a_strategy_a_custom_type_fails_for_good() {
    let (_redis, _conn, q) = RedisServer::with_queue("nb").await;
    q.add(
        "x",
        &json!({}),
        JobOptions::new()
            .attempts(3)
            .backoff(Backoff::Custom(json!({"type": "linear", "delay": 10}))),
    )
    .await
    .unwrap();
    let m = ManualWorker::new(q.clone(), WorkerOptions::default()).unwrap();
    let job = take(&m, "t1").await;
    assert!(job.move_to_failed("boom", false).await.unwrap().is_none());
    assert_eq!(q.get_job_state("1").await.unwrap(), JobState::Failed);
}

async fn take(m: &ManualWorker, token: &str) -> ManualJob {
    match m.get_next_job(token).await.unwrap() {
        Fetched::Job(j) => *j,
        other => panic!("expected a job, got {other:?}"),
    }
}

#[tokio::test]
async fn manual_processing_takes_finishes_and_delays_with_its_own_token() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "man").await.unwrap();
    for (name, opts) in [
        ("a", JobOptions::new()),
        ("b", JobOptions::new().attempts(2)),
        ("c", JobOptions::new()),
        ("d", JobOptions::new()),
    ] {
        q.add(name, &json!({ "n": name }), opts).await.unwrap();
    }
    let m = ManualWorker::new(
        q.clone(),
        WorkerOptions::default()
            .name("hand")
            .lock_duration(Duration::from_secs(5)),
    )
    .unwrap();
    assert!(matches!(m.get_next_job("").await, Err(Error::Config(_))));

    // Take, extend, complete and fetch the next with the same token.
    let a = take(&m, "tok-1").await;
    assert_eq!(a.job().id, "1");
    let lock: String = c.get("emq:man:1:lock").await.unwrap();
    assert_eq!(lock, "tok-1");
    assert!(a.extend_lock(Duration::from_secs(60)).await.unwrap());
    let ttl: i64 = c.pttl("emq:man:1:lock").await.unwrap();
    assert!(ttl > 50_000, "{ttl}");
    let next = a.move_to_completed(&json!({"ok": 1}), true).await.unwrap();
    let Some(Fetched::Job(b)) = next else {
        panic!("fetch-next brought nothing")
    };
    assert_eq!((b.job().id.as_str(), b.token()), ("2", "tok-1"));

    // A failure with attempts left is retried, as Node's moveToFailed.
    assert!(b
        .move_to_failed("first try", false)
        .await
        .unwrap()
        .is_none());
    assert_eq!(q.get_job_state("2").await.unwrap(), JobState::Waiting);

    // Delay until a time, no attempt counted.
    let c3 = take(&m, "tok-2").await;
    assert_eq!(c3.job().id, "3");
    let until = echomq::clock::now_ms() + 60_000;
    c3.move_to_delayed(until).await.unwrap();
    assert_eq!(q.get_job_state("3").await.unwrap(), JobState::Delayed);
    let score: Option<f64> = c.zscore("emq:man:delayed", "3").await.unwrap();
    assert!(score.is_some());

    // A lock lost meanwhile: the transition is refused, nothing changes.
    let d = take(&m, "tok-3").await;
    let d_id = d.job().id.clone();
    let _: () = c.del(format!("emq:man:{d_id}:lock")).await.unwrap();
    let err = d.move_to_completed(&json!(1), false).await.unwrap_err();
    assert!(matches!(err, Error::Script { .. }), "{err}");
    assert_eq!(q.get_job_state(&d_id).await.unwrap(), JobState::Active);

    let read = bullmq("read-jobs", &url, "man", json!({"ids": ["1", "2", "3"]}));
    assert_eq!(read["1"]["state"], "completed");
    assert_eq!(read["1"]["returnvalue"], json!({"ok": 1}));
    assert_eq!(read["1"]["processedBy"], "hand");
    assert_eq!(read["2"]["state"], "waiting");
    assert_eq!(read["2"]["attemptsMade"], 1);
    assert_eq!(read["2"]["failedReason"], "first try");
    assert_eq!(read["3"]["state"], "delayed");
    assert_eq!(read["3"]["attemptsMade"], Json::from(0));
}
