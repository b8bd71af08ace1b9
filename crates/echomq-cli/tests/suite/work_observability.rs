//! `echomq work --metrics-addr` as a process: the endpoint is up before the
//! worker takes a job, counts what it ran, and carries BullMQ's queue
//! gauges; a non-loopback address is said so in the log (docs/operations.md).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use echomq::{JobOptions, Queue};
use echomq_integration_tests::RedisServer;
use serde_json::json;

use crate::cli::command as echomq;
use crate::cli::{free_port, metric_value, scrape, Killed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_process_serves_its_metrics_and_the_queue_gauges() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "served").await.unwrap();
    for n in 0..10 {
        q.add("j", &json!({ "n": n }), JobOptions::new())
            .await
            .unwrap();
    }
    let port = free_port();
    let _child = Killed(
        echomq()
            .args([
                "work",
                "served",
                "--url",
                &redis.url(),
                "--quiet",
                "--metrics",
                "60",
            ])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        if let Some(t) = scrape(port) {
            if metric_value(&t, r#"echomq_jobs_completed_total{queue="served"}"#) == Some(10.0) {
                break t;
            }
        }
        assert!(Instant::now() < deadline, "no complete scrape in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        metric_value(
            &text,
            r#"echomq_job_duration_seconds_count{queue="served"}"#
        ),
        Some(10.0)
    );
    assert_eq!(
        metric_value(
            &text,
            r#"bullmq_job_count{queue="served", state="completed"}"#
        ),
        Some(10.0)
    );
    assert_eq!(
        metric_value(&text, r#"bullmq_job_completed_total{queue="served"}"#),
        Some(10.0)
    );
    assert!(text.contains("# TYPE bullmq_job_count gauge"));
}

#[test]
fn a_non_loopback_metrics_address_is_logged() {
    let redis = RedisServer::start();
    let port = free_port();
    let mut child = Killed(
        echomq()
            .args(["work", "open", "--url", &redis.url(), "--quiet"])
            .args(["--log-format", "json"])
            .args(["--metrics-addr", &format!("0.0.0.0:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let line = stderr
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("metrics endpoint"))
        .expect("a log line about the endpoint");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "WARN", "{line}");
    assert!(
        v["message"].as_str().unwrap().contains("non-loopback"),
        "{line}"
    );
}

#[test]
fn an_https_otlp_endpoint_is_a_configuration_error() {
    let out = echomq()
        .args(["work", "q", "--url", "redis://127.0.0.1:1"])
        .args(["--otlp-endpoint", "https://collector:4318"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("https is not supported"), "{stderr}");
}
