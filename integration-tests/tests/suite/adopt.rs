//! `echomq adopt` against a queue BullMQ 4 (npm 4.18.3) really wrote: its
//! legacy repeatable jobs are reported without a write, converted into job
//! schedulers by `--apply` (a second run writes nothing), and then a BullMQ
//! 6.7.6 Node worker and an EchoMQ worker carry both schedules on — each
//! iteration once, on its slot, the limit kept. The CLI command is a thin
//! printer over `echomq::adopt::{inspect, apply}`, which this test drives.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::adopt::{self, AdoptError, IterationState, LegacyRepeat};
use echomq::protocol::call::scheduler::Adopted;
use echomq::worker::{processor_fn, JobContext};
use echomq::{Connection, ConnectionConfig, Error, ProcessError, Queue, WorkerArgs, WorkerMsg};
use echomq_integration_tests::{wait_until, NodeBullmq, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

const CRON_STEP: u64 = 2000;
const EVERY: u64 = 1500;
const EVERY_LIMIT: usize = 4;
const EVERY_STEP_A: u64 = 1000;

async fn connect_bull(redis: &RedisServer) -> Connection {
    let mut config = ConnectionConfig::with_url(redis.url());
    config.prefix = "bull".into();
    Connection::connect(config).await.unwrap()
}

/// `echomq --prefix bull adopt <args>` (the workspace's binary, with none of
/// the caller's `ECHOMQ_*`/`REDIS_URL`): its exit code and standard output.
fn echomq_adopt(url: &str, args: &[&str]) -> (i32, String) {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/echomq");
    assert!(
        bin.is_file(),
        "{} missing: `cargo build -p echomq-cli` first",
        bin.display()
    );
    let mut cmd = Command::new(bin);
    for (k, _) in std::env::vars() {
        if k.starts_with("ECHOMQ_") || k == "REDIS_URL" {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .args(["--url", url, "--prefix", "bull", "adopt"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("echomq adopt {args:?}: {stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// BullMQ 4.18.3 adds repeatable jobs (`integration-tests/interop-4/legacy.js`).
fn bullmq4_add(url: &str, queue: &str, specs: Json) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop-4");
    assert!(
        dir.join("node_modules/bullmq").is_dir(),
        "BullMQ 4.18.3 missing in {}: run `just _ensure-node-packages`",
        dir.display()
    );
    let out = Command::new("node")
        .current_dir(&dir)
        .args(["legacy.js", url, queue, &specs.to_string()])
        .output()
        .expect("node is installed");
    assert!(
        out.status.success(),
        "legacy.js failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every key under `bull:` with its DUMP: equal snapshots, equal keyspaces.
async fn snapshot(c: &Client) -> BTreeMap<String, Vec<u8>> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let (next, page): (String, Vec<String>) = c
            .scan_page(cursor, "bull:*", Some(1000), None)
            .await
            .unwrap();
        keys.extend(page);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    let mut out = BTreeMap::new();
    for k in keys {
        let dump: Option<Vec<u8>> = c.dump(&k).await.unwrap();
        out.insert(k, dump.unwrap_or_default());
    }
    out
}

/// Runs an EchoMQ worker on `queue` until `done` says so; the ids it ran.
async fn rust_worker_until(
    queue: &Queue,
    limit: Duration,
    done: impl Fn(&HashMap<String, u32>) -> bool,
) -> HashMap<String, u32> {
    let runs: Arc<Mutex<HashMap<String, u32>>> = Default::default();
    let r = runs.clone();
    let p = processor_fn(move |job: JobContext| {
        let r = r.clone();
        async move {
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
    wait_until("the EchoMQ worker's runs", limit, async || {
        done(&runs.lock().unwrap())
    })
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    w.wait(Some(Duration::from_secs(10))).await.unwrap();
    let out = runs.lock().unwrap().clone();
    out
}

fn of(runs: &HashMap<String, u32>, sched: &str) -> usize {
    runs.keys()
        .filter(|id| id.starts_with(&format!("repeat:{sched}:")))
        .count()
}

/// The completed iterations of `sched`, by millis: one chain `step` apart,
/// a slot skipped only when its predecessor's successor was computed after
/// that slot (as both clients do when behind); each ran once, never early.
async fn assert_chain(
    c: &Client,
    sched: &str,
    first: u64,
    step: u64,
    runs: &[&HashMap<String, u32>],
) -> Vec<u64> {
    let ids: Vec<String> = c
        .zrange("bull:q:completed", 0, -1, None, false, None, false)
        .await
        .unwrap();
    let prefix = format!("repeat:{sched}:");
    let mut millis: Vec<u64> = ids
        .iter()
        .filter_map(|id| id.strip_prefix(&prefix))
        .map(|m| m.parse().unwrap())
        .collect();
    millis.sort();
    assert_eq!(
        millis.first(),
        Some(&first),
        "the adopted iteration ran first: {millis:?}"
    );
    for m in &millis {
        let id = format!("{prefix}{m}");
        let total: u32 = runs.iter().map(|r| r.get(&id).copied().unwrap_or(0)).sum();
        assert_eq!(total, 1, "{id} ran {total} times");
        let processed: String = c.hget(format!("bull:q:{id}"), "processedOn").await.unwrap();
        assert!(
            processed.parse::<u64>().unwrap() + 5 >= *m,
            "{id} ran early, at {processed}"
        );
    }
    for w in millis.windows(2) {
        let gap = w[1] - w[0];
        if gap == step {
            continue;
        }
        let created: String = c
            .hget(format!("bull:q:{prefix}{}", w[1]), "timestamp")
            .await
            .unwrap();
        let created: u64 = created.parse().unwrap();
        assert!(
            gap > step && gap % step == 0 && created + 1 >= w[0] + step && w[1] <= created + step,
            "gap or duplicate in {millis:?}: {} next {} computed at {created}",
            w[0],
            w[1]
        );
    }
    millis
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_repeatables_written_by_bullmq_4_are_adopted_and_run_on() {
    let deadline = Instant::now() + Duration::from_secs(90);
    let left = || deadline.saturating_duration_since(Instant::now());
    let redis = RedisServer::start();
    let c = redis.client().await;
    let conn = connect_bull(&redis).await;
    let end = echomq::clock::now_ms() + 3_600_000;
    let ids = bullmq4_add(
        &redis.url(),
        "q",
        json!([
            {"name": "nightly", "data": {"mode": "ok", "ret": "c"}, "attempts": 2,
             "repeat": {"pattern": "*/2 * * * * *", "tz": "Europe/London", "limit": 100, "endDate": end}},
            {"name": "tick", "jobId": "tick-id", "data": {"mode": "ok"},
             "repeat": {"every": EVERY, "limit": EVERY_LIMIT}},
        ]),
    );
    assert_eq!(ids.len(), 2);

    // Report: nothing written, by the library and by `echomq adopt`.
    let before = snapshot(&c).await;
    let report = adopt::inspect(&conn, "q").await.unwrap();
    assert_eq!(snapshot(&c).await, before, "inspect wrote something");
    let (code, out) = echomq_adopt(&redis.url(), &["q", "--json"]);
    assert_eq!(code, 0, "{out}");
    let shown: Json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(shown["legacy"].as_array().map(Vec::len), Some(2), "{shown}");
    assert_eq!(snapshot(&c).await, before, "`echomq adopt` wrote something");
    let (code, out) = echomq_adopt(&redis.url(), &["nope"]);
    assert_eq!(code, 2, "a queue that does not exist: {out}");
    assert_eq!(snapshot(&c).await, before);
    assert_eq!(report.version.as_deref(), Some("bullmq:4.18.3"));
    assert_eq!(report.unknown_keys, 0, "{:?}", report.unknown_sample);
    assert!(report.walk_complete);
    assert_eq!(report.legacy.len(), 2, "{report:?}");
    let cron = report
        .legacy
        .iter()
        .find(|e| e.key.name == "nightly")
        .unwrap()
        .clone();
    let every = report
        .legacy
        .iter()
        .find(|e| e.key.name == "tick")
        .unwrap()
        .clone();
    assert_eq!(cron.key.repeat, LegacyRepeat::Cron("*/2 * * * * *".into()));
    assert_eq!(cron.key.tz.as_deref(), Some("Europe/London"));
    assert_eq!(cron.key.end_date, Some(end));
    assert_eq!(every.key.repeat, LegacyRepeat::Every(EVERY));
    assert_eq!(every.key.job_id, "tick-id");
    // The iteration ids BullMQ 4 made are the ones adopt derives.
    let mut derived = vec![cron.iteration_id.clone(), every.iteration_id.clone()];
    let mut written = ids.clone();
    derived.sort();
    written.sort();
    assert_eq!(derived, written);
    assert!(report
        .legacy
        .iter()
        .all(|e| e.iteration == IterationState::Pending));

    // Bad input: a queue that does not exist, an unknown prefix.
    assert!(matches!(
        adopt::apply(&conn, "nope").await,
        Err(Error::Adopt(AdoptError::QueueNotFound { .. }))
    ));
    let other = Connection::connect(ConnectionConfig::with_url(redis.url()))
        .await
        .unwrap();
    assert!(matches!(
        adopt::apply(&other, "q").await,
        Err(Error::Adopt(AdoptError::QueueNotFound { .. }))
    ));
    // A key of unknown shape: refused, nothing written.
    let _: () = c
        .set("bull:q:odd:key", "x", None, None, false)
        .await
        .unwrap();
    let with_odd = snapshot(&c).await;
    assert!(matches!(
        adopt::apply(&conn, "q").await,
        Err(Error::Adopt(AdoptError::UnknownKeys { count: 1, .. }))
    ));
    assert_eq!(
        snapshot(&c).await,
        with_odd,
        "a refused apply wrote something"
    );
    let _: () = c.del("bull:q:odd:key").await.unwrap();
    assert_eq!(snapshot(&c).await, before);

    // Apply: two schedulers, same next run, same definition.
    let applied = adopt::apply(&conn, "q").await.unwrap();
    assert_eq!(applied.converted.len(), 2, "{applied:?}");
    assert!(applied
        .converted
        .iter()
        .all(|c| c.outcome == Adopted::Pending && c.created.is_none()));
    let legacy_left: Vec<String> = c
        .zrange("bull:q:repeat", 0, -1, None, false, None, false)
        .await
        .unwrap();
    let mut expect = vec![cron.scheduler_id.clone(), every.scheduler_id.clone()];
    expect.sort();
    let mut got = legacy_left.clone();
    got.sort();
    assert_eq!(got, expect, "only the schedulers are indexed");
    for e in [&cron, &every] {
        let score: f64 = c.zscore("bull:q:repeat", &e.scheduler_id).await.unwrap();
        assert_eq!(score as u64, e.next_millis, "same next run");
        let rjk: String = c
            .hget(format!("bull:q:{}", e.iteration_id), "rjk")
            .await
            .unwrap();
        assert_eq!(rjk, e.scheduler_id);
    }
    let def: HashMap<String, String> = c
        .hgetall(format!("bull:q:repeat:{}", cron.scheduler_id))
        .await
        .unwrap();
    assert_eq!(def["pattern"], "*/2 * * * * *");
    assert_eq!(def["tz"], "Europe/London");
    assert_eq!(def["limit"], "100");
    assert_eq!(def["endDate"], end.to_string());
    assert_eq!(def["ic"], "1");
    assert_eq!(def["opts"], r#"{"attempts":2}"#);
    let def: HashMap<String, String> = c
        .hgetall(format!("bull:q:repeat:{}", every.scheduler_id))
        .await
        .unwrap();
    assert_eq!(def["every"], EVERY.to_string());
    assert_eq!(def["limit"], EVERY_LIMIT.to_string());

    // A second run finds nothing to do and writes nothing.
    let converted = snapshot(&c).await;
    let again = adopt::apply(&conn, "q").await.unwrap();
    assert!(
        again.legacy.is_empty() && again.converted.is_empty(),
        "{again:?}"
    );
    assert_eq!(
        snapshot(&c).await,
        converted,
        "a second apply wrote something"
    );

    // A BullMQ 6.7.6 worker carries both schedules on...
    let mut node = NodeBullmq::V6_7.spawn(
        "worker.js",
        &redis.url(),
        "q",
        json!({"prefix": "bull", "skipStalledCheck": true, "verbose": true}),
    );
    let mut started: HashSet<String> = HashSet::new();
    node.wait_line(left(), |v| {
        if v["ev"] == "start" {
            started.insert(v["id"].as_str().unwrap_or_default().to_owned());
        }
        let n = |s: &str| started.iter().filter(|id| id.contains(s)).count();
        n(&cron.scheduler_id) >= 2 && n(&every.scheduler_id) >= 2
    });
    let summary = node.finish().expect("node summary");
    let node_runs: HashMap<String, u32> = serde_json::from_value(summary["runs"].clone()).unwrap();
    // ...and so does an EchoMQ worker, up to the every scheduler's limit.
    let queue = Queue::new(&conn, "q").await.unwrap();
    let (cs, es) = (cron.scheduler_id.clone(), every.scheduler_id.clone());
    let node_every = of(&node_runs, &es);
    let rust_runs = rust_worker_until(&queue, left(), move |r| {
        of(r, &cs) >= 2 && of(r, &es) + node_every >= EVERY_LIMIT
    })
    .await;
    assert!(of(&rust_runs, &cron.scheduler_id) >= 2, "{rust_runs:?}");

    let cron_chain = assert_chain(
        &c,
        &cron.scheduler_id,
        cron.next_millis,
        CRON_STEP,
        &[&node_runs, &rust_runs],
    )
    .await;
    assert!(
        cron_chain.iter().all(|m| m % CRON_STEP == 0),
        "{cron_chain:?}"
    );
    let every_chain = assert_chain(
        &c,
        &every.scheduler_id,
        every.next_millis,
        EVERY,
        &[&node_runs, &rust_runs],
    )
    .await;
    assert_eq!(
        every_chain.len(),
        EVERY_LIMIT,
        "the limit holds: {every_chain:?}"
    );
    let ic: String = c
        .hget(format!("bull:q:repeat:{}", every.scheduler_id), "ic")
        .await
        .unwrap();
    assert_eq!(ic, EVERY_LIMIT.to_string());
    // Nothing pending past the limit; the cron schedule still has its next.
    let delayed: Vec<String> = c
        .zrange("bull:q:delayed", 0, -1, None, false, None, false)
        .await
        .unwrap();
    let waiting: Vec<String> = c.lrange("bull:q:wait", 0, -1).await.unwrap();
    let pending: Vec<&String> = delayed.iter().chain(&waiting).collect();
    assert!(
        !pending.iter().any(|id| id.contains(&every.scheduler_id)),
        "{pending:?}"
    );
    let next: f64 = c.zscore("bull:q:repeat", &cron.scheduler_id).await.unwrap();
    let next_id = format!("repeat:{}:{}", cron.scheduler_id, next as u64);
    assert!(
        pending.contains(&&next_id),
        "{next_id} not pending: {pending:?}"
    );
    let failed: i64 = c.zcard("bull:q:failed").await.unwrap();
    assert_eq!(failed, 0);
}

/// The schedule EchoMQ could not continue: an EchoMQ worker ran a legacy
/// iteration before the adoption and produced no successor (the schedule
/// stopped). `apply` converts it and creates the iteration it owed; the
/// schedule goes on. A run stopped after one entry converges on a re-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_legacy_schedule_goes_on_and_a_partial_run_converges() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = || deadline.saturating_duration_since(Instant::now());
    let redis = RedisServer::start();
    let c = redis.client().await;
    let conn = connect_bull(&redis).await;
    bullmq4_add(
        &redis.url(),
        "q",
        json!([
            {"name": "a", "data": {}, "repeat": {"every": 1000}},
            {"name": "b", "data": {}, "repeat": {"pattern": "0 0 * * *", "tz": "UTC"}},
        ]),
    );
    let report = adopt::inspect(&conn, "q").await.unwrap();
    let a = report
        .legacy
        .iter()
        .find(|e| e.key.name == "a")
        .unwrap()
        .clone();
    let b = report
        .legacy
        .iter()
        .find(|e| e.key.name == "b")
        .unwrap()
        .clone();

    // Before: an EchoMQ worker runs `a`'s iteration and nothing follows.
    let queue = Queue::new(&conn, "q").await.unwrap();
    let first = a.iteration_id.clone();
    let ran = rust_worker_until(&queue, left(), move |r| r.contains_key(&first)).await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    let delayed: Vec<String> = c
        .zrange("bull:q:delayed", 0, -1, None, false, None, false)
        .await
        .unwrap();
    assert_eq!(
        delayed,
        vec![b.iteration_id.clone()],
        "the every schedule stopped"
    );

    // A run that converted `b` only (as if killed after its call)...
    let conv: HashMap<String, String> = c
        .hgetall(format!("bull:q:{}", b.iteration_id))
        .await
        .unwrap();
    assert!(!conv.is_empty());
    let partial = adopt::inspect(&conn, "q").await.unwrap();
    assert_eq!(partial.legacy.len(), 2);
    let def = vec![
        ("name".to_owned(), "b".to_owned()),
        ("tz".to_owned(), "UTC".to_owned()),
        ("pattern".to_owned(), "0 0 * * *".to_owned()),
        ("ic".to_owned(), "1".to_owned()),
    ];
    let keys = echomq::protocol::QueueKeys::new("bull", "q").unwrap();
    let outcome = conn
        .call(&echomq::protocol::call::scheduler::AdoptLegacyRepeatable {
            keys: &keys,
            member: &b.key.member,
            scheduler_id: &b.scheduler_id,
            millis: b.next_millis,
            definition: &def,
            iteration_opts: r#"{"repeat":{"pattern":"0 0 * * *","tz":"UTC","count":1}}"#,
        })
        .await
        .unwrap();
    assert_eq!(outcome, Adopted::Pending);
    // ...then a full run: `b` is not touched again, `a` gets its iteration.
    let applied = adopt::apply(&conn, "q").await.unwrap();
    assert_eq!(applied.converted.len(), 1, "{applied:?}");
    let done = &applied.converted[0];
    assert_eq!(done.member, a.key.member);
    assert_eq!(done.outcome, Adopted::NeedsIteration);
    let next = done.created.clone().expect("the owed iteration");
    assert!(
        next.starts_with(&format!("repeat:{}:", a.scheduler_id)),
        "{next}"
    );
    let again = adopt::apply(&conn, "q").await.unwrap();
    assert!(again.legacy.is_empty() && again.converted.is_empty());

    // After: the every schedule goes on, one iteration each second.
    let a_id = a.scheduler_id.clone();
    let ran = rust_worker_until(&queue, left(), move |r| of(r, &a_id) >= 2).await;
    assert!(ran.contains_key(&next), "{ran:?} lacks {next}");
    let runs_total: HashMap<String, u32> = ran
        .into_iter()
        .chain([(a.iteration_id.clone(), 1)])
        .collect();
    let chain = assert_chain(
        &c,
        &a.scheduler_id,
        a.next_millis,
        EVERY_STEP_A,
        &[&runs_total],
    )
    .await;
    assert!(chain.len() >= 3, "{chain:?}");
}
