//! The consistency audit finds what it should, and nothing on a healthy queue.

use echomq::audit::{Audit, AuditOptions, Severity};
use echomq::JobOptions;
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::json;

#[tokio::test]
async fn a_healthy_queue_has_no_violations() {
    let (_redis, conn, q) = RedisServer::with_queue("ok").await;
    for i in 0..50 {
        let opts = match i % 3 {
            0 => JobOptions::new(),
            1 => JobOptions::new().priority(2),
            _ => JobOptions::new().delay(std::time::Duration::from_secs(60)),
        };
        q.add("j", &json!({ "i": i }), opts).await.unwrap();
    }
    let r = Audit::new(&conn, "ok")
        .options(AuditOptions {
            quiescent: true,
            ..Default::default()
        })
        .run()
        .await
        .unwrap();
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(r.ids, 50);
    assert_eq!(r.counts["wait"], 17);
}

#[tokio::test]
async fn tampering_is_reported_as_hard_violations() {
    let (redis, conn, q) = RedisServer::with_queue("bad").await;
    let c = redis.client().await;
    q.add("a", &json!({}), JobOptions::new()).await.unwrap();
    q.add("b", &json!({}), JobOptions::new()).await.unwrap();
    // Job 1 in two states; job 2 listed twice; a lock on a waiting job without TTL;
    // a dangling id; an id above the counter; an orphan hash.
    c.zadd::<(), _, _>("emq:bad:completed", None, None, false, false, (1.0, "1"))
        .await
        .unwrap();
    c.lpush::<(), _, _>("emq:bad:wait", "2").await.unwrap();
    c.set::<(), _, _>("emq:bad:2:lock", "not-a-uuid", None, None, false)
        .await
        .unwrap();
    c.lpush::<(), _, _>("emq:bad:wait", "ghost").await.unwrap();
    c.hset::<(), _, _>("emq:bad:99", [("name", "x"), ("timestamp", "1")])
        .await
        .unwrap();
    c.lpush::<(), _, _>("emq:bad:wait", "99").await.unwrap();
    c.hset::<(), _, _>("emq:bad:orphan", [("name", "x"), ("timestamp", "1")])
        .await
        .unwrap();
    let r = Audit::new(&conn, "bad").run().await.unwrap();
    let has = |check: &str, id: Option<&str>| {
        r.violations
            .iter()
            .any(|v| v.check == check && v.job_id.as_deref() == id)
    };
    assert!(has("A2", Some("1")), "{:#?}", r.violations);
    assert!(has("A1", Some("2")));
    assert!(has("A6a", Some("2")));
    assert!(has("A6b", Some("2")));
    assert!(has("A6c", Some("2")));
    assert!(has("A3", Some("ghost")));
    assert!(has("A14", Some("99")));
    assert!(has("A4", Some("orphan")));
    assert!(
        r.violations
            .iter()
            .find(|v| v.check == "A4")
            .unwrap()
            .severity
            == Severity::Quiescent
    );
    assert!(!r.is_consistent());
    // A wrong key type.
    c.del::<(), _>("emq:bad:active").await.unwrap();
    c.set::<(), _, _>("emq:bad:active", "x", None, None, false)
        .await
        .unwrap();
    let r = Audit::new(&conn, "bad").run().await.unwrap();
    assert!(r.violations.iter().any(|v| v.check == "A16" && v.hard));
}
