//! User JSON crosses the Rust side byte for byte: data a Node producer wrote
//! (keys not sorted, nested objects, unicode, escapes) comes back from an
//! EchoMQ echo worker as a `returnvalue` identical to Node's `data`, and a
//! Rust `update_data` / `update_progress` of the parsed value writes Node's
//! text again.

use std::time::Duration;

use echomq::protocol::job::field::{DATA as DATA_FIELD, PROGRESS, RETURN_VALUE};
use echomq::worker::{processor_fn, JobContext};
use echomq::{Queue, WorkerArgs, WorkerMsg};
use echomq_integration_tests::{bullmq, wait_until, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

const Q: &str = "jo";

/// Compact, as `JSON.stringify` writes it: key order is insertion order.
const DATA: &str = r#"{"i":0,"kind":"x","payload":{"z":1,"a":[1,2]},"nested":{"b":"é\n\"q\"","a":null},"emoji":"✓ 日本","esc":"tab\there\\"}"#;

async fn field(c: &Client, id: &str, name: &str) -> String {
    c.hget::<String, _, _>(format!("emq:{Q}:{id}"), name)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_json_round_trips_byte_identically_through_rust() {
    let redis = RedisServer::start();
    let c = redis.client().await;
    let data: Json = serde_json::from_str(DATA).unwrap();
    let ids = bullmq(
        "add-jobs",
        &redis.url(),
        Q,
        json!({"jobs": [{"name": "echo", "data": data, "opts": {}}]}),
    );
    assert_eq!(ids, json!(["1"]));
    let node_text = field(&c, "1", DATA_FIELD).await;
    assert_eq!(node_text, DATA, "Node stores JSON.stringify of the data");

    let conn = redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let echo = processor_fn(|job: JobContext| async move { Ok(job.data().clone()) });
    let mut args = WorkerArgs::new(q.clone(), echo);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq::worker::spawn_linked(host.get_cell(), args)
        .await
        .unwrap();
    wait_until(
        "the echo job completed",
        Duration::from_secs(10),
        async || q.counts().await.unwrap().completed == 1,
    )
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    assert_eq!(field(&c, "1", RETURN_VALUE).await, node_text);

    // Rust writes of the value parsed from Node's text give Node's text back.
    let parsed: Json = serde_json::from_str(&node_text).unwrap();
    q.update_data("1", &parsed).await.unwrap();
    assert_eq!(field(&c, "1", DATA_FIELD).await, node_text);
    q.update_progress("1", &parsed).await.unwrap();
    assert_eq!(field(&c, "1", PROGRESS).await, node_text);
    // And Node reads the Rust-written fields as the object it wrote.
    let read = bullmq("read-jobs", &redis.url(), Q, json!({"ids": ["1"]}));
    assert_eq!(read["1"]["returnvalue"], data);
}
