//! `just bench`, delayed-job lateness: how late an idle worker starts delayed
//! jobs, EchoMQ against BullMQ Node, in the same run on the same fresh
//! redis-server. Both workers get the same jobs (added by an EchoMQ Queue,
//! delays spread over a few seconds, concurrency 8); lateness is the start of
//! the processor minus the due time (`timestamp + delay`), read on this
//! host's clock, which is the server's. Printed as Markdown rows for
//! docs/benchmarks.md. `BENCH_SCALE=<f>` scales the job count.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use echomq::worker::processor_fn;
use echomq::{Connection, JobOptions, Queue, WorkerArgs, WorkerMsg, WorkerOptions, WorkerSetSpec};
use echomq_integration_tests::RedisServer;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const CONCURRENCY: usize = 8;

fn scale(n: u64) -> u64 {
    let f: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64) * f).max(1.0) as u64
}

fn real_ms_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as f64
        / 1000.0
}

/// Adds `n` delayed jobs, due 300 ms … from now, 97 ms apart.
async fn add_delayed(q: &Queue, n: u64) {
    for i in 0..n {
        q.add(
            "late",
            &json!({ "i": i }),
            JobOptions::new().delay(Duration::from_millis(300 + 97 * i)),
        )
        .await
        .unwrap();
    }
}

/// p50 and p99 of `v`.
fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

/// Lateness samples of the EchoMQ worker: processor entry and processedOn.
async fn with_echomq(conn: &Connection, n: u64) -> (Vec<f64>, Vec<f64>) {
    let q = Queue::new(conn, "late-echomq").await.unwrap();
    let samples: Arc<Mutex<(Vec<f64>, Vec<f64>)>> = Arc::default();
    let s2 = samples.clone();
    let mut args = WorkerArgs::new(
        q.clone(),
        processor_fn(move |ctx| {
            let now = real_ms_f64();
            let s2 = s2.clone();
            async move {
                let job = ctx.job();
                let due = job.timestamp as f64 + job.opts.delay.unwrap_or(0) as f64;
                let mut s = s2.lock().unwrap();
                s.0.push(now - due);
                s.1.push(job.processed_on.unwrap_or(0) as f64 - due);
                Ok(serde_json::Value::Null)
            }
        }),
    );
    args.options = WorkerOptions::default().concurrency(CONCURRENCY);
    let mut spec = WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_delayed(&q, n).await;
    while (samples.lock().unwrap().0.len() as u64) < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = ractor::call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5));
    host.stop(None);
    let s = samples.lock().unwrap();
    (s.0.clone(), s.1.clone())
}

/// The same with BullMQ Node's worker (interop/lateness.js).
async fn with_node(conn: &Connection, url: &str, n: u64) -> (Vec<f64>, Vec<f64>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let queue = "late-node";
    let mut child = tokio::process::Command::new("node")
        .current_dir(&dir)
        .args([
            "lateness.js",
            url,
            queue,
            &json!({ "n": n, "concurrency": CONCURRENCY }).to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node is installed (npm ci in integration-tests/interop)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next_line().await.unwrap();
    assert_eq!(ready.as_deref(), Some("ready"), "lateness.js did not start");
    let q = Queue::new(conn, queue).await.unwrap();
    add_delayed(&q, n).await;
    let out = lines
        .next_line()
        .await
        .unwrap()
        .expect("lateness.js prints its samples");
    let _ = child.wait().await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let floats = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_f64())
            .collect()
    };
    (floats("entry"), floats("processedOn"))
}

#[tokio::main]
async fn main() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = Connection::connect_url(&url).await.unwrap();
    let n = scale(40);
    eprintln!("bench_lateness: {n} delayed jobs per worker on {url}");
    let (rust_entry, rust_pon) = with_echomq(&conn, n).await;
    let (node_entry, node_pon) = with_node(&conn, &url, n).await;
    let (re50, re99) = percentiles(rust_entry);
    let (rp50, rp99) = percentiles(rust_pon);
    let (ne50, ne99) = percentiles(node_entry);
    let (np50, np99) = percentiles(node_pon);
    println!("\n### Delayed job lateness ({n} jobs due 300 ms … {:.1} s after adding, idle worker, concurrency {CONCURRENCY})\n", (300 + 97 * (n - 1)) as f64 / 1000.0);
    println!("| metric | EchoMQ | BullMQ Node |");
    println!("| --- | ---: | ---: |");
    println!("| delayed job lateness p50 / p99 (processor start − due) | {re50:.1} / {re99:.1} ms | {ne50:.1} / {ne99:.1} ms |");
    println!("| delayed job lateness p50 / p99 (processedOn − due) | {rp50:.0} / {rp99:.0} ms | {np50:.0} / {np99:.0} ms |");
}
