//! A mixed fleet: a BullMQ Node worker and an EchoMQ worker serve one queue of
//! 10000 jobs (half added by each side); every job is completed exactly once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::worker::{processor_fn, JobContext};
use echomq::{JobOptions, NewJob, ProcessError, WorkerArgs, WorkerMsg, WorkerSetSpec};
use echomq_integration_tests::NullSupervisor;
use echomq_integration_tests::{NodeBullmq, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

const N: usize = 10_000;

async fn node_and_rust_workers_complete_10000_jobs_exactly_once(js: NodeBullmq) {
    let (redis, _conn, queue) = RedisServer::with_queue("fleet").await;
    let c = redis.client().await;

    let node_ids = js.bullmq(
        "add-many",
        &redis.url(),
        "fleet",
        json!({"n": N / 2, "name": "n", "from": 0}),
    );
    assert_eq!(node_ids.as_array().unwrap().len(), N / 2);
    let mut rust_ids = Vec::new();
    for chunk in (N / 2..N).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| NewJob {
                name: "r".into(),
                data: json!({ "i": i }),
                options: JobOptions::new(),
            })
            .collect();
        rust_ids.extend(queue.add_bulk(jobs).await.unwrap());
    }
    // One id counter for both producers: no id handed out twice.
    let mut all_ids: Vec<String> = node_ids
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .chain(rust_ids)
        .collect();
    all_ids.sort();
    all_ids.dedup();
    assert_eq!(all_ids.len(), N);

    let t0 = Instant::now();
    let node = js.spawn(
        "worker.js",
        &redis.url(),
        "fleet",
        json!({"concurrency": 50, "name": "node"}),
    );
    let runs: Arc<Mutex<HashMap<String, u32>>> = Default::default();
    let r = runs.clone();
    let processor = processor_fn(move |job: JobContext| {
        let r = r.clone();
        async move {
            *r.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.concurrency = 50;
    args.options.name = Some("rust".into());
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let done: u64 = c.zcard("emq:fleet:completed").await.unwrap();
        if done == N as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "only {done} of {N} completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = t0.elapsed();
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    let summary = node.finish().expect("node worker summary");

    let rust_runs = runs.lock().unwrap().clone();
    let node_runs: HashMap<String, u32> = serde_json::from_value(summary["runs"].clone()).unwrap();
    eprintln!(
        "{N} jobs in {elapsed:?}: rust ran {}, node ran {}",
        rust_runs.len(),
        node_runs.len()
    );
    assert!(rust_runs.values().all(|&n| n == 1), "rust ran a job twice");
    assert!(node_runs.values().all(|&n| n == 1), "node ran a job twice");
    let both: Vec<&String> = rust_runs
        .keys()
        .filter(|id| node_runs.contains_key(*id))
        .collect();
    assert!(both.is_empty(), "run on both sides: {both:?}");
    assert_eq!(rust_runs.len() + node_runs.len(), N);
    assert!(
        !rust_runs.is_empty() && !node_runs.is_empty(),
        "both sides took jobs"
    );

    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.completed, counts.failed, counts.pending()),
        (N as u64, 0, 0)
    );
    // Every job was started once and by the worker that ran it (items 42, 16).
    let odd: Vec<String> = c
        .eval(
            "local out = {}
             for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
               local h = redis.call('HMGET', ARGV[1] .. id, 'ats', 'atm', 'pb', 'lock')
               if h[1] ~= '1' or h[2] ~= '1' or (h[3] ~= 'node' and h[3] ~= 'rust') then
                 table.insert(out, id)
               end
               if redis.call('EXISTS', ARGV[1] .. id .. ':lock') == 1 then
                 table.insert(out, id .. ':lock')
               end
             end
             return out",
            vec!["emq:fleet:completed"],
            vec!["emq:fleet:"],
        )
        .await
        .unwrap();
    assert!(
        odd.is_empty(),
        "jobs with ats/atm != 1 or a lock left: {odd:?}"
    );
    let by_node: u64 = c
        .eval(
            "local n = 0
             for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
               if redis.call('HGET', ARGV[1] .. id, 'pb') == 'node' then n = n + 1 end
             end
             return n",
            vec!["emq:fleet:completed"],
            vec!["emq:fleet:"],
        )
        .await
        .unwrap();
    assert_eq!(
        by_node as usize,
        node_runs.len(),
        "pb agrees with who ran it"
    );
}

echomq_integration_tests::bullmq_matrix!(node_and_rust_workers_complete_10000_jobs_exactly_once,);
