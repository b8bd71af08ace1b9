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
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
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

/// A typed job, fields in the order a Node producer writes its object.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Email {
    to: String,
    subject: String,
    n: u32,
    tags: Vec<String>,
    meta: Meta,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Meta {
    z: i64,
    a: Option<String>,
}

#[derive(serde::Serialize)]
struct Receipt {
    to: String,
    words: usize,
    attempt: u64,
}

const EMAIL: &str = r#"{"to":"ada@example.com","subject":"Hé \"there\"","n":3,"tags":["b","a"],"meta":{"z":-1,"a":null}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_jobs_store_what_node_stores_and_read_what_node_wrote() {
    use echomq::{typed_processor, ProcessError, TypedJob};
    let redis = RedisServer::start();
    let c = redis.client().await;
    let q_name = "typed";
    let node_data: Json = serde_json::from_str(EMAIL).unwrap();
    // Node's job 1, and job 2 whose data does not fit `Email`.
    let ids = bullmq(
        "add-jobs",
        &redis.url(),
        q_name,
        json!({"jobs": [
            {"name": "email", "data": node_data, "opts": {}},
            {"name": "email", "data": {"to": 5}, "opts": {"attempts": 3}},
        ]}),
    );
    assert_eq!(ids, json!(["1", "2"]));
    let stored = |id: &str| {
        let c = c.clone();
        let key = format!("emq:{q_name}:{id}");
        async move { c.hget::<String, _, _>(key, DATA_FIELD).await.unwrap() }
    };
    assert_eq!(stored("1").await, EMAIL);

    // The typed producer writes the same bytes for the same value.
    let conn = redis.connect().await;
    let q = Queue::new(&conn, q_name).await.unwrap();
    let emails = q.typed::<Email>();
    let value: Email = serde_json::from_str(EMAIL).unwrap();
    let id = emails
        .add("email", &value, echomq::JobOptions::new())
        .await
        .unwrap();
    assert_eq!(id, "3");
    assert_eq!(stored("3").await, EMAIL, "byte-identical to Node's");
    let bulk = emails
        .add_bulk([("email".to_owned(), value, echomq::JobOptions::new())])
        .await
        .unwrap();
    assert_eq!(stored(&bulk[0]).await, EMAIL);
    let (_, read) = emails.get("1").await.unwrap().unwrap();
    assert_eq!(read.unwrap().subject, "Hé \"there\"");
    let (_, misfit) = emails.get("2").await.unwrap().unwrap();
    assert!(misfit.is_err());

    let processor = typed_processor(|job: TypedJob<Email>| async move {
        job.log(&format!("to {}", job.data().to)).await?;
        Ok::<_, ProcessError>(Receipt {
            to: job.data().to.clone(),
            words: job.data().subject.split_whitespace().count(),
            attempt: job.attempt(),
        })
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    wait_until(
        "every typed job finished",
        Duration::from_secs(20),
        async || {
            let counts = q.counts().await.unwrap();
            counts.completed == 3 && counts.failed == 1
        },
    )
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();

    let read = bullmq(
        "read-jobs",
        &redis.url(),
        q_name,
        json!({"ids": ["1", "2", "3"]}),
    );
    let receipt = json!({"to": "ada@example.com", "words": 2, "attempt": 1});
    assert_eq!(read["1"]["returnvalue"], receipt);
    assert_eq!(read["3"]["returnvalue"], receipt);
    let returned: String = c
        .hget(format!("emq:{q_name}:1"), RETURN_VALUE)
        .await
        .unwrap();
    assert_eq!(
        returned, r#"{"to":"ada@example.com","words":2,"attempt":1}"#,
        "the return value in field order"
    );
    // The misfit failed at once, whatever its attempts, with the reason; its
    // data is as Node wrote it.
    assert_eq!(read["2"]["state"], "failed");
    assert_eq!(read["2"]["attemptsMade"], 1);
    let reason = read["2"]["failedReason"].as_str().unwrap();
    assert!(
        reason.starts_with("the data of job 2 does not fit ")
            && reason.contains("Email: invalid type: integer `5`, expected a string"),
        "{reason}"
    );
    assert_eq!(stored("2").await, r#"{"to":5}"#);
}
