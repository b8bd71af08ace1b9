//! `echomq work` as a process: started before its Redis it waits (one log
//! line per attempt) and then works; a bounded wait ends with exit 3 and one
//! readable line; a missing queue is a configuration error (exit 2).

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use echomq::{JobOptions, Queue};
use echomq_integration_tests::restartable::RestartableRedis;
use serde_json::json;

use crate::cli::command as echomq;

#[test]
fn a_bounded_wait_for_an_absent_redis_exits_3_with_one_readable_line() {
    let redis = RestartableRedis::reserve();
    let t0 = Instant::now();
    let out = echomq()
        .args([
            "work",
            "q",
            "--url",
            &redis.url(),
            "--connect-timeout",
            "1000",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let last = stderr.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "error: cannot connect to Redis at 127.0.0.1:{}: connection refused; is redis-server running and listening there? check --url / ECHOMQ_URL",
            redis.port()
        )
    );
    assert!(!stderr.contains("Os {"), "no Debug dump: {stderr}");
}

#[test]
fn configuration_errors_exit_2() {
    let out = echomq().args(["work"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap().trim_end(),
        "error: no queue: give it as an argument, ECHOMQ_QUEUE or `queue` in the config file"
    );
    let out = echomq()
        .args(["work", "q"])
        .env("ECHOMQ_CONCURRENCY", "many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_3s_before_redis_it_waits_then_works() {
    let mut redis = RestartableRedis::reserve();
    let mut child = echomq()
        .args([
            "work",
            "early",
            "--max-jobs",
            "5",
            "--quiet",
            "--log-format",
            "json",
        ])
        .env("ECHOMQ_URL", redis.url())
        .env("ECHOMQ_CONCURRENCY", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The phenomenon: Redis is absent for 3 s after the worker started.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "still waiting for Redis"
    );
    redis.start();
    let conn = echomq::Connection::connect_url(&redis.url()).await.unwrap();
    let q = Queue::new(&conn, "early").await.unwrap();
    for i in 0..5 {
        q.add("j", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap();
    }
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "worker did not finish 5 jobs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    // JSON log lines: one per failed attempt, then the connection.
    let logs: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let retries = logs
        .iter()
        .filter(|l| l["message"] == "Redis not reachable yet; retrying")
        .count();
    assert!(
        retries >= 3,
        "a line per attempt while Redis was absent: {stderr}"
    );
    let first = logs
        .iter()
        .find(|l| l["message"] == "Redis not reachable yet; retrying")
        .unwrap();
    assert_eq!(first["level"], "WARN");
    assert!(first["error"]
        .as_str()
        .unwrap()
        .starts_with("cannot connect to Redis at 127.0.0.1:"));
    assert!(
        logs.iter().any(|l| l["message"] == "connected to Redis"),
        "{stderr}"
    );
    assert_eq!(
        q.counts().await.unwrap().completed,
        5,
        "the five jobs completed"
    );
}
