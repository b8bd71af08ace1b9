//! `echomq budget` (docs/operations.md §Memory): shows and sets a queue's
//! byte budget, refuses bad byte counts with the budget's typed error and
//! writes nothing then; `echomq stats` shows the bytes kept; `echomq work`
//! holds the budget and serves the `echomq_budget_*` gauges.

use std::process::Stdio;
use std::time::Duration;

use echomq::{JobOptions, Queue};
use echomq_integration_tests::state::exists;
use echomq_integration_tests::{wait_until, RedisServer};
use serde_json::{json, Value};

use crate::cli::command as echomq;
use crate::cli::{free_port, metric_value, ok, refused, scrape, Killed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_shows_sets_and_refuses_bad_byte_counts() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "bq").await.unwrap();
    q.add("j", &json!({"pad": "x".repeat(500)}), JobOptions::new())
        .await
        .unwrap();

    for (bad, says) in [
        ("0", "a byte budget of 0 is refused"),
        ("-5", "cannot be negative"),
        ("lots", "is not a byte count"),
        ("1.5MiB", "is not a byte count"),
        ("999999999999999999999999", "too large"),
        ("1000000GiB", "too large"),
    ] {
        refused(&url, &["budget", "bq", "--max-bytes", bad], says);
    }
    assert!(
        !exists(&c, &q.keys().budget()).await,
        "a refused budget writes nothing"
    );

    let shown: Value = serde_json::from_str(&ok(&url, &["budget", "bq", "--json"])).unwrap();
    assert_eq!(shown["max_bytes"], Value::Null);
    assert!(shown["used_bytes"].as_u64().unwrap() > 0, "{shown}");

    let set: Value = serde_json::from_str(&ok(
        &url,
        &["budget", "bq", "--max-bytes", "64KiB", "--json"],
    ))
    .unwrap();
    assert_eq!(set["max_bytes"], 65536);
    assert_eq!(q.byte_budget().await.unwrap().max, Some(65536));
    let text = ok(&url, &["budget", "bq"]);
    assert!(text.contains("of 64.0 KiB"), "{text}");

    let stats: Value = serde_json::from_str(&ok(&url, &["stats", "bq", "--json"])).unwrap();
    assert_eq!(stats["budget"]["max_bytes"], 65536);
    assert!(ok(&url, &["stats", "bq"]).contains("bytes kept"));

    let cleared: Value =
        serde_json::from_str(&ok(&url, &["budget", "bq", "--clear", "--json"])).unwrap();
    assert_eq!(cleared["max_bytes"], Value::Null);
    assert!(!exists(&c, &q.keys().budget()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_holds_the_budget_and_serves_its_gauges() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "held").await.unwrap();
    for n in 0..40 {
        q.add(
            "j",
            &json!({"n": n, "pad": "x".repeat(2000)}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    }
    ok(&url, &["budget", "held", "--max-bytes", "40000"]);
    let port = free_port();
    let _child = Killed(
        echomq()
            .args(["work", "held", "--url", &url, "--quiet"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The worker finishes the 40 jobs (about 130 KB kept without a budget);
    // its enforcer removes the oldest down to the budget.
    wait_until("the budget held", Duration::from_secs(60), async || {
        let b = q.byte_budget().await.unwrap();
        let counts = q.counts().await.unwrap();
        counts.pending() == 0 && b.removed > 0 && b.used <= 40000
    })
    .await;
    let counts = q.counts().await.unwrap();
    let b = q.byte_budget().await.unwrap();
    assert_eq!(counts.completed + counts.failed + b.removed, 40);
    let mut text = String::new();
    wait_until(
        "a scrape with the budget",
        Duration::from_secs(30),
        async || {
            text = scrape(port).unwrap_or_default();
            metric_value(&text, r#"echomq_budget_used_bytes{queue="held"}"#).is_some()
        },
    )
    .await;
    assert!(text.contains("# TYPE echomq_budget_bytes gauge"), "{text}");
    assert_eq!(
        metric_value(&text, r#"echomq_budget_bytes{queue="held"}"#),
        Some(40000.0)
    );
    assert!(metric_value(&text, r#"echomq_budget_used_bytes{queue="held"}"#).unwrap() <= 40000.0);
}
