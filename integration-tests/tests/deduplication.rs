//! Deduplication and debounce as typed job options (issue 16): the modes of
//! docs/protocol.md §Deduplication through `Queue::add`, the owner getter, the
//! two ways of freeing an id, and the `deduplicated` events.

use std::time::Duration;

use echomq::{Deduplication, Error, JobOptions, JobState, Queue};
use echomq_integration_tests::{events, RedisServer};
use fred::prelude::*;
use serde_json::{json, Value as Json};

fn dedup(d: Deduplication) -> JobOptions {
    JobOptions::new().deduplication(d)
}

/// The `deduplicated` events of the stream, as (jobId, deduplicationId, deduplicatedJobId).
async fn deduplicated(c: &Client, queue: &str) -> Vec<(String, String, String)> {
    events(c, &format!("emq:{queue}:events"))
        .await
        .into_iter()
        .filter(|(name, _)| name == "deduplicated")
        .map(|(_, f)| {
            let get = |k: &str| f.iter().find(|(n, _)| n == k).unwrap().1.clone();
            (
                get("jobId"),
                get("deduplicationId"),
                get("deduplicatedJobId"),
            )
        })
        .collect()
}

#[tokio::test]
async fn simple_mode_keeps_the_owner_until_the_key_is_freed() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "dd").await.unwrap();

    let first = q
        .add("a", &json!({"n": 1}), dedup(Deduplication::new("D")))
        .await
        .unwrap();
    assert_eq!(first, "1");
    let again = q
        .add("a", &json!({"n": 2}), dedup(Deduplication::new("D")))
        .await
        .unwrap();
    assert_eq!(again, "1", "the add is dropped in favour of the owner");
    assert_eq!(q.counts().await.unwrap().waiting, 1);
    assert_eq!(
        deduplicated(&c, "dd").await,
        vec![("1".into(), "D".into(), "2".into())]
    );

    // Stored form: `de` in opts, `deid` on the hash, key without expiry.
    let h: std::collections::HashMap<String, String> = c.hgetall("emq:dd:1").await.unwrap();
    assert_eq!(h["deid"], "D");
    let opts: Json = serde_json::from_str(&h["opts"]).unwrap();
    assert_eq!(opts["de"], json!({"id": "D"}));
    let ttl: i64 = c.pttl("emq:dd:de:D").await.unwrap();
    assert_eq!(ttl, -1);
    assert_eq!(
        q.get_deduplication_job_id("D").await.unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(q.get_deduplication_job_id("nope").await.unwrap(), None);

    // Freed by its owner only: job 1 owns D, so it may free it.
    assert!(q.remove_job_deduplication_key("1").await.unwrap());
    assert!(!q.remove_job_deduplication_key("1").await.unwrap());
    assert!(matches!(
        q.remove_job_deduplication_key("404").await,
        Err(Error::JobNotFound(_))
    ));
    let third = q
        .add("a", &json!({"n": 3}), dedup(Deduplication::new("D")))
        .await
        .unwrap();
    assert_eq!(third, "3", "a freed id lets the next add through");

    // Job 1 no longer owns D (job 3 does): the owner-checked removal refuses,
    // the queue-wide one deletes whoever owns it.
    assert!(!q.remove_job_deduplication_key("1").await.unwrap());
    assert_eq!(
        q.get_deduplication_job_id("D").await.unwrap().as_deref(),
        Some("3")
    );
    assert!(q.remove_deduplication_key("D").await.unwrap());
    assert!(!q.remove_deduplication_key("D").await.unwrap());
    assert_eq!(q.get_deduplication_job_id("D").await.unwrap(), None);
}

#[tokio::test]
async fn throttle_mode_expires_with_the_ttl() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "th").await.unwrap();
    let opts = || dedup(Deduplication::new("T").ttl(300));

    assert_eq!(q.add("a", &json!(1), opts()).await.unwrap(), "1");
    let ttl: i64 = c.pttl("emq:th:de:T").await.unwrap();
    assert!(ttl > 0 && ttl <= 300, "ttl {ttl}");
    assert_eq!(q.add("a", &json!(2), opts()).await.unwrap(), "1");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(q.add("a", &json!(3), opts()).await.unwrap(), "3");
    assert_eq!(
        deduplicated(&c, "th").await,
        vec![("1".into(), "T".into(), "2".into())]
    );
}

#[tokio::test]
async fn debounce_mode_restarts_the_window_on_every_dropped_add() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "db").await.unwrap();
    let opts = || dedup(Deduplication::new("B").ttl(400).extend(true));

    assert_eq!(q.add("a", &json!(1), opts()).await.unwrap(), "1");
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(q.add("a", &json!(0), opts()).await.unwrap(), "1");
        let ttl: i64 = c.pttl("emq:db:de:B").await.unwrap();
        assert!(ttl > 300, "the window restarted: {ttl}");
    }
    // 750 ms after the first add, past its own 400 ms window: still owned.
    assert_eq!(
        q.get_deduplication_job_id("B").await.unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(deduplicated(&c, "db").await.len(), 3);
}

#[tokio::test]
async fn replace_mode_swaps_a_delayed_owner_for_the_newest_add() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "rp").await.unwrap();
    let opts = |n: u64| {
        dedup(
            Deduplication::new("R")
                .ttl(5_000)
                .extend(true)
                .replace(true),
        )
        .delay(Duration::from_millis(10_000 + n))
    };

    assert_eq!(q.add("a", &json!({"v": 1}), opts(1)).await.unwrap(), "1");
    assert_eq!(q.add("a", &json!({"v": 2}), opts(2)).await.unwrap(), "2");
    assert!(
        q.get_job("1").await.unwrap().is_none(),
        "the delayed owner is gone"
    );
    assert_eq!(q.get_state("2").await.unwrap(), JobState::Delayed);
    assert_eq!(
        q.get_deduplication_job_id("R").await.unwrap().as_deref(),
        Some("2")
    );
    assert_eq!(
        deduplicated(&c, "rp").await,
        vec![("2".into(), "R".into(), "1".into())],
        "the new job is the owner, the replaced one the deduplicated"
    );
    let names: Vec<String> = events(&c, "emq:rp:events")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"removed".to_string()), "{names:?}");
}

#[tokio::test]
async fn a_bad_deduplication_is_refused_before_any_write() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "bad").await.unwrap();
    let err = q
        .add("a", &json!(1), dedup(Deduplication::new("")))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Validation(_)), "{err}");
    let mut debounce = JobOptions::new();
    debounce.extra.insert("debounce".into(), json!({"id": "x"}));
    assert!(matches!(
        q.add("a", &json!(1), debounce).await,
        Err(Error::Validation(_))
    ));
    let id: Option<String> = c.get("emq:bad:id").await.unwrap();
    assert_eq!(id, None, "no id was taken");
}
