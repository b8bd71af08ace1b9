//! The add scripts through `Queue::add`: the Redis state and events
//! docs/protocol.md describes (§Key layout, §Job hash, §Events).

use std::time::Duration;

use echomq::{Backoff, Error, JobOptions, JobState, KeepJobs, NewJob, Queue};
use echomq_integration_tests::{event_names, events, RedisServer};
use fred::prelude::*;
use serde_json::json;

#[tokio::test]
async fn standard_add_writes_hash_wait_marker_and_events() {
    let (redis, _conn, q) = RedisServer::with_queue("mail").await;
    let c = redis.client().await;

    let id = q
        .add("welcome", &json!({"to": "a@b.c"}), JobOptions::new())
        .await
        .unwrap();
    assert_eq!(id, "1");

    let meta: std::collections::HashMap<String, String> = c.hgetall("emq:mail:meta").await.unwrap();
    assert_eq!(meta["version"], "bullmq:6.7.6");
    assert_eq!(meta["opts.maxLenEvents"], "10000");

    let h: std::collections::HashMap<String, String> = c.hgetall("emq:mail:1").await.unwrap();
    assert_eq!(h["name"], "welcome");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&h["data"]).unwrap(),
        json!({"to": "a@b.c"})
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&h["opts"]).unwrap(),
        json!({"attempts": 0})
    );
    assert_eq!(h["delay"], "0");
    assert_eq!(h["priority"], "0");
    assert_eq!(h["timestamp"].len(), 13);

    let wait: Vec<String> = c.lrange("emq:mail:wait", 0, -1).await.unwrap();
    assert_eq!(wait, vec!["1"]);
    let marker: Vec<(String, f64)> = c
        .zrange("emq:mail:marker", 0, -1, None, false, None, true)
        .await
        .unwrap();
    assert_eq!(marker, vec![("0".to_string(), 0.0)]);
    assert_eq!(
        event_names(&c, "emq:mail:events").await,
        vec!["added", "waiting"]
    );
    let ev = events(&c, "emq:mail:events").await;
    assert_eq!(
        ev[0].1,
        vec![
            ("jobId".into(), "1".into()),
            ("name".into(), "welcome".into())
        ]
    );
    assert_eq!(ev[1].1, vec![("jobId".into(), "1".into())]);

    let job = q.get_job("1").await.unwrap().unwrap();
    assert_eq!(job.name, "welcome");
    assert_eq!(q.get_job_state("1").await.unwrap(), JobState::Waiting);
}

#[tokio::test]
async fn fifo_and_lifo_order_in_wait() {
    let (redis, _conn, q) = RedisServer::with_queue("q").await;
    let c = redis.client().await;
    q.add("a", &json!({}), JobOptions::new()).await.unwrap();
    q.add("b", &json!({}), JobOptions::new()).await.unwrap();
    q.add("c", &json!({}), JobOptions::new().lifo(true))
        .await
        .unwrap();
    // Workers take from the tail: the LIFO job first, then FIFO order.
    let wait: Vec<String> = c.lrange("emq:q:wait", 0, -1).await.unwrap();
    assert_eq!(wait, vec!["2", "1", "3"]);
}

#[tokio::test]
async fn delayed_add_uses_the_sequenced_score_and_delay_marker() {
    let (redis, _conn, q) = RedisServer::with_queue("d").await;
    let c = redis.client().await;
    let ts = 1_700_000_000_000u64;
    for _ in 0..3 {
        q.add(
            "x",
            &json!(null),
            JobOptions::new()
                .delay(Duration::from_millis(500))
                .timestamp(ts),
        )
        .await
        .unwrap();
    }
    let delayed: Vec<(String, f64)> = c
        .zrange("emq:d:delayed", 0, -1, None, false, None, true)
        .await
        .unwrap();
    let scores: Vec<u64> = delayed.iter().map(|(_, s)| *s as u64).collect();
    assert_eq!(
        scores,
        vec![
            6_963_200_002_048_000,
            6_963_200_002_048_001,
            6_963_200_002_048_002
        ]
    );
    let marker: Vec<(String, f64)> = c
        .zrange("emq:d:marker", 0, -1, None, false, None, true)
        .await
        .unwrap();
    assert_eq!(marker, vec![("1".to_string(), 1_700_000_000_500.0)]);
    let ev = events(&c, "emq:d:events").await;
    assert_eq!(ev[1].0, "delayed");
    assert_eq!(
        ev[1].1,
        vec![
            ("jobId".into(), "1".into()),
            ("delay".into(), "1700000000500".into())
        ]
    );
    let h: std::collections::HashMap<String, String> = c.hgetall("emq:d:1").await.unwrap();
    assert_eq!(h["delay"], "500");
    assert_eq!(q.get_job_state("1").await.unwrap(), JobState::Delayed);
}

#[tokio::test]
async fn prioritized_add_uses_priority_score() {
    let (redis, _conn, q) = RedisServer::with_queue("p").await;
    let c = redis.client().await;
    q.add("x", &json!({}), JobOptions::new().priority(3))
        .await
        .unwrap();
    q.add("y", &json!({}), JobOptions::new().priority(1))
        .await
        .unwrap();
    q.add("z", &json!({}), JobOptions::new().priority(3))
        .await
        .unwrap();
    let p: Vec<(String, f64)> = c
        .zrange("emq:p:prioritized", 0, -1, None, false, None, true)
        .await
        .unwrap();
    let two32 = 4_294_967_296f64;
    assert_eq!(
        p,
        vec![
            ("2".into(), two32 + 2.0),
            ("1".into(), 3.0 * two32 + 1.0),
            ("3".into(), 3.0 * two32 + 3.0)
        ]
    );
    assert_eq!(c.get::<String, _>("emq:p:pc").await.unwrap(), "3");
    assert_eq!(q.get_job_state("2").await.unwrap(), JobState::Prioritized);
    assert_eq!(
        event_names(&c, "emq:p:events").await,
        vec!["added", "waiting", "added", "waiting", "added", "waiting"]
    );
}

#[tokio::test]
async fn custom_id_duplicate_is_not_stored_twice() {
    let (redis, _conn, q) = RedisServer::with_queue("dup").await;
    let c = redis.client().await;
    let opts = JobOptions::new()
        .job_id("abc")
        .attempts(3)
        .backoff(Backoff::Fixed {
            delay: 1000,
            jitter: None,
        })
        .remove_on_complete(KeepJobs::Remove(true))
        .keep_logs(5);
    assert_eq!(
        q.add("n", &json!({"v": 1}), opts.clone()).await.unwrap(),
        "abc"
    );
    assert_eq!(q.add("n", &json!({"v": 2}), opts).await.unwrap(), "abc");
    let h: std::collections::HashMap<String, String> = c.hgetall("emq:dup:abc").await.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&h["data"]).unwrap(),
        json!({"v": 1})
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&h["opts"]).unwrap(),
        json!({"jobId":"abc","attempts":3,"backoff":{"type":"fixed","delay":1000},"removeOnComplete":true,"kl":5})
    );
    // The id counter moves on every add, even duplicates (docs/protocol.md §Job ids).
    assert_eq!(c.get::<String, _>("emq:dup:id").await.unwrap(), "2");
    assert_eq!(
        event_names(&c, "emq:dup:events").await,
        vec!["added", "waiting", "duplicated"]
    );
    assert_eq!(c.llen::<u64, _>("emq:dup:wait").await.unwrap(), 1);
}

#[tokio::test]
async fn invalid_input_is_a_typed_error_and_writes_nothing() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    assert!(matches!(
        Queue::new(&conn, "").await,
        Err(Error::Validation(_))
    ));
    assert!(matches!(
        Queue::new(&conn, "a:b").await,
        Err(Error::Validation(_))
    ));
    let q = Queue::new(&conn, "v").await.unwrap();
    let cases = vec![
        JobOptions::new().job_id("42"),
        JobOptions::new().job_id("a:b"),
        JobOptions {
            delay: Some(-5),
            ..Default::default()
        },
        JobOptions::new().priority(2_097_152),
        JobOptions::new().priority(-1),
        JobOptions::new().attempts(-1),
        JobOptions::new().backoff(Backoff::Fixed {
            delay: 5,
            jitter: Some(1.5),
        }),
    ];
    for opts in cases {
        let r = q.add("n", &json!({}), opts.clone()).await;
        assert!(
            matches!(r, Err(Error::Validation(_))),
            "{opts:?} gave {r:?}"
        );
    }
    assert!(matches!(
        q.add("", &json!({}), JobOptions::new()).await,
        Err(Error::Validation(_))
    ));
    // Data that cannot be serialised to JSON (a map with non-string keys).
    let mut bad = std::collections::HashMap::new();
    bad.insert(vec![1u8], 1);
    assert!(matches!(
        q.add("n", &bad, JobOptions::new()).await,
        Err(Error::Validation(_))
    ));
    // Oversized data.
    let small = Queue::with_options(
        &conn,
        "v",
        echomq::QueueOptions::default().max_data_bytes(10),
    )
    .await
    .unwrap();
    assert!(matches!(
        small.add("n", &"x".repeat(100), JobOptions::new()).await,
        Err(Error::Validation(_))
    ));
    // Nothing but the meta hash was written.
    let keys = echomq_integration_tests::keys(&c, "emq:v:*").await;
    assert_eq!(keys, vec!["emq:v:meta".to_string()]);
}

#[tokio::test]
async fn add_bulk_is_one_round_trip_and_keeps_order() {
    let (redis, _conn, q) = RedisServer::with_queue("bulk").await;
    let c = redis.client().await;
    let jobs: Vec<NewJob> = (0..1000)
        .map(|i| NewJob {
            name: "n".into(),
            data: json!({ "i": i }),
            options: if i % 10 == 0 {
                JobOptions::new().priority(2)
            } else {
                JobOptions::new()
            },
        })
        .collect();
    let ids = q.add_bulk(jobs).await.unwrap();
    assert_eq!(ids.len(), 1000);
    assert_eq!(ids[0], "1");
    assert_eq!(ids[999], "1000");
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.waiting, 900);
    assert_eq!(counts.prioritized, 100);
    // A bad job anywhere refuses the whole batch before anything is sent.
    let bad = vec![
        NewJob {
            name: "ok".into(),
            data: json!(1),
            options: JobOptions::new(),
        },
        NewJob {
            name: "bad".into(),
            data: json!(1),
            options: JobOptions::new().job_id("7"),
        },
    ];
    assert!(matches!(q.add_bulk(bad).await, Err(Error::Validation(_))));
    assert_eq!(c.get::<String, _>("emq:bulk:id").await.unwrap(), "1000");
}

#[tokio::test]
async fn scripts_reload_after_script_flush() {
    let (redis, _conn, q) = RedisServer::with_queue("flush").await;
    let c = redis.client().await;
    c.script_flush(false).await.unwrap();
    q.add("a", &json!({}), JobOptions::new()).await.unwrap();
    c.script_flush(false).await.unwrap();
    let ids = q
        .add_bulk(vec![
            NewJob {
                name: "b".into(),
                data: json!({}),
                options: JobOptions::new()
            };
            3
        ])
        .await
        .unwrap();
    assert_eq!(ids, vec!["2", "3", "4"]);
    assert_eq!(q.counts().await.unwrap().waiting, 4);
}
