//! `just bench`, DAG flows (issue 43; docs/benchmarks.md §DAG flows): what a
//! DAG node costs against a plain flow child, and how soon a node whose last
//! dependency finished is waiting, on one fresh redis-server, by the fixed
//! method's rules that apply to a section without peers (BullMQ has no
//! DAG): one whole round run first and discarded, then `BENCH_RUNS` rounds
//! (default 3), each cell the median of the rounds (min–max), Redis CPU and
//! commands read from INFO around the section only.
//!
//! Add: 2,000 diamonds `A → (B, C, D) → E` (10,000 nodes; C and D wait for
//! A through extension edges), written (a) as one gated DAG
//! (`add_dag`, 200 nodes per transaction), (b) as 50 DAGs of 40 diamonds
//! (each one transaction), (c) as the same number of nodes in BullMQ trees
//! (E over B, C, D, with A under B; `FlowProducer::add_bulk`, 40 trees per
//! transaction). Per node: wall µs, Redis CPU µs, commands.
//!
//! Release: 1,000 diamonds run by one EchoMQ worker (concurrency 32, a
//! no-op processor) with a DagReleaser under a host (default arguments);
//! for every node, its last dependency's `completed` to its `waiting`, on
//! Redis's clock (the events stream's ids: milliseconds), split by who
//! released it: BullMQ's finish (the node is its dependency's `parentKey`)
//! or the releaser (an extra parent). Printed as Markdown rows.
//! `BENCH_SCALE=<f>` scales the diamonds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use echomq::flow_producer::{DagNode, DagReleaserArgs};
use echomq::worker::processor_fn;
use echomq::{FlowJob, FlowProducer, Host, JobOptions, Queue, QueueOptions, WorkerArgs};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::{json, Value};

fn scale(n: usize) -> usize {
    let f: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64) * f).max(1.0) as usize
}

fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1)
}

fn diamonds(queue: &str, from: usize, n: usize) -> Vec<DagNode> {
    let mut nodes = Vec::with_capacity(n * 5);
    for i in from..from + n {
        let id = |s: &str| format!("{i}-{s}");
        let node = |s: &str, deps: &[String]| {
            let mut d = DagNode::new(id(s), "n", queue, json!({"i": i}));
            for dep in deps {
                d = d.depends_on(dep.clone());
            }
            d
        };
        nodes.push(node("A", &[]));
        for m in ["B", "C", "D"] {
            nodes.push(node(m, &[id("A")]));
        }
        nodes.push(node("E", &[id("B"), id("C"), id("D")]));
    }
    nodes
}

fn tree(queue: &str, i: usize) -> FlowJob {
    let j = |s: &str| {
        FlowJob::new("n", queue, json!({"i": i}))
            .options(JobOptions::new().job_id(format!("{i}-{s}")))
    };
    j("E")
        .child(j("B").child(j("A")))
        .child(j("C"))
        .child(j("D"))
}

async fn info(c: &Client, kind: fred::types::InfoKind) -> HashMap<String, String> {
    let text: String = c.info(Some(kind)).await.expect("INFO");
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// Redis CPU (µs) and commands run so far (INFO itself left out).
async fn reading(c: &Client) -> (f64, u64) {
    let cpu = info(c, fred::types::InfoKind::Cpu).await;
    let secs = cpu["used_cpu_user"].parse::<f64>().unwrap_or(0.0)
        + cpu["used_cpu_sys"].parse::<f64>().unwrap_or(0.0);
    let stats = info(c, fred::types::InfoKind::CommandStats).await;
    let calls = stats
        .iter()
        .filter(|(k, _)| k.starts_with("cmdstat_") && k.as_str() != "cmdstat_info")
        .filter_map(|(_, v)| {
            v.split(',')
                .find_map(|p| p.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum();
    (secs * 1e6, calls)
}

/// Per node: wall µs, Redis CPU µs, commands.
#[derive(Clone, Copy, Default)]
struct AddCost {
    wall: f64,
    redis: f64,
    commands: f64,
}

async fn add_section<F, Fut>(c: &Client, nodes: usize, write: F) -> AddCost
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (cpu0, cmd0) = reading(c).await;
    let t0 = Instant::now();
    write().await;
    let wall = t0.elapsed();
    let (cpu1, cmd1) = reading(c).await;
    let n = nodes as f64;
    AddCost {
        wall: wall.as_micros() as f64 / n,
        redis: (cpu1 - cpu0) / n,
        commands: (cmd1 - cmd0) as f64 / n,
    }
}

/// One round of the add section: (gated DAG, DAGs of 40 diamonds, trees).
async fn add_round(redis: &RedisServer, round: usize) -> [AddCost; 3] {
    let conn = redis.connect().await;
    let c = redis.client().await;
    let fp = FlowProducer::new(&conn);
    let n = scale(2_000);
    let nodes = n * 5;
    let q = |s: &str| format!("{s}{round}");
    for name in [q("gated"), q("small"), q("trees")] {
        Queue::with_options(
            &conn,
            &name,
            QueueOptions::default().max_len_events(1_000_000),
        )
        .await
        .expect("queue");
    }
    let gated = diamonds(&q("gated"), 0, n);
    let a = add_section(&c, nodes, || async {
        fp.add_dag(gated).await.expect("add_dag");
    })
    .await;
    let small: Vec<Vec<DagNode>> = (0..n)
        .step_by(40)
        .map(|from| diamonds(&q("small"), from, 40.min(n - from)))
        .collect();
    let b = add_section(&c, nodes, || async {
        for dag in small {
            fp.add_dag(dag).await.expect("add_dag");
        }
    })
    .await;
    let trees: Vec<Vec<FlowJob>> = (0..n)
        .collect::<Vec<_>>()
        .chunks(40)
        .map(|part| part.iter().map(|&i| tree(&q("trees"), i)).collect())
        .collect();
    let t = add_section(&c, nodes, || async {
        for part in trees {
            fp.add_bulk(part).await.expect("add_bulk");
        }
    })
    .await;
    let _: () = c.flushall(false).await.expect("FLUSHALL");
    conn.close().await;
    [a, b, t]
}

/// One round of the release section: latencies (ms) released by BullMQ's
/// finish and by the releaser.
async fn release_round(redis: &RedisServer, round: usize) -> (Vec<u64>, Vec<u64>) {
    let conn = redis.connect().await;
    let c = redis.client().await;
    let name = format!("rel{round}");
    let queue = Queue::with_options(
        &conn,
        &name,
        QueueOptions::default().max_len_events(1_000_000),
    )
    .await
    .expect("queue");
    let n = scale(1_000);
    let nodes = diamonds(&name, 0, n);
    FlowProducer::new(&conn)
        .add_dag(nodes.clone())
        .await
        .expect("add_dag");
    let host = Host::start().await.expect("host");
    host.add_dag_releaser(DagReleaserArgs::new(conn.clone(), name.clone()))
        .await
        .expect("releaser");
    let mut args = WorkerArgs::new(
        queue.clone(),
        processor_fn(|_job| async { Ok::<_, echomq::ProcessError>(Value::Null) }),
    );
    args.options.concurrency = 32;
    host.add_worker(args).await.expect("worker");
    let done_key = format!("emq:{name}:completed");
    let t0 = Instant::now();
    loop {
        let done: u64 = c.zcard(&done_key).await.expect("zcard");
        if done as usize >= nodes.len() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "only {done} done");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = host.close(Duration::from_secs(5)).await;
    let stamps = echomq_integration_tests::timeline::read(&c, &format!("emq:{name}:events"))
        .await
        .expect("XRANGE");
    let mut completed: HashMap<&str, u64> = HashMap::new();
    let mut waiting: HashMap<&str, u64> = HashMap::new();
    for s in &stamps {
        match s.name.as_str() {
            "completed" => {
                completed.insert(&s.job_id, s.at_ms);
            }
            "waiting" => {
                waiting.insert(&s.job_id, s.at_ms);
            }
            _ => {}
        }
    }
    // Who releases a node: the finish of a dependency whose first dependent
    // it is (BullMQ's parentKey), or the releaser (an extra parent).
    let mut first_dependent: HashMap<&str, &str> = HashMap::new();
    for node in &nodes {
        for d in &node.depends_on {
            first_dependent
                .entry(d.as_str())
                .or_insert(node.id.as_str());
        }
    }
    let (mut bullmq, mut extra) = (Vec::new(), Vec::new());
    for node in nodes.iter().filter(|n| !n.depends_on.is_empty()) {
        let Some((last, done)) = node
            .depends_on
            .iter()
            .filter_map(|d| completed.get(d.as_str()).map(|&t| (d.as_str(), t)))
            .max_by_key(|&(_, t)| t)
        else {
            continue;
        };
        let Some(&w) = waiting.get(node.id.as_str()) else {
            continue;
        };
        let lat = w.saturating_sub(done);
        if first_dependent.get(last) == Some(&node.id.as_str()) {
            bullmq.push(lat);
        } else {
            extra.push(lat);
        }
    }
    let _: () = c.flushall(false).await.expect("FLUSHALL");
    conn.close().await;
    (bullmq, extra)
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

/// Median (min–max) of the rounds.
fn cell(mut v: Vec<f64>, digits: usize) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v[v.len() / 2];
    format!(
        "{mid:.digits$} ({:.digits$}–{:.digits$})",
        v[0],
        v[v.len() - 1]
    )
}

#[tokio::main]
async fn main() {
    let redis = RedisServer::start();
    let rounds = runs();
    // The discarded round: pools, scripts and the server warm.
    let _ = add_round(&redis, 0).await;
    let _ = release_round(&redis, 0).await;
    let mut adds = Vec::new();
    let mut releases = Vec::new();
    for r in 1..=rounds {
        adds.push(add_round(&redis, r).await);
        releases.push(release_round(&redis, r).await);
    }
    let n = scale(2_000);
    println!(
        "| add, per node ({} diamonds = {} nodes; {rounds} rounds, median (min–max)) | wall µs | Redis CPU µs | commands |",
        n,
        n * 5
    );
    println!("| --- | ---: | ---: | ---: |");
    let labels = [
        "one gated DAG (`add_dag`, 200 nodes per transaction)",
        "DAGs of 40 diamonds (one transaction each)",
        "BullMQ trees, 40 per transaction (`add_bulk`)",
    ];
    for (k, label) in labels.iter().enumerate() {
        let col = |f: fn(&AddCost) -> f64| adds.iter().map(|a| f(&a[k])).collect::<Vec<_>>();
        println!(
            "| {label} | {} | {} | {} |",
            cell(col(|a| a.wall), 1),
            cell(col(|a| a.redis), 1),
            cell(col(|a| a.commands), 2),
        );
    }
    println!();
    println!(
        "| last dependency `completed` → node `waiting` (Redis's clock, ms; {} diamonds, worker c32, {rounds} rounds, median (min–max)) | samples per round | median | p99 | max | mean |",
        scale(1_000)
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (label, pick) in [
        ("released by BullMQ's finish (first dependent)", 0usize),
        ("released by the DagReleaser (extra parent)", 1),
    ] {
        let mut med = Vec::new();
        let mut p99 = Vec::new();
        let mut max = Vec::new();
        let mut avg = Vec::new();
        let mut samples = 0;
        for (b, e) in &releases {
            let mut v = if pick == 0 { b.clone() } else { e.clone() };
            samples = v.len();
            avg.push(mean(&v));
            med.push(pct(&mut v, 0.5) as f64);
            p99.push(pct(&mut v, 0.99) as f64);
            max.push(pct(&mut v, 1.0) as f64);
        }
        println!(
            "| {label} | {samples} | {} | {} | {} | {} |",
            cell(med, 0),
            cell(p99, 0),
            cell(max, 0),
            cell(avg, 2)
        );
    }
}
