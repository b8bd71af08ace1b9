//! `just bench`: EchoMQ and BullMQ Node measured in the same run, on the same
//! fresh redis-server, doing the same work; one table with ratios. Results are
//! printed as Markdown so they can be pasted into docs/benchmarks.md.
//!
//! Speed lives here, never in tests. Sizes are modest (2-core machines): set
//! `BENCH_SCALE=<f>` to scale the job counts.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::protocol::ScriptId;
use echomq::{
    Connection, Delivery, JobOptions, NewJob, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg,
    StalledChecker, StalledCheckerArgs, StalledCheckerMsg,
};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::json;

struct Row {
    metric: String,
    echomq: f64,
    bullmq: Option<f64>,
    unit: &'static str,
    higher_is_better: bool,
}

fn scale(n: u64) -> u64 {
    let f: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64) * f).max(1.0) as u64
}

fn node(mode: &str, url: &str, queue: &str, args: serde_json::Value) -> serde_json::Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let out = Command::new("node")
        .current_dir(&dir)
        .args(["bench.js", mode, url, queue, &args.to_string()])
        .output()
        .expect("node is installed (npm ci in integration-tests/interop)");
    assert!(
        out.status.success(),
        "node bench.js {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bench.js prints JSON")
}

async fn info_map(c: &Client, section: &str) -> HashMap<String, String> {
    let text: String = c
        .info(Some(match section {
            "cpu" => fred::types::InfoKind::Cpu,
            _ => fred::types::InfoKind::CommandStats,
        }))
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

async fn redis_cpu(c: &Client) -> f64 {
    let m = info_map(c, "cpu").await;
    m["used_cpu_user"].parse::<f64>().unwrap() + m["used_cpu_sys"].parse::<f64>().unwrap()
}

async fn evalsha_usec(c: &Client) -> (u64, u64) {
    let m = info_map(c, "commandstats").await;
    let Some(line) = m.get("cmdstat_evalsha") else {
        return (0, 0);
    };
    let get = |k: &str| {
        line.split(',')
            .find_map(|p| p.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (get("calls"), get("usec"))
}

async fn flush(c: &Client) {
    c.flushall::<()>(false).await.unwrap();
}

#[tokio::main]
async fn main() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = Connection::connect(echomq::ConnectionConfig {
        pool_size: 8,
        ..echomq::ConnectionConfig::with_url(&url)
    })
    .await
    .unwrap();
    let c = redis.client().await;
    let mut rows: Vec<Row> = Vec::new();
    let version: String = c.info(Some(fred::types::InfoKind::Server)).await.unwrap();
    let redis_version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    eprintln!("bench: redis {redis_version} on {url}");

    // 1. add, one job per call, 100 in flight.
    let n = scale(20_000);
    let q = Queue::new(&conn, "add1").await.unwrap();
    let t = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let lanes: Vec<_> = (0..100)
        .map(|_| {
            let q = q.clone();
            let next = next.clone();
            tokio::spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                    q.add("bench", &json!({"i": 1}), JobOptions::new())
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for l in lanes {
        l.await.unwrap();
    }
    let rust = n as f64 / t.elapsed().as_secs_f64();
    flush(&c).await;
    let node_ms = node("add-single", &url, "add1", json!({"n": n, "inFlight": 100}))["ms"]
        .as_f64()
        .unwrap();
    rows.push(Row {
        metric: format!("add, 1 per call, 100 in flight ({n} jobs)"),
        echomq: rust,
        bullmq: Some(n as f64 / (node_ms / 1000.0)),
        unit: "jobs/s",
        higher_is_better: true,
    });
    flush(&c).await;

    // 2. add_bulk, 1000 per call.
    let n = scale(100_000);
    let q = Queue::new(&conn, "bulk").await.unwrap();
    let t = Instant::now();
    for start in (0..n).step_by(1000) {
        let batch: Vec<NewJob> = (start..(start + 1000).min(n))
            .map(|i| NewJob {
                name: "bench".into(),
                data: json!({"i": i}),
                options: JobOptions::new(),
            })
            .collect();
        q.add_bulk(batch).await.unwrap();
    }
    let rust = n as f64 / t.elapsed().as_secs_f64();
    flush(&c).await;
    let node_ms = node("add-bulk", &url, "bulk", json!({"n": n, "batch": 1000}))["ms"]
        .as_f64()
        .unwrap();
    rows.push(Row {
        metric: format!("add_bulk, 1000 per call ({n} jobs)"),
        echomq: rust,
        bullmq: Some(n as f64 / (node_ms / 1000.0)),
        unit: "jobs/s",
        higher_is_better: true,
    });
    flush(&c).await;

    // 3. Stalled sweep cost against the number of active jobs.
    let mut sweep_rows = Vec::new();
    for active in [100u64, 1_000, 10_000, 100_000] {
        let active = scale(active);
        let q = Queue::new(&conn, "sweep").await.unwrap();
        let k = q.keys().clone();
        for chunk in (0..active).collect::<Vec<_>>().chunks(5000) {
            let p = c.pipeline();
            let ids: Vec<String> = chunk.iter().map(|i| i.to_string()).collect();
            p.lpush::<(), _, _>(k.active(), ids.clone()).await.unwrap();
            for id in &ids {
                p.set::<(), _, _>(
                    k.lock(id),
                    "00000000-0000-4000-8000-000000000000",
                    Some(Expiration::PX(600_000)),
                    None,
                    false,
                )
                .await
                .unwrap();
            }
            let _: Vec<Value> = p.all().await.unwrap();
        }
        let mut args = StalledCheckerArgs::new(conn.clone(), "sweep");
        args.interval = Duration::from_secs(3600);
        let (checker, _) = ractor::Actor::spawn(None, StalledChecker, args)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await; // the first sweep at start (marks)
        let _: i64 = c.del(k.stalled_check()).await.unwrap();
        let before = evalsha_usec(&c).await;
        let cpu0 = redis_cpu(&c).await;
        let t = Instant::now();
        let report = ractor::call_t!(checker, StalledCheckerMsg::CheckNow, 600_000)
            .unwrap()
            .unwrap();
        let wall = t.elapsed();
        let after = evalsha_usec(&c).await;
        let cpu = redis_cpu(&c).await - cpu0;
        assert!(report.recovered.is_empty());
        checker.stop(None);
        sweep_rows.push((
            active,
            wall.as_secs_f64() * 1000.0,
            (after.1 - before.1) as f64 / 1000.0,
            cpu * 1000.0,
        ));
        flush(&c).await;
    }

    // 4. Events consumed per second, and end-to-end lag.
    let n = scale(20_000);
    let q = Queue::new(&conn, "events").await.unwrap();
    let mut args = QueueEventsArgs::new(conn.clone(), "events");
    args.block = Duration::from_millis(500);
    let (qe, _) = ractor::Actor::spawn(None, QueueEvents, args).await.unwrap();
    let mut sub = ractor::call_t!(qe, QueueEventsMsg::Subscribe, 5000, 100_000).unwrap();
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            for start in (0..n).step_by(500) {
                let batch: Vec<NewJob> = (start..(start + 500).min(n))
                    .map(|i| NewJob {
                        name: "e".into(),
                        data: json!({"i": i}),
                        options: JobOptions::new(),
                    })
                    .collect();
                q.add_bulk(batch).await.unwrap();
            }
        })
    };
    let want = n * 2; // added + waiting per job
    let mut got = 0u64;
    let mut lags = Vec::with_capacity(want as usize);
    let mut first: Option<Instant> = None;
    while got < want {
        match tokio::time::timeout(Duration::from_secs(30), sub.recv())
            .await
            .expect("events keep coming")
        {
            Some(Delivery::Event(e)) => {
                first.get_or_insert_with(Instant::now);
                got += 1;
                let id_ms: u64 = e.id.split('-').next().unwrap().parse().unwrap();
                lags.push(Connection::now_ms().saturating_sub(id_ms));
            }
            Some(other) => panic!("unexpected {other:?}"),
            None => panic!("QueueEvents stopped"),
        }
    }
    producer.await.unwrap();
    let rate = got as f64 / first.unwrap().elapsed().as_secs_f64();
    lags.sort_unstable();
    qe.cast(QueueEventsMsg::Close).ok();
    flush(&c).await;

    // 5. The Redis ceiling: a trivial script through redis-benchmark.
    let sha: String = c.script_load("return 1").await.unwrap();
    let ceiling = Command::new("redis-benchmark")
        .args([
            "-p",
            &redis.port().to_string(),
            "-n",
            "200000",
            "-c",
            "50",
            "-P",
            "1",
            "-q",
            "EVALSHA",
            &sha,
            "0",
        ])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().find_map(|w| w.parse::<f64>().ok()))
        .unwrap_or(f64::NAN);

    // The table.
    let _ = ScriptId::ExtendLocks;
    println!(
        "\n### EchoMQ vs BullMQ Node 6.2.0 — same machine, same redis-server {redis_version}\n"
    );
    println!("| metric | EchoMQ | BullMQ Node | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    for r in &rows {
        let ratio = r.bullmq.map(|b| {
            if r.higher_is_better {
                r.echomq / b
            } else {
                b / r.echomq
            }
        });
        println!(
            "| {} | {:.0} {} | {} | {} |",
            r.metric,
            r.echomq,
            r.unit,
            r.bullmq
                .map(|b| format!("{b:.0} {}", r.unit))
                .unwrap_or_else(|| "—".into()),
            ratio
                .map(|x| format!("{x:.2}×"))
                .unwrap_or_else(|| "—".into())
        );
    }
    println!("\n### Stalled sweep cost (probe + moveStalledJobsToWait-8) against active jobs\n");
    println!("| active jobs | sweep wall time | script time (Redis) | Redis CPU |");
    println!("| ---: | ---: | ---: | ---: |");
    for (a, wall, script, cpu) in sweep_rows {
        println!("| {a} | {wall:.1} ms | {script:.1} ms | {cpu:.1} ms |");
    }
    println!("\n### Events\n");
    println!("| metric | value |");
    println!("| --- | ---: |");
    println!("| events consumed per second ({want} events, QueueEvents → bounded subscriber) | {rate:.0} |");
    println!(
        "| end-to-end lag p50 / p99 (XADD → subscriber) | {} / {} ms |",
        lags[lags.len() / 2],
        lags[lags.len() * 99 / 100]
    );
    println!(
        "\nRedis ceiling (redis-benchmark EVALSHA of `return 1`, 50 clients): {ceiling:.0} calls/s"
    );
}
