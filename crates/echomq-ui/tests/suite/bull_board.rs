//! The ecosystem sees EchoMQ's queues: bull-board's own API (`@bull-board/api`
//! with its BullMQAdapter, `integration-tests/browser/bullboard.js`) lists a
//! queue EchoMQ wrote, with the right counts and a job EchoMQ added.
//!
//! Skipped, with a message, only when the npm packages are missing and CI
//! is not set.

use std::path::PathBuf;
use std::time::Duration;

use echomq::{JobOptions, Queue};
use echomq_integration_tests::RedisServer;
use serde_json::json;

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../integration-tests/browser")
}

#[tokio::test(flavor = "multi_thread")]
async fn bull_board_lists_an_echomq_queue() {
    if !browser_dir().join("node_modules/@bull-board/api").is_dir() {
        let why = format!(
            "npm packages missing: run `npm ci` in {}",
            browser_dir().display()
        );
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        assert!(!ci, "CI is set, so the bull-board check must run: {why}");
        eprintln!("SKIPPED bull-board check: {why}");
        return;
    }
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "board").await.unwrap();
    let id = q
        .add(
            "from-echomq",
            &json!({"hello": "bull-board", "n": 1}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    q.add("second", &json!({"n": 2}), JobOptions::new().priority(3))
        .await
        .unwrap();
    q.add(
        "later",
        &json!({"n": 3}),
        JobOptions::new().delay(Duration::from_secs(600)),
    )
    .await
    .unwrap();
    q.pause().await.unwrap();

    let out = tokio::process::Command::new("node")
        .current_dir(browser_dir())
        .args(["bullboard.js", &redis.url(), "board", &id])
        .output()
        .await
        .expect("node runs");
    assert!(
        out.status.success(),
        "bullboard.js failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let board = &v["queue"];
    assert_eq!(board["name"], "board");
    assert_eq!(board["isPaused"], true);
    let counts = &board["counts"];
    let c = q.counts().await.unwrap();
    assert_eq!(counts["waiting"], json!(c.waiting), "{counts}");
    assert_eq!(counts["prioritized"], json!(c.prioritized), "{counts}");
    assert_eq!(counts["delayed"], json!(c.delayed), "{counts}");
    assert_eq!((c.waiting, c.prioritized, c.delayed), (1, 1, 1));
    let listed = board["jobs"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|j| j["id"] == id.as_str() && j["name"] == "from-echomq"),
        "{listed:?}"
    );
    let job = &v["job"];
    assert_eq!(job["name"], "from-echomq");
    assert_eq!(job["data"], json!({"hello": "bull-board", "n": 1}));
    conn.close().await;
}
