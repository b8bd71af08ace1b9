//! The blocking readers reconnect under the name they opened with: a
//! QueueEvents or GroupFeeder whose connection is killed (`CLIENT KILL`) reads
//! again on a fresh connection that `CLIENT LIST` shows with the same name
//! (BullMQ's `getWorkers` and the dashboard read these names), and goes on
//! delivering.

use std::time::Duration;

use echomq::groups::{GroupFeeder, GroupFeederArgs, GroupFeederMsg};
use echomq::{Delivery, JobOptions, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg};
use echomq_integration_tests::{wait_until, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::json;

async fn client_list(c: &Client) -> String {
    c.custom(
        fred::types::CustomCommand::new_static("CLIENT", fred::types::ClusterHash::FirstKey, false),
        vec!["LIST"],
    )
    .await
    .unwrap()
}

/// The id of the connection named `name` that blocks in `cmd`, once there is one.
async fn blocked_id(c: &Client, name: &str, cmd: &str) -> String {
    let mut id = String::new();
    wait_until(
        &format!("{name} blocked in {cmd}"),
        Duration::from_secs(5),
        async || {
            let list = client_list(c).await;
            match list
                .lines()
                .find(|l| l.contains(&format!("name={name} ")) && l.contains(&format!("cmd={cmd}")))
            {
                Some(line) => {
                    id = line
                        .split_whitespace()
                        .find_map(|f| f.strip_prefix("id="))
                        .unwrap()
                        .to_owned();
                    true
                }
                None => false,
            }
        },
    )
    .await;
    id
}

async fn kill(c: &Client, id: &str) {
    let _: Value = c
        .custom(
            fred::types::CustomCommand::new_static(
                "CLIENT",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec!["KILL", "ID", id],
        )
        .await
        .unwrap();
}

/// Waits until a connection other than `old` named `name` blocks in `cmd`.
async fn renamed(c: &Client, name: &str, cmd: &str, old: &str) {
    wait_until(
        "a fresh connection under the same name",
        Duration::from_secs(10),
        async || {
            client_list(c).await.lines().any(|l| {
                l.contains(&format!("name={name} "))
                    && !l.contains(&format!("id={old} "))
                    && l.contains(&format!("cmd={cmd}"))
            })
        },
    )
    .await;
}

#[tokio::test]
async fn queue_events_reconnects_under_its_name() {
    let (redis, conn, q) = RedisServer::with_queue("named").await;
    let c = redis.client().await;
    let args = QueueEventsArgs::new(conn.clone(), "named").block(Duration::from_millis(500));
    let (qe, _h) = Actor::spawn(None, QueueEvents, args).await.unwrap();
    let mut sub = call_t!(qe, QueueEventsMsg::Subscribe, 2000, 100).unwrap();
    // <prefix>:<base64("named")>:qe
    let name = "emq:bmFtZWQ=:qe";
    let id = blocked_id(&c, name, "xread").await;
    kill(&c, &id).await;
    renamed(&c, name, "xread", &id).await;
    // Nothing was lost or delivered twice across the reconnect.
    q.add("after", &json!({}), JobOptions::new()).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .expect("a delivery within 5 s")
        .expect("actor alive");
    match first {
        Delivery::Event(e) => assert_eq!(e.kind.name(), "added"),
        other => panic!("unexpected {other:?}"),
    }
    qe.cast(QueueEventsMsg::Close).unwrap();
}

#[tokio::test]
async fn group_feeder_reconnects_under_its_name() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "fed").await.unwrap();
    // A feeder reads the stream once its queue has a group (before, it only
    // looks for one).
    q.add(
        "g",
        &json!({}),
        JobOptions::new().group(echomq::groups::GroupOptions::new("g1")),
    )
    .await
    .unwrap();
    let args = GroupFeederArgs::new(conn.clone(), "fed").block(Duration::from_millis(500));
    let (feeder, _h) = Actor::spawn(None, GroupFeeder, args).await.unwrap();
    // The QueueEvents name of the queue with `:groups`.
    let name = "emq:ZmVk:qe:groups";
    let id = blocked_id(&c, name, "xread").await;
    let rounds = call_t!(feeder, GroupFeederMsg::GetStats, 2000)
        .unwrap()
        .rounds;
    kill(&c, &id).await;
    renamed(&c, name, "xread", &id).await;
    // And it goes on with its rounds.
    wait_until(
        "rounds after the reconnect",
        Duration::from_secs(5),
        async || {
            call_t!(feeder, GroupFeederMsg::GetStats, 2000)
                .unwrap()
                .rounds
                > rounds + 1
        },
    )
    .await;
    feeder.cast(GroupFeederMsg::Close).unwrap();
}
