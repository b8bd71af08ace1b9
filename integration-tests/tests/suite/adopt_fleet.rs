//! The adoption walk-through of docs/migrating.md as a test: a BullMQ 6.7.6
//! Node fleet on prefix `bull` — a worker, a producer adding plain, delayed,
//! prioritized and deduplicated jobs and flows in a steady stream, a cron
//! job scheduler, all under a global rate limit — is joined by the real
//! `echomq work --prefix bull`; then the Node worker stops. Every job added
//! runs exactly once, every flow's parent after its children, the cron
//! schedule has no missed or doubled iteration, no rate-limit window holds
//! more than the limit allows, and the audit is clean.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use echomq::{Connection, ConnectionConfig};
use echomq_integration_tests::{wait_until, NodeBullmq, RedisServer};
use fred::prelude::*;
use serde_json::{json, Value as Json};

/// `driver.js <command>` of BullMQ 6.7.6 on prefix `bull`.
fn node_bull(url: &str, command: &str, args: Json) -> Json {
    let out = NodeBullmq::V6_7
        .node("driver.js")
        .env("EMQ_PREFIX", "bull")
        .args([command, url, "q", &args.to_string()])
        .output()
        .expect("node is installed");
    assert!(
        out.status.success(),
        "driver.js {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `echomq` binary of this workspace (built by `cargo build` or a
/// workspace test run).
fn echomq_work(url: &str) -> Child {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/echomq");
    assert!(
        bin.is_file(),
        "{} missing: `cargo build -p echomq-cli` first",
        bin.display()
    );
    Command::new(bin)
        .args([
            "--url",
            url,
            "--prefix",
            "bull",
            "work",
            "q",
            "--concurrency",
            "4",
            "--processor",
            "echo",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// One batch of the producer's stream: plain, delayed, prioritized, and a
/// delayed pair sharing a deduplication id (the second is not added: the
/// first is still delayed).
fn batch(k: u64) -> Json {
    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(json!({"name": "plain", "data": {"k": k, "i": i}, "opts": {}}));
    }
    jobs.push(json!({"name": "later", "data": {"k": k}, "opts": {"delay": 300 + 100 * (k % 5)}}));
    jobs.push(json!({"name": "urgent", "data": {"k": k}, "opts": {"priority": 1 + (k % 3)}}));
    for _ in 0..2 {
        jobs.push(json!({"name": "once", "data": {"k": k}, "opts": {"delay": 1000, "deduplication": {"id": format!("d{k}")}}}));
    }
    json!({ "jobs": jobs })
}

async fn completed(c: &Client) -> Vec<String> {
    c.zrange("bull:q:completed", 0, -1, None, false, None, false)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fleet_adopts_echomq_workers_and_retires_its_own() {
    let deadline = Instant::now() + Duration::from_secs(120);
    let left = || deadline.saturating_duration_since(Instant::now());
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;

    // The fleet's queue is rate limited: at most LIMIT jobs start per
    // WINDOW ms, whichever client takes them (`{P}limiter`).
    const LIMIT: u64 = 10;
    const WINDOW: u64 = 250;
    node_bull(
        &url,
        "ops",
        json!({"ops": [["set-global-rate-limit", LIMIT, WINDOW]]}),
    );

    // The Node fleet: a worker, a cron scheduler, a producer.
    let node = NodeBullmq::V6_7.spawn(
        "worker.js",
        &url,
        "q",
        json!({"prefix": "bull", "concurrency": 4, "skipStalledCheck": true, "name": "node-fleet"}),
    );
    node_bull(
        &url,
        "upsert-scheduler",
        json!({"id": "tick", "repeat": {"pattern": "* * * * * *", "tz": "UTC"}, "template": {"name": "cron"}}),
    );
    let mut added: Vec<String> = Vec::new();
    let mut add = |k: u64| {
        let ids: Vec<Option<String>> =
            serde_json::from_value(node_bull(&url, "add-jobs", batch(k))).unwrap();
        // The deduplicated add answers the first job's id.
        for id in ids.into_iter().flatten() {
            if !added.contains(&id) {
                added.push(id);
            }
        }
    };
    let mut k = 0;
    let stream = |k: &mut u64, until: usize, add: &mut dyn FnMut(u64)| {
        let target = *k + until as u64;
        while *k < target {
            add(*k);
            *k += 1;
        }
    };
    // A flow (a parent and two children, all in this queue) per phase.
    let mut parents: Vec<String> = Vec::new();
    let mut flow = |phase: u64| {
        let ids = node_bull(
            &url,
            "ops",
            json!({"ops": [["flow", "report", {"phase": phase},
                [{"name": "part", "data": {"phase": phase, "n": 1}},
                 {"name": "part", "data": {"phase": phase, "n": 2}}], {}]]}),
        );
        parents.push(ids[0].as_str().expect("the flow's parent id").to_owned());
    };
    stream(&mut k, 3, &mut add);
    flow(0);

    // EchoMQ joins while adds go on.
    let mut echo = echomq_work(&url);
    stream(&mut k, 3, &mut add);
    flow(1);
    // Both sides run jobs: the Node worker's carry its name in `pb`, `echomq
    // work`'s none.
    wait_until("a job run by EchoMQ while Node works", left(), async || {
        for id in completed(&c).await.iter().rev().take(50) {
            let pb: Option<String> = c.hget(format!("bull:q:{id}"), "pb").await.unwrap();
            if pb.as_deref() != Some("node-fleet") {
                return true;
            }
        }
        false
    })
    .await;
    stream(&mut k, 3, &mut add);

    // The Node worker stops; the stream goes on with EchoMQ alone.
    let summary = node.finish().expect("node summary");
    let node_runs: HashMap<String, u32> = serde_json::from_value(summary["runs"].clone()).unwrap();
    assert!(!node_runs.is_empty(), "the Node worker ran nothing");
    assert!(node_runs.values().all(|n| *n == 1), "{node_runs:?}");
    stream(&mut k, 3, &mut add);
    flow(2);
    let stop_at: u64 = echomq::clock::now_ms();
    assert_eq!(
        added.len() as u64,
        7 * k,
        "one job per deduplicated pair: {added:?}"
    );

    // Everything added completes; the cron schedule runs on past the stop.
    let want: Vec<String> = added.iter().chain(&parents).cloned().collect();
    wait_until(
        "every job added completed, cron past the Node stop",
        left(),
        async || {
            let done = completed(&c).await;
            let crons = done
                .iter()
                .filter(|id| id.starts_with("repeat:tick:"))
                .filter(|id| {
                    id.rsplit(':')
                        .next()
                        .and_then(|m| m.parse::<u64>().ok())
                        .unwrap_or(0)
                        > stop_at + 2000
                })
                .count();
            want.iter().all(|id| done.contains(id)) && crons >= 2
        },
    )
    .await;
    // `echomq work` closes on SIGTERM, letting held jobs finish.
    let _ = Command::new("kill")
        .args(["-TERM", &echo.id().to_string()])
        .status();
    let status = echo.wait().unwrap();
    assert!(status.success() || status.code().is_some(), "{status:?}");

    // Exactly once: one attempt started per job, none failed.
    let done = completed(&c).await;
    for id in &done {
        let ats: Option<String> = c.hget(format!("bull:q:{id}"), "ats").await.unwrap();
        assert_eq!(ats.as_deref(), Some("1"), "{id} started {ats:?} times");
    }
    let failed: i64 = c.zcard("bull:q:failed").await.unwrap();
    assert_eq!(failed, 0);
    let echo_ran = done
        .iter()
        .filter(|id| !node_runs.contains_key(*id))
        .count();
    assert!(echo_ran > 0, "EchoMQ ran nothing");
    // The cron chain: one iteration per second, no gap, no duplicate, except
    // a slot skipped when its predecessor was taken after it (both clients).
    let mut cron: Vec<u64> = done
        .iter()
        .filter_map(|id| id.strip_prefix("repeat:tick:"))
        .map(|m| m.parse().unwrap())
        .collect();
    cron.sort();
    assert!(cron.len() >= 4, "{cron:?}");
    for w in cron.windows(2) {
        let gap = w[1] - w[0];
        if gap == 1000 {
            continue;
        }
        let created: String = c
            .hget(format!("bull:q:repeat:tick:{}", w[1]), "timestamp")
            .await
            .unwrap();
        let created: u64 = created.parse().unwrap();
        assert!(
            gap > 1000 && gap % 1000 == 0 && created + 1 >= w[0] + 1000 && w[1] <= created + 1000,
            "cron gap or duplicate in {cron:?} at {}",
            w[0]
        );
    }
    // Each flow's parent ran after both its children, which ran once each
    // (`ats` above covers every completed job). The order is the events
    // stream's, Redis's own: `finishedOn` and `processedOn` are timestamps
    // the clients send, and a Node worker's take computed before a child's
    // finish applied may reach Redis after it (seen once under load).
    let stream = echomq_integration_tests::timeline::stamps(&c, "bull:q:events").await;
    let at = |name: &str, id: &str| {
        stream
            .iter()
            .position(|s| s.name == name && s.job_id == id)
            .unwrap_or_else(|| panic!("no {name} event of {id} in the stream"))
    };
    for parent in &parents {
        let processed: HashMap<String, String> = c
            .hgetall(format!("bull:q:{parent}:processed"))
            .await
            .unwrap();
        assert_eq!(processed.len(), 2, "{parent}: children done {processed:?}");
        let parent_started = at("active", parent);
        for key in processed.keys() {
            let child = key.strip_prefix("bull:q:").expect("a child of this queue");
            assert!(
                at("completed", child) < parent_started,
                "{child} completed after its parent {parent} started"
            );
        }
    }
    // The global rate limit held for both clients: the limiter's windows are
    // fixed, so any WINDOW ms of Redis's clock sees at most two windows'
    // starts. The fleet ran more than one window's worth at all.
    let starts: Vec<u64> = echomq_integration_tests::timeline::stamps(&c, "bull:q:events")
        .await
        .into_iter()
        .filter(|s| s.name == "active")
        .map(|s| s.at_ms)
        .collect();
    assert!(starts.len() as u64 > 2 * LIMIT, "{} starts", starts.len());
    for (i, t) in starts.iter().enumerate() {
        let within = starts[i..].iter().take_while(|u| **u < t + WINDOW).count() as u64;
        assert!(
            within <= 2 * LIMIT,
            "{within} starts within {WINDOW} ms from {t}"
        );
    }
    // The audit of the adopted queue is clean.
    let mut config = ConnectionConfig::with_url(url.clone());
    config.prefix = "bull".into();
    let conn = Connection::connect(config).await.unwrap();
    let audit = echomq::audit::Audit::new(&conn, "q").run().await.unwrap();
    assert_eq!(audit.hard_count(), 0, "{:?}", audit.violations);
}
