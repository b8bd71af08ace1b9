//! A real browser drives the dashboard: Debian's headless Chromium, through
//! playwright-core (`integration-tests/browser/dashboard.js`), opens the
//! overview, follows a queue's failed count to the job BullMQ Node failed,
//! retries it through the confirm step and sees it complete in the live
//! feed; a screenshot is saved under `target/ui-browser/`.
//!
//! Skipped, with a message, only when Chromium or the npm packages are
//! missing and CI is not set; under CI it must run.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use echomq::{processor_fn, JobContext, Queue, WorkerArgs, WorkerMsg, WorkerSetSpec};
use echomq_integration_tests::{bullmq, NullSupervisor};
use fred::prelude::KeysInterface;
use ractor::{call_t, Actor};
use serde_json::json;
use support::*;

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../integration-tests/browser")
}

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    path.is_file().then_some(path)
}

/// What is missing for the browser test, if anything; under CI a missing
/// piece is a failure, elsewhere a skip.
fn missing() -> Option<String> {
    let why = if chromium().is_none() {
        "Chromium is not installed (Debian: apt-get install chromium; or set CHROMIUM)".to_owned()
    } else if !browser_dir().join("node_modules/playwright-core").is_dir() {
        format!(
            "npm packages missing: run `npm ci` in {}",
            browser_dir().display()
        )
    } else {
        return None;
    };
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(!ci, "CI is set, so the browser test must run: {why}");
    eprintln!("SKIPPED browser test: {why}");
    Some(why)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_browser_retries_a_failed_job_and_sees_it_complete() {
    if missing().is_some() {
        return;
    }
    let h = start(fast()).await;
    let url = h.redis.url();
    // BullMQ Node makes the queue and fails the job's first attempt.
    bullmq(
        "ops",
        &url,
        "browser",
        json!({"ops": [
            ["add", "flaky", {"mode": "fail-until", "n": 1, "reason": "first attempt fails"}],
            ["work"]
        ]}),
    );
    let queue = Queue::new(&h.conn, "browser").await.unwrap();
    assert_eq!(queue.get_job_state("1").await.unwrap().as_str(), "failed");

    // An EchoMQ worker serves the queue; the retried job waits for the
    // browser's signal, so its completion happens while the page watches.
    const GO: &str = "ui-e2e:go";
    let conn = h.conn.clone();
    let processor = processor_fn(move |job: JobContext| {
        let conn = conn.clone();
        async move {
            if job.job().attempts_made >= 1 {
                let deadline = std::time::Instant::now() + Duration::from_secs(180);
                while conn.pool().exists::<i64, _>(GO).await.unwrap_or(0) == 0 {
                    if std::time::Instant::now() > deadline {
                        return Err(echomq::ProcessError::failed("the browser never said go"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Ok(json!({"done": true}))
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.name = Some("ui-e2e".into());
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    eventually("the worker shows in the dashboard", async || {
        let q = h.json("/api/queues/browser").await;
        q["workers"]
            .as_array()?
            .iter()
            .any(|w| w["name"] == "ui-e2e")
            .then_some(())
    })
    .await;

    let all = h.json("/api/queues").await;
    assert_eq!(queue_of(&all, "browser").unwrap()["workers"], 1);
    let target = target_dir();
    let shot = target
        .canonicalize()
        .unwrap_or(target)
        .join("ui-browser/dashboard.png");
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new("node")
            .current_dir(browser_dir())
            .args(["dashboard.js", &h.ui.url(), &url, "browser", "1", GO])
            .arg(&shot)
            .output(),
    )
    .await
    .expect("the browser run ends within 5 minutes")
    .expect("node runs");
    assert!(
        out.status.success(),
        "dashboard.js failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["ok"], true);
    assert!(shot.is_file());
    println!("browser steps: {}", report["steps"]);
    println!("screenshot: {}", shot.display());
    eprintln!("screenshot: {}", shot.display());
    assert_eq!(
        queue.get_job_state("1").await.unwrap().as_str(),
        "completed"
    );
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
}
