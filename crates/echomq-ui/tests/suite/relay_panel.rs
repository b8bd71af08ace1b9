//! The relay panel over a real redis-server: a BullMQ 6.7.0 node and an
//! EchoMQ retained message shown read-only and escaped; the relay's keys
//! never listed as queues.

use crate::support;

use std::time::Duration;

use echomq::relay::RelayClient;
use echomq::{JobOptions, Queue};
use echomq_integration_tests::NodeChild;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_panel_shows_a_namespace_escaped_and_queues_stay_queues() {
    let h = start(fast()).await;
    let url = h.redis.url();
    let queue = Queue::new(&h.conn, "mail").await.unwrap();
    queue
        .add("welcome", &json!({}), JobOptions::new())
        .await
        .unwrap();
    let mut node = NodeChild::spawn(
        "relay.js",
        &url,
        "ops",
        json!({"nodeId": "bullnode", "name": "<script>alert(1)</script>", "subscribe": ["deploy.*", "mail.id"]}),
    );
    let client = RelayClient::new(&h.conn, "ops").unwrap();
    client
        .publish(
            "deploy.status",
            &json!({"html": "<img src=x onerror=alert(2)>"}),
            Some(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    node.wait_line(Duration::from_secs(20), |v| v["ev"] == "msg");

    let api = h.json("/api/relay?namespace=ops").await;
    assert_eq!(api["namespace"], "ops");
    assert_eq!(api["namespaces"], json!(["ops"]));
    assert_eq!(
        api["counts"],
        json!({"nodes": 1, "subscriptions": 2, "patterns": 2, "retained": 1})
    );
    assert_eq!(api["nodes"][0]["id"], "bullnode");
    assert_eq!(api["nodes"][0]["info"]["name"], "<script>alert(1)</script>");
    assert_eq!(api["nodes"][0]["info"]["version"], "6.7.6");
    assert_eq!(api["subscriptions"][0]["nodeId"], "bullnode");
    assert_eq!(api["retained"][0]["topic"], "deploy.status");

    let page = h.html("/relay?namespace=ops").await;
    assert!(
        page.contains("bullnode") && page.contains("deploy.*") && page.contains("deploy.status")
    );
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(
        !page.contains("<script>alert(1)"),
        "node info reaches the page as text"
    );
    assert!(
        !page.contains("<img src=x"),
        "retained data reaches the page as text"
    );
    assert!(page.contains("1 node(s), 2 subscription(s) on 2 pattern(s), 1 retained message(s)"));
    // The default namespace is empty; a bad one is refused.
    let empty = h.html("/relay").await;
    assert!(empty.contains("No node.") && empty.contains("No retained message."));
    assert_eq!(h.get("/relay?namespace=no%20way").await.status(), 400);
    assert_eq!(h.get("/api/relay?namespace=a.b").await.status(), 400);

    // With every kind of relay key present, the queue list is the one queue.
    let all = h.json("/api/queues").await;
    let names: Vec<&str> = all["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mail"]);
    node.finish();
}
