//! The autoscaling figures as an operator reads them (docs/operations.md
//! §Autoscaling): `echomq stats --json` carries them under `capacity`,
//! plain `echomq stats` in one line, `echomq work --metrics-addr` serves
//! them as `echomq_capacity_*` gauges; a zero setting is a configuration
//! error.

use std::process::Stdio;
use std::time::Duration;

use echomq::{JobOptions, Queue};
use echomq_integration_tests::{wait_until, RedisServer};
use serde_json::{json, Value};

use crate::cli::command as echomq;
use crate::cli::{free_port, metric_value, scrape, Killed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_shows_the_capacity_figures() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "cap").await.unwrap();
    for i in 0..4 {
        q.add("j", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap();
    }
    q.add("p", &json!({}), JobOptions::new().priority(3))
        .await
        .unwrap();
    q.add(
        "d",
        &json!({}),
        JobOptions::new().delay(Duration::from_millis(1)),
    )
    .await
    .unwrap();
    // The delayed job is due once Redis's clock passed it.
    let stats = |extra: &[&str]| {
        echomq()
            .args(["--url", &url, "stats", "cap"])
            .args(extra)
            .output()
            .unwrap()
    };
    let mut cap = Value::Null;
    wait_until(
        "the delayed job to be due",
        Duration::from_secs(10),
        async || {
            let out = stats(&[
                "--json",
                "--scale-target-age",
                "2500",
                "--scale-concurrency",
                "3",
            ]);
            assert!(out.status.success(), "{out:?}");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            cap = v["capacity"].clone();
            cap["delayed_due"] == 1
        },
    )
    .await;
    assert_eq!(cap["queue"], "cap");
    assert_eq!(cap["waiting"], 4);
    assert_eq!(cap["prioritized"], 1);
    assert_eq!(cap["backlog"], 6, "{cap}");
    assert_eq!(cap["target_age_ms"], 2500);
    assert_eq!(cap["concurrency"], 3);
    assert!(cap["oldest_age_ms"].as_u64().is_some(), "{cap}");
    assert!(cap["arrival_rate"].as_f64().unwrap() > 0.0, "{cap}");
    assert_eq!(cap["completion_rate"], 0.0);
    assert!(cap["service_time_ms"].is_null(), "nothing finished yet");
    assert_eq!(cap["desired_workers"], 1, "work in hand, no timing yet");
    assert_eq!(cap["instant_workers"], 1);

    let out = stats(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("desired workers  1") && text.contains("backlog 6"),
        "{text}"
    );

    let out = stats(&["--scale-target-age", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = stats(&["--scale-concurrency", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_process_serves_the_capacity_gauges() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "scaled").await.unwrap();
    for n in 0..10 {
        q.add("j", &json!({ "n": n }), JobOptions::new())
            .await
            .unwrap();
    }
    let port = free_port();
    let _child = Killed(
        echomq()
            .args(["work", "scaled", "--url", &redis.url(), "--quiet"])
            .args(["--concurrency", "4", "--scale-target-age", "2500"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut text = String::new();
    wait_until(
        "a scrape with the jobs timed",
        Duration::from_secs(60),
        async || {
            text = scrape(port).unwrap_or_default();
            metric_value(
                &text,
                r#"echomq_capacity_service_time_seconds{queue="scaled"}"#,
            )
            .is_some()
        },
    )
    .await;
    for gauge in [
        "desired_workers",
        "instant_workers",
        "backlog",
        "oldest_age_seconds",
        "arrival_rate",
        "completion_rate",
        "service_time_seconds",
        "target_age_seconds",
    ] {
        let name = format!("echomq_capacity_{gauge}");
        assert!(text.contains(&format!("# TYPE {name} gauge")), "{text}");
        assert!(
            metric_value(&text, &format!("{name}{{queue=\"scaled\"}}")).is_some(),
            "{name}: {text}"
        );
    }
    assert_eq!(
        metric_value(
            &text,
            r#"echomq_capacity_target_age_seconds{queue="scaled"}"#
        ),
        Some(2.5)
    );
    assert!(metric_value(&text, r#"echomq_capacity_arrival_rate{queue="scaled"}"#).unwrap() > 0.0);

    let out = echomq()
        .args([
            "work",
            "scaled",
            "--url",
            &redis.url(),
            "--scale-concurrency",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--scale-concurrency"));
}
