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
        // BENCH_POOL overrides the default pool size, for experiments.
        pool_size: std::env::var("BENCH_POOL")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(echomq::ConnectionConfig::default().pool_size),
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
    fill(&q, n).await;
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

    // Processing throughput with a no-op processor, and Redis CPU per job.
    let n = scale(20_000);
    let mut cpu_rows = Vec::new();
    for concurrency in [1usize, 16, 100] {
        let n = if concurrency == 1 { n / 4 } else { n };
        let q = Queue::new(&conn, "proc").await.unwrap();
        fill(&q, n).await;
        let cpu0 = redis_cpu(&c).await;
        let secs = process_with_echomq(&q, n, concurrency).await;
        let rust_cpu = (redis_cpu(&c).await - cpu0) / n as f64;
        flush(&c).await;
        let q = Queue::new(&conn, "proc").await.unwrap();
        fill(&q, n).await;
        let cpu0 = redis_cpu(&c).await;
        let out = node(
            "process",
            &url,
            "proc",
            json!({"n": n, "concurrency": concurrency}),
        );
        let node_cpu = (redis_cpu(&c).await - cpu0) / n as f64;
        let node_secs = out["ms"].as_f64().unwrap() / 1000.0;
        rows.push(Row {
            metric: format!("processing, concurrency {concurrency}, no-op ({n} jobs)"),
            echomq: n as f64 / secs,
            bullmq: Some(n as f64 / node_secs),
            unit: "jobs/s",
            higher_is_better: true,
        });
        cpu_rows.push((concurrency, rust_cpu * 1e6, node_cpu * 1e6));
        flush(&c).await;
    }
    for (concurrency, rust, node) in cpu_rows {
        rows.push(Row {
            metric: format!("Redis CPU per processed job, concurrency {concurrency}"),
            echomq: rust,
            bullmq: Some(node),
            unit: "µs",
            higher_is_better: false,
        });
    }

    // End-to-end latency (add → processor start) at a steady 500 jobs/s.
    let n = scale(2_000);
    let (p50, p99) = latency_with_echomq(&conn, n).await;
    flush(&c).await;
    let (np50, np99) = latency_with_node(&conn, &url, n).await;
    rows.push(Row {
        metric: "latency add → start, p50 (500 jobs/s)".into(),
        echomq: p50,
        bullmq: Some(np50),
        unit: "ms",
        higher_is_better: false,
    });
    rows.push(Row {
        metric: "latency add → start, p99 (500 jobs/s)".into(),
        echomq: p99,
        bullmq: Some(np99),
        unit: "ms",
        higher_is_better: false,
    });
    flush(&c).await;

    // Lock renewal cost against held jobs: one extendLocks call vs one call per job.
    let mut renew_rows = Vec::new();
    for held in [1u64, 10, 100, 1_000, 10_000] {
        renew_rows.push(renewal_cost(&conn, &c, held).await);
        flush(&c).await;
    }

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
                lags.push(echomq::clock::now_ms().saturating_sub(id_ms));
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
        // A 0 (below the ms resolution of job timestamps) has no meaningful ratio.
        let ratio = r.bullmq.filter(|b| *b > 0.0 && r.echomq > 0.0).map(|b| {
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
    println!("\n### Lock renewal per window against held jobs (LockManager: one extendLocks-1 call; naive: one extendLock-2 call per job)\n");
    println!("| held jobs | LockManager calls | LockManager Redis time | naive calls | naive Redis time | naive wall time (sequential) |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in renew_rows {
        println!(
            "| {} | {} | {:.2} ms | {} | {:.2} ms | {:.1} ms |",
            r.held,
            r.calls,
            r.usec as f64 / 1000.0,
            r.naive_calls,
            r.naive_usec as f64 / 1000.0,
            r.naive_wall_ms
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

async fn fill(q: &Queue, n: u64) {
    for start in (0..n).step_by(1000) {
        let batch: Vec<NewJob> = (start..(start + 1000).min(n))
            .map(|i| NewJob {
                name: "p".into(),
                data: json!({"i": i}),
                options: JobOptions::new(),
            })
            .collect();
        q.add_bulk(batch).await.unwrap();
    }
}

/// Time from worker start to the n-th completion, no-op processor, jobs
/// removed on completion (as the Node side does).
async fn process_with_echomq(q: &Queue, n: u64, concurrency: usize) -> f64 {
    use echomq::worker::processor_fn;
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    let mut args = echomq::WorkerArgs::new(
        q.clone(),
        processor_fn(|_| async { Ok(serde_json::Value::Null) }),
    );
    args.options.concurrency = concurrency;
    args.options.remove_on_complete = Some(echomq::KeepJobs::Remove(true));
    args.events = Some(tx);
    let mut spec = echomq::WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let t = Instant::now();
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    let mut done = 0;
    while done < n {
        if let Some(echomq::WorkerEvent::Completed { .. }) = rx.recv().await {
            done += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let _ = ractor::call_t!(
        set.worker,
        echomq::WorkerMsg::Close,
        10_000,
        Duration::from_secs(5)
    );
    host.stop(None);
    secs
}

async fn produce_steadily(q: &Queue, n: u64) {
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    for i in 0..n {
        tick.tick().await;
        q.add("lat", &json!({"i": i}), JobOptions::new())
            .await
            .unwrap();
    }
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

async fn latency_with_echomq(conn: &Connection, n: u64) -> (f64, f64) {
    use echomq::worker::processor_fn;
    let q = Queue::new(conn, "lat").await.unwrap();
    let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    let l2 = lat.clone();
    let mut args = echomq::WorkerArgs::new(
        q.clone(),
        processor_fn(move |ctx| {
            let l = l2.clone();
            async move {
                l.lock()
                    .unwrap()
                    .push(echomq::clock::now_ms().saturating_sub(ctx.job().timestamp) as f64);
                Ok(serde_json::Value::Null)
            }
        }),
    );
    args.options.concurrency = 16;
    let mut spec = echomq::WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    produce_steadily(&q, n).await;
    while (lat.lock().unwrap().len() as u64) < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = ractor::call_t!(
        set.worker,
        echomq::WorkerMsg::Close,
        10_000,
        Duration::from_secs(5)
    );
    host.stop(None);
    let v = lat.lock().unwrap().clone();
    percentiles(v)
}

async fn latency_with_node(conn: &Connection, url: &str, n: u64) -> (f64, f64) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let child = tokio::process::Command::new("node")
        .current_dir(&dir)
        .args([
            "bench.js",
            "process",
            url,
            "lat",
            &json!({"n": n, "concurrency": 16, "latency": true}).to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node");
    tokio::time::sleep(Duration::from_millis(1500)).await; // Node start-up
    let q = Queue::new(conn, "lat").await.unwrap();
    produce_steadily(&q, n).await;
    let out = child.wait_with_output().await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["p50"].as_f64().unwrap_or(f64::NAN),
        v["p99"].as_f64().unwrap_or(f64::NAN),
    )
}

struct Renewal {
    held: u64,
    calls: u64,
    usec: u64,
    naive_calls: u64,
    naive_usec: u64,
    naive_wall_ms: f64,
}

/// `held` active jobs with locks, tracked by a LockManager: one RenewNow is
/// the renewal of one window. Then the naive design: one extendLock per job.
async fn renewal_cost(conn: &Connection, c: &Client, held: u64) -> Renewal {
    use echomq::{LockManager, LockManagerArgs, LockManagerMsg};
    let q = Queue::new(conn, "renew").await.unwrap();
    let k = q.keys().clone();
    let ids: Vec<String> = (0..held).map(|i| format!("j{i}")).collect();
    let token = "6f1c2e4a-0000-4000-8000-000000000000";
    for chunk in ids.chunks(5000) {
        let p = c.pipeline();
        p.lpush::<(), _, _>(k.active(), chunk.to_vec())
            .await
            .unwrap();
        for id in chunk {
            p.set::<(), _, _>(k.lock(id), token, Some(Expiration::PX(60_000)), None, false)
                .await
                .unwrap();
        }
        let _: Vec<Value> = p.all().await.unwrap();
    }
    let args = LockManagerArgs {
        connection: conn.clone(),
        keys: k.clone(),
        lock_duration: Duration::from_secs(3600),
        lock_renew_time: None,
        worker: None,
    };
    let (lm, _) = ractor::Actor::spawn(None, LockManager, args).await.unwrap();
    for id in &ids {
        lm.cast(LockManagerMsg::Track {
            id: id.clone(),
            token: token.into(),
        })
        .unwrap();
    }
    let _ = ractor::call_t!(lm, LockManagerMsg::GetTracked, 60_000).unwrap();
    let before = evalsha_usec(c).await;
    lm.cast(LockManagerMsg::RenewNow).unwrap();
    let stats = loop {
        let s = ractor::call_t!(lm, LockManagerMsg::GetStats, 60_000).unwrap();
        if s.extend_calls >= 1 {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let after = evalsha_usec(c).await;
    lm.stop(None);
    let t = Instant::now();
    for id in &ids {
        let call = echomq::protocol::call::lifecycle::ExtendLock {
            keys: &k,
            id,
            token,
            duration: Duration::from_millis(3_600_000),
        };
        let renewed = conn.call(&call).await.unwrap();
        assert!(renewed);
    }
    let naive_wall_ms = t.elapsed().as_secs_f64() * 1000.0;
    let naive = evalsha_usec(c).await;
    Renewal {
        held,
        calls: stats.extend_calls,
        usec: after.1 - before.1,
        naive_calls: naive.0 - after.0,
        naive_usec: naive.1 - after.1,
        naive_wall_ms,
    }
}
