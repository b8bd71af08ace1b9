//! The byte budget on the queue page (issue 44, docs/operations.md §Memory):
//! a queue with a budget shows one line — bytes kept, the budget, jobs kept
//! and removed — and the queue API carries the same; a queue without one
//! shows nothing.

use crate::support;

use echomq::{JobOptions, Queue};
use serde_json::json;
use support::{fast, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_with_a_budget_shows_its_bytes_kept() {
    let h = start(fast()).await;
    let q = Queue::new(&h.conn, "kept").await.unwrap();
    q.add("j", &json!({"pad": "x".repeat(500)}), JobOptions::new())
        .await
        .unwrap();
    let html = h.html("/queues/kept").await;
    assert!(!html.contains("queue-budget"), "no budget, no line");
    assert!(h.json("/api/queues/kept").await["budget"].is_null());

    q.set_byte_budget(2 << 20).await.unwrap();
    let html = h.html("/queues/kept").await;
    assert!(html.contains("id=\"queue-budget\""), "{html}");
    assert!(html.contains("of a budget of 2.0 MiB"), "{html}");
    assert!(html.contains("0 removed by the budget"), "{html}");
    let api = h.json("/api/queues/kept").await;
    assert_eq!(api["budget"]["max_bytes"], 2 << 20, "{api}");
    assert!(api["budget"]["used_bytes"].as_u64().unwrap() > 0, "{api}");
}
