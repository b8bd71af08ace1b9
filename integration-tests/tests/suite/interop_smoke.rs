//! First interop checks against the real BullMQ 6.7.0 Node client (prefix
//! `emq`): jobs added by either side read back the same on the other.
//! The full interop suite (workers, stalls, schedulers, events) grows here.

use echomq::{Backoff, JobOptions, JobState, KeepJobs, Queue};
use echomq_integration_tests::{bullmq, RedisServer};
use serde_json::json;

#[tokio::test]
async fn node_added_jobs_read_back_in_rust() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let ids = bullmq("add-mix", &redis.url(), "mix", json!({}));
    let ids: Vec<String> = serde_json::from_value(ids).unwrap();
    assert_eq!(ids, vec!["1", "2", "3", "4", "custom-1", "6"]);
    let q = Queue::new(&conn, "mix").await.unwrap();

    let plain = q.get_job("1").await.unwrap().unwrap();
    assert_eq!(plain.name, "plain");
    assert_eq!(plain.data, json!({"n": 1}));
    assert_eq!(plain.opts.attempts, Some(0));
    assert_eq!(q.get_job_state("1").await.unwrap(), JobState::Waiting);

    let delayed = q.get_job("2").await.unwrap().unwrap();
    assert_eq!(delayed.delay, 60000);
    assert_eq!(q.get_job_state("2").await.unwrap(), JobState::Delayed);
    assert_eq!(q.get_job_state("3").await.unwrap(), JobState::Prioritized);
    assert_eq!(q.get_job("3").await.unwrap().unwrap().priority, 5);
    assert!(q.get_job("4").await.unwrap().unwrap().opts.lifo);

    let custom = q.get_job("custom-1").await.unwrap().unwrap();
    assert_eq!(custom.opts.attempts, Some(3));
    assert_eq!(
        custom.opts.backoff,
        Some(Backoff::Fixed {
            delay: 1000,
            jitter: None
        })
    );
    assert_eq!(custom.opts.remove_on_complete, Some(KeepJobs::Remove(true)));
    assert_eq!(custom.opts.keep_logs, Some(5));
    let expo = q.get_job("6").await.unwrap().unwrap();
    assert_eq!(
        expo.opts.backoff,
        Some(Backoff::Exponential {
            delay: 500,
            jitter: None
        })
    );
    assert_eq!(
        expo.opts.remove_on_fail,
        Some(KeepJobs::Policy {
            age: Some(3600),
            count: Some(10),
            limit: None
        })
    );

    let c = q.counts().await.unwrap();
    assert_eq!((c.waiting, c.delayed, c.prioritized), (4, 1, 1));
}

#[tokio::test]
async fn rust_added_jobs_read_back_in_node() {
    let (redis, _conn, q) = RedisServer::with_queue("mix").await;
    q.add("plain", &json!({"n": 1}), JobOptions::new())
        .await
        .unwrap();
    q.add(
        "delayed",
        &json!({"n": 2}),
        JobOptions::new().delay(std::time::Duration::from_secs(60)),
    )
    .await
    .unwrap();
    q.add("prio", &json!({"n": 3}), JobOptions::new().priority(5))
        .await
        .unwrap();
    q.add(
        "custom",
        &json!({"n": 5}),
        JobOptions::new()
            .job_id("custom-1")
            .attempts(3)
            .backoff(Backoff::Fixed {
                delay: 1000,
                jitter: None,
            })
            .remove_on_complete(KeepJobs::Remove(true))
            .keep_logs(5),
    )
    .await
    .unwrap();
    let jobs = bullmq(
        "read-jobs",
        &redis.url(),
        "mix",
        json!({"ids": ["1", "2", "3", "custom-1"]}),
    );
    assert_eq!(jobs["1"]["name"], "plain");
    assert_eq!(jobs["1"]["data"], json!({"n": 1}));
    assert_eq!(jobs["1"]["state"], "waiting");
    assert_eq!(jobs["2"]["state"], "delayed");
    assert_eq!(jobs["2"]["delay"], 60000);
    assert_eq!(jobs["3"]["state"], "prioritized");
    assert_eq!(jobs["3"]["priority"], 5);
    assert_eq!(jobs["custom-1"]["opts"]["attempts"], 3);
    assert_eq!(
        jobs["custom-1"]["opts"]["backoff"],
        json!({"type": "fixed", "delay": 1000})
    );
    assert_eq!(jobs["custom-1"]["opts"]["keepLogs"], 5);
    let counts = bullmq("counts", &redis.url(), "mix", json!({}));
    assert_eq!(counts["waiting"], 2);
    assert_eq!(counts["delayed"], 1);
    assert_eq!(counts["prioritized"], 1);
}
