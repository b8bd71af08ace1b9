//! `echomq add --timeout` and `echomq cancel` run as the binary against a
//! real Redis, with `echomq work` (another process) holding the job: the
//! cancel reaches that worker, the job fails (or retries) with the reason,
//! a job not started yet is removed, and bad input writes nothing.

use std::process::{Child, Stdio};
use std::time::Duration;

use echomq_integration_tests::RedisServer;
use fred::prelude::*;

use crate::cli::ok;
use crate::cli::run as echomq;

/// A worker process holding the queue's jobs for a minute each.
struct Worker(Child);

impl Worker {
    fn start(url: &str, queue: &str) -> Worker {
        let child = crate::cli::command()
            .args([
                "--url",
                url,
                "work",
                queue,
                "--processor",
                "sleep:60000",
                "--concurrency",
                "2",
                "--quiet",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("echomq work starts");
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for(what: &str, f: impl AsyncFnMut() -> bool) {
    echomq_integration_tests::wait_until(what, Duration::from_secs(30), f).await
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_from_the_command_line_reaches_the_worker_process() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;

    // Bad input is refused before anything is written.
    let out = echomq(&url, &["add", "cq", "x", "{}", "--timeout", "-5"]);
    assert!(!out.status.success());
    assert!(echomq_integration_tests::keys(&c, "*").await.is_empty());

    // --timeout is stored as the job's emqTimeout.
    let later = ok(
        &url,
        &[
            "add",
            "cq",
            "later",
            "{}",
            "--delay",
            "600000",
            "--timeout",
            "2500",
        ],
    );
    let later = later.trim().rsplit(' ').next().unwrap().to_owned();
    let stored: Option<String> = c.hget(format!("emq:cq:{later}"), "opts").await.unwrap();
    assert!(stored.unwrap().contains(r#""emqTimeout":2500"#));
    // add-bulk takes the public name `timeout`, stored the same way.
    let file = std::env::temp_dir().join(format!("cancel_cli_{}.jsonl", std::process::id()));
    std::fs::write(
        &file,
        "{\"name\": \"b\", \"data\": {}, \"opts\": {\"timeout\": 1500, \"delay\": 600000}}\n",
    )
    .unwrap();
    ok(&url, &["add-bulk", "cq", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    let bulk: Vec<String> = c
        .zrange("emq:cq:delayed", 0, -1, None, false, None, false)
        .await
        .unwrap();
    let bulk = bulk
        .into_iter()
        .find(|id| *id != later)
        .expect("the add-bulk job");
    let stored: Option<String> = c.hget(format!("emq:cq:{bulk}"), "opts").await.unwrap();
    assert!(stored.unwrap().contains(r#""emqTimeout":1500"#));
    ok(&url, &["cancel", "cq", &bulk]);
    let said = ok(&url, &["cancel", "cq", &later]);
    assert!(said.contains("removed"), "{said}");
    let gone: bool = c.exists(format!("emq:cq:{later}")).await.unwrap();
    assert!(!gone);

    // Two jobs held by a worker process: one failed for good, one retried.
    let one = ok(&url, &["add", "cq", "long", "{}"])
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_owned();
    let two = ok(&url, &["add", "cq", "long", "{}", "--attempts", "2"])
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_owned();
    let _worker = Worker::start(&url, "cq");
    let lock = |id: &str| format!("emq:cq:{id}:lock");
    wait_for("the worker holds both jobs", async || {
        let held: i64 = c.exists(vec![lock(&one), lock(&two)]).await.unwrap();
        held == 2
    })
    .await;
    let said = ok(&url, &["cancel", "cq", &one, "--reason", "not needed"]);
    assert!(said.contains("failed"), "{said}");
    let reason: Option<String> = c
        .hget(format!("emq:cq:{one}"), "failedReason")
        .await
        .unwrap();
    assert_eq!(reason.as_deref(), Some("not needed"));
    let failed: Option<f64> = c.zscore("emq:cq:failed", &one).await.unwrap();
    assert!(failed.is_some());
    let said = ok(&url, &["cancel", "cq", &two, "--retry"]);
    assert!(said.contains("run again"), "{said}");
    // The worker hears the cancel and takes the retried job again: its
    // second attempt is running under a new lock.
    wait_for("the retried job runs again", async || {
        // BullMQ 6.7's fields: `atm` attempts made, `ats` attempts started.
        let made: Vec<Option<i64>> = c
            .hmget(format!("emq:cq:{two}"), vec!["atm", "ats"])
            .await
            .unwrap();
        let held: bool = c.exists(lock(&two)).await.unwrap();
        made == [Some(1), Some(2)] && held
    })
    .await;
    let said = ok(&url, &["cancel", "cq", &one]);
    assert!(said.contains("already finished"), "{said}");
    let out = echomq(&url, &["cancel", "cq", "404"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}

/// `echomq work --batch` takes and finishes jobs in batches; `--default-timeout`
/// fails an attempt that runs too long with a timeout reason.
#[tokio::test(flavor = "multi_thread")]
async fn work_takes_batches_and_times_jobs_out() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;
    for _ in 0..6 {
        ok(&url, &["add", "bq", "j", "{}"]);
    }
    let out = echomq(
        &url,
        &[
            "work",
            "bq",
            "--batch",
            "3/3/5000",
            "--max-jobs",
            "6",
            "--quiet",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: i64 = c.zcard("emq:bq:completed").await.unwrap();
    assert_eq!(done, 6);
    let refused = echomq(&url, &["work", "bq", "--batch", "3/4"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--batch"));

    let id = ok(&url, &["add", "tq", "slow", "{}"]).trim().to_owned();
    let _worker = {
        let child = crate::cli::command()
            .args(["--url", &url, "work", "tq", "--processor", "sleep:60000"])
            .args(["--default-timeout", "300", "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("echomq work starts");
        Worker(child)
    };
    wait_for("the job timed out", async || {
        let failed: Option<f64> = c.zscore("emq:tq:failed", &id).await.unwrap();
        failed.is_some()
    })
    .await;
    let reason: Option<String> = c
        .hget(format!("emq:tq:{id}"), "failedReason")
        .await
        .unwrap();
    assert!(reason.unwrap().contains("timed out after 300 ms"));
}
