//! `just job-cost`: the client's cost per processed job, counted rather than
//! timed, for EchoMQ's worker and for bullmq-official (BullMQ's own Rust port).
//!
//! Wall time and getrusage are noisy on a shared machine; instructions
//! (valgrind's callgrind) and heap blocks allocated (valgrind's dhat) are not.
//! Each client processes `n` already-added jobs (no-op processor, completed
//! jobs kept) in its own process under the tool, once with `JOB_COST_N1` and
//! once with `JOB_COST_N2` jobs; the difference divided by `N2 - N1` is the
//! cost of one job, with the process's start, connection and script loading
//! cancelled out.
//!
//! Environment: `JOB_COST_TOOL=callgrind|dhat|both` (default both),
//! `JOB_COST_CONCURRENCY=1,16`, `JOB_COST_N1=500`, `JOB_COST_N2=2500`,
//! `JOB_COST_PEERS=echomq,official` (the peer binary from `BENCH_OFFICIAL`
//! or `integration-tests/peer-bullmq-official`, built by `just bench`),
//! `JOB_COST_OUT=<dir>` keeps each run's callgrind/dhat profile there,
//! `JOB_COST_COMMAND_TIMEOUT_MS=<ms>` sets EchoMQ's command timeout,
//! `JOB_COST_GROUP_COMMIT=<n>` its `WorkerOptions::group_commit` (0 = off).
//!
//! `JOB_COST_SIDE=server` counts the other side instead: the instructions
//! redis-server executes per processed job (callgrind on the server, the
//! clients native). Each count is a whole server lifetime: start, fill `n`
//! jobs, run the child (or not), `SHUTDOWN NOSAVE`; the run without the child
//! is subtracted, so only what the child made Redis do is left, and `N2 - N1`
//! cancels the child's start (connecting, loading scripts).
//!
//! `job_cost process <url> <queue> <n> <concurrency>` is the EchoMQ child.

use std::process::Command;
use std::time::Duration;

use echomq::{Connection, JobOptions, NewJob, Queue};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::json;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn official_binary() -> std::path::PathBuf {
    std::env::var_os("BENCH_OFFICIAL")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("peer-bullmq-official/target/release/peer-bullmq-official")
        })
}

/// The EchoMQ child: processes `n` jobs at `concurrency` the way `just bench`
/// does (no stalled checker, completed jobs kept), then exits.
async fn process_child(url: &str, queue: &str, n: u64, concurrency: usize) {
    use echomq::worker::processor_fn;
    let mut config = echomq::ConnectionConfig::with_url(url);
    // For measuring fred's per-command timeout (0 = none) against the default.
    if let Some(ms) = std::env::var("JOB_COST_COMMAND_TIMEOUT_MS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        config.command_timeout = Duration::from_millis(ms);
    }
    let conn = Connection::connect(config).await.expect("connect");
    let q = Queue::new(&conn, queue).await.expect("queue");
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    let mut args = echomq::WorkerArgs::new(
        q.clone(),
        processor_fn(|_| async { Ok(serde_json::Value::Null) }),
    );
    args.options.concurrency = concurrency;
    // JOB_COST_GROUP_COMMIT=0 measures the worker without group commit.
    if let Some(n) = std::env::var("JOB_COST_GROUP_COMMIT")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        args.options.group_commit = n;
    }
    args.events = Some(tx);
    let mut spec = echomq::WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .expect("host");
    let set = spec.spawn_linked(host.get_cell()).await.expect("worker");
    let mut done = 0;
    while done < n {
        if let Some(echomq::WorkerEvent::Completed { .. }) = rx.recv().await {
            done += 1;
        }
    }
    let _ = ractor::call_t!(
        set.worker,
        echomq::WorkerMsg::Close,
        60_000,
        Duration::from_secs(30)
    );
    host.stop(None);
    conn.close().await;
}

/// Adds `n` small jobs (as `just bench` does) to a flushed server.
async fn fill(conn: &Connection, c: &Client, queue: &str, n: u64) {
    let _: () = c.flushall(false).await.expect("flushall");
    add_jobs(conn, queue, n).await;
}

/// `n` small jobs, 1000 per `add_bulk`.
async fn add_jobs(conn: &Connection, queue: &str, n: u64) {
    let q = Queue::new(conn, queue).await.expect("queue");
    for start in (0..n).step_by(1000) {
        let batch: Vec<NewJob> = (start..(start + 1000).min(n))
            .map(|i| NewJob {
                name: "p".into(),
                data: json!({"i": i}),
                options: JobOptions::new(),
            })
            .collect();
        q.add_bulk(batch).await.expect("add_bulk");
    }
}

/// Runs one child under `tool` and returns its count: instructions
/// (callgrind) or heap blocks allocated (dhat).
fn counted(tool: &str, child: &[String], label: &str) -> u64 {
    let log = tempfile::NamedTempFile::new().expect("temp log");
    let mut cmd = Command::new("valgrind");
    cmd.arg(format!("--tool={tool}"))
        .arg(format!("--log-file={}", log.path().display()));
    // JOB_COST_OUT keeps the tools' profiles (callgrind_annotate, dh_view).
    let out = match std::env::var("JOB_COST_OUT") {
        Ok(dir) if !dir.is_empty() => format!("{dir}/{tool}.{label}.out"),
        _ => "/dev/null".to_owned(),
    };
    match tool {
        "callgrind" => cmd.arg(format!("--callgrind-out-file={out}")),
        _ => cmd.arg(format!("--dhat-out-file={out}")),
    };
    let out = cmd.args(child).output().expect("valgrind starts");
    assert!(
        out.status.success(),
        "{child:?} under {tool}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(log.path()).expect("valgrind log");
    let number = |s: &str| -> u64 { s.trim().replace(',', "").parse().expect("a count") };
    for line in text.lines() {
        let body = line.split_once("== ").map_or(line, |(_, b)| b);
        if tool == "callgrind" {
            if let Some(rest) = body.strip_prefix("Collected :") {
                return number(rest);
            }
        } else if let Some(rest) = body.strip_prefix("Total:") {
            // "Total:     1,234 bytes in 56 blocks"
            let blocks = rest.split(" in ").nth(1).expect("blocks");
            return number(blocks.trim_end_matches("blocks"));
        }
    }
    panic!("no count in the {tool} log:\n{text}")
}

/// The child that processes `n` jobs of queue `cost` on `url` for `peer`.
/// `work` is `process` (the jobs are there) or `add` (`add_bulk`, 1000 per call).
fn child_command(peer: &str, work: &str, url: &str, n: u64, concurrency: usize) -> Vec<String> {
    let args = match (peer, work) {
        ("official", "add") => vec![
            "add-bulk".into(),
            url.to_owned(),
            "cost".into(),
            json!({"n": n, "batch": 1000, "warm": 0}).to_string(),
        ],
        ("official", _) => vec![
            "process".into(),
            url.to_owned(),
            "cost".into(),
            json!({"n": n, "concurrency": concurrency, "keep": true, "warm": 0}).to_string(),
        ],
        (_, work) => vec![
            work.to_owned(),
            url.to_owned(),
            "cost".into(),
            n.to_string(),
            concurrency.to_string(),
        ],
    };
    let program = match peer {
        "official" => official_binary(),
        _ => std::env::current_exe().expect("own path"),
    };
    std::iter::once(program.display().to_string())
        .chain(args)
        .collect()
}

/// Instructions of one redis-server lifetime under callgrind. `process`:
/// `n` jobs added, then processed by `peer`'s child unless `run_child` is off.
/// `add`: `peer`'s child adds `n` jobs.
async fn server_lifetime(
    peer: &str,
    work: &str,
    n: u64,
    concurrency: usize,
    run_child: bool,
) -> u64 {
    let dir = tempfile::tempdir().expect("callgrind dir");
    let out = dir.path().join("redis.out");
    let out_arg = format!("--callgrind-out-file={}", out.display());
    let mut redis = RedisServer::start_wrapped(&["valgrind", "--tool=callgrind", &out_arg], &[]);
    let url = redis.url();
    {
        let conn = redis.connect().await;
        let c = redis.client().await;
        if work == "process" {
            fill(&conn, &c, "cost", n).await;
        }
        if run_child {
            let child = child_command(peer, work, &url, n, concurrency);
            let status = tokio::task::spawn_blocking(move || {
                Command::new(&child[0])
                    .args(&child[1..])
                    .status()
                    .expect("child starts")
            })
            .await
            .unwrap();
            assert!(status.success(), "{peer} child failed");
        }
        let _ = c
            .custom::<fred::types::Value, _>(
                fred::types::CustomCommand::new_static("SHUTDOWN", None, false),
                vec!["NOSAVE"],
            )
            .await;
        conn.close().await;
    }
    redis.wait_exit();
    // JOB_COST_OUT keeps the server's profile (callgrind_annotate).
    if let Ok(keep) = std::env::var("JOB_COST_OUT") {
        let name = format!("redis.{peer}.{work}.c{concurrency}.n{n}.{run_child}.out");
        let _ = std::fs::copy(&out, std::path::Path::new(&keep).join(name));
    }
    let text = std::fs::read_to_string(&out).expect("callgrind output");
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .map(|n| n.trim().parse().expect("a count"))
        .expect("no summary in the callgrind output")
}

/// `JOB_COST_SIDE=server`: Redis's instructions per processed job.
async fn server_side(n1: u64, n2: u64, concurrencies: &[usize], peers: &str) {
    // JOB_COST_WORK=add counts adds (add_bulk, 1000 per call) instead.
    let work = env_or("JOB_COST_WORK", "process");
    let concurrencies = if work == "add" {
        &[1][..]
    } else {
        concurrencies
    };
    println!("redis-server's instructions per job, work: {work} (callgrind on the server)");
    println!();
    println!("| client | concurrency | Redis instructions per job |");
    println!("| --- | ---: | ---: |");
    for peer in peers.split(',').map(str::trim) {
        if peer == "official" && !official_binary().exists() {
            eprintln!("job_cost: no bullmq-official binary; skipped");
            continue;
        }
        for &conc in concurrencies {
            let mut costs = Vec::new();
            for n in [n1, n2] {
                let with = server_lifetime(peer, &work, n, conc, true).await;
                let without = server_lifetime(peer, &work, n, conc, false).await;
                eprintln!("job_cost: {peer} c{conc} n{n}: {with} - {without}");
                costs.push(with as f64 - without as f64);
            }
            let per_job = (costs[1] - costs[0]) / (n2 - n1) as f64;
            println!("| {peer} | {conc} | {per_job:.0} |");
        }
    }
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("add") {
        let conn = Connection::connect(echomq::ConnectionConfig::with_url(&argv[2]))
            .await
            .expect("connect");
        add_jobs(&conn, &argv[3], argv[4].parse().expect("n")).await;
        conn.close().await;
        return;
    }
    if argv.get(1).map(String::as_str) == Some("process") {
        let n = argv[4].parse().expect("n");
        let c = argv[5].parse().expect("concurrency");
        process_child(&argv[2], &argv[3], n, c).await;
        return;
    }
    let n1: u64 = env_or("JOB_COST_N1", "500").parse().expect("JOB_COST_N1");
    let n2: u64 = env_or("JOB_COST_N2", "2500").parse().expect("JOB_COST_N2");
    let tools: Vec<&str> = match env_or("JOB_COST_TOOL", "both").as_str() {
        "callgrind" => vec!["callgrind"],
        "dhat" => vec!["dhat"],
        _ => vec!["callgrind", "dhat"],
    };
    let concurrencies: Vec<usize> = env_or("JOB_COST_CONCURRENCY", "1,16")
        .split(',')
        .map(|s| s.trim().parse().expect("concurrency"))
        .collect();
    let peers = env_or("JOB_COST_PEERS", "echomq,official");
    if env_or("JOB_COST_SIDE", "client") == "server" {
        server_side(n1, n2, &concurrencies, &peers).await;
        return;
    }
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    println!("| client | concurrency | instructions per job | heap blocks allocated per job |");
    println!("| --- | ---: | ---: | ---: |");
    for peer in peers.split(',').map(str::trim) {
        if peer == "official" && !official_binary().exists() {
            eprintln!("job_cost: no bullmq-official binary; skipped");
            continue;
        }
        for &conc in &concurrencies {
            let mut cells = Vec::new();
            for tool in ["callgrind", "dhat"] {
                if !tools.contains(&tool) {
                    cells.push("—".to_owned());
                    continue;
                }
                let mut counts = Vec::new();
                for n in [n1, n2] {
                    fill(&conn, &c, "cost", n).await;
                    let child = child_command(peer, "process", &url, n, conc);
                    let label = format!("{peer}.c{conc}.n{n}");
                    let count = tokio::task::spawn_blocking(move || counted(tool, &child, &label))
                        .await
                        .unwrap();
                    counts.push(count);
                }
                let per_job = (counts[1] as f64 - counts[0] as f64) / (n2 - n1) as f64;
                eprintln!("job_cost: {peer} c{conc} {tool}: {counts:?}");
                cells.push(format!("{per_job:.0}"));
            }
            println!("| {peer} | {conc} | {} | {} |", cells[0], cells[1]);
        }
    }
}
