//! `just bench`, groups (issue 31): jobs/s through a GroupFeeder with 1, 100
//! and 10,000 groups, beside the same jobs ungrouped, on one fresh
//! redis-server. The same no-op processor (an EchoMQ worker, concurrency 32)
//! runs every case; the clock runs from the worker's start to the last
//! completion, the adds are not timed. Picking the next group is a ZPOPMIN,
//! so the rate should not fall with the number of groups beyond the log n of
//! a sorted set. Printed as Markdown rows. `BENCH_SCALE=<f>` scales the jobs.

use std::time::{Duration, Instant};

use echomq::groups::{GroupFeeder, GroupFeederArgs, GroupOptions};
use echomq::worker::processor_fn;
use echomq::{JobOptions, NewJob, Queue, WorkerArgs, WorkerMsg, WorkerSetSpec};
use echomq_integration_tests::{NullSupervisor, RedisServer};
use fred::prelude::SortedSetsInterface;
use ractor::{call_t, Actor};
use serde_json::Value;

const CONCURRENCY: usize = 32;

fn scale(n: u64) -> u64 {
    let f: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64) * f).max(1.0) as u64
}

async fn run(redis: &RedisServer, name: &str, groups: Option<u64>, jobs: u64) -> f64 {
    let conn = redis.connect().await;
    let client = redis.client().await;
    let queue = Queue::new(&conn, name).await.expect("queue");
    let mut added = 0;
    while added < jobs {
        let chunk: Vec<NewJob> = (added..(added + 1000).min(jobs))
            .map(|i| NewJob {
                name: "b".into(),
                data: Value::Null,
                options: match groups {
                    Some(g) => JobOptions::new().group(GroupOptions::new(format!("g{}", i % g))),
                    None => JobOptions::new(),
                },
            })
            .collect();
        added += chunk.len() as u64;
        queue.add_bulk(chunk).await.expect("add");
    }
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.expect("host");
    let feeder = match groups {
        Some(_) => Some(
            Actor::spawn_linked(
                None,
                GroupFeeder,
                GroupFeederArgs::new(conn.clone(), name).max_ready(2 * CONCURRENCY as u64),
                host.get_cell(),
            )
            .await
            .expect("feeder")
            .0,
        ),
        None => None,
    };
    let processor = processor_fn(|_job| async { Ok::<_, echomq::ProcessError>(Value::Null) });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.concurrency = CONCURRENCY;
    let t0 = Instant::now();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .expect("worker");
    let key = format!("emq:{name}:completed");
    loop {
        let done: u64 = client.zcard(&key).await.expect("zcard");
        if done >= jobs {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "{name}: only {done} of {jobs}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let _ = call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5));
    if let Some(f) = feeder {
        f.stop(None);
    }
    jobs as f64 / secs
}

#[tokio::main]
async fn main() {
    let redis = RedisServer::start();
    let jobs = scale(20_000);
    println!("| groups ({jobs} jobs, worker concurrency {CONCURRENCY}) | jobs/s |");
    println!("| --- | ---: |");
    let plain = run(&redis, "plain", None, jobs).await;
    println!("| ungrouped | {plain:.0} |");
    for g in [1u64, 100, 10_000] {
        let rate = run(&redis, &format!("g{g}"), Some(g), jobs).await;
        println!("| {g} | {rate:.0} |");
    }
}
