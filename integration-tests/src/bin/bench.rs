//! `just bench`: EchoMQ, BullMQ Node and bullmq-official (BullMQ's own Rust
//! port) measured in the same run, on the same fresh redis-server, doing the
//! same work by the same method; one table with each peer's figure and
//! EchoMQ's ratio to the best peer. Printed as Markdown for docs/benchmarks.md.
//!
//! Every client times its own section in its own process and reports its CPU
//! over that section (getrusage: user + system); Redis CPU is read from
//! `INFO cpu` around the same section. Speed lives here, never in tests.
//!
//! Environment: `BENCH_SCALE=<f>` scales the job counts; `BENCH_ONLY=<list>`
//! runs some sections only (`add`, `process`, `latency`, `renew`, `sweep`,
//! `events`, `exec`; for profiling); `BENCH_PEERS=none|node|official|all` (default
//! all) picks the peers; `BENCH_OFFICIAL=<path>` is the bullmq-official peer
//! binary (`integration-tests/peer-bullmq-official`, built by the recipe).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{
    Connection, Delivery, JobOptions, NewJob, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg,
    StalledChecker, StalledCheckerArgs, StalledCheckerMsg, WorkerArgs, WorkerMsg,
};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::{json, Value as Json};

/// One line of the comparison table.
struct Row {
    metric: String,
    unit: &'static str,
    higher_is_better: bool,
    echomq: f64,
    node: Option<f64>,
    official: Option<f64>,
}

impl Row {
    fn new(metric: String, unit: &'static str, higher_is_better: bool, echomq: f64) -> Self {
        Row {
            metric,
            unit,
            higher_is_better,
            echomq,
            node: None,
            official: None,
        }
    }

    fn set(&mut self, peer: Peer, v: Option<f64>) {
        match peer {
            Peer::Node => self.node = v,
            Peer::Official => self.official = v,
        }
    }

    /// EchoMQ against the best peer (>1 is better for EchoMQ).
    fn ratio(&self) -> Option<f64> {
        let peers = [self.node, self.official];
        let valid = peers.iter().flatten().copied().filter(|v| *v > 0.0);
        let best = if self.higher_is_better {
            valid.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        } else {
            valid.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
        }?;
        (self.echomq > 0.0).then(|| {
            if self.higher_is_better {
                self.echomq / best
            } else {
                best / self.echomq
            }
        })
    }
}

/// The two peers; each runs as its own process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Node,
    Official,
}

const PEERS: [Peer; 2] = [Peer::Node, Peer::Official];

fn scale(n: u64) -> u64 {
    let f: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64) * f).max(1.0) as u64
}

fn section(name: &str) -> bool {
    match std::env::var("BENCH_ONLY") {
        Ok(list) if !list.is_empty() => list.split(',').any(|s| s.trim() == name),
        _ => true,
    }
}

fn official_binary() -> std::path::PathBuf {
    std::env::var_os("BENCH_OFFICIAL")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("peer-bullmq-official/target/release/peer-bullmq-official")
        })
}

fn peer_enabled(p: Peer) -> bool {
    let want = std::env::var("BENCH_PEERS").unwrap_or_else(|_| "all".into());
    let named = match p {
        Peer::Node => "node",
        Peer::Official => "official",
    };
    let listed = want == "all" || want.split(',').any(|s| s.trim() == named);
    listed
        && match p {
            Peer::Node => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("interop/node_modules/bullmq")
                .exists(),
            Peer::Official => official_binary().exists(),
        }
}

/// Runs one mode of a peer; `None` when the peer is not available.
fn peer(p: Peer, mode: &str, url: &str, queue: &str, args: Json) -> Option<Json> {
    if !peer_enabled(p) {
        return None;
    }
    let mut cmd = match p {
        Peer::Node => {
            let mut c = Command::new("node");
            c.current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop"))
                .arg("bench.js");
            c
        }
        Peer::Official => Command::new(official_binary()),
    };
    let out = cmd
        .args([mode, url, queue, &args.to_string()])
        .output()
        .expect("peer starts");
    assert!(
        out.status.success(),
        "{p:?} {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{'))?;
    Some(serde_json::from_str(line).expect("peer prints JSON"))
}

/// This process's CPU time (user + system), in µs.
fn cpu_us() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 * 1e6 + tv.tv_usec as f64;
    t(u.ru_utime) + t(u.ru_stime)
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

/// Every command the server ran (scripts' commands included).
async fn commands(c: &Client) -> u64 {
    let m = info_map(c, "commandstats").await;
    m.iter()
        .filter(|(k, _)| k.starts_with("cmdstat_") && k.as_str() != "cmdstat_info")
        .filter_map(|(_, v)| {
            v.split(',')
                .find_map(|p| p.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

async fn flush(c: &Client) {
    c.flushall::<()>(false).await.unwrap();
}

/// One client's figures for one section.
#[derive(Clone, Copy, Default)]
struct Measured {
    /// Jobs per second.
    rate: f64,
    /// Client CPU per job (µs).
    client_us: f64,
    /// Redis CPU per job (µs).
    redis_us: f64,
    /// Redis commands per job (scripts' included).
    commands: f64,
}

/// A peer's JSON (`ms`, `cpu_us`) as figures, with Redis' side measured here.
fn from_peer(out: &Json, n: u64, redis_s: f64, cmds: u64) -> Measured {
    let ms = out["ms"].as_f64().unwrap_or(f64::NAN);
    let cpu = out["cpu_us"]
        .as_f64()
        .or_else(|| out["cpuUs"].as_f64())
        .unwrap_or(f64::NAN);
    Measured {
        rate: n as f64 / (ms / 1000.0),
        client_us: cpu / n as f64,
        redis_us: redis_s * 1e6 / n as f64,
        commands: cmds as f64 / n as f64,
    }
}

/// Runs a peer's mode between two readings of Redis' CPU and command counts.
async fn peer_measured(
    c: &Client,
    p: Peer,
    mode: &str,
    url: &str,
    queue: &str,
    n: u64,
    args: Json,
) -> Option<Measured> {
    if !peer_enabled(p) {
        return None;
    }
    let (cpu0, cmd0) = (redis_cpu(c).await, commands(c).await);
    let url = url.to_owned();
    let (mode, queue) = (mode.to_owned(), queue.to_owned());
    let out = tokio::task::spawn_blocking(move || peer(p, &mode, &url, &queue, args))
        .await
        .unwrap()?;
    let (cpu1, cmd1) = (redis_cpu(c).await, commands(c).await);
    // The peer's own start-up commands (script loads, client names) are a
    // handful against thousands of jobs.
    Some(from_peer(
        &out,
        n,
        cpu1 - cpu0,
        cmd1.saturating_sub(cmd0 + 1),
    ))
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
    eprintln!(
        "bench: redis {redis_version} on {url}; peers: node {}, bullmq-official {}",
        peer_enabled(Peer::Node),
        peer_enabled(Peer::Official)
    );

    if section("add") {
        // 1. add, one job per call, 100 in flight.
        let n = scale(20_000);
        let q = Queue::new(&conn, "add1").await.unwrap();
        let (t, cpu0) = (Instant::now(), cpu_us());
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
        let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_us() - cpu0);
        flush(&c).await;
        let metric = format!("add, 1 per call, 100 in flight ({n} jobs)");
        let mut rate = Row::new(metric.clone(), "jobs/s", true, n as f64 / secs);
        let mut client = Row::new(
            format!("client CPU per job: {metric}"),
            "µs",
            false,
            cpu / n as f64,
        );
        for p in PEERS {
            let m = peer_measured(
                &c,
                p,
                "add-single",
                &url,
                "add1",
                n,
                json!({"n": n, "inFlight": 100}),
            )
            .await;
            rate.set(p, m.map(|m| m.rate));
            client.set(p, m.map(|m| m.client_us));
            flush(&c).await;
        }
        rows.push(rate);
        rows.push(client);

        // 2. add_bulk, 1000 per call.
        let n = scale(100_000);
        let q = Queue::new(&conn, "bulk").await.unwrap();
        let (t, cpu0) = (Instant::now(), cpu_us());
        fill(&q, n).await;
        let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_us() - cpu0);
        flush(&c).await;
        let metric = format!("add_bulk, 1000 per call ({n} jobs)");
        let mut rate = Row::new(metric.clone(), "jobs/s", true, n as f64 / secs);
        let mut client = Row::new(
            format!("client CPU per job: {metric}"),
            "µs",
            false,
            cpu / n as f64,
        );
        for p in PEERS {
            let m = peer_measured(
                &c,
                p,
                "add-bulk",
                &url,
                "bulk",
                n,
                json!({"n": n, "batch": 1000}),
            )
            .await;
            rate.set(p, m.map(|m| m.rate));
            client.set(p, m.map(|m| m.client_us));
            flush(&c).await;
        }
        rows.push(rate);
        rows.push(client);
    }

    // Processing with a no-op processor: throughput, client and Redis CPU per
    // job, Redis commands per job; completed jobs kept, then removed.
    let mut ceiling = Vec::new();
    if section("process") {
        let n = scale(20_000);
        for keep in [true, false] {
            let kept = if keep { "kept" } else { "removeOnComplete" };
            let mut group: Vec<Row> = Vec::new();
            for concurrency in [1usize, 16, 100] {
                let n = if concurrency == 1 { n / 4 } else { n };
                let q = Queue::new(&conn, "proc").await.unwrap();
                fill(&q, n).await;
                let (cpu0, cmd0) = (redis_cpu(&c).await, commands(&c).await);
                let (secs, client) = process_with_echomq(&q, n, concurrency, keep).await;
                let (cpu1, cmd1) = (redis_cpu(&c).await, commands(&c).await);
                let ours = Measured {
                    rate: n as f64 / secs,
                    client_us: client / n as f64,
                    redis_us: (cpu1 - cpu0) * 1e6 / n as f64,
                    commands: cmd1.saturating_sub(cmd0 + 1) as f64 / n as f64,
                };
                flush(&c).await;
                let tag = format!("c{concurrency}, {kept} ({n} jobs)");
                let mut rows4 = [
                    Row::new(format!("processing {tag}"), "jobs/s", true, ours.rate),
                    Row::new(
                        format!("client CPU per job, {tag}"),
                        "µs",
                        false,
                        ours.client_us,
                    ),
                    Row::new(
                        format!("Redis CPU per job, {tag}"),
                        "µs",
                        false,
                        ours.redis_us,
                    ),
                    Row::new(
                        format!("Redis commands per job, {tag}"),
                        "",
                        false,
                        ours.commands,
                    ),
                ];
                for p in PEERS {
                    let q = Queue::new(&conn, "proc").await.unwrap();
                    fill(&q, n).await;
                    let m = peer_measured(
                        &c,
                        p,
                        "process",
                        &url,
                        "proc",
                        n,
                        json!({"n": n, "concurrency": concurrency, "keep": keep}),
                    )
                    .await;
                    rows4[0].set(p, m.map(|m| m.rate));
                    rows4[1].set(p, m.map(|m| m.client_us));
                    rows4[2].set(p, m.map(|m| m.redis_us));
                    rows4[3].set(p, m.map(|m| m.commands));
                    flush(&c).await;
                }
                if concurrency == 100 {
                    // One core's worth of Redis at EchoMQ's own cost per job.
                    ceiling.push((kept, ours.rate, 1e6 / ours.redis_us));
                }
                group.extend(rows4);
            }
            rows.extend(group);
        }
    }

    if section("latency") {
        // add → completed at concurrency 1, 500 jobs/s, each client adding
        // its own jobs and timing them in-process.
        let n = scale(2_000);
        let (p50, p99) = latency_with_echomq(&conn, n).await;
        flush(&c).await;
        let mut r50 = Row::new(
            "latency add → completed p50, c1, 500 jobs/s".into(),
            "ms",
            false,
            p50,
        );
        let mut r99 = Row::new(
            "latency add → completed p99, c1, 500 jobs/s".into(),
            "ms",
            false,
            p99,
        );
        for p in PEERS {
            let url = url.clone();
            let out = tokio::task::spawn_blocking(move || {
                peer(
                    p,
                    "latency",
                    &url,
                    "lat",
                    json!({"n": n, "concurrency": 1, "rate": 500}),
                )
            })
            .await
            .unwrap();
            r50.set(p, out.as_ref().and_then(|o| o["p50"].as_f64()));
            r99.set(p, out.as_ref().and_then(|o| o["p99"].as_f64()));
            flush(&c).await;
        }
        rows.push(r50);
        rows.push(r99);
    }

    // Lock renewal cost against held jobs: one extendLocks call vs one call per job.
    let mut renew_rows = Vec::new();
    for held in [1u64, 10, 100, 1_000, 10_000]
        .into_iter()
        .filter(|_| section("renew"))
    {
        renew_rows.push(renewal_cost(&conn, &c, held).await);
        flush(&c).await;
    }

    // 3. Stalled sweep cost against the number of active jobs.
    let mut sweep_rows = Vec::new();
    for active in [100u64, 1_000, 10_000, 100_000]
        .into_iter()
        .filter(|_| section("sweep"))
    {
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
    let events_row = if section("events") {
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
        Some((want, rate, lags))
    } else {
        None
    };

    // 5. Handler processes (`--processor exec:`) against the in-process echo.
    let exec_rows = if section("exec") {
        exec_vs_echo(&conn, &c).await
    } else {
        Vec::new()
    };

    // 6. The Redis ceiling: a trivial script through redis-benchmark.
    let sha: String = c.script_load("return 1").await.unwrap();
    let trivial = Command::new("redis-benchmark")
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

    println!(
        "\n### EchoMQ vs BullMQ Node {} and bullmq-official 1.4.4 — same machine, same redis-server {redis_version}\n",
        echomq_integration_tests::NodeBullmq::V6_7.version()
    );
    println!("| metric | EchoMQ | BullMQ Node | bullmq-official | EchoMQ vs best peer |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let show = |v: f64, unit: &str| {
        if unit.is_empty() || v < 10.0 {
            format!("{v:.2} {unit}")
        } else {
            format!("{v:.0} {unit}")
        }
    };
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            r.metric,
            show(r.echomq, r.unit),
            r.node
                .map(|v| show(v, r.unit))
                .unwrap_or_else(|| "—".into()),
            r.official
                .map(|v| show(v, r.unit))
                .unwrap_or_else(|| "—".into()),
            r.ratio()
                .map(|x| format!("{x:.2}×"))
                .unwrap_or_else(|| "—".into())
        );
    }
    for (kept, rate, at_core) in ceiling {
        println!(
            "\nc100, {kept}: EchoMQ {rate:.0} jobs/s = {:.2}× the Redis ceiling of one core at EchoMQ's Redis CPU per job ({at_core:.0} jobs/s)",
            rate / at_core
        );
    }
    if !renew_rows.is_empty() {
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
    }
    if !sweep_rows.is_empty() {
        println!(
            "\n### Stalled sweep cost (probe + moveStalledJobsToWait-8) against active jobs\n"
        );
        println!("| active jobs | sweep wall time | script time (Redis) | Redis CPU |");
        println!("| ---: | ---: | ---: | ---: |");
        for (a, wall, script, cpu) in sweep_rows {
            println!("| {a} | {wall:.1} ms | {script:.1} ms | {cpu:.1} ms |");
        }
    }
    if let Some((want, rate, lags)) = events_row {
        println!("\n### Events\n");
        println!("| metric | value |");
        println!("| --- | ---: |");
        println!("| events consumed per second ({want} events, QueueEvents → bounded subscriber) | {rate:.0} |");
        println!(
            "| end-to-end lag p50 / p99 (XADD → subscriber) | {} / {} ms |",
            lags[lags.len() / 2],
            lags[lags.len() * 99 / 100]
        );
    }
    if !exec_rows.is_empty() {
        println!("\n### Handler processes (`exec:`, a minimal Python handler) vs the in-process echo processor\n");
        println!("| concurrency (= processes) | jobs | echo | exec | exec overhead per job |");
        println!("| ---: | ---: | ---: | ---: | ---: |");
        for r in exec_rows {
            println!(
                "| {} | {} | {:.0} jobs/s | {:.0} jobs/s | {:.0} µs |",
                r.concurrency, r.jobs, r.echo_rate, r.exec_rate, r.overhead_us
            );
        }
    }
    println!(
        "\nRedis ceiling (redis-benchmark EVALSHA of `return 1`, 50 clients): {trivial:.0} calls/s"
    );
}

/// One line of the exec section.
struct ExecRow {
    concurrency: usize,
    jobs: u64,
    echo_rate: f64,
    exec_rate: f64,
    /// Extra wall time per job on one slot: (exec − echo) × concurrency / jobs.
    overhead_us: f64,
}

/// The smallest handler that speaks the protocol: it echoes the data.
const BENCH_HANDLER: &str = r#"
import json, sys
for line in sys.stdin:
    job = json.loads(line)
    sys.stdout.write(json.dumps({"type": "completed", "value": job["data"]}) + "\n")
    sys.stdout.flush()
"#;

/// The same jobs through the in-process echo processor and through `exec:`
/// handler processes, at concurrency 1 (the per-job overhead of the round
/// trip through a pipe and a Python process) and 8 (throughput).
async fn exec_vs_echo(conn: &Connection, c: &Client) -> Vec<ExecRow> {
    use echomq::external::{ExecCommand, ExecOptions, ExecProcessor};
    use echomq::worker::processor_fn;
    let mut rows = Vec::new();
    for (concurrency, n) in [(1usize, scale(2_000)), (8, scale(10_000))] {
        let q = Queue::new(conn, "exec-echo").await.unwrap();
        fill(&q, n).await;
        let echo = processor_fn(|job| async move { Ok(job.data().clone()) });
        let echo_secs = process_with(&q, n, concurrency, echo).await;
        flush(c).await;
        let q = Queue::new(conn, "exec-handler").await.unwrap();
        fill(&q, n).await;
        let handlers = ExecProcessor::start(
            ExecCommand::new("python3").arg("-c").arg(BENCH_HANDLER),
            ExecOptions::default().processes(concurrency),
        )
        .await
        .expect("python3 runs");
        let exec_secs = process_with(&q, n, concurrency, Arc::new(handlers)).await;
        flush(c).await;
        rows.push(ExecRow {
            concurrency,
            jobs: n,
            echo_rate: n as f64 / echo_secs,
            exec_rate: n as f64 / exec_secs,
            overhead_us: (exec_secs - echo_secs) * concurrency as f64 / n as f64 * 1e6,
        });
    }
    rows
}

/// Time from worker start to the n-th completion with `processor`.
async fn process_with(
    q: &Queue,
    n: u64,
    concurrency: usize,
    processor: Arc<dyn echomq::Processor>,
) -> f64 {
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    let mut args = echomq::WorkerArgs::new(q.clone(), processor);
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
        match rx.recv().await {
            Some(echomq::WorkerEvent::Completed { .. }) => done += 1,
            Some(echomq::WorkerEvent::Failed { .. }) => panic!("a bench job failed"),
            _ => {}
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

/// Time from worker start to the n-th completion and this process's CPU over
/// it, no-op processor, completed jobs kept or removed.
async fn process_with_echomq(q: &Queue, n: u64, concurrency: usize, keep: bool) -> (f64, f64) {
    use echomq::worker::processor_fn;
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    let mut args = echomq::WorkerArgs::new(
        q.clone(),
        processor_fn(|_| async { Ok(serde_json::Value::Null) }),
    );
    args.options.concurrency = concurrency;
    if !keep {
        args.options.remove_on_complete = Some(echomq::KeepJobs::Remove(true));
    }
    args.events = Some(tx);
    let mut spec = echomq::WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let (t, cpu0) = (Instant::now(), cpu_us());
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
    let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_us() - cpu0);
    let _ = ractor::call_t!(
        set.worker,
        echomq::WorkerMsg::Close,
        10_000,
        Duration::from_secs(5)
    );
    host.stop(None);
    (secs, cpu)
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

/// add → completed at concurrency 1: one add every 2 ms, each timed from the
/// add call to the worker's `Completed` event for it, in this process.
async fn latency_with_echomq(conn: &Connection, n: u64) -> (f64, f64) {
    use echomq::worker::processor_fn;
    let q = Queue::new(conn, "lat").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    let mut args = echomq::WorkerArgs::new(
        q.clone(),
        processor_fn(|_| async { Ok(serde_json::Value::Null) }),
    );
    args.options.concurrency = 1;
    args.events = Some(tx);
    let mut spec = echomq::WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let producer = {
        let sent = sent.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(2));
            for i in 0..n {
                tick.tick().await;
                let at = Instant::now();
                let id = q
                    .add("lat", &json!({"i": i}), JobOptions::new())
                    .await
                    .unwrap();
                sent.lock().unwrap().insert(id.to_string(), at);
            }
        })
    };
    let mut done = Vec::with_capacity(n as usize);
    while (done.len() as u64) < n {
        if let Some(echomq::WorkerEvent::Completed { job_id }) = rx.recv().await {
            done.push((job_id, Instant::now()));
        }
    }
    producer.await.unwrap();
    let v: Vec<f64> = {
        let sent = sent.lock().unwrap();
        done.iter()
            .filter_map(|(id, at)| Some(at.duration_since(*sent.get(id)?).as_secs_f64() * 1e3))
            .collect()
    };
    let _ = ractor::call_t!(
        set.worker,
        echomq::WorkerMsg::Close,
        10_000,
        Duration::from_secs(5)
    );
    host.stop(None);
    percentiles(v)
}

struct Renewal {
    held: u64,
    calls: u64,
    usec: u64,
    naive_calls: u64,
    naive_usec: u64,
    naive_wall_ms: f64,
}

/// A Worker holding `held` jobs (concurrency `held`, every processor waiting
/// to be released): one RenewNow of its LockManager is the renewal of one
/// window, through the set the Worker shares. Then the naive design: one
/// extendLock per job, with the same tokens.
async fn renewal_cost(conn: &Connection, c: &Client, held: u64) -> Renewal {
    use echomq::{LockManager, LockManagerMsg, Worker, WorkerOptions};
    let q = Queue::new(conn, "renew").await.unwrap();
    let k = q.keys().clone();
    let (release, released) = tokio::sync::watch::channel(false);
    let processor = echomq::processor_fn(move |_job| {
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|go| *go).await;
            Ok::<_, echomq::ProcessError>(Json::Null)
        }
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(held as usize)
        .lock_duration(Duration::from_secs(3600));
    let lm_args = args.lock_manager_args(None);
    let (worker, _) = ractor::Actor::spawn(None, Worker, args).await.unwrap();
    let (lm, _) = ractor::Actor::spawn(None, LockManager, lm_args.reporting_to(&worker))
        .await
        .unwrap();
    for start in (0..held).step_by(5000) {
        let batch: Vec<NewJob> = (start..(start + 5000).min(held))
            .map(|i| NewJob {
                name: "renew".into(),
                data: json!({ "i": i }),
                options: JobOptions::new(),
            })
            .collect();
        q.add_bulk(batch).await.unwrap();
    }
    let locks = loop {
        let tracked = ractor::call_t!(lm, LockManagerMsg::GetTracked, 60_000).unwrap();
        if tracked.len() as u64 == held {
            break tracked;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let before = evalsha_usec(c).await;
    let calls_before = ractor::call_t!(lm, LockManagerMsg::GetStats, 60_000)
        .unwrap()
        .extend_calls;
    lm.cast(LockManagerMsg::RenewNow).unwrap();
    let stats = loop {
        let s = ractor::call_t!(lm, LockManagerMsg::GetStats, 60_000).unwrap();
        if s.extend_calls > calls_before {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let after = evalsha_usec(c).await;
    let t = Instant::now();
    for lock in &locks {
        let call = echomq::protocol::call::lifecycle::ExtendLock {
            keys: &k,
            id: &lock.id,
            token: &lock.token,
            duration: Duration::from_millis(3_600_000),
        };
        let renewed = conn.call(&call).await.unwrap();
        assert!(renewed);
    }
    let naive_wall_ms = t.elapsed().as_secs_f64() * 1000.0;
    let naive = evalsha_usec(c).await;
    release.send_replace(true);
    let _ = ractor::call_t!(worker, WorkerMsg::Close, 120_000, Duration::from_secs(60));
    Renewal {
        held,
        calls: stats.extend_calls - calls_before,
        usec: after.1 - before.1,
        naive_calls: naive.0 - after.0,
        naive_usec: naive.1 - after.1,
        naive_wall_ms,
    }
}
