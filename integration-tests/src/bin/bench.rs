//! `just bench`: EchoMQ, BullMQ Node and bullmq-official (BullMQ's own Rust
//! port) measured in the same run, on the same fresh redis-server, doing the
//! same work by the same method; one table with each client's figure and
//! EchoMQ's ratio to the best peer, then issue 42's targets, each with its
//! ratio to the peer it names per round. Printed as Markdown for
//! docs/benchmarks.md.
//!
//! The method, the same for every client (docs/benchmarks.md §Method):
//! - one section per measurement: a peer process connects, constructs its
//!   Queue/Worker and runs a small warm-up of the same work on a side queue,
//!   then prints `{"ready":true}`; the harness reads `INFO cpu` and
//!   `INFO commandstats`, writes `go`, the peer times the section and reports
//!   its wall time and its own CPU over it (getrusage), the harness reads INFO
//!   again, then writes `close`. EchoMQ runs in this process over the same
//!   section between the same two readings (its pool is warm from the rounds
//!   before);
//! - every worker with its default background work on (EchoMQ's
//!   StalledChecker and LockManager, the peers' stalled checks and renewals);
//! - one discarded warm-up round, then `BENCH_RUNS` (default 3) measured
//!   rounds, the order of the clients rotated from round to round; each cell
//!   is the median of the rounds with their min–max.
//!
//! Environment: `BENCH_SCALE=<f>` scales the job counts; `BENCH_RUNS=<n>`
//! measured rounds; `BENCH_ONLY=<list>` runs some sections only (`add`,
//! `process`, `latency`, `renew`, `sweep`, `events`, `exec`, `work`; for
//! profiling); `BENCH_ECHOMQ=<path>` is the release `echomq` binary the `work`
//! section runs (default `target/release/echomq`, built by the recipe);
//! `BENCH_PEERS=none|node|official|all` (default all) picks the peers;
//! `BENCH_OFFICIAL=<path>` is the bullmq-official peer binary
//! (`integration-tests/peer-bullmq-official`, built by the recipe).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{
    Connection, Delivery, JobOptions, NewJob, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg,
    StalledChecker, StalledCheckerArgs, StalledCheckerMsg, WorkerArgs, WorkerMsg,
};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::{json, Value as Json};

/// The three clients; EchoMQ runs in this process, the peers as their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    EchoMq,
    Node,
    Official,
}

impl Who {
    fn index(self) -> usize {
        self as usize
    }
}

/// The order of the clients in round `r`: rotated, so that each one goes
/// first, second and third in three rounds.
fn order(r: usize) -> [Who; 3] {
    let mut o = [Who::EchoMq, Who::Node, Who::Official];
    o.rotate_left(r % 3);
    o
}

/// One line of the comparison table: each client's value per measured round.
struct Row {
    metric: String,
    unit: &'static str,
    higher_is_better: bool,
    /// `runs[round][client]`.
    runs: Vec<[Option<f64>; 3]>,
}

impl Row {
    /// EchoMQ against the best peer in round `r` (>1 is better for EchoMQ).
    fn ratio(&self, r: usize) -> Option<f64> {
        self.ratio_among(r, &[Who::Node, Who::Official])
    }

    /// EchoMQ against the best of `peers` in round `r` (>1 is better for
    /// EchoMQ); none when EchoMQ or every one of them has no figure.
    fn ratio_among(&self, r: usize, peers: &[Who]) -> Option<f64> {
        let figures = self.runs[r];
        let ours = figures[Who::EchoMq.index()].filter(|v| *v > 0.0)?;
        let valid = peers
            .iter()
            .filter_map(|p| figures[p.index()])
            .filter(|v| *v > 0.0);
        let best = if self.higher_is_better {
            valid.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        } else {
            valid.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
        }?;
        Some(if self.higher_is_better {
            ours / best
        } else {
            best / ours
        })
    }

    fn client(&self, who: Who) -> Vec<f64> {
        self.runs.iter().filter_map(|r| r[who.index()]).collect()
    }
}

/// The rows of every round, in the order they were first recorded.
#[derive(Default)]
struct Table {
    rows: Vec<Row>,
    /// `echomq work` against the library, one entry per measured round.
    work: Vec<WorkRound>,
    /// The round being recorded (0-based among the measured ones).
    round: usize,
}

impl Table {
    fn set(&mut self, metric: &str, unit: &'static str, hib: bool, who: Who, v: Option<f64>) {
        let round = self.round;
        let row = match self.rows.iter().position(|r| r.metric == metric) {
            Some(i) => &mut self.rows[i],
            None => {
                self.rows.push(Row {
                    metric: metric.to_owned(),
                    unit,
                    higher_is_better: hib,
                    runs: Vec::new(),
                });
                self.rows.last_mut().unwrap()
            }
        };
        while row.runs.len() <= round {
            row.runs.push([None; 3]);
        }
        row.runs[round][who.index()] = v;
    }

    /// The four rows of a throughput section.
    fn measured(&mut self, tag: &str, who: Who, m: Option<Measured>) {
        self.set(tag, "jobs/s", true, who, m.map(|m| m.rate));
        let cpu = format!("client CPU per job, {tag}");
        self.set(&cpu, "µs", false, who, m.map(|m| m.client_us));
        let redis = format!("Redis CPU per job, {tag}");
        self.set(&redis, "µs", false, who, m.map(|m| m.redis_us));
        let cmds = format!("Redis commands per job, {tag}");
        self.set(&cmds, "", false, who, m.map(|m| m.commands));
    }

    fn median(&self, metric: &str, who: Who) -> Option<f64> {
        let row = self.rows.iter().find(|r| r.metric == metric)?;
        spread(row.client(who)).map(|s| s.0)
    }
}

/// Median, min, max.
fn spread(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

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

fn peer_enabled(p: Who) -> bool {
    let want = std::env::var("BENCH_PEERS").unwrap_or_else(|_| "all".into());
    let named = match p {
        Who::EchoMq => return true,
        Who::Node => "node",
        Who::Official => "official",
    };
    let listed = want == "all" || want.split(',').any(|s| s.trim() == named);
    listed
        && match p {
            Who::Node => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("interop/node_modules/bullmq")
                .exists(),
            _ => official_binary().exists(),
        }
}

/// A peer process between `ready` and its exit (see the module docs).
struct PeerProc {
    who: Who,
    mode: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PeerProc {
    /// Starts a peer's mode and waits until it says it is ready.
    fn start(p: Who, mode: &str, url: &str, queue: &str, args: &Json) -> PeerProc {
        let mut cmd = match p {
            Who::Node => {
                let mut c = Command::new("node");
                c.current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop"))
                    .arg("bench.js");
                c
            }
            _ => Command::new(official_binary()),
        };
        let mut child = cmd
            .args([mode, url, queue, &args.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("peer starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut proc = PeerProc {
            who: p,
            mode: mode.to_owned(),
            child,
            stdin,
            stdout,
        };
        let ready = proc.json();
        assert_eq!(ready["ready"], json!(true), "{p:?} {mode}: {ready}");
        proc
    }

    /// The next JSON line the peer prints.
    fn json(&mut self) -> Json {
        let mut line = String::new();
        loop {
            line.clear();
            let read = self.stdout.read_line(&mut line).expect("peer's stdout");
            assert!(read > 0, "{:?} {} ended early", self.who, self.mode);
            if line.starts_with('{') {
                return serde_json::from_str(&line).expect("peer prints JSON");
            }
        }
    }

    fn say(&mut self, word: &str) {
        writeln!(self.stdin, "{word}").expect("peer's stdin");
        self.stdin.flush().unwrap();
    }

    /// `go`, then the peer's figures for the section.
    fn run(mut self) -> (PeerProc, Json) {
        self.say("go");
        let out = self.json();
        (self, out)
    }

    /// `close`, and the peer's exit.
    fn finish(mut self) {
        self.say("close");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{:?} {}: {status}", self.who, self.mode);
    }
}

/// Redis's CPU (s) and command count at one instant.
#[derive(Clone, Copy)]
struct Snap {
    cpu: f64,
    commands: u64,
}

impl Snap {
    async fn take(c: &Client) -> Snap {
        Snap {
            cpu: redis_cpu(c).await,
            commands: commands(c).await,
        }
    }
}

/// A peer's section between two readings of Redis: its JSON and Redis's side.
async fn peer_section(
    c: &Client,
    p: Who,
    mode: &str,
    url: &str,
    queue: &str,
    args: Json,
) -> Option<(Json, Snap)> {
    if !peer_enabled(p) {
        return None;
    }
    let (mode, url, queue) = (mode.to_owned(), url.to_owned(), queue.to_owned());
    let proc = tokio::task::spawn_blocking(move || PeerProc::start(p, &mode, &url, &queue, &args))
        .await
        .unwrap();
    let before = Snap::take(c).await;
    let (proc, out) = tokio::task::spawn_blocking(move || proc.run())
        .await
        .unwrap();
    let after = Snap::take(c).await;
    tokio::task::spawn_blocking(move || proc.finish())
        .await
        .unwrap();
    Some((
        out,
        Snap {
            cpu: after.cpu - before.cpu,
            commands: after.commands.saturating_sub(before.commands),
        },
    ))
}

/// A peer's throughput section as figures.
async fn peer_measured(
    c: &Client,
    p: Who,
    mode: &str,
    url: &str,
    queue: &str,
    n: u64,
    args: Json,
) -> Option<Measured> {
    let (out, redis) = peer_section(c, p, mode, url, queue, args).await?;
    let ms = out["ms"].as_f64().unwrap_or(f64::NAN);
    let cpu = out["cpu_us"]
        .as_f64()
        .or_else(|| out["cpuUs"].as_f64())
        .unwrap_or(f64::NAN);
    Some(Measured::of(n, ms / 1000.0, cpu, redis))
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

impl Measured {
    fn of(n: u64, secs: f64, client_cpu_us: f64, redis: Snap) -> Measured {
        Measured {
            rate: n as f64 / secs,
            client_us: client_cpu_us / n as f64,
            redis_us: redis.cpu * 1e6 / n as f64,
            commands: redis.commands as f64 / n as f64,
        }
    }
}

/// EchoMQ's section in this process, between the same two readings of Redis
/// as a peer's: `work` returns what to do after the second reading (close).
async fn echomq_measured<F, Fut, After>(c: &Client, n: u64, work: F) -> (Measured, After)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = After>,
{
    let before = Snap::take(c).await;
    let (t, cpu0) = (Instant::now(), cpu_us());
    let after_work = work().await;
    let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_us() - cpu0);
    let after = Snap::take(c).await;
    let redis = Snap {
        cpu: after.cpu - before.cpu,
        commands: after.commands.saturating_sub(before.commands),
    };
    (Measured::of(n, secs, cpu, redis), after_work)
}

/// One round of the compared sections, the clients in `order(r)`.
async fn round(t: &mut Table, r: usize, conn: &Connection, c: &Client, url: &str) {
    let clients = order(r);
    if section("work") {
        let w = work_vs_library(conn, c, url, r).await;
        t.work.push(w);
    }
    if section("add") {
        // 1. add, one job per call, 100 in flight.
        let n = scale(20_000);
        let tag = format!("add, 1 per call, 100 in flight ({n} jobs)");
        for who in clients {
            let m = match who {
                Who::EchoMq => {
                    let q = Queue::new(conn, "add1").await.unwrap();
                    Some(echomq_measured(c, n, || add_lanes(&q, n, 100)).await.0)
                }
                p => {
                    let args = json!({"n": n, "inFlight": 100});
                    peer_measured(c, p, "add-single", url, "add1", n, args).await
                }
            };
            t.measured(&tag, who, m);
            flush(c).await;
        }
        // 2. add_bulk, 1000 per call.
        let n = scale(100_000);
        let tag = format!("add_bulk, 1000 per call ({n} jobs)");
        for who in clients {
            let m = match who {
                Who::EchoMq => {
                    let q = Queue::new(conn, "bulk").await.unwrap();
                    Some(echomq_measured(c, n, || fill(&q, n)).await.0)
                }
                p => {
                    let args = json!({"n": n, "batch": 1000});
                    peer_measured(c, p, "add-bulk", url, "bulk", n, args).await
                }
            };
            t.measured(&tag, who, m);
            flush(c).await;
        }
    }

    // Processing with a no-op processor: throughput, client and Redis CPU per
    // job, Redis commands per job; completed jobs kept, then removed.
    if section("process") {
        for keep in [true, false] {
            let kept = if keep { "kept" } else { "removeOnComplete" };
            for concurrency in [1usize, 16, 100] {
                let n = scale(20_000) / if concurrency == 1 { 4 } else { 1 };
                let tag = format!("processing c{concurrency}, {kept} ({n} jobs)");
                for who in clients {
                    let q = Queue::new(conn, "proc").await.unwrap();
                    fill(&q, n).await;
                    let m = match who {
                        Who::EchoMq => Some(process_with_echomq(c, &q, n, concurrency, keep).await),
                        p => {
                            let args = json!({"n": n, "concurrency": concurrency, "keep": keep});
                            peer_measured(c, p, "process", url, "proc", n, args).await
                        }
                    };
                    t.measured(&tag, who, m);
                    flush(c).await;
                }
            }
        }
    }

    if section("latency") {
        // add → completed at concurrency 1, each client adding its own jobs
        // and timing them in its own process: one at a time as a user would
        // (the add awaited, then its completion), at the Worker and at a
        // QueueEvents subscriber; then the earlier bench's paced method.
        let n = scale(2_000);
        let names = [
            "latency add → Worker's completed p50, c1, one at a time",
            "latency add → Worker's completed p99, c1, one at a time",
            "latency add → QueueEvents completed p50, c1, one at a time",
            "latency add → QueueEvents completed p99, c1, one at a time",
        ];
        for who in clients {
            let v = match who {
                Who::EchoMq => Some(
                    latency_one_at_a_time(conn, n, Duration::ZERO)
                        .await
                        .map(Some),
                ),
                p => peer_section(c, p, "latency", url, "lat", json!({"n": n}))
                    .await
                    .map(|(o, _)| ["p50", "p99", "qe_p50", "qe_p99"].map(|k| o[k].as_f64())),
            };
            for (i, name) in names.iter().enumerate() {
                t.set(name, "ms", false, who, v.and_then(|v| v[i]));
            }
            flush(c).await;
        }
        // EchoMQ alone: one at a time with 2 ms between a completion and the
        // next add, which separates "back to back" from "awaited".
        let v = latency_one_at_a_time(conn, n, Duration::from_millis(2)).await;
        flush(c).await;
        for (i, q) in ["Worker's completed p50", "Worker's completed p99"]
            .iter()
            .enumerate()
        {
            let name = format!("latency add → {q}, c1, one at a time, 2 ms apart");
            t.set(&name, "ms", false, Who::EchoMq, Some(v[i]));
        }
        let names = [
            "latency add → Worker's completed p50, c1, paced 500 jobs/s (earlier method)",
            "latency add → Worker's completed p99, c1, paced 500 jobs/s (earlier method)",
        ];
        for who in clients {
            let v = match who {
                Who::EchoMq => {
                    let (p50, p99) = latency_paced(conn, n).await;
                    Some([Some(p50), Some(p99)])
                }
                p => {
                    let args = json!({"n": n, "rate": 500});
                    peer_section(c, p, "latency-paced", url, "lat", args)
                        .await
                        .map(|(o, _)| ["p50", "p99"].map(|k| o[k].as_f64()))
                }
            };
            for (i, name) in names.iter().enumerate() {
                t.set(name, "ms", false, who, v.and_then(|v| v[i]));
            }
            flush(c).await;
        }
    }
}

async fn add_lanes(q: &Queue, n: u64, in_flight: usize) {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let lanes: Vec<_> = (0..in_flight)
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
}

/// A cell: the median of the rounds and their min–max.
fn cell(v: Vec<f64>, unit: &str) -> String {
    let show = |v: f64| {
        if unit.is_empty() || v < 10.0 {
            format!("{v:.2}")
        } else {
            format!("{v:.0}")
        }
    };
    match spread(v) {
        None => "—".into(),
        Some((m, lo, hi)) if lo == hi => format!("{} {unit}", show(m)),
        Some((m, lo, hi)) => format!("{} {unit} ({}–{})", show(m), show(lo), show(hi)),
    }
}

fn print_table(t: &Table, redis_version: &str) {
    let runs = t.rows.first().map_or(0, |r| r.runs.len());
    println!(
        "\n### EchoMQ vs BullMQ Node {} and bullmq-official 1.4.4 — same machine, same redis-server {redis_version}\n",
        echomq_integration_tests::NodeBullmq::V6_7.version()
    );
    println!(
        "Each cell: the median of {runs} measured rounds (min–max), after one discarded warm-up round; the clients' order rotated from round to round. The ratio is taken per round.\n"
    );
    println!("| metric | EchoMQ | BullMQ Node | bullmq-official | EchoMQ vs best peer |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for r in &t.rows {
        let ratios: Vec<f64> = (0..r.runs.len()).filter_map(|i| r.ratio(i)).collect();
        let ratio = match spread(ratios) {
            None => "—".into(),
            Some((m, lo, hi)) if lo == hi => format!("{m:.2}×"),
            Some((m, lo, hi)) => format!("{m:.2}× ({lo:.2}–{hi:.2})"),
        };
        println!(
            "| {} | {} | {} | {} | {ratio} |",
            r.metric,
            cell(r.client(Who::EchoMq), r.unit),
            cell(r.client(Who::Node), r.unit),
            cell(r.client(Who::Official), r.unit),
        );
    }
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
    let version: String = c.info(Some(fred::types::InfoKind::Server)).await.unwrap();
    let redis_version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    eprintln!(
        "bench: redis {redis_version} on {url}; peers: node {}, bullmq-official {}",
        peer_enabled(Who::Node),
        peer_enabled(Who::Official)
    );

    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let mut table = Table::default();
    let load_before = load_average();
    for r in 0..=runs {
        let clients = order(r);
        if r == 0 {
            eprintln!("bench: warm-up round (discarded), order {clients:?}");
            round(&mut Table::default(), r, &conn, &c, &url).await;
        } else {
            eprintln!("bench: round {r} of {runs}, order {clients:?}");
            table.round = r - 1;
            round(&mut table, r, &conn, &c, &url).await;
        }
    }
    let load_after = load_average();
    // One core's worth of Redis at EchoMQ's own cost per job.
    let n = scale(20_000);
    let ceiling: Vec<(&str, f64, f64)> = ["kept", "removeOnComplete"]
        .into_iter()
        .filter_map(|kept| {
            let tag = format!("processing c100, {kept} ({n} jobs)");
            let rate = table.median(&tag, Who::EchoMq)?;
            let redis_us = table.median(&format!("Redis CPU per job, {tag}"), Who::EchoMq)?;
            Some((kept, rate, 1e6 / redis_us))
        })
        .collect();

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
        // Every event of the section is kept: a reader that falls more than
        // the default 10 000 events behind a burst of adds would find a gap,
        // and this section measures reading, not trimming.
        let mut options = echomq::QueueOptions::default();
        options.max_len_events = n * 2 + 1_000;
        let q = Queue::with_options(&conn, "events", options).await.unwrap();
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

    print_table(&table, &redis_version);
    // How quiet the machine was: the rounds' own load shows in the "after"
    // figures, anything that ran before them in the "before" ones.
    println!(
        "\nMachine: {} CPUs; load average (1, 5, 15 min) {load_before} before the rounds, {load_after} after them.",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    print_work(&table.work);
    print_targets(&table);
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

/// One round of the `work` section: jobs/s of the library's worker and of
/// the `echomq work` binary, and the client CPU per job of each.
struct WorkRound {
    n: u64,
    library: f64,
    binary: f64,
    library_cpu_us: f64,
    binary_cpu_us: f64,
}

fn echomq_binary() -> String {
    std::env::var("BENCH_ECHOMQ").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/echomq").to_owned()
    })
}

/// CPU time (user + system, µs) of process `pid` so far, from /proc.
fn process_cpu_us(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the
    // 12th and 13th of them, in clock ticks.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz * 1e6
}

/// `n` jobs on the paused queue `name`, a worker at c16 started and
/// waiting; then the section: resume to the n-th completion (`ZCARD` of
/// completed, read every millisecond, the same for both workers).
async fn work_section(c: &Client, q: &Queue, n: u64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    // The worker has opened and named its blocking connection (at start):
    // it is up, waiting on the paused queue.
    while q.get_workers().await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the worker never connected");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t = Instant::now();
    q.resume().await.unwrap();
    let completed = q.keys().fixed().completed.as_str().to_owned();
    loop {
        let done: u64 = c.zcard(&completed).await.unwrap();
        if done >= n {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "{done} of {n} jobs done"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    t.elapsed().as_secs_f64()
}

/// `echomq work` (the release binary, `--processor echo`, its defaults
/// otherwise) against the library's worker (`WorkerSetSpec::new`, a
/// processor answering at once) at concurrency 16, completed jobs kept; the
/// same section for both (module docs of `work_section`), the order
/// alternating from round to round.
async fn work_vs_library(conn: &Connection, c: &Client, url: &str, r: usize) -> WorkRound {
    use echomq::worker::processor_fn;
    const CONCURRENCY: usize = 16;
    let n = scale(20_000);
    let mut library = (0.0, 0.0);
    let mut binary = (0.0, 0.0);
    for binary_first in [r % 2 == 1, r % 2 == 0] {
        let q = Queue::new(conn, "work").await.unwrap();
        q.pause().await.unwrap();
        fill(&q, n).await;
        if binary_first {
            let mut child = Command::new(echomq_binary())
                .args([
                    "--url",
                    url,
                    "work",
                    "work",
                    "--concurrency",
                    &CONCURRENCY.to_string(),
                    "--processor",
                    "echo",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the release echomq binary (cargo build --release -p echomq-cli)");
            let cpu0 = process_cpu_us(child.id());
            let secs = work_section(c, &q, n).await;
            let cpu = process_cpu_us(child.id()) - cpu0;
            binary = (n as f64 / secs, cpu / n as f64);
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        } else {
            let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
            let mut args = echomq::WorkerArgs::new(
                q.clone(),
                processor_fn(|job| async move { Ok(job.data().clone()) }),
            );
            args.options.concurrency = CONCURRENCY;
            args.events = Some(tx);
            let spec = echomq::WorkerSetSpec::new(args);
            let (host, _) =
                ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
                    .await
                    .unwrap();
            let set = spec.spawn_linked(host.get_cell()).await.unwrap();
            let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
            let cpu0 = cpu_us();
            let secs = work_section(c, &q, n).await;
            library = (n as f64 / secs, (cpu_us() - cpu0) / n as f64);
            let _ = ractor::call_t!(
                set.worker,
                echomq::WorkerMsg::Close,
                10_000,
                Duration::from_secs(5)
            );
            host.stop(None);
            drain.abort();
        }
        flush(c).await;
    }
    WorkRound {
        n,
        library: library.0,
        binary: binary.0,
        library_cpu_us: library.1,
        binary_cpu_us: binary.1,
    }
}

fn print_work(rounds: &[WorkRound]) {
    let Some(first) = rounds.first() else {
        return;
    };
    println!(
        "\n### `echomq work` (release binary, `--processor echo`) vs the library worker, c16, kept ({} jobs)\n",
        first.n
    );
    println!("Each cell: the median of {} measured rounds (min–max); the ratio is taken per round, > 1 = `echomq work` better (jobs/s: binary / library; CPU: library / binary). Client CPU: the binary's from /proc, the library's getrusage of the bench process (which also polls Redis for the count).\n", rounds.len());
    println!("| metric | library | `echomq work` | `echomq work` vs library |");
    println!("| --- | ---: | ---: | ---: |");
    let show = |v: Vec<f64>, unit: &str| cell(v, unit);
    let ratio = |v: Vec<f64>| match spread(v) {
        None => "—".to_owned(),
        Some((m, lo, hi)) => format!("{m:.2}× ({lo:.2}–{hi:.2})"),
    };
    println!(
        "| processing c16, kept | {} | {} | {} |",
        show(rounds.iter().map(|w| w.library).collect(), "jobs/s"),
        show(rounds.iter().map(|w| w.binary).collect(), "jobs/s"),
        ratio(rounds.iter().map(|w| w.binary / w.library).collect()),
    );
    println!(
        "| client CPU per job | {} | {} | {} |",
        show(rounds.iter().map(|w| w.library_cpu_us).collect(), "µs"),
        show(rounds.iter().map(|w| w.binary_cpu_us).collect(), "µs"),
        ratio(
            rounds
                .iter()
                .map(|w| w.library_cpu_us / w.binary_cpu_us)
                .collect()
        ),
    );
}

/// The first three fields of /proc/loadavg ("?" where there is none).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One of issue 42's targets: EchoMQ's ratio (> 1 = EchoMQ better) on the
/// table's row whose metric starts with `row`, against `peers`, per round.
struct Target {
    what: &'static str,
    row: &'static str,
    peers: &'static [Who],
    /// The least ratio that meets it.
    want: f64,
    /// The target as the issue states it.
    stated: &'static str,
}

const OFFICIAL: &[Who] = &[Who::Official];
const NODE: &[Who] = &[Who::Node];
const BEST: &[Who] = &[Who::Node, Who::Official];

/// Issue 42's targets, each with its ratio per round (median, min–max) and
/// whether it was met in every round (the minimum), by the median only, or
/// not. CPU ratios are the peer's CPU over EchoMQ's, so the issue's
/// "≤ 0.5× the peer's CPU" is a ratio of at least 2.
fn print_targets(t: &Table) {
    let targets = [
        Target {
            what: "processing c16, kept, vs bullmq-official",
            row: "processing c16, kept (",
            peers: OFFICIAL,
            want: 1.6,
            stated: "≥ 1.6× in every round",
        },
        Target {
            what: "processing c100, kept, vs bullmq-official",
            row: "processing c100, kept (",
            peers: OFFICIAL,
            want: 1.6,
            stated: "≥ 1.6× in every round",
        },
        Target {
            what: "processing c16, removeOnComplete, vs bullmq-official",
            row: "processing c16, removeOnComplete (",
            peers: OFFICIAL,
            want: 1.6,
            stated: "≥ 1.6× in every round",
        },
        Target {
            what: "processing c100, removeOnComplete, vs bullmq-official",
            row: "processing c100, removeOnComplete (",
            peers: OFFICIAL,
            want: 1.6,
            stated: "≥ 1.6× in every round",
        },
        Target {
            what: "processing c16, kept, vs BullMQ Node",
            row: "processing c16, kept (",
            peers: NODE,
            want: 2.5,
            stated: "≥ 2.5×",
        },
        Target {
            what: "processing c100, kept, vs BullMQ Node",
            row: "processing c100, kept (",
            peers: NODE,
            want: 2.5,
            stated: "≥ 2.5×",
        },
        Target {
            what: "processing c1, kept, vs bullmq-official",
            row: "processing c1, kept (",
            peers: OFFICIAL,
            want: 1.2,
            stated: "≥ 1.2×",
        },
        Target {
            what: "add, 1 per call, 100 in flight, vs the best peer",
            row: "add, 1 per call, 100 in flight (",
            peers: BEST,
            want: 1.4,
            stated: "≥ 1.4×",
        },
        Target {
            what: "add_bulk vs the best peer",
            row: "add_bulk, 1000 per call (",
            peers: BEST,
            want: 1.6,
            stated: "≥ 1.6×",
        },
        Target {
            what: "Redis CPU per processed job, c16, kept: bullmq-official's / EchoMQ's",
            row: "Redis CPU per job, processing c16, kept (",
            peers: OFFICIAL,
            want: 2.0,
            stated: "EchoMQ ≤ 0.5× the peer's",
        },
        Target {
            what: "client CPU per processed job, c16, kept: bullmq-official's / EchoMQ's",
            row: "client CPU per job, processing c16, kept (",
            peers: OFFICIAL,
            want: 2.0,
            stated: "EchoMQ ≤ 0.5× the peer's",
        },
    ];
    println!("\n### Issue 42's targets against this run\n");
    println!("Each ratio is taken per round against the named peer (> 1 = EchoMQ better): the median (min–max). \"In every round\" is the minimum.\n");
    println!("| target | stated | ratio per round | met |");
    println!("| --- | --- | ---: | --- |");
    let verdict = |v: &[f64], want: f64| match spread(v.to_vec()) {
        None => ("—".to_owned(), "not measured"),
        Some((m, lo, hi)) => (
            format!("{m:.2}× ({lo:.2}–{hi:.2})"),
            if lo >= want {
                "in every round"
            } else if m >= want {
                "by the median"
            } else {
                "missed"
            },
        ),
    };
    for target in &targets {
        let ratios: Vec<f64> = t
            .rows
            .iter()
            .find(|r| r.metric.starts_with(target.row))
            .map(|r| {
                (0..r.runs.len())
                    .filter_map(|i| r.ratio_among(i, target.peers))
                    .collect()
            })
            .unwrap_or_default();
        let (ratio, met) = verdict(&ratios, target.want);
        println!("| {} | {} | {ratio} | {met} |", target.what, target.stated);
    }
    let work: Vec<f64> = t.work.iter().map(|w| w.binary / w.library).collect();
    let (ratio, met) = verdict(&work, 0.9);
    println!("| `echomq work` vs the library, c16, kept (jobs/s) | ≥ 0.9× | {ratio} | {met} |");
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

/// From worker start to the n-th completion, no-op processor, completed jobs
/// kept or removed; the worker with its StalledChecker and LockManager, as
/// `WorkerSetSpec::new` makes them.
async fn process_with_echomq(
    c: &Client,
    q: &Queue,
    n: u64,
    concurrency: usize,
    keep: bool,
) -> Measured {
    use echomq::worker::processor_fn;
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    let mut args = echomq::WorkerArgs::new(
        q.clone(),
        processor_fn(|_| async { Ok(serde_json::Value::Null) }),
    );
    args.options.concurrency = concurrency;
    // BENCH_GROUP_COMMIT overrides WorkerOptions::group_commit, for experiments.
    if let Some(n) = std::env::var("BENCH_GROUP_COMMIT")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        args.options.group_commit = n;
    }
    if !keep {
        args.options.remove_on_complete = Some(echomq::KeepJobs::Remove(true));
    }
    args.events = Some(tx);
    let spec = echomq::WorkerSetSpec::new(args);
    let (m, (host, set)) = echomq_measured(c, n, || async {
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
        (host, set)
    })
    .await;
    let _ = ractor::call_t!(
        set.worker,
        echomq::WorkerMsg::Close,
        10_000,
        Duration::from_secs(5)
    );
    host.stop(None);
    m
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

/// Job ids with the instant this process received their completion.
type Stamps = tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>;

/// The arrival of `id` on `rx` (arrivals of other ids kept in `early`).
async fn arrival(
    rx: &mut Stamps,
    early: &mut HashMap<String, Instant>,
    id: &str,
    within: Duration,
) -> Option<Instant> {
    if let Some(at) = early.remove(id) {
        return Some(at);
    }
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (got, at) = tokio::time::timeout_at(deadline, rx.recv()).await.ok()??;
        if got == id {
            return Some(at);
        }
        early.insert(got, at);
    }
}

/// The latency sections' worker: queue `lat`, one slot, a no-op processor,
/// its events on a channel of `capacity`, under a host of its own.
async fn latency_worker(
    conn: &Connection,
    capacity: usize,
) -> (
    Queue,
    tokio::sync::mpsc::Receiver<echomq::WorkerEvent>,
    ractor::ActorRef<()>,
    echomq::WorkerSet,
) {
    use echomq::worker::processor_fn;
    let q = Queue::new(conn, "lat").await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    let mut args = echomq::WorkerArgs::new(
        q.clone(),
        processor_fn(|_| async { Ok(serde_json::Value::Null) }),
    );
    args.options.concurrency = 1;
    args.events = Some(tx);
    let spec = echomq::WorkerSetSpec::new(args);
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    (q, rx, host, set)
}

/// add → completed at concurrency 1, one job at a time as a user would: the
/// clock read before the add call, the add awaited, then the Worker's own
/// `Completed` and a QueueEvents subscriber's `completed` for that job, each
/// stamped on receipt. p50 and p99 of each, in ms.
/// `gap`: a pause after each completion before the next add (the worker
/// re-armed on its marker by then), to tell the method's parts apart.
async fn latency_one_at_a_time(conn: &Connection, n: u64, gap: Duration) -> [f64; 4] {
    let (q, mut rx, host, set) = latency_worker(conn, 1024).await;
    let (qe, _) =
        ractor::Actor::spawn(None, QueueEvents, QueueEventsArgs::new(conn.clone(), "lat"))
            .await
            .unwrap();
    let mut sub = ractor::call_t!(qe, QueueEventsMsg::Subscribe, 5000, 100_000).unwrap();
    let (wtx, mut wrx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            if let echomq::WorkerEvent::Completed { job_id } = ev {
                let _ = wtx.send((job_id, Instant::now()));
            }
        }
    });
    let (qtx, mut qrx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(d) = sub.recv().await {
            if let Delivery::Event(e) = d {
                if let echomq::protocol::EventKind::Completed { job_id, .. } = e.kind {
                    let _ = qtx.send((job_id, Instant::now()));
                }
            }
        }
    });
    // The subscriber reads from `$` once its first XREAD is in: add until it
    // has seen one completion.
    loop {
        let id = q
            .add("lat", &json!({"warm": true}), JobOptions::new())
            .await
            .unwrap()
            .to_string();
        let mut early = HashMap::new();
        let seen = arrival(&mut qrx, &mut early, &id, Duration::from_millis(200)).await;
        if seen.is_some() {
            break;
        }
    }
    while wrx.try_recv().is_ok() {}
    let (mut ew, mut eq) = (HashMap::new(), HashMap::new());
    let (mut lw, mut lq) = (Vec::new(), Vec::new());
    let within = Duration::from_secs(10);
    for i in 0..n {
        let t0 = Instant::now();
        let id = q
            .add("lat", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap()
            .to_string();
        let tw = arrival(&mut wrx, &mut ew, &id, within).await;
        let tq = arrival(&mut qrx, &mut eq, &id, within).await;
        lw.push((tw.expect("worker completed") - t0).as_secs_f64() * 1e3);
        lq.push((tq.expect("QueueEvents completed") - t0).as_secs_f64() * 1e3);
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
    }
    qe.cast(QueueEventsMsg::Close).ok();
    let _ = ractor::call_t!(
        set.worker,
        echomq::WorkerMsg::Close,
        10_000,
        Duration::from_secs(5)
    );
    host.stop(None);
    let (w50, w99) = percentiles(lw);
    let (q50, q99) = percentiles(lq);
    [w50, w99, q50, q99]
}

/// The earlier bench's method, kept to show the difference: one add every
/// 2 ms, not waiting for its completion, each timed from the add call to the
/// worker's `Completed` event for it.
async fn latency_paced(conn: &Connection, n: u64) -> (f64, f64) {
    let (q, mut rx, host, set) = latency_worker(conn, n as usize + 16).await;
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
