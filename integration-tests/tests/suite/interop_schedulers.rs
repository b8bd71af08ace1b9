//! Job schedulers across clients: a scheduler upserted by one side is
//! advanced by the other side's workers, then handed back, and the chain of
//! iteration ids (`repeat:<id>:<millis>`) has no gap and no duplicate — the
//! ids each side creates are the ones the other would have created.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{processor_fn, JobContext};
use echomq::{JobSchedulers, ProcessError, Queue, SchedulerSpec, WorkerArgs, WorkerMsg};
use echomq_integration_tests::{timeline, wait_until, NullSupervisor};
use echomq_integration_tests::{NodeBullmq, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

/// Runs a Rust worker on `queue` until it has run `n` jobs, then closes it
/// (the jobs it holds finish); the ids it ran, with counts.
async fn rust_worker_for(queue: &Queue, n: usize) -> HashMap<String, u32> {
    rust_worker_observing(queue, n, None).await.0
}

/// What a Rust processor saw of its scheduler while it ran iteration `millis`.
#[derive(Debug)]
struct Seen {
    millis: u64,
    /// The job hash of the scheduler's next slot existed.
    successor_exists: bool,
    /// `{P}repeat` score of the scheduler.
    score: Option<f64>,
    /// The scheduler's `ic`.
    ic: Option<String>,
}

/// Like [`rust_worker_for`]; with an `observer` client every run also
/// records, from inside the processor, the state of its successor.
async fn rust_worker_observing(
    queue: &Queue,
    n: usize,
    observer: Option<Client>,
) -> (HashMap<String, u32>, Vec<Seen>) {
    let runs: Arc<Mutex<HashMap<String, u32>>> = Default::default();
    let seen: Arc<Mutex<Vec<Seen>>> = Default::default();
    let (r, sn, name) = (runs.clone(), seen.clone(), queue.name().to_owned());
    let p = processor_fn(move |job: JobContext| {
        let (r, sn, observer, name) = (r.clone(), sn.clone(), observer.clone(), name.clone());
        async move {
            if let Some(c) = observer {
                let (sched, millis) = job
                    .id()
                    .strip_prefix("repeat:")
                    .unwrap()
                    .rsplit_once(':')
                    .unwrap();
                let millis: u64 = millis.parse().unwrap();
                // The scheduler's next slot, and the job hash of that slot.
                let score: Option<f64> =
                    c.zscore(format!("emq:{name}:repeat"), sched).await.unwrap();
                let successor =
                    format!("emq:{name}:repeat:{sched}:{}", score.unwrap_or(0.0) as u64);
                let exists: i64 = c.exists(&successor).await.unwrap();
                let ic: Option<String> = c
                    .hget(format!("emq:{name}:repeat:{sched}"), "ic")
                    .await
                    .unwrap();
                sn.lock().unwrap().push(Seen {
                    millis,
                    successor_exists: exists == 1,
                    score,
                    ic,
                });
            }
            *r.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), p);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    wait_until(
        "the Rust worker's runs",
        Duration::from_secs(30),
        async || runs.lock().unwrap().len() >= n,
    )
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    w.wait(Some(Duration::from_secs(10))).await.unwrap();
    let out = runs.lock().unwrap().clone();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (out, seen)
}

/// Compat item 58: a Rust worker creates the next iteration (job hash,
/// `{P}repeat` score, `ic` + 1) before it runs — so before it finishes —
/// iteration `T`. `chain` is every completed iteration's millis then the
/// pending next one; iteration `chain[i]` is number `i + 1`, so its successor
/// `chain[i + 1]` makes `ic` = `i + 2`.
fn assert_successor_first(seen: &[Seen], chain: &[u64]) {
    assert!(!seen.is_empty(), "the Rust worker ran no iteration");
    for s in seen {
        let i = chain
            .iter()
            .position(|m| *m == s.millis)
            .expect("iteration in chain");
        assert!(
            s.successor_exists,
            "iteration {} ran before its successor existed: {s:?}",
            s.millis
        );
        assert_eq!(s.score, Some(chain[i + 1] as f64), "{s:?}");
        assert_eq!(s.ic, Some((i + 2).to_string()), "{s:?}");
    }
}

/// Runs a Node worker on `queue` until it has started `n` jobs, then closes
/// it (the jobs it holds finish); the ids it ran, with counts.
fn node_worker_for(js: NodeBullmq, url: &str, queue: &str, n: usize) -> HashMap<String, u32> {
    let mut node = js.spawn(
        "worker.js",
        url,
        queue,
        json!({"skipStalledCheck": true, "verbose": true}),
    );
    let mut started = 0;
    node.wait_line(Duration::from_secs(30), |v| {
        started += usize::from(v["ev"] == "start");
        started >= n
    });
    let summary = node.finish().expect("node summary");
    serde_json::from_value(summary["runs"].clone()).unwrap()
}

/// The millis of every iteration completed, then of the pending next one,
/// checked to form one chain `step` apart, each run once by exactly one
/// side. A slot is skipped only where the clock says so: an iteration whose
/// successor was computed (after its take) once the successor's slot had
/// passed makes the next one at the first slot after that moment, as both
/// sides do; any other gap is a fault.
async fn assert_chain(
    c: &Client,
    queue: &str,
    sched: &str,
    step: u64,
    runs: &[&HashMap<String, u32>],
) -> Vec<u64> {
    let ids: Vec<String> = c
        .zrange(
            format!("emq:{queue}:completed"),
            0,
            -1,
            None,
            false,
            None,
            false,
        )
        .await
        .unwrap();
    let prefix = format!("repeat:{sched}:");
    let mut millis: Vec<u64> = ids
        .iter()
        .map(|id| {
            id.strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("unexpected job {id}"))
                .parse()
                .unwrap()
        })
        .collect();
    millis.sort();
    for id in &ids {
        let total: u32 = runs.iter().map(|r| r.get(id).copied().unwrap_or(0)).sum();
        assert_eq!(total, 1, "{id} ran {total} times");
    }
    let ran: usize = runs.iter().map(|r| r.len()).sum();
    assert_eq!(ran, ids.len(), "every run completed");
    // The next iteration waits; the scheduler's score names it.
    let next: f64 = c
        .zscore(format!("emq:{queue}:repeat"), sched)
        .await
        .unwrap();
    let next = next as u64;
    let pending: Vec<String> = c
        .zrange(
            format!("emq:{queue}:delayed"),
            0,
            -1,
            None,
            false,
            None,
            false,
        )
        .await
        .unwrap();
    let waiting: Vec<String> = c.lrange(format!("emq:{queue}:wait"), 0, -1).await.unwrap();
    let next_id = format!("{prefix}{next}");
    assert!(
        pending.contains(&next_id) || waiting.contains(&next_id),
        "next iteration {next_id} missing: delayed {pending:?} wait {waiting:?}"
    );
    millis.push(next);
    let stamps = timeline::stamps(c, &format!("emq:{queue}:events")).await;
    let taken_at = |m: u64| {
        stamps
            .iter()
            .find(|s| s.name == "active" && s.job_id == format!("{prefix}{m}"))
            .map(|s| s.at_ms)
            .unwrap_or_else(|| panic!("no active event for {prefix}{m}"))
    };
    for w in millis.windows(2) {
        let gap = w[1] - w[0];
        if gap == step {
            continue;
        }
        // The creator of `w[1]` stamped the moment it computed the slot in
        // the job's `timestamp` (its `delay` counts from there): a skipped
        // slot is right only if that moment was at or past the slot skipped
        // and `w[1]` is the first slot after it. A cron or every slot is
        // computed on the creator's clock (Node's, or Redis's for an EchoMQ
        // worker), so this is the clock the check must use; the `active`
        // event on Redis's clock is shown for the record.
        let created: String = c
            .hget(format!("emq:{queue}:{prefix}{}", w[1]), "timestamp")
            .await
            .unwrap();
        let created: u64 = created.parse().unwrap();
        let at = taken_at(w[0]);
        assert!(
            gap > step && gap % step == 0 && created + 1 >= w[0] + step && w[1] <= created + step,
            "gap or duplicate in {millis:?}: {} taken at {at}, next {} computed at {created}",
            w[0],
            w[1]
        );
    }
    millis
}

async fn node_every_scheduler_runs_on_rust_then_node_workers(js: NodeBullmq) {
    let (redis, _conn, queue) = RedisServer::with_queue("se").await;
    let c = redis.client().await;
    let first = js.bullmq(
        "upsert-scheduler",
        &redis.url(),
        "se",
        json!({"id": "s1", "repeat": {"every": 1000}, "template": {"name": "tick"}}),
    );
    let (rust, seen) = rust_worker_observing(&queue, 2, Some(c.clone())).await;
    let node = node_worker_for(js, &redis.url(), "se", 1);
    assert!(
        rust.len() >= 2 && !node.is_empty(),
        "rust {rust:?} node {node:?}"
    );
    let chain = assert_chain(&c, "se", "s1", 1000, &[&rust, &node]).await;
    assert_eq!(first["id"], json!(format!("repeat:s1:{}", chain[0])));
    let ic: String = c.hget("emq:se:repeat:s1", "ic").await.unwrap();
    assert_eq!(
        ic,
        chain.len().to_string(),
        "one iteration count per iteration made"
    );
    assert_successor_first(&seen, &chain);
}

async fn node_cron_scheduler_runs_on_rust_then_node_workers(js: NodeBullmq) {
    let (redis, _conn, queue) = RedisServer::with_queue("sc").await;
    let c = redis.client().await;
    js.bullmq(
        "upsert-scheduler",
        &redis.url(),
        "sc",
        json!({"id": "c1", "repeat": {"pattern": "* * * * * *", "tz": "UTC"}}),
    );
    let rust = rust_worker_for(&queue, 2).await;
    let node = node_worker_for(js, &redis.url(), "sc", 1);
    assert!(
        rust.len() >= 2 && !node.is_empty(),
        "rust {rust:?} node {node:?}"
    );
    let chain = assert_chain(&c, "sc", "c1", 1000, &[&rust, &node]).await;
    // Cron iterations sit on second boundaries, whoever computed them.
    assert!(chain.iter().all(|m| m % 1000 == 0), "{chain:?}");
}

async fn echomq_every_scheduler_runs_on_node_then_rust_workers(js: NodeBullmq) {
    let (redis, conn, queue) = RedisServer::with_queue("sr").await;
    let c = redis.client().await;
    let schedulers = JobSchedulers::new(&conn, "sr").unwrap();
    let first = schedulers
        .upsert(&SchedulerSpec::every("s2", Duration::from_secs(1)))
        .await
        .unwrap()
        .expect("first iteration");
    let node = node_worker_for(js, &redis.url(), "sr", 2);
    let (rust, seen) = rust_worker_observing(&queue, 1, Some(c.clone())).await;
    assert!(
        node.len() >= 2 && !rust.is_empty(),
        "rust {rust:?} node {node:?}"
    );
    let chain = assert_chain(&c, "sr", "s2", 1000, &[&rust, &node]).await;
    assert_eq!(first.job_id, format!("repeat:s2:{}", chain[0]));
    assert_successor_first(&seen, &chain);
    // Node reads the Rust-made scheduler as its own.
    let info = js.bullmq("get-scheduler", &redis.url(), "sr", json!({"id": "s2"}));
    assert_eq!(info["every"], json!(1000));
}

echomq_integration_tests::bullmq_matrix!(
    node_every_scheduler_runs_on_rust_then_node_workers,
    node_cron_scheduler_runs_on_rust_then_node_workers,
    echomq_every_scheduler_runs_on_node_then_rust_workers,
);
