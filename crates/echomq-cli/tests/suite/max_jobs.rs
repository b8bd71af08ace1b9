//! `echomq work --max-jobs N` on a queue deeper than N takes exactly N jobs
//! and exits: no job is fetched past the limit — neither by `moveToActive`
//! nor by the fetch-next of a finishing call — however fast the jobs go.
//! (The limit used to be read from the progress line once a second: at c16
//! a run with `--max-jobs 1000` processed 12,433 jobs.)

use echomq::{JobOptions, NewJob};
use echomq_integration_tests::RedisServer;
use serde_json::json;

use crate::cli::run as echomq;

async fn deep_queue(q: &echomq::Queue, n: usize) {
    let jobs = (0..n)
        .map(|i| NewJob {
            name: "j".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
}

async fn run_to_the_limit(queue: &str, total: usize, limit: u64, extra: &[&str]) {
    let (redis, _conn, q) = RedisServer::with_queue(queue).await;
    deep_queue(&q, total).await;
    let limit_arg = limit.to_string();
    let mut args = vec!["work", queue, "--quiet", "--max-jobs", &limit_arg];
    args.extend_from_slice(extra);
    let out = echomq(&redis.url(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.completed, limit, "{counts:?}");
    assert_eq!(counts.waiting, total as u64 - limit, "{counts:?}");
    assert_eq!((counts.active, counts.failed), (0, 0), "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_at_c16_takes_exactly_max_jobs() {
    run_to_the_limit("deep", 5000, 1000, &["--concurrency", "16"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_worker_takes_exactly_max_jobs() {
    // 130 is no multiple of the batch size: the last batch is cut to fit.
    run_to_the_limit(
        "batches",
        1000,
        130,
        &["--concurrency", "2", "--batch", "50"],
    )
    .await;
}
