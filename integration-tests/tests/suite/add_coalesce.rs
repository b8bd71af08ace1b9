//! Concurrent `Queue::add` calls on one handle go together as
//! addStandardJobs calls once two calls are in flight (issue 42;
//! `crates/echomq/src/queue/coalesce.rs`): every caller gets its own job's
//! answer, refusals stay with their job, fewer calls than adds reach Redis,
//! and callers that give up mid-call leave no add without a sender.

use std::time::Duration;

use echomq::flow_producer::ParentRef;
use echomq::protocol::ScriptId;
use echomq::{JobOptions, Queue, QueueOptions};
use echomq_integration_tests::state::cmd;
use echomq_integration_tests::timeline::log_every_command;
use echomq_integration_tests::{events, wait_until, RedisServer};
use fred::prelude::*;
use serde_json::json;

use crate::group_commit::calls_of;

const LIMIT: Duration = Duration::from_secs(30);

/// Runs every future as its own task (all at once); their outputs in order.
async fn join_all<T: Send + 'static>(
    futures: impl Iterator<Item = impl std::future::Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("an add task"));
    }
    out
}

/// Calls of either standard add script in the slow log.
async fn add_calls(c: &Client) -> (usize, usize) {
    (
        calls_of(c, ScriptId::AddStandardJobs).await,
        calls_of(c, ScriptId::AddStandardJob).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_share_calls_and_each_gets_its_own_answer() {
    const N: usize = 400;
    let (redis, conn, q) = RedisServer::with_queue("co").await;
    let c = redis.client().await;
    log_every_command(&c).await;
    let ids = join_all((0..N).map(|i| {
        let q = q.clone();
        async move { q.add("n", &json!({ "i": i }), JobOptions::new()).await }
    }))
    .await;
    let mut seen = std::collections::HashSet::new();
    for (i, id) in ids.into_iter().enumerate() {
        let id = id.unwrap();
        assert!(seen.insert(id.clone()), "id {id} answered twice");
        let job = q
            .get_job(&id)
            .await
            .unwrap()
            .expect("the answered job exists");
        assert_eq!(job.data, json!({ "i": i }), "caller {i} got job {id}");
    }
    assert_eq!(q.counts().await.unwrap().waiting, N as u64);
    let (groups, singles) = add_calls(&c).await;
    eprintln!("{N} concurrent adds: {groups} addStandardJobs + {singles} addStandardJob calls");
    assert!(groups > 0, "no add was grouped");
    // On average two or more adds to a call (12 calls in all on a quiet
    // machine: the margin is for a loaded one).
    assert!(
        groups + singles < N / 2,
        "{groups} + {singles} calls for {N} adds"
    );
    let added = events(&c, &q.keys().events())
        .await
        .into_iter()
        .filter(|(name, _)| name == "added")
        .count();
    assert_eq!(added, N, "one added event per job");
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_duplicates_stay_with_their_own_add() {
    let (redis, _conn, q) = RedisServer::with_queue("co-mixed").await;
    let c = redis.client().await;
    log_every_command(&c).await;
    // Every fourth add names a parent that does not exist; every fifth
    // reuses one custom id; the rest are plain.
    let adds = join_all((0..200).map(|i| {
        let q = q.clone();
        async move {
            let o = if i % 4 == 1 {
                JobOptions::new().parent(ParentRef {
                    id: "missing".into(),
                    queue: "emq:co-mixed".into(),
                })
            } else if i % 5 == 0 {
                JobOptions::new().job_id("same")
            } else {
                JobOptions::new()
            };
            (i, q.add("n", &json!({ "i": i }), o).await)
        }
    }))
    .await;
    let mut plain = 0;
    for (i, r) in adds {
        if i % 4 == 1 {
            let e = r.expect_err("a missing parent is refused");
            assert_eq!(
                e.script_code(),
                Some(echomq::protocol::ScriptErrorCode::ParentJobNotExist),
                "add {i}: {e}"
            );
        } else if i % 5 == 0 {
            assert_eq!(r.unwrap(), "same", "add {i}");
        } else {
            let id = r.unwrap();
            let job = q.get_job(&id).await.unwrap().unwrap();
            assert_eq!(job.data, json!({ "i": i }));
            plain += 1;
        }
    }
    // The plain ones and one "same"; nothing of a refused add.
    assert_eq!(q.counts().await.unwrap().waiting, plain + 1);
    let (groups, _) = add_calls(&c).await;
    assert!(groups > 0, "no add was grouped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_give_up_leave_no_add_without_a_sender() {
    let (redis, _conn, q) = RedisServer::with_queue("co-drop").await;
    let c = redis.client().await;
    // Redis holds writes for a moment: the first two adds stay in flight
    // and the rest wait for a group while every caller is dropped.
    let _: String = cmd(
        &c,
        "CLIENT",
        vec!["PAUSE".into(), "500".into(), "WRITE".into()],
    )
    .await;
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let q = q.clone();
            tokio::spawn(async move { q.add("n", &json!({ "i": i }), JobOptions::new()).await })
        })
        .collect();
    // The handle's Debug shows its slots: both taken, adds waiting.
    wait_until("two adds in flight, the rest waiting", LIMIT, async || {
        let d = format!("{q:?}");
        d.contains("in_flight: 2") && !d.contains("waiting: 0,")
    })
    .await;
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        assert!(t.await.unwrap_err().is_cancelled());
    }
    // The slots came back: the handle adds again, alone and in groups.
    let more = join_all((0..100).map(|i| {
        let q = q.clone();
        async move { q.add("m", &json!({ "m": i }), JobOptions::new()).await }
    }));
    let more = tokio::time::timeout(LIMIT, more)
        .await
        .expect("adds after dropped callers answer");
    assert!(more.iter().all(|r| r.is_ok()));
    // A dropped caller's add may or may not have been stored (its outcome
    // is unknown to it); each at most once.
    let ids: Vec<String> = c.lrange(q.keys().wait(), 0, -1).await.unwrap();
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "an id twice in wait");
    assert!((100..=400).contains(&ids.len()), "{} waiting", ids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_group_of_one_sends_every_add_alone() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::with_options(&conn, "co-off", QueueOptions::default().add_group(1))
        .await
        .unwrap();
    log_every_command(&c).await;
    let ids = join_all((0..100).map(|i| {
        let q = q.clone();
        async move { q.add("n", &json!({ "i": i }), JobOptions::new()).await }
    }))
    .await;
    assert!(ids.iter().all(|r| r.is_ok()));
    assert_eq!(add_calls(&c).await, (0, 100));
}
