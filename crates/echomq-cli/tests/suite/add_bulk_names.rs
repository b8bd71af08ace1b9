//! `echomq add-bulk` takes job options by BullMQ's public names
//! (`deduplication`, `keepLogs`, `telemetry`, …), as `queue.addBulk` does:
//! the same lines added by the binary and by BullMQ 6.7.0 Node leave the same
//! keyspace, and a name BullMQ does not have is refused before anything is
//! written.

use echomq_integration_tests::keyspace::{assert_same, snapshot, Mask};
use echomq_integration_tests::{bullmq, RedisServer};
use serde_json::{json, Value as Json};

use crate::cli::run as echomq;

/// The lines as a JSON-lines file of this test (`tag`), in the temp dir.
fn write_lines(tag: &str, lines: &[Json]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "echomq-add-bulk-{}-{tag}.jsonl",
        std::process::id()
    ));
    let text: Vec<String> = lines.iter().map(Json::to_string).collect();
    std::fs::write(&path, text.join("\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_option_names_add_what_bullmq_adds() {
    let t = 1_700_000_000_000u64;
    let lines = vec![
        json!({"name": "a", "data": {"n": 1}, "opts": {"deduplication": {"id": "p"}, "timestamp": t}}),
        json!({"name": "a", "data": {"n": 2}, "opts": {"deduplication": {"id": "p"}, "timestamp": t}}),
        json!({"name": "b", "data": {}, "opts": {"keepLogs": 2, "removeOnComplete": true,
               "attempts": 3, "backoff": 1000, "priority": 4, "timestamp": t}}),
        json!({"name": "c", "data": {}, "opts": {"delay": 5000, "jobId": "custom",
               "telemetry": {"omitContext": true}, "timestamp": t}}),
    ];
    let file = write_lines("names", &lines);

    let node = RedisServer::start();
    let ids = bullmq("add-bulk", &node.url(), "q", json!({ "jobs": lines }));
    assert_eq!(ids, json!(["1", "1", "3", "custom"]), "two adds, one job");

    let rust = RedisServer::start();
    let out = echomq(&rust.url(), &["add-bulk", "q", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&file);
    let node_state = snapshot(&node.client().await, "q", Mask::default()).await;
    let rust_state = snapshot(&rust.client().await, "q", Mask::default()).await;
    assert_same("add-bulk", &node_state, &rust_state);
    assert!(rust_state.contains_key("de:p"), "{rust_state:?}");
    assert_eq!(rust_state["1"][1]["opts"]["de"], json!({"id": "p"}));
    assert!(rust_state["1"][1]["opts"].get("deduplication").is_none());
    assert_eq!(rust_state["3"][1]["opts"]["kl"], json!(2));
    assert_eq!(rust_state["custom"][1]["opts"]["omc"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_option_name_is_refused_and_nothing_is_written() {
    let redis = RedisServer::start();
    let file = write_lines(
        "unknown",
        &[
            json!({"name": "ok", "data": {}}),
            json!({"name": "typo", "data": {}, "opts": {"dedup": {"id": "p"}}}),
        ],
    );
    let out = echomq(&redis.url(), &["add-bulk", "q", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    assert!(!out.status.success(), "a misspelt option was accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2") && err.contains("unknown job option `dedup`"),
        "{err}"
    );
    assert!(err.contains("deduplication"), "names the options: {err}");
    let keys = echomq_integration_tests::keys(&redis.client().await, "emq:*").await;
    let jobs: Vec<&String> = keys.iter().filter(|k| !k.ends_with(":meta")).collect();
    assert!(jobs.is_empty(), "nothing added: {keys:?}");
}
