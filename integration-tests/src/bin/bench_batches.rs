//! `just bench` (second part): batches and cancels, EchoMQ only (no peer
//! offers either in the open), on a fresh redis-server.
//!
//! * Batch throughput: the same no-op jobs processed one by one at
//!   concurrency 16 and in batches of 10, 50 and 100 (one batch at a time),
//!   with the script calls per job read from `INFO commandstats`.
//! * Cancel latency: a job held by a worker is cancelled from another
//!   connection; timed from the start of `Queue::cancel` to the moment the
//!   holder's processor sees its cancellation, and the `Queue::cancel` call
//!   itself.
//!
//! `BENCH_SCALE=<f>` scales the job counts. Printed as Markdown for
//! docs/benchmarks.md.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::queue::CancelMode;
use echomq::worker::{batch_processor_fn, processor_fn, BatchOptions, JobContext};
use echomq::{
    Connection, JobOptions, JobState, NewJob, ProcessError, Queue, WorkerArgs, WorkerEvent,
    WorkerSetSpec,
};
use echomq_integration_tests::{NullSupervisor, RedisServer};
use fred::prelude::*;
use serde_json::{json, Value as Json};

fn scale(n: u64) -> u64 {
    let f: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * f) as u64).max(10)
}

use echomq_integration_tests::evalsha_calls;

async fn fill(q: &Queue, n: u64) {
    for start in (0..n).step_by(1000) {
        let jobs: Vec<NewJob> = (start..(start + 1000).min(n))
            .map(|i| NewJob {
                name: "b".into(),
                data: json!({ "i": i }),
                options: JobOptions::new().remove_on_complete(echomq::KeepJobs::Remove(true)),
            })
            .collect();
        q.add_bulk(jobs).await.unwrap();
    }
}

/// Seconds to process `n` jobs with `args`, and EVALSHA calls per job.
async fn run(c: &Client, q: &Queue, n: u64, mut args: WorkerArgs) -> (f64, f64) {
    fill(q, n).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    args.events = Some(tx);
    let mut spec = WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let calls0 = evalsha_calls(c).await;
    let t = Instant::now();
    let (host, _) = ractor::Actor::spawn(None, NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    let mut done = 0;
    while done < n {
        if let Some(WorkerEvent::Completed { .. }) = rx.recv().await {
            done += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let calls = evalsha_calls(c).await - calls0;
    set.close(Duration::from_secs(5)).await.unwrap();
    host.stop(None);
    (secs, calls as f64 / n as f64)
}

fn percentile(v: &mut [f64], p: usize) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[(v.len() * p / 100).min(v.len() - 1)]
}

#[tokio::main]
async fn main() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let n = scale(20_000);

    println!("### Batches ({n} no-op jobs, removed on completion)\n");
    println!("| worker | jobs/s | script calls per job |");
    println!("| --- | ---: | ---: |");
    // Warm-up: scripts loaded, connections open.
    let warm = Queue::new(&conn, "warm").await.unwrap();
    let single = || processor_fn(|_| async { Ok::<_, ProcessError>(Json::Null) });
    run(&c, &warm, 500, WorkerArgs::new(warm.clone(), single())).await;
    let q = Queue::new(&conn, "single").await.unwrap();
    let mut args = WorkerArgs::new(q.clone(), single());
    args.options.concurrency = 16;
    let (secs, per) = run(&c, &q, n, args).await;
    println!(
        "| one job at a time, concurrency 16 | {:.0} | {per:.2} |",
        n as f64 / secs
    );
    for size in [10usize, 50, 100] {
        let q = Queue::new(&conn, &format!("batch{size}")).await.unwrap();
        let processor = batch_processor_fn(|jobs: Vec<JobContext>| async move {
            jobs.iter().map(|_| Ok(Json::Null)).collect()
        });
        let args = WorkerArgs::batched(q.clone(), processor, BatchOptions::new(size));
        let (secs, per) = run(&c, &q, n, args).await;
        println!(
            "| batches of {size}, one at a time | {:.0} | {per:.2} |",
            n as f64 / secs
        );
    }

    cancel_latency(&conn, scale(200)).await;
}

/// The holder's processor waits for its cancellation and stamps the moment.
async fn cancel_latency(conn: &Connection, rounds: u64) {
    let q = Queue::new(conn, "cancel").await.unwrap();
    let seen: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stamp = seen.clone();
    let processor = processor_fn(move |job: JobContext| {
        let stamp = stamp.clone();
        async move {
            job.cancelled().await;
            *stamp.lock().unwrap() = Some(Instant::now());
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options.drain_delay = Duration::from_millis(100);
    let mut spec = WorkerSetSpec::new(args);
    spec.stalled_checker = None;
    let (host, _) = ractor::Actor::spawn(None, NullSupervisor, ())
        .await
        .unwrap();
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    // The canceller: another connection, as another process would be.
    let other = Connection::connect(conn.config().clone()).await.unwrap();
    let canceller = Queue::new(&other, "cancel").await.unwrap();
    let (mut stop, mut call) = (Vec::new(), Vec::new());
    for i in 0..rounds + 10 {
        *seen.lock().unwrap() = None;
        let id = q.add("c", &json!({}), JobOptions::new()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while q.get_job_state(&id).await.unwrap() != JobState::Active {
            assert!(Instant::now() < deadline, "job {id} never started");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let t = Instant::now();
        canceller
            .cancel(&id, "bench", CancelMode::Fail)
            .await
            .unwrap();
        let called = t.elapsed();
        let at = loop {
            if let Some(at) = *seen.lock().unwrap() {
                break at;
            }
            assert!(Instant::now() < deadline, "job {id} was never stopped");
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        // The first rounds warm up the subscriber and the scripts.
        if i >= 10 {
            call.push(called.as_secs_f64() * 1000.0);
            stop.push(at.duration_since(t).as_secs_f64() * 1000.0);
        }
    }
    set.close(Duration::from_secs(5)).await.unwrap();
    host.stop(None);
    other.close().await;
    println!("\n### Cancel latency ({rounds} cancels of a running job from another connection)\n");
    println!("| metric | median | p99 |");
    println!("| --- | ---: | ---: |");
    println!(
        "| cancel call → the holder's processor cancelled | {:.2} ms | {:.2} ms |",
        percentile(&mut stop, 50),
        percentile(&mut stop, 99)
    );
    println!(
        "| `Queue::cancel` call | {:.2} ms | {:.2} ms |",
        percentile(&mut call, 50),
        percentile(&mut call, 99)
    );
}
