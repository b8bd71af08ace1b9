//! BullMQ's official Rust port doing the work of `just bench`, on the queue
//! prefix `emq` so that the harness fills and inspects the same keys.
//!
//! The harness and this process take turns so that every client is measured
//! over the same section: this process connects, constructs its Queue/Worker
//! and runs a small warm-up of the same work on a side queue, then prints
//! `{"ready":true}`; the harness reads Redis's INFO and writes `go`; this
//! process times the section and prints one JSON line — `ms` (wall time),
//! `cpu_us` (this process's user + system CPU over it, from getrusage) and,
//! for the latency modes, percentiles in ms — then waits for `close` before it
//! closes anything.
//!
//! Usage: peer-bullmq-official <mode> <redis-url> <queue> <json-args>
//!   add-single {n, inFlight}   add-bulk {n, batch}   process {n, concurrency, keep}
//!   latency {n}   latency-paced {n, rate}
//! (`"warm": 0` skips the warm-up; a closed stdin runs without the turns.)

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bullmq::options::RedisConnectionOptions;
use bullmq::queue::BulkJob;
use bullmq::queue_events::{QueueEvent, QueueEventsOptions};
use bullmq::worker::{CancellationToken, WorkerEvent};
use bullmq::{Job, Queue, QueueEvents, QueueOptions, Worker, WorkerOptions};
use serde_json::{json, Value};
use tokio::sync::mpsc;

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

fn worker_opts(url: &str, concurrency: usize, keep: bool, autorun: bool) -> WorkerOptions {
    WorkerOptions {
        connection: connection(url),
        prefix: "emq".into(),
        concurrency,
        remove_on_complete: (!keep).then_some(bullmq::types::RemoveOnFinish::Bool(true)),
        autorun,
        ..WorkerOptions::default()
    }
}

async fn noop(_job: Job, _cancel: CancellationToken) -> bullmq::Result<Value> {
    Ok(Value::Null)
}

/// Waits for `n` completions from the worker's event channel.
async fn completions(worker: &Worker, n: u64) {
    let mut done = 0;
    while done < n {
        match worker.next_event().await {
            Some(WorkerEvent::Completed { .. }) => done += 1,
            Some(_) => {}
            None => panic!("worker events ended"),
        }
    }
}

async fn add_lanes(q: Arc<Queue>, n: u64, in_flight: u64) {
    let next = Arc::new(AtomicU64::new(0));
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
}

async fn add_batches(q: &Queue, n: u64, batch: u64) {
    let mut done = 0;
    while done < n {
        let jobs: Vec<BulkJob> = (done..(done + batch).min(n))
            .map(|i| BulkJob::new("bench", json!({"i": i})))
            .collect();
        done += jobs.len() as u64;
        q.add_bulk(jobs).await.expect("add_bulk");
    }
}

/// The same work on a side queue before "ready": pools connected, scripts
/// in Redis's cache.
async fn warm_up(url: &str, name: &str, mode: &str, args: &Value) {
    let warm = args["warm"].as_u64().unwrap_or(200);
    if warm == 0 {
        return;
    }
    let side = format!("{name}-warm");
    let q = Arc::new(queue(url, &side).await);
    if mode == "add-single" {
        let lanes = args["inFlight"].as_u64().unwrap_or(1).min(warm);
        add_lanes(q.clone(), warm, lanes).await;
    } else {
        add_batches(&q, warm, args["batch"].as_u64().unwrap_or(100).min(warm)).await;
    }
    if mode == "process" || mode.starts_with("latency") {
        let concurrency = args["concurrency"].as_u64().unwrap_or(1) as usize;
        let keep = args["keep"].as_bool().unwrap_or(true);
        let w = Worker::with_options(&side, noop, worker_opts(url, concurrency, keep, true))
            .await
            .expect("worker");
        completions(&w, warm).await;
        let _ = w.close(5000).await;
    }
}

/// Job ids with the instant this process received their completion.
type Stamps = mpsc::UnboundedReceiver<(String, Instant)>;

/// Forwards the worker's completions, stamped on receipt.
fn stamp_worker(w: Arc<Worker>) -> Stamps {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(ev) = w.next_event().await {
            if let WorkerEvent::Completed { job_id, .. } = ev {
                let _ = tx.send((job_id, Instant::now()));
            }
        }
    });
    rx
}

/// Forwards a QueueEvents subscriber's `completed`, stamped on receipt.
fn stamp_events(qe: Arc<QueueEvents>) -> Stamps {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(e) = qe.next_event().await {
            if let QueueEvent::Completed { job_id, .. } = e.event {
                let _ = tx.send((job_id, Instant::now()));
            }
        }
    });
    rx
}

/// The arrival of `id` on `rx` (earlier arrivals kept in `early`).
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

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

type Section = std::pin::Pin<Box<dyn std::future::Future<Output = Value>>>;

fn read_line() -> Option<String> {
    let mut s = String::new();
    match std::io::stdin().lock().read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s),
    }
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let (mode, url, name) = (argv[1].clone(), argv[2].clone(), argv[3].clone());
    let args: Value =
        serde_json::from_str(argv.get(4).map(String::as_str).unwrap_or("{}")).expect("json args");
    let n = args["n"].as_u64().unwrap_or(1000);
    warm_up(&url, &name, &mode, &args).await;
    let q = Arc::new(queue(&url, &name).await);
    let mut workers: Vec<Arc<Worker>> = Vec::new();
    let mut listeners: Vec<Arc<QueueEvents>> = Vec::new();
    let section: Section = match mode.as_str() {
        "add-single" => {
            let in_flight = args["inFlight"].as_u64().unwrap_or(100);
            let q = q.clone();
            Box::pin(async move {
                add_lanes(q, n, in_flight).await;
                json!({})
            })
        }
        "add-bulk" => {
            let batch = args["batch"].as_u64().unwrap_or(1000);
            let q = q.clone();
            Box::pin(async move {
                add_batches(&q, n, batch).await;
                json!({})
            })
        }
        "process" => {
            // The jobs were added by the harness: from worker start to the
            // n-th completion.
            let concurrency = args["concurrency"].as_u64().unwrap_or(1) as usize;
            let keep = args["keep"].as_bool().unwrap_or(false);
            let w = Arc::new(
                Worker::with_options(&name, noop, worker_opts(&url, concurrency, keep, false))
                    .await
                    .expect("worker"),
            );
            workers.push(w.clone());
            Box::pin(async move {
                w.run().await.expect("worker runs");
                completions(&w, n).await;
                json!({})
            })
        }
        "latency" => {
            // add → completed one job at a time as a user would: the clock
            // read before the add call, the add awaited, then the worker's own
            // Completed and a QueueEvents subscriber's `completed` for that
            // job, each stamped on receipt.
            let w = Arc::new(
                Worker::with_options(&name, noop, worker_opts(&url, 1, true, true))
                    .await
                    .expect("worker"),
            );
            let qe = Arc::new(
                QueueEvents::with_options(
                    &name,
                    QueueEventsOptions {
                        connection: connection(&url),
                        prefix: "emq".into(),
                        ..QueueEventsOptions::default()
                    },
                )
                .await
                .expect("queue events"),
            );
            workers.push(w.clone());
            listeners.push(qe.clone());
            let (mut wrx, mut qrx) = (stamp_worker(w), stamp_events(qe));
            // The listener reads from `$` once its first XREAD is in: add
            // until it has seen one completion.
            loop {
                let job = q.add("lat", json!({"warm": true})).await.expect("add");
                let mut early = HashMap::new();
                let seen = arrival(&mut qrx, &mut early, job.id(), Duration::from_millis(200));
                if seen.await.is_some() {
                    break;
                }
            }
            while wrx.try_recv().is_ok() {}
            let q = q.clone();
            Box::pin(async move {
                let (mut ew, mut eq) = (HashMap::new(), HashMap::new());
                let (mut lw, mut lq) = (Vec::new(), Vec::new());
                let within = Duration::from_secs(10);
                for i in 0..n {
                    let t0 = Instant::now();
                    let job = q.add("lat", json!({"i": i})).await.expect("add");
                    let tw = arrival(&mut wrx, &mut ew, job.id(), within).await;
                    let tq = arrival(&mut qrx, &mut eq, job.id(), within).await;
                    lw.push((tw.expect("worker completed") - t0).as_secs_f64() * 1e3);
                    lq.push((tq.expect("QueueEvents completed") - t0).as_secs_f64() * 1e3);
                }
                json!({"p50": pct(&mut lw, 0.5), "p99": pct(&mut lw, 0.99),
                       "qe_p50": pct(&mut lq, 0.5), "qe_p99": pct(&mut lq, 0.99)})
            })
        }
        "latency-paced" => {
            // The earlier bench's method: one add every `1000 / rate` ms, not
            // waiting for its completion, timed from the add call to the
            // worker's Completed (completions come in add order at c1).
            let rate = args["rate"].as_f64().unwrap_or(500.0);
            let w = Arc::new(
                Worker::with_options(&name, noop, worker_opts(&url, 1, true, true))
                    .await
                    .expect("worker"),
            );
            workers.push(w.clone());
            tokio::time::sleep(Duration::from_millis(300)).await;
            let q = q.clone();
            Box::pin(async move {
                let mut wrx = stamp_worker(w);
                let sent = Arc::new(std::sync::Mutex::new(HashMap::new()));
                let producer = {
                    let sent = sent.clone();
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
                        for i in 0..n {
                            tick.tick().await;
                            let at = Instant::now();
                            let job = q.add("lat", json!({"i": i})).await.expect("add");
                            sent.lock().unwrap().insert(job.id().to_owned(), at);
                        }
                    })
                };
                let mut done = Vec::with_capacity(n as usize);
                while (done.len() as u64) < n {
                    done.push(wrx.recv().await.expect("worker events"));
                }
                producer.await.unwrap();
                let sent = sent.lock().unwrap();
                let mut lat: Vec<f64> = done
                    .iter()
                    .filter_map(|(id, at)| Some((*at - *sent.get(id)?).as_secs_f64() * 1e3))
                    .collect();
                json!({"p50": pct(&mut lat, 0.5), "p99": pct(&mut lat, 0.99)})
            })
        }
        other => panic!("unknown mode {other}"),
    };
    println!("{}", json!({"ready": true}));
    // `go`; a closed stdin (a caller that does not take turns, as job_cost)
    // is a go too.
    let _ = tokio::task::spawn_blocking(read_line).await;
    let (t, c) = (Instant::now(), cpu_us());
    let mut out = section.await;
    out["ms"] = json!(t.elapsed().as_secs_f64() * 1e3);
    out["cpu_us"] = json!(cpu_us() - c);
    println!("{out}");
    let _ = tokio::task::spawn_blocking(read_line).await;
    for w in workers {
        let _ = w.close(5000).await;
    }
    for qe in listeners {
        qe.close().await;
    }
    std::process::exit(0);
}
