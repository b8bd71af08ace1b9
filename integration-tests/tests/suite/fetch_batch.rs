//! Fetching in batches in the worker (issue 42): a worker whose slots are
//! free takes several jobs with one moveJobsToActive call, each run in its
//! own slot under its own lock; a rate limit stops a batch where single
//! takes would have stopped; one free slot takes alone (moveToActive). The
//! calls are read on Redis's side (the slow log, as in `group_commit`).
//! The script's keyspace equality is `fetch_batch_equality`.

use std::time::Duration;

use echomq::protocol::ScriptId;
use echomq::{RateLimit, WorkerOptions};
use echomq_integration_tests::timeline::log_every_command;
use echomq_integration_tests::{wait_until, RedisServer};
use fred::prelude::*;

use crate::group_commit::{add_jobs, calls_of, outcomes, start, stop};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_slots_take_a_burst_in_batches_and_every_job_runs_once() {
    const N: usize = 300;
    let (redis, conn, q) = RedisServer::with_queue("fb16").await;
    let c = redis.client().await;
    add_jobs(&q, N, 9).await;
    log_every_command(&c).await;
    let mut w = start(
        &q,
        WorkerOptions::default()
            .concurrency(16)
            .drain_delay(Duration::from_millis(500)),
    )
    .await;
    let (completed, failed) = outcomes(&mut w, N).await;
    stop(w).await;
    assert_eq!(completed.len() + failed.len(), N);
    assert_eq!(failed.len(), N.div_ceil(9), "every ninth job fails");
    let batches = calls_of(&c, ScriptId::MoveJobsToActive).await;
    let singles = calls_of(&c, ScriptId::MoveToActive).await;
    // At start all 16 slots are free: the first take is a batch.
    assert!(batches > 0, "no batched take ({singles} single takes)");
    let active: i64 = c.llen("emq:fb16:active").await.unwrap();
    assert_eq!(active, 0);
    echomq_integration_tests::assert_consistent(&conn, "fb16").await;
    eprintln!("c16: {N} jobs taken with {batches} moveJobsToActive + {singles} moveToActive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_stops_a_batch_where_single_takes_would_stop() {
    const N: usize = 12;
    const MAX: u64 = 3;
    let (redis, conn, q) = RedisServer::with_queue("fblim").await;
    let c = redis.client().await;
    add_jobs(&q, N, 0).await;
    log_every_command(&c).await;
    let mut w = start(
        &q,
        WorkerOptions::default().concurrency(16).limiter(RateLimit {
            max: MAX,
            duration: Duration::from_secs(60),
        }),
    )
    .await;
    let (completed, _) = outcomes(&mut w, MAX as usize).await;
    assert_eq!(completed.len(), MAX as usize);
    // The window lasts 60 s: the limiter holds the count of the takes, and
    // the rest wait; none is active (a take past the limit would be).
    wait_until(
        "the rate-limited takes are reported",
        Duration::from_secs(10),
        async || {
            let done: i64 = c.zcard("emq:fblim:completed").await.unwrap();
            done == MAX as i64
        },
    )
    .await;
    let taken: String = c.get("emq:fblim:limiter").await.unwrap();
    assert_eq!(taken, MAX.to_string());
    let waiting: i64 = c.llen("emq:fblim:wait").await.unwrap();
    let active: i64 = c.llen("emq:fblim:active").await.unwrap();
    assert_eq!((waiting, active), ((N as u64 - MAX) as i64, 0));
    assert!(calls_of(&c, ScriptId::MoveJobsToActive).await > 0);
    stop(w).await;
    echomq_integration_tests::assert_consistent(&conn, "fblim").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_free_slot_takes_alone() {
    const N: usize = 30;
    let (redis, _conn, q) = RedisServer::with_queue("fb1").await;
    let c = redis.client().await;
    add_jobs(&q, N, 0).await;
    log_every_command(&c).await;
    let mut w = start(
        &q,
        WorkerOptions::default()
            .concurrency(1)
            .drain_delay(Duration::from_millis(500)),
    )
    .await;
    let (completed, _) = outcomes(&mut w, N).await;
    stop(w).await;
    assert_eq!(completed.len(), N);
    assert_eq!(calls_of(&c, ScriptId::MoveJobsToActive).await, 0);
    assert!(calls_of(&c, ScriptId::MoveToActive).await > 0);
}
