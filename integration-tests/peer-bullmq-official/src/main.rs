//! BullMQ's official Rust port doing the work of `just bench`, timed inside the
//! process, on the queue prefix `emq` so that the harness fills and inspects the
//! same keys. Prints one JSON line: `ms` (wall time of the timed section),
//! `cpu_us` (this process's user + system CPU over it, from getrusage), and for
//! `latency` the add → completed percentiles in ms.
//!
//! Usage: peer-bullmq-official <mode> <redis-url> <queue> <json-args>
//!   add-single {n, inFlight}   add-bulk {n, batch}
//!   process {n, concurrency, keep}   latency {n, concurrency, rate}

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bullmq::options::RedisConnectionOptions;
use bullmq::queue::BulkJob;
use bullmq::worker::{CancellationToken, WorkerEvent};
use bullmq::{Job, Queue, QueueOptions, Worker, WorkerOptions};
use serde_json::{json, Value};

fn cpu_us() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the zeroed struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 * 1e6 + tv.tv_usec as f64;
    t(u.ru_utime) + t(u.ru_stime)
}

fn connection(url: &str) -> RedisConnectionOptions {
    RedisConnectionOptions {
        url: url.to_owned(),
        ..RedisConnectionOptions::default()
    }
}

async fn queue(url: &str, name: &str) -> Queue {
    let opts = QueueOptions {
        connection: connection(url),
        prefix: "emq".into(),
        ..QueueOptions::default()
    };
    Queue::with_options(name, opts).await.expect("queue")
}

fn worker_opts(url: &str, concurrency: usize, keep: bool) -> WorkerOptions {
    WorkerOptions {
        connection: connection(url),
        prefix: "emq".into(),
        concurrency,
        remove_on_complete: (!keep).then_some(bullmq::types::RemoveOnFinish::Bool(true)),
        ..WorkerOptions::default()
    }
}

async fn noop(_job: Job, _cancel: CancellationToken) -> bullmq::Result<Value> {
    Ok(Value::Null)
}

/// Waits for `n` completions from the worker's event channel.
async fn completions(worker: &Worker, n: u64, mut each: impl FnMut()) {
    let mut done = 0;
    while done < n {
        match worker.next_event().await {
            Some(WorkerEvent::Completed { .. }) => {
                done += 1;
                each();
            }
            Some(_) => {}
            None => panic!("worker events ended"),
        }
    }
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let (mode, url, name) = (&argv[1], &argv[2], &argv[3]);
    let args: Value =
        serde_json::from_str(argv.get(4).map(String::as_str).unwrap_or("{}")).expect("json args");
    let n = args["n"].as_u64().unwrap_or(1000);
    let out = match mode.as_str() {
        "add-single" => {
            let q = Arc::new(queue(url, name).await);
            let in_flight = args["inFlight"].as_u64().unwrap_or(100);
            let next = Arc::new(AtomicU64::new(0));
            let (t, c) = (Instant::now(), cpu_us());
            let lanes: Vec<_> = (0..in_flight)
                .map(|_| {
                    let (q, next) = (q.clone(), next.clone());
                    tokio::spawn(async move {
                        while next.fetch_add(1, Ordering::Relaxed) < n {
                            q.add("bench", json!({"i": 1})).await.expect("add");
                        }
                    })
                })
                .collect();
            for l in lanes {
                l.await.unwrap();
            }
            json!({"ms": t.elapsed().as_secs_f64() * 1e3, "cpu_us": cpu_us() - c})
        }
        "add-bulk" => {
            let q = queue(url, name).await;
            let batch = args["batch"].as_u64().unwrap_or(1000);
            let (t, c) = (Instant::now(), cpu_us());
            let mut done = 0;
            while done < n {
                let jobs: Vec<BulkJob> = (done..(done + batch).min(n))
                    .map(|i| BulkJob::new("bench", json!({"i": i})))
                    .collect();
                done += jobs.len() as u64;
                q.add_bulk(jobs).await.expect("add_bulk");
            }
            json!({"ms": t.elapsed().as_secs_f64() * 1e3, "cpu_us": cpu_us() - c})
        }
        "process" => {
            // The jobs were added beforehand by the harness: from worker start
            // to the n-th completion.
            let concurrency = args["concurrency"].as_u64().unwrap_or(1) as usize;
            let keep = args["keep"].as_bool().unwrap_or(false);
            let (t, c) = (Instant::now(), cpu_us());
            let w = Worker::with_options(name, noop, worker_opts(url, concurrency, keep))
                .await
                .expect("worker");
            completions(&w, n, || {}).await;
            let out = json!({"ms": t.elapsed().as_secs_f64() * 1e3, "cpu_us": cpu_us() - c});
            let _ = w.close(5000).await;
            out
        }
        "latency" => {
            // add → completed, measured in this process: one add every
            // `1000 / rate` ms, each timed from the add call to its completion
            // event (completions come in add order at concurrency 1).
            let concurrency = args["concurrency"].as_u64().unwrap_or(1) as usize;
            let rate = args["rate"].as_f64().unwrap_or(500.0);
            let q = queue(url, name).await;
            let w = Worker::with_options(name, noop, worker_opts(url, concurrency, true))
                .await
                .expect("worker");
            tokio::time::sleep(Duration::from_millis(300)).await;
            let sent = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n as usize)));
            let producer = {
                let sent = sent.clone();
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
                    for i in 0..n {
                        tick.tick().await;
                        sent.lock().unwrap().push(Instant::now());
                        q.add("lat", json!({"i": i})).await.expect("add");
                    }
                })
            };
            let mut lat = Vec::with_capacity(n as usize);
            let mut k = 0usize;
            completions(&w, n, || {
                let at = sent.lock().unwrap()[k];
                lat.push(at.elapsed().as_secs_f64() * 1e3);
                k += 1;
            })
            .await;
            producer.await.unwrap();
            let _ = w.close(5000).await;
            lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
            json!({"p50": pct(0.5), "p99": pct(0.99)})
        }
        other => panic!("unknown mode {other}"),
    };
    println!("{out}");
    std::process::exit(0);
}
