//! `just bench-scale`: the cost curve of a queue as it grows. At each size
//! (10^3, 10^5, 10^6, 10^7 jobs: half completed, half waiting, written
//! straight into Redis by a Lua helper, `scale::fill`) it measures add and
//! process throughput and the latency of the operator's calls (stats, a page
//! of jobs, a search request, the audit, clean 1 000, the dashboard's
//! overview and queue page), each with the longest single Redis command of
//! the step from `SLOWLOG`; and BullMQ Node 6.7.0's `getJobs`/`getJobCounts`
//! on the same data; and, for the processing step, Redis's calls and µs per
//! command at each size (`INFO commandstats`). Then Redis's bytes per waiting and per completed job,
//! EchoMQ beside BullMQ Node, and the events stream's share; then the memory
//! of a worker holding 10 000 sleeping jobs (RSS of `echomq work`, and heap
//! blocks per held job counted by this binary's allocator) and its idle CPU.
//! Printed as Markdown for docs/benchmarks.md.
//!
//! Environment: `BENCH_SIZES=1000,100000` picks the sizes (default 10^3,
//! 10^5, 10^6; `BENCH_HUGE=1` adds 10^7); `BENCH_ONLY=`
//! `curve`, `memory`, `held` or `linear` picks sections (`linear`: BullMQ's
//! calls that are O(N) by design, at 10^5 and 10^6, for docs/scale.md;
//! `BENCH_LINEAR=100000` picks its sizes); `BENCH_ECHOMQ=<path>` is the
//! release `echomq` binary (for the dashboard and `echomq work`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use echomq::queue::JobFilter;
use echomq::{JobOptions, JobState, NewJob, Queue};
use echomq_integration_tests::scale::fill;
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::{json, Value as Json};

/// Live heap blocks and bytes of this process.
struct Counting;

static BLOCKS: AtomicI64 = AtomicI64::new(0);
static BYTES: AtomicI64 = AtomicI64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(l.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        BYTES.fetch_sub(l.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        BYTES.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const DATA: &str = r#"{"order":12345,"customer":"c-678","items":3}"#;
const ROUNDS: usize = 20;
/// Jobs added, then processed, at each size.
const BATCH: u64 = 20_000;

/// One measured step.
#[derive(Clone, Default)]
struct Step {
    p50_ms: f64,
    max_ms: f64,
    /// Longest single Redis command (µs) and its name.
    slow_us: u64,
    slow_cmd: String,
    /// Extra figure (throughput, calls).
    extra: String,
    /// What Redis ran during the step, by command (`INFO commandstats`,
    /// those a script runs included): calls and µs.
    commands: BTreeMap<String, (u64, f64)>,
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

fn only(section: &str) -> bool {
    std::env::var("BENCH_ONLY")
        .map(|v| v.split(',').any(|s| s == section))
        .unwrap_or(true)
}

fn echomq_bin() -> String {
    std::env::var("BENCH_ECHOMQ").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/echomq").to_owned()
    })
}

async fn run() {
    let sizes: Vec<u64> = std::env::var("BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| {
            // 10^7 takes ~4 GB of Redis and most of an hour: asked for.
            let mut v = vec![1_000, 100_000, 1_000_000];
            if std::env::var_os("BENCH_HUGE").is_some() {
                v.push(10_000_000);
            }
            v
        });
    if only("curve") {
        let mut table = Vec::new();
        for n in &sizes {
            eprintln!("bench-scale: {n} jobs");
            table.push((*n, curve(*n).await));
        }
        print_curve(&table);
    }
    if only("memory") {
        memory_per_job(100_000).await;
    }
    if only("held") {
        held_jobs(10_000).await;
    }
    if only("linear") {
        let sizes: Vec<u64> = std::env::var("BENCH_LINEAR")
            .ok()
            .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![100_000, 1_000_000]);
        println!("\n| call (O(N) by design) | jobs | wall ms | longest Redis command |");
        println!("| --- | ---: | ---: | --- |");
        for n in sizes {
            linear_calls(n).await;
        }
    }
}

/// BullMQ's own scripts that walk a structure by design, on `n` waiting and
/// `n` completed jobs: removing the oldest waiting job (`LREM` of `wait`
/// from the head reaches the tail), re-prioritising the newest (`LREM -1`
/// from the tail reaches the head), and `clean` with limit 0 (every
/// completed job in one call). Each measured once, on Redis's slow log.
async fn linear_calls(n: u64) {
    let redis = RedisServer::start();
    let c = redis.client().await;
    // BullMQ's one-call clean of 10^6 jobs holds Redis ~10 s, past the
    // default command timeout: this section measures it, so it waits.
    let conn = echomq::Connection::connect(echomq::ConnectionConfig {
        command_timeout: Duration::from_secs(600),
        ..echomq::ConnectionConfig::with_url(redis.url())
    })
    .await
    .unwrap();
    fill(&c, "q", n, n, DATA).await;
    let q = Queue::new(&conn, "q").await.unwrap();
    // fill writes the completed ids first, then the waiting ones, each
    // pushed at the head: the oldest waiting job is at the tail.
    let (oldest, newest) = ((n + 1).to_string(), (2 * n).to_string());
    let row = |what: &str, step: Step| {
        println!(
            "| {what} | {n} | {:.1} | {} {:.1} ms |",
            step.max_ms,
            step.slow_cmd,
            step.slow_us as f64 / 1e3
        );
    };
    let step = timed(&c, 1, || async {
        q.remove(&oldest, false).await.unwrap();
    })
    .await;
    row(
        "`remove` of the oldest waiting job (removeJob: LREM wait)",
        step,
    );
    let step = timed(&c, 1, || async {
        q.change_priority(&newest, 5, false).await.unwrap();
    })
    .await;
    row(
        "`change_priority` of the newest waiting job (LREM -1 wait)",
        step,
    );
    let step = timed(&c, 1, || async {
        q.clean(Duration::ZERO, 0, JobState::Completed)
            .await
            .unwrap();
    })
    .await;
    row("`clean` of completed, limit 0: EchoMQ's calls of 250", step);
    // What a BullMQ client's `clean(0, 0)` sends: one call, no limit.
    fill(&c, "q", 0, n, DATA).await;
    let keys = echomq::protocol::QueueKeys::new("emq", "q").unwrap();
    let step = timed(&c, 1, || async {
        let call = echomq::protocol::call::admin::CleanJobsInSet {
            keys: &keys,
            state: "completed",
            cutoff_ms: u64::MAX / 2,
            limit: 0,
        };
        let _: Vec<String> = conn.call(&call).await.unwrap();
    })
    .await;
    row(
        "`cleanJobsInSet` of completed, limit 0, one call (BullMQ's `clean(0, 0)`)",
        step,
    );
}

/// Waits until the keyspace's hash table has finished growing. A fill of
/// 10^7 keys ends with the main table half rehashed (8.4M → 16.8M buckets):
/// until Redis's cron finishes it (~15 s), every command also moves buckets,
/// and an INCR took 2.3 µs instead of 0.3. A queue that grew over time is
/// past that point; measuring during it would charge the fill to the steps.
async fn settle_rehash(c: &Client, n: u64) {
    let t0 = Instant::now();
    loop {
        let stats: String = cmd(c, "DEBUG", vec!["HTSTATS".into(), "0".into()]).await;
        if !stats.contains("rehashing target") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "the keyspace of {n} jobs still rehashing after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "bench-scale: {n} jobs: keyspace rehash settled {:.1} s after the fill",
        t0.elapsed().as_secs_f64()
    );
}

async fn cmd<R: FromValue>(c: &Client, name: &'static str, args: Vec<String>) -> R {
    use fred::types::{ClusterHash, CustomCommand};
    c.custom(
        CustomCommand::new_static(name, ClusterHash::FirstKey, false),
        args,
    )
    .await
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

async fn slowlog_reset(c: &Client) {
    let _: String = cmd(
        c,
        "CONFIG",
        vec!["SET".into(), "slowlog-log-slower-than".into(), "50".into()],
    )
    .await;
    let _: String = cmd(
        c,
        "CONFIG",
        vec!["SET".into(), "slowlog-max-len".into(), "100000".into()],
    )
    .await;
    let _: String = cmd(c, "SLOWLOG", vec!["RESET".into()]).await;
}

/// The longest command since the reset: µs and a short name (a script's
/// name is looked up by its SHA).
async fn slowlog_max(c: &Client) -> (u64, String) {
    let v: Value = cmd(c, "SLOWLOG", vec!["GET".into(), "100000".into()]).await;
    let mut best = (0u64, String::new());
    if let Value::Array(entries) = v {
        for e in entries {
            let Value::Array(parts) = e else { continue };
            let us = parts.get(2).and_then(|p| p.as_u64()).unwrap_or(0);
            if us <= best.0 {
                continue;
            }
            let args: Vec<String> = match parts.get(3) {
                Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_string()).collect(),
                _ => Vec::new(),
            };
            let name = name_of(&args);
            // The bench's own instruments: a SLOWLOG RESET frees the previous
            // step's entries (their copied arguments), which is not the
            // step's work.
            if matches!(name.as_str(), "SLOWLOG" | "CONFIG") {
                continue;
            }
            best = (us, name);
        }
    }
    best
}

fn name_of(args: &[String]) -> String {
    let first = args
        .first()
        .cloned()
        .unwrap_or_default()
        .to_ascii_uppercase();
    if first == "EVALSHA" {
        let sha = args.get(1).cloned().unwrap_or_default();
        for (stem, _, s) in echomq::protocol::scripts::compiled() {
            if s == sha {
                return stem.to_owned();
            }
        }
    }
    first
}

async fn timed<F, Fut>(c: &Client, rounds: usize, mut f: F) -> Step
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    slowlog_reset(c).await;
    let _: String = cmd(c, "CONFIG", vec!["RESETSTAT".into()]).await;
    let mut ms = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t0 = Instant::now();
        f().await;
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let commands = command_stats(c).await;
    let (slow_us, slow_cmd) = slowlog_max(c).await;
    Step {
        p50_ms: ms[ms.len() / 2],
        max_ms: ms[ms.len() - 1],
        slow_us,
        slow_cmd,
        extra: String::new(),
        commands,
    }
}

/// Calls and µs per command since the last `CONFIG RESETSTAT`.
async fn command_stats(c: &Client) -> BTreeMap<String, (u64, f64)> {
    let text: String = cmd(c, "INFO", vec!["commandstats".into()]).await;
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let field = |key: &str| {
                rest.split(',')
                    .find_map(|p| p.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some((name.to_owned(), (field("calls=")? as u64, field("usec=")?)))
        })
        .collect()
}

/// A GET against the dashboard, the body's length.
fn http_get(port: u16, path: &str) -> usize {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    assert!(
        body.starts_with(b"HTTP/1.1 200"),
        "{path}: {}",
        String::from_utf8_lossy(&body[..80.min(body.len())])
    );
    body.len()
}

struct Ui {
    child: std::process::Child,
    port: u16,
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_ui(url: &str) -> Ui {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(echomq_bin())
        .args(["--url", url, "ui", "--bind", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the release echomq binary (cargo build --release -p echomq-cli)");
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the dashboard did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ui { child, port }
}

/// Every figure of one size.
struct SizeRow {
    fill_s: f64,
    add: Step,
    process: Step,
    stats: Step,
    page_waiting: Step,
    page_completed: Step,
    search: Step,
    audit: Step,
    clean: Step,
    overview: Step,
    queue_page: Step,
    node: Option<Json>,
    redis_mb: f64,
}

async fn used_memory(c: &Client) -> u64 {
    let info: String = cmd(c, "INFO", vec!["memory".into()]).await;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

async fn curve(n: u64) -> SizeRow {
    // DEBUG HTSTATS tells when the keyspace's rehash is over (settle_rehash).
    let redis = RedisServer::start_with(&["--enable-debug-command", "local"]);
    let c = redis.client().await;
    let t0 = Instant::now();
    fill(&c, "q", n / 2, n - n / 2, DATA).await;
    let fill_s = t0.elapsed().as_secs_f64();
    settle_rehash(&c, n).await;
    let redis_mb = used_memory(&c).await as f64 / 1e6;
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "q").await.unwrap();

    // Adding 20 000 jobs, the way add-bulk sends them.
    let jobs = || -> Vec<NewJob> {
        (0..BATCH)
            .map(|_| NewJob {
                name: "job".into(),
                data: serde_json::from_str(DATA).unwrap(),
                options: JobOptions::new(),
            })
            .collect()
    };
    let mut add = timed(&c, 1, || async {
        q.add_bulk(jobs()).await.unwrap();
    })
    .await;
    add.extra = format!("{:.0}", BATCH as f64 / (add.p50_ms / 1e3));

    // Processing 20 000 of the waiting jobs, no-op processor, concurrency 100.
    let mut process = timed(&c, 1, || async { process_jobs(&conn, &c, BATCH).await }).await;
    process.extra = format!("{:.0}", BATCH as f64 / (process.p50_ms / 1e3));

    let stats = timed(&c, ROUNDS, || async {
        q.counts().await.unwrap();
        q.is_paused().await.unwrap();
    })
    .await;
    let page_waiting = timed(&c, ROUNDS, || async {
        assert_eq!(
            q.get_jobs(&[JobState::Waiting], 0, 24, echomq::RangeOrder::Descending)
                .await
                .unwrap()
                .len(),
            25
        );
    })
    .await;
    let page_completed = timed(&c, ROUNDS, || async {
        assert_eq!(
            q.get_jobs(
                &[JobState::Completed],
                0,
                24,
                echomq::RangeOrder::Descending
            )
            .await
            .unwrap()
            .len(),
            25
        );
    })
    .await;
    // A search request of the dashboard: a miss reads its whole budget
    // (2 000 ids, 4 calls of 500).
    let filter = JobFilter {
        name: None,
        data_contains: Some("no-such-text".into()),
    };
    let search = timed(&c, ROUNDS, || async {
        let mut cursor = 0;
        for _ in 0..4 {
            let (next, _) = q
                .search_jobs_page(
                    JobState::Completed,
                    &filter,
                    cursor,
                    500,
                    echomq::RangeOrder::Descending,
                )
                .await
                .unwrap();
            cursor = next.unwrap_or(0);
        }
    })
    .await;
    let calls = std::sync::atomic::AtomicU64::new(0);
    let mut audit = timed(&c, 1, || async {
        let r = echomq::audit::Audit::new(&conn, "q").run().await.unwrap();
        calls.store(r.calls, Ordering::Relaxed);
    })
    .await;
    let calls = calls.load(Ordering::Relaxed);
    audit.extra = format!(
        "{calls} calls, {:.2} ms/call",
        audit.p50_ms / calls.max(1) as f64
    );
    let clean = timed(&c, 5, || async {
        q.clean(Duration::ZERO, 1000, JobState::Completed)
            .await
            .unwrap();
    })
    .await;
    let ui = start_ui(&redis.url());
    // The first requests walk the keyspace (a bounded step each); the
    // figures are of a request once the queue is known.
    for _ in 0..3 {
        http_get(ui.port, "/api/queues");
    }
    let overview = timed(&c, ROUNDS, || async {
        http_get(ui.port, "/");
        http_get(ui.port, "/api/queues");
    })
    .await;
    let queue_page = timed(&c, ROUNDS, || async {
        http_get(ui.port, "/queues/q?state=waiting");
    })
    .await;
    drop(ui);
    let node = node_reads(&redis.url());
    conn.close().await;
    SizeRow {
        fill_s,
        add,
        process,
        stats,
        page_waiting,
        page_completed,
        search,
        audit,
        clean,
        overview,
        queue_page,
        node,
        redis_mb,
    }
}

async fn process_jobs(conn: &echomq::Connection, c: &Client, n: u64) {
    let q = Queue::new(conn, "q").await.unwrap();
    let before: u64 = c.zcard("emq:q:completed").await.unwrap();
    let set = spawn_workers(&q, 100, |_| async { Ok(serde_json::Value::Null) }).await;
    loop {
        let done: u64 = c.zcard("emq:q:completed").await.unwrap();
        if done >= before + n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    set.close().await;
}

/// A Worker and its LockManager (no stalled checker), as a host runs them.
struct Workers {
    host: ractor::ActorRef<()>,
    worker: ractor::ActorRef<echomq::WorkerMsg>,
}

impl Workers {
    async fn close(self) {
        let _ = ractor::call_t!(
            self.worker,
            echomq::WorkerMsg::Close,
            30_000,
            Duration::from_secs(5)
        );
        self.host.stop(None);
    }
}

async fn spawn_workers<F, Fut>(q: &Queue, concurrency: usize, f: F) -> Workers
where
    F: Fn(echomq::JobContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<serde_json::Value, echomq::ProcessError>>
        + Send
        + 'static,
{
    let mut args = echomq::WorkerArgs::new(q.clone(), echomq::worker::processor_fn(f));
    args.options.concurrency = concurrency;
    let mut spec = echomq::WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    Workers {
        host,
        worker: set.worker,
    }
}

fn node_reads(url: &str) -> Option<Json> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let out = Command::new("node")
        .current_dir(&dir)
        .args(["scale.js", url, "q", &json!({"rounds": ROUNDS}).to_string()])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("node: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn slow(s: &Step) -> String {
    if s.slow_us == 0 {
        "< 0.05".to_owned()
    } else {
        format!("{:.2} ({})", s.slow_us as f64 / 1e3, s.slow_cmd)
    }
}

/// A Markdown table's header: `first`, then one column per size.
fn size_header(first: &str, table: &[(u64, SizeRow)]) {
    print!("| {first} |");
    for (n, _) in table {
        print!(" {n} jobs |");
    }
    println!();
    print!("| --- |");
    for _ in table {
        print!(" --- |");
    }
    println!();
}

fn print_curve(table: &[(u64, SizeRow)]) {
    println!("\n### Cost curve (ms: median / max of {ROUNDS}; longest Redis command of the step in ms)\n");
    size_header("step", table);
    let line = |name: &str, f: &dyn Fn(&SizeRow) -> String| {
        print!("| {name} |");
        for (_, r) in table {
            print!(" {} |", f(r));
        }
        println!();
    };
    line("fill (s), Redis MB", &|r| {
        format!("{:.1} s, {:.0} MB", r.fill_s, r.redis_mb)
    });
    line("add (jobs/s; longest)", &|r| {
        format!("{} ; {}", r.add.extra, slow(&r.add))
    });
    line("process (jobs/s; longest)", &|r| {
        format!("{} ; {}", r.process.extra, slow(&r.process))
    });
    let op = |s: &Step| format!("{:.2} / {:.2} ; {}", s.p50_ms, s.max_ms, slow(s));
    line("stats", &|r| op(&r.stats));
    line("page of waiting (25)", &|r| op(&r.page_waiting));
    line("page of completed (25)", &|r| op(&r.page_completed));
    line("search request (2 000 ids)", &|r| op(&r.search));
    line("audit, whole (calls)", &|r| {
        format!(
            "{:.0} ms ({}) ; {}",
            r.audit.p50_ms,
            r.audit.extra,
            slow(&r.audit)
        )
    });
    line("clean 1 000", &|r| op(&r.clean));
    line("dashboard overview (/ + /api/queues)", &|r| op(&r.overview));
    line("dashboard queue page", &|r| op(&r.queue_page));
    let node = |k: &'static str| {
        move |r: &SizeRow| match &r.node {
            Some(v) => format!(
                "{:.2} / {:.2}",
                v[k]["p50"].as_f64().unwrap_or(0.0),
                v[k]["max"].as_f64().unwrap_or(0.0)
            ),
            None => "n/a".into(),
        }
    };
    line("BullMQ Node getJobCounts", &node("getJobCounts"));
    line(
        "BullMQ Node getJobs(waiting, 0, 24)",
        &node("getJobsWaiting"),
    );
    line(
        "BullMQ Node getJobs(completed, 0, 24)",
        &node("getJobsCompleted"),
    );
    print_process_commands(table);
}

/// Where Redis's time went in the processing step, per command and size:
/// calls per processed job and µs per call, the commands scripts run
/// included (an EVALSHA's µs include its commands'); the heaviest at the
/// largest size first.
fn print_process_commands(table: &[(u64, SizeRow)]) {
    const JOBS: f64 = BATCH as f64;
    let Some((_, largest)) = table.last() else {
        return;
    };
    let mut names: Vec<(&String, f64)> = largest
        .process
        .commands
        .iter()
        .map(|(name, (_, us))| (name, *us))
        .collect();
    names.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!(
        "\n### Processing 20 000 jobs: Redis's commands (calls per job; µs per call; µs per job)\n"
    );
    size_header("command", table);
    let cell = |r: &SizeRow, name: &str| match r.process.commands.get(name) {
        Some((calls, us)) => format!(
            "{:.2} ; {:.2} ; {:.2}",
            *calls as f64 / JOBS,
            us / (*calls).max(1) as f64,
            us / JOBS
        ),
        None => "–".into(),
    };
    for (name, _) in names.iter().take(20) {
        print!("| {name} |");
        for (_, r) in table {
            print!(" {} |", cell(r, name));
        }
        println!();
    }
}

/// Redis's bytes per waiting and per completed job, EchoMQ beside BullMQ
/// Node, and the events stream's share.
async fn memory_per_job(n: u64) {
    let mut rows = Vec::new();
    for client in ["EchoMQ", "BullMQ Node"] {
        let redis = RedisServer::start();
        let c = redis.client().await;
        let base = used_memory(&c).await;
        if client == "EchoMQ" {
            let conn = redis.connect().await;
            let q = Queue::new(&conn, "q").await.unwrap();
            let jobs: Vec<NewJob> = (0..n)
                .map(|i| NewJob {
                    name: "bench".into(),
                    data: json!({ "i": i }),
                    options: JobOptions::new(),
                })
                .collect();
            q.add_bulk(jobs).await.unwrap();
        } else {
            node_bench(
                &redis.url(),
                "add-bulk",
                json!({"n": n, "batch": 1000, "warm": 0}),
            );
        }
        let waiting = used_memory(&c).await;
        let events_w: u64 = cmd(
            &c,
            "MEMORY",
            vec![
                "USAGE".into(),
                "emq:q:events".into(),
                "SAMPLES".into(),
                "0".into(),
            ],
        )
        .await;
        if client == "EchoMQ" {
            let conn = redis.connect().await;
            process_all(&conn, &c, n).await;
        } else {
            node_bench(
                &redis.url(),
                "process",
                json!({"n": n, "concurrency": 100, "keep": true, "warm": 0}),
            );
        }
        let completed = used_memory(&c).await;
        let events_c: u64 = cmd(
            &c,
            "MEMORY",
            vec![
                "USAGE".into(),
                "emq:q:events".into(),
                "SAMPLES".into(),
                "0".into(),
            ],
        )
        .await;
        let xlen: u64 = cmd(&c, "XLEN", vec!["emq:q:events".into()]).await;
        let sample: u64 = cmd(
            &c,
            "MEMORY",
            vec![
                "USAGE".into(),
                "emq:q:7".into(),
                "SAMPLES".into(),
                "0".into(),
            ],
        )
        .await;
        rows.push((
            client, base, waiting, completed, events_w, events_c, xlen, sample,
        ));
    }
    println!("\n### Redis memory per job ({n} jobs, data `{{\"i\": n}}`)\n");
    println!("| client | bytes per waiting job | bytes per completed job | one completed job hash (MEMORY USAGE) | events stream (entries, bytes, share of the queue) |");
    println!("| --- | ---: | ---: | ---: | --- |");
    for (client, base, waiting, completed, ew, ec, xlen, sample) in rows {
        let w = (waiting - base - ew) as f64 / n as f64;
        let done = (completed - base - ec) as f64 / n as f64;
        let share = ec as f64 / (completed - base) as f64 * 100.0;
        println!(
            "| {client} | {w:.0} | {done:.0} | {sample} | {xlen} entries, {:.1} MB, {share:.1} % |",
            ec as f64 / 1e6
        );
    }
}

async fn process_all(conn: &echomq::Connection, c: &Client, n: u64) {
    process_jobs(conn, c, n).await
}

fn node_bench(url: &str, mode: &str, args: Json) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let out = Command::new("node")
        .current_dir(&dir)
        .args(["bench.js", mode, url, "q", &args.to_string()])
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "node {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// A worker holding `n` sleeping jobs: the `echomq work` process's RSS and
/// idle CPU, and (in this process) heap blocks and bytes per held job.
async fn held_jobs(n: u64) {
    // The process: idle first (nothing to hold), then holding n.
    let redis = RedisServer::start();
    let c = redis.client().await;
    let spawn = |queue: &str| {
        Command::new(echomq_bin())
            .args([
                "--url",
                &redis.url(),
                "work",
                queue,
                "--concurrency",
                &n.to_string(),
                "--processor",
                "sleep:600000",
                "--quiet",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the release echomq binary")
    };
    let mut idle = spawn("empty");
    // Up and blocked on the marker: its worker connection is named.
    wait_for(&c, "the idle worker connects", || async {
        let list: String = c.client_list::<String, String>(None, None).await.unwrap();
        list.contains("name=emq:ZW1wdHk=")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = rss_kb(idle.id());
    let _ = idle.kill();
    let _ = idle.wait();

    let conn = redis.connect().await;
    let q = Queue::new(&conn, "held").await.unwrap();
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob {
            name: "sleep".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
    let mut w = spawn("held");
    wait_for(&c, "every job is held", || async {
        c.llen::<u64, _>("emq:held:active").await.unwrap() == n
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_held = rss_kb(w.id());
    // Idle CPU while holding: 30 s, two renewal rounds (lock 30 s, renewed
    // every 15 s) and the stalled checks of that time, whose longest command
    // (extendLocks or moveStalledJobsToWait over every held job) is read
    // from SLOWLOG.
    slowlog_reset(&c).await;
    let (t0, c0) = (Instant::now(), cpu_ticks(w.id()));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let ticks = cpu_ticks(w.id()) - c0;
    let (held_us, held_cmd) = slowlog_max(&c).await;
    let secs = t0.elapsed().as_secs_f64();
    let _ = w.kill();
    let _ = w.wait();
    let hz = 100.0; // USER_HZ on Linux
    let cpu_ms_per_s = ticks as f64 / hz * 1e3 / secs;

    // In process, with the counting allocator.
    let redis2 = RedisServer::start();
    let c2 = redis2.client().await;
    let conn2 = redis2.connect().await;
    let q2 = Queue::new(&conn2, "held").await.unwrap();
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob {
            name: "sleep".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    q2.add_bulk(jobs).await.unwrap();
    let (b0, y0) = (
        BLOCKS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let set = spawn_workers(&q2, n as usize, |_| async {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok(serde_json::Value::Null)
    })
    .await;
    wait_for(&c2, "every job is held (in process)", || async {
        c2.llen::<u64, _>("emq:held:active").await.unwrap() == n
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (b1, y1) = (
        BLOCKS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    set.host.stop(None);

    println!("\n### A worker holding {n} sleeping jobs\n");
    println!("| figure | value |");
    println!("| --- | ---: |");
    println!(
        "| `echomq work` RSS idle (concurrency {n}, no job) | {:.1} MB |",
        rss_idle as f64 / 1024.0
    );
    println!(
        "| `echomq work` RSS holding {n} jobs | {:.1} MB |",
        rss_held as f64 / 1024.0
    );
    println!(
        "| RSS per held job | {:.2} KB |",
        (rss_held.saturating_sub(rss_idle)) as f64 / n as f64
    );
    println!(
        "| heap blocks per held job (in process) | {:.1} |",
        (b1 - b0) as f64 / n as f64
    );
    println!(
        "| heap bytes per held job (in process) | {:.0} B |",
        (y1 - y0) as f64 / n as f64
    );
    println!("| CPU while holding, between renewals included (30 s) | {cpu_ms_per_s:.2} ms/s |");
    println!(
        "| longest Redis command while holding (SLOWLOG) | {:.2} ms `{held_cmd}` |",
        held_us as f64 / 1e3
    );
}

async fn wait_for<F, Fut>(_c: &Client, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    while !f().await {
        assert!(t0.elapsed() < Duration::from_secs(120), "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
