//! Dead letters from the command line (issue 45, docs/operations.md §Dead
//! letters): `echomq work --dead-letter` moves final failures and serves
//! `echomq_dead_letters` on /metrics; `echomq dlq <queue> list|show|replay`
//! with filters; bad input refused with nothing moved; a replay SIGKILLed
//! midway and run again neither doubles nor loses a job.

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use echomq::dead_letter::DeadLetterFilter;
use echomq::{JobOptions, NewJob, Queue};
use echomq_integration_tests::{assert_consistent, wait_until, RedisServer};
use serde_json::json;

use crate::cli::{free_port, ok, refused, scrape, Killed};

const Q: &str = "orders";
const DLQ: &str = "orders-dead";

async fn add(q: &Queue, n: usize, name: &str) {
    let jobs = (0..n)
        .map(|i| NewJob {
            name: name.to_owned(),
            data: json!({ "i": i }),
            options: JobOptions::new().attempts(2),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
}

/// `echomq work --processor fail --dead-letter` dead-letters each job once
/// its attempts are spent, and /metrics counts them by source and class;
/// `dlq list` filters, `dlq show` shows one, `dlq replay` puts them back.
/// Checked to fail without the feature: without `--dead-letter` wired to the
/// worker option, the jobs stay in `failed` and the wait times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_dead_letters_and_dlq_lists_shows_and_replays() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let dlq = Queue::new(&conn, DLQ).await.unwrap();
    add(&q, 4, "charge").await;
    add(&q, 2, "refund").await;

    // Bad input first: nothing may be written.
    refused(
        &url,
        &["work", Q, "--dead-letter", Q],
        "its own dead-letter queue",
    );
    refused(&url, &["dlq", DLQ, "replay", "--rate", "0"], "--rate");
    refused(
        &url,
        &["dlq", DLQ, "list", "--since", "yesterday"],
        "time ago",
    );

    let port = free_port();
    let _worker = Killed(
        crate::cli::command()
            .args(["--url", &url, "work", Q, "--quiet", "--processor", "fail"])
            .args(["--dead-letter", DLQ])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let series = format!(r#"echomq_dead_letters{{queue="{DLQ}", source="{Q}", class="error"}} 6"#);
    wait_until(
        &format!("a scrape with {series}"),
        Duration::from_secs(60),
        async || scrape(port).is_some_and(|t| t.lines().any(|l| l == series)),
    )
    .await;
    drop(_worker);
    assert_eq!(q.counts().await.unwrap().failed, 0);
    assert_eq!(dlq.dead_letters().count().await.unwrap(), 6);

    let list = ok(&url, &["dlq", DLQ, "list", "--name", "refund"]);
    assert!(list.contains("2 shown of 6 dead letters"), "{list}");
    let list = ok(
        &url,
        &[
            "dlq", DLQ, "list", "--source", Q, "--since", "1h", "--limit", "3",
        ],
    );
    assert!(list.contains("3 shown of 6"), "{list}");
    let list = ok(&url, &["dlq", DLQ, "list", "--class", "timeout"]);
    assert!(list.contains("0 shown of 6"), "{list}");
    let one = dlq
        .dead_letters()
        .list(&DeadLetterFilter::all().name("refund"), 1)
        .await
        .unwrap();
    let shown = ok(&url, &["dlq", DLQ, "show", &one[0].id]);
    assert!(
        shown.contains(&format!("source:         {Q} (job {})", one[0].source_id)),
        "{shown}"
    );
    assert!(shown.contains("attempts made:  2"), "{shown}");
    assert!(shown.contains("name:           refund"), "{shown}");
    refused(&url, &["dlq", DLQ, "show", "nope"], "not found");

    refused(
        &url,
        &["dlq", DLQ, "replay", "--name", "nothing"],
        "matches",
    );
    refused(
        &url,
        &["dlq", DLQ, "replay", "--source", "gone"],
        "does not exist",
    );
    assert_eq!(
        dlq.dead_letters().count().await.unwrap(),
        6,
        "nothing moved"
    );

    let out = ok(&url, &["dlq", DLQ, "replay", "--name", "refund"]);
    assert!(out.contains("2 replayed, 0 left in place"), "{out}");
    let c = q.counts().await.unwrap();
    assert_eq!(c.waiting, 2);
    assert_eq!(dlq.dead_letters().count().await.unwrap(), 4);
    assert_consistent(&conn, Q).await;
    assert_consistent(&conn, DLQ).await;
}

/// `echomq dlq replay --rate` SIGKILLed midway, then run again: every dead
/// letter is back in its queue once — source + dead letters = added, no id
/// twice, both audits clean. Fails if the kill came before the first replay
/// or after the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_sigkilled_midway_and_run_again_neither_doubles_nor_loses() {
    const N: u64 = 60;
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let dlq = Queue::new(&conn, DLQ).await.unwrap();
    add(&q, N as usize, "charge").await;
    let out = crate::cli::command()
        .args(["--url", &url, "work", Q, "--quiet", "--processor", "fail"])
        .args(["--dead-letter", DLQ, "--max-jobs", &(2 * N).to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(dlq.dead_letters().count().await.unwrap(), N);

    let mut replay = Killed(
        crate::cli::command()
            .args(["--url", &url, "dlq", DLQ, "replay", "--rate", "40"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("a few replayed", Duration::from_secs(20), async || {
        q.counts().await.unwrap().waiting >= 10
    })
    .await;
    replay.0.kill().unwrap();
    let _ = replay.0.wait();
    let back = q.counts().await.unwrap().waiting;
    let left = dlq.dead_letters().count().await.unwrap();
    assert!(
        back > 0 && left > 0,
        "the kill came at an end ({back} back, {left} left)"
    );
    assert_eq!(back + left, N, "a job doubled or lost at the kill");

    let out = ok(&url, &["dlq", DLQ, "replay"]);
    assert!(
        out.contains(&format!("{left} replayed, 0 left in place")),
        "{out}"
    );
    let ids: Vec<String> = q
        .get_jobs(
            &[echomq::JobState::Waiting],
            0,
            -1,
            echomq::RangeOrder::Ascending,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(ids.len() as u64, N);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len() as u64, N);
    assert_eq!(dlq.dead_letters().count().await.unwrap(), 0);
    assert_consistent(&conn, Q).await;
    assert_consistent(&conn, DLQ).await;
}
