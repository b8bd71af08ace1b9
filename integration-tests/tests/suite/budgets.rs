//! Byte budgets (issue 44 §Byte budgets, docs/operations.md §Memory): a
//! queue through which many times its budget passes, half finished by
//! BullMQ Node 6.7.6 workers and half by EchoMQ's, keeps what it keeps
//! within the budget (Redis's `used_memory`), loses no job that was not
//! finished, makes no call over 10 ms and stays consistent; the removal of a
//! flow's child leaves its parent as BullMQ's own removal does; the events
//! stream is trimmed to its share; a queue without a budget is left alone.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::budget::{BudgetEnforcer, EnforcerSettings};
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    FlowJob, FlowProducer, JobOptions, JobState, NewJob, Queue, WorkerArgs, WorkerMsg,
    WorkerOptions,
};
use echomq_integration_tests::state::{cmd, exists, hash, members};
use echomq_integration_tests::{
    assert_consistent, behave, bullmq, wait_until, NodeChild, NullSupervisor, RedisServer,
};
use fred::prelude::{
    Client, ClientLike, ListInterface, SortedSetsInterface, TransactionInterface,
    Value as FredValue,
};
use fred::types::{ClusterHash, CustomCommand};
use ractor::{Actor, ActorRef};
use serde_json::{json, Value};

const Q: &str = "budgeted";
/// The budget of the mixed-fleet run: `ECHOMQ_BUDGET_BYTES`, default the
/// issue's 64 MiB. (At 3 MiB the jobs of 20 ms, the enforcer's tick, were a
/// tenth of the budget, so the worst reading was the enforcer's lag, not
/// the budget's hold: +24-35 % where 64 MiB reads +5 %.)
fn budget_bytes() -> u64 {
    std::env::var("ECHOMQ_BUDGET_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64 << 20)
}

/// Jobs per phase (one phase Node's, one EchoMQ's): half of
/// `ECHOMQ_BUDGET_JOBS`, default 60,000: three times the budget passes
/// through (`just bench-budget` runs 300,000, fifteen times).
fn per_phase() -> usize {
    std::env::var("ECHOMQ_BUDGET_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(60_000)
        / 2
}
/// Most jobs waiting or active while the producer adds.
const BACKLOG: u64 = 400;

/// A 2 KB job: every 25th fails (kept in `failed`), the rest complete.
fn payload(i: usize) -> Value {
    let mode = if i % 25 == 0 { "fail" } else { "ok" };
    json!({"mode": mode, "reason": "planned", "ret": i, "pad": "x".repeat(2000)})
}

/// Redis's `used_memory` and `used_memory_dataset` (the former less the
/// server's own overhead: client buffers, the script cache, the keyspace
/// tables), from one `INFO memory`.
async fn used_memory(c: &Client) -> (u64, u64) {
    memory_fields(&cmd::<String>(c, "INFO", vec!["memory".into()]).await)
}

fn memory_fields(info: &str) -> (u64, u64) {
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("INFO memory has {name}"))
    };
    (field("used_memory:"), field("used_memory_dataset:"))
}

/// One reading, in one `MULTI`: `INFO memory` and the queue's counts at
/// the same instant. (Read one call after another, a reading paired the
/// memory of one moment with the live jobs of a later one, while the
/// workers finished a chunk: up to 10 % of a 3 MiB budget either way.)
async fn reading(c: &Client, q: &Queue) -> ((u64, u64), u64, u64) {
    let k = q.keys();
    let trx = c.multi();
    let info = CustomCommand::new_static("INFO", ClusterHash::Random, false);
    let _: () = trx.custom(info, vec!["memory"]).await.unwrap();
    for list in [k.wait(), k.active()] {
        let _: () = trx.llen(list).await.unwrap();
    }
    for set in [k.delayed(), k.prioritized(), k.completed(), k.failed()] {
        let _: () = trx.zcard(set).await.unwrap();
    }
    let replies: Vec<FredValue> = trx.exec(true).await.unwrap();
    let info = replies[0].as_string().expect("INFO memory");
    let n = |i: usize| replies[i].as_u64().expect("a count");
    let live = n(1) + n(2) + n(3) + n(4);
    (memory_fields(&info), live, n(5) + n(6))
}

/// The exact bytes of what the queue keeps, walking every finished job (a
/// test may; the enforcer samples).
async fn kept_bytes_exactly(c: &Client, q: &Queue) -> u64 {
    let mut total = 0u64;
    for set in [q.keys().completed(), q.keys().failed()] {
        let n: Option<u64> = cmd(
            c,
            "MEMORY",
            vec!["USAGE".into(), set.clone(), "SAMPLES".into(), "0".into()],
        )
        .await;
        total += n.unwrap_or(0);
        for id in c
            .zrange::<Vec<String>, _, _, _>(set, 0, -1, None, false, None, false)
            .await
            .unwrap()
        {
            let job = q.keys().job(&id);
            let n: Option<u64> = cmd(
                c,
                "MEMORY",
                vec!["USAGE".into(), job.clone(), "SAMPLES".into(), "0".into()],
            )
            .await;
            total += n.unwrap_or(0);
            for sub in [":logs", ":dependencies", ":processed"] {
                let n: Option<u64> =
                    cmd(c, "MEMORY", vec!["USAGE".into(), format!("{job}{sub}")]).await;
                total += n.unwrap_or(0);
            }
        }
    }
    let n: Option<u64> = cmd(
        c,
        "MEMORY",
        vec![
            "USAGE".into(),
            q.keys().events(),
            "SAMPLES".into(),
            "0".into(),
        ],
    )
    .await;
    total + n.unwrap_or(0)
}

async fn removed_by_budget(c: &Client, q: &Queue) -> u64 {
    hash(c, &q.keys().budget())
        .await
        .get("removed")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One reading of Redis's `used_memory` (over the baseline) and of the
/// jobs not finished yet.
#[derive(Clone, Copy, Debug)]
struct Sample {
    used: i64,
    dataset: i64,
    live: u64,
    /// Jobs in `completed` and `failed`.
    kept: u64,
}

/// Adds `range`'s jobs a chunk at a time, keeping at most [`BACKLOG`] of
/// them unfinished, and reads `used_memory` between chunks and while the
/// workers finish; answers the ids and the readings.
async fn produce(
    q: &Queue,
    c: &Client,
    range: std::ops::Range<usize>,
    baseline: (u64, u64),
) -> (Vec<String>, Vec<Sample>) {
    let mut ids = Vec::new();
    let mut samples = Vec::new();
    let sample = async |samples: &mut Vec<Sample>| {
        let ((used, dataset), live, kept) = reading(c, q).await;
        samples.push(Sample {
            kept,
            used: used as i64 - baseline.0 as i64,
            dataset: dataset as i64 - baseline.1 as i64,
            live,
        });
        live
    };
    for chunk in range.collect::<Vec<_>>().chunks(100) {
        wait_until(
            "the workers to keep up",
            Duration::from_secs(20),
            async || sample(&mut samples).await < BACKLOG,
        )
        .await;
        let jobs = chunk
            .iter()
            .map(|i| NewJob {
                name: "j".into(),
                data: payload(*i),
                options: JobOptions::new(),
            })
            .collect();
        ids.extend(q.add_bulk(jobs).await.unwrap());
    }
    wait_until("every job to finish", Duration::from_secs(20), async || {
        sample(&mut samples).await == 0
    })
    .await;
    (ids, samples)
}

/// One SLOWLOG entry.
#[derive(Debug)]
struct Slow {
    /// Unix time (s) it was logged.
    at: i64,
    /// Its duration in µs.
    micros: i64,
    /// The command and its first arguments.
    words: Vec<String>,
}

async fn slowlog(c: &Client) -> Vec<Slow> {
    use fred::prelude::Value as V;
    let entries: Vec<V> = cmd(c, "SLOWLOG", vec!["GET".into(), "-1".into()]).await;
    entries
        .into_iter()
        .filter_map(|e| {
            let V::Array(parts) = e else { return None };
            let int = |i: usize| match parts.get(i) {
                Some(V::Integer(n)) => Some(*n),
                _ => None,
            };
            let words = match parts.get(3) {
                Some(V::Array(w)) => w.iter().filter_map(V::as_string).collect(),
                _ => Vec::new(),
            };
            Some(Slow {
                at: int(1)?,
                micros: int(2)?,
                words,
            })
        })
        .collect()
}

/// The calls over 10 ms that the server's own stall does not explain. A
/// 2-core machine shared with compiles and other tests deschedules
/// redis-server now and then, and a stall lengthens whatever runs; SLOWLOG
/// times a command's execution by the wall clock, not by its work. A call is
/// excused when:
/// - another call that also took more than 5 ms within a second of it — of
///   another command or script, not one of the test's own reads — shows the
///   process starved then; or
/// - it is the one call of its kind (command, and script for `EVALSHA`) over
///   5 ms in the whole run: work that grows with the data shows in more than
///   one call of a kind that runs hundreds of times, while a stall hits one
///   call (a BullMQ `moveToFinished` took 11.7 ms once in a CI run, against
///   well under 1 ms every other time).
///
/// Any other call over 10 ms fails.
fn over_10_ms(slow: &[Slow]) -> Vec<&Slow> {
    const OWN_READS: [&str; 7] = [
        "INFO", "KEYS", "SLOWLOG", "MEMORY", "CLIENT", "ZRANGE", "EXISTS",
    ];
    let what = |e: &Slow| e.words.iter().take(2).cloned().collect::<Vec<_>>();
    let over_5_ms: Vec<&Slow> = slow.iter().filter(|e| e.micros > 5_000).collect();
    let witnesses: Vec<&Slow> = over_5_ms
        .iter()
        .copied()
        .filter(|e| {
            e.words
                .first()
                .is_some_and(|w| !OWN_READS.contains(&w.to_ascii_uppercase().as_str()))
        })
        .collect();
    let over: Vec<&Slow> = slow.iter().filter(|e| e.micros > 10_000).collect();
    for e in &over {
        eprintln!("a call over 10 ms: {} µs, {:?}", e.micros, what(e));
    }
    over.into_iter()
        .filter(|e| {
            !witnesses
                .iter()
                .any(|w| (w.at - e.at).abs() <= 1 && what(w) != what(e))
        })
        .filter(|e| over_5_ms.iter().filter(|o| what(o) == what(e)).count() > 1)
        .collect()
}

#[test]
fn a_lone_slow_call_is_a_stall_and_a_slow_kind_is_not() {
    let call = |at: i64, micros: i64, words: &[&str]| Slow {
        at,
        micros,
        words: words.iter().map(|w| w.to_string()).collect(),
    };
    let finish = ["evalsha", "f1"];
    let enforce = ["evalsha", "e1"];
    // One call of its kind over 5 ms: a stall.
    let lone = [call(10, 11_700, &finish), call(30, 3_000, &finish)];
    assert!(over_10_ms(&lone).is_empty());
    // Two of a kind over 5 ms, one over 10 ms, seconds apart: its work.
    let kind = [call(10, 12_000, &enforce), call(40, 6_000, &enforce)];
    assert_eq!(over_10_ms(&kind).len(), 1);
    // The same, with another command's long call in the same second: a stall.
    let witnessed = [
        call(10, 12_000, &enforce),
        call(40, 6_000, &enforce),
        call(11, 7_000, &finish),
    ];
    assert!(over_10_ms(&witnessed).is_empty());
    // The test's own reads witness nothing.
    let own = [
        call(10, 12_000, &enforce),
        call(40, 6_000, &enforce),
        call(10, 7_000, &["INFO", "memory"]),
    ];
    assert_eq!(over_10_ms(&own).len(), 1);
}

async fn rust_worker(q: &Queue, seen: Arc<Mutex<Vec<String>>>) -> ActorRef<WorkerMsg> {
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(move |job: JobContext| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(job.id().to_owned());
            behave(&job).await
        }
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(8)
        .drain_delay(Duration::from_millis(200));
    let (worker, _lm) = echomq_integration_tests::spawn_worker(sup.get_cell(), args)
        .await
        .unwrap();
    worker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_whoever_finishes_the_jobs() {
    let redis = RedisServer::start_with(&[
        "--slowlog-log-slower-than",
        "1000",
        "--slowlog-max-len",
        "100000",
    ]);
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let (budget, per_phase) = (budget_bytes(), per_phase());
    q.set_byte_budget(budget).await.unwrap();
    let enforcer = BudgetEnforcer::start(
        &conn,
        Q,
        EnforcerSettings::default().interval(Duration::from_millis(20)),
    )
    .await
    .unwrap();

    // Phase 1: BullMQ Node 6.7.6 workers finish the jobs.
    // One `start` line per run (a summary at exit is too big to count on
    // at full size).
    let mut node = NodeChild::spawn(
        "worker.js",
        &redis.url(),
        Q,
        json!({"concurrency": 8, "verbose": true}),
    );
    // Redis 7 keeps a latency histogram (about 18 KB) per command name from
    // its first call until CONFIG RESETSTAT: server memory, not the queue's,
    // and 0.7-0.9 MB of this run's commands (docs/operations.md §Memory).
    let _: String = cmd(
        &c,
        "CONFIG",
        vec!["SET".into(), "latency-tracking".into(), "no".into()],
    )
    .await;
    let baseline = used_memory(&c).await;
    let (node_added, mut samples) = produce(&q, &c, 0..per_phase, baseline).await;
    let mut node_runs: HashMap<String, u64> = HashMap::new();
    wait_until(
        "a start line of the Node worker for each of its jobs",
        Duration::from_secs(30),
        async || {
            node_runs.clear();
            for line in node.drain() {
                if line["ev"] == "start" {
                    let id = line["id"].as_str().unwrap_or_default().to_owned();
                    *node_runs.entry(id).or_default() += 1;
                }
            }
            node_runs.len() >= node_added.len()
        },
    )
    .await;
    node.finish();

    // Phase 2: EchoMQ workers finish them.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let worker = rust_worker(&q, seen.clone()).await;
    let (rust_added, more) = produce(&q, &c, per_phase..2 * per_phase, baseline).await;
    samples.extend(more);
    worker.stop(None);

    // The enforcer brings what is kept back under the budget.
    wait_until(
        "the queue under its budget",
        Duration::from_secs(10),
        async || {
            let b = q.byte_budget().await.unwrap();
            b.used <= budget
        },
    )
    .await;
    let stats = enforcer.stats();
    enforcer.close().await;
    // Within budget + live jobs + 10 %: whole-server used_memory over the
    // baseline taken before any job was added, a live job counted at what a
    // finished one costs (the most it holds).
    let newest: Vec<String> = conn
        .pool()
        .zrange(q.keys().completed(), -1, -1, None, false, None, false)
        .await
        .unwrap();
    let job_bytes: u64 = cmd::<Option<u64>>(
        &c,
        "MEMORY",
        vec![
            "USAGE".into(),
            q.keys().job(&newest[0]),
            "SAMPLES".into(),
            "0".into(),
        ],
    )
    .await
    .unwrap();
    // Over budget + live jobs, as a fraction of it: the server's whole
    // used_memory, and its dataset (used_memory less client buffers, the
    // script cache and the keyspace tables).
    let over = |s: &Sample, bytes: i64| {
        let allowed = (budget + s.live * job_bytes) as f64;
        (bytes as f64 - allowed) / allowed
    };
    let worst_used = samples
        .iter()
        .map(|s| over(s, s.used))
        .fold(f64::MIN, f64::max);
    let worst_dataset = samples
        .iter()
        .map(|s| over(s, s.dataset))
        .fold(f64::MIN, f64::max);
    let at_worst = samples
        .iter()
        .max_by(|a, b| over(a, a.dataset).total_cmp(&over(b, b.dataset)))
        .unwrap();
    eprintln!(
        "at the worst reading: dataset {} B over the baseline, {} jobs live, {} finished jobs kept \
         ({} B at {job_bytes} B each; the budget fits {})",
        at_worst.dataset,
        at_worst.live,
        at_worst.kept,
        at_worst.kept * job_bytes,
        budget / job_bytes
    );
    let exact = kept_bytes_exactly(&c, &q).await;
    let estimate = q.byte_budget().await.unwrap();
    eprintln!(
        "budget {budget} B, {} jobs of {job_bytes} B kept, {} readings: worst used_memory {:+.1} % \
         of budget + live jobs, worst dataset {:+.1} %; kept at the end exactly {exact} B, \
         estimated {} B; removed {}, trimmed {}, enforcer calls {}",
        2 * per_phase,
        samples.len(),
        worst_used * 100.0,
        worst_dataset * 100.0,
        estimate.used,
        stats.removed,
        stats.trimmed,
        stats.calls
    );
    // The bound: whole-server used_memory within budget + live
    // jobs + 10 %, and the dataset (used_memory less the server's own
    // overhead) too.
    assert!(
        worst_dataset <= 0.10,
        "the dataset went {:.1} % over budget + live jobs",
        worst_dataset * 100.0
    );
    assert!(
        worst_used <= 0.10,
        "used_memory went {:.1} % over budget + live jobs",
        worst_used * 100.0
    );
    assert!(exact <= budget + budget / 10, "kept {exact} B exactly");
    let error = (estimate.used as f64 - exact as f64).abs() / exact as f64;
    assert!(error < 0.15, "estimate {} vs exact {exact}", estimate.used);

    // Every id accounted: each ran exactly once, by Node or by EchoMQ, so
    // none was removed before it finished; what is not kept was removed by
    // the budget, and the budget counted exactly those.
    let rust_seen = seen.lock().unwrap().clone();
    let added: Vec<String> = node_added.iter().chain(&rust_added).cloned().collect();
    assert_eq!(added.len(), 2 * per_phase);
    assert!(node_runs.values().all(|n| *n == 1), "a Node job ran twice");
    let rust_set: HashSet<&String> = rust_seen.iter().collect();
    assert_eq!(rust_set.len(), rust_seen.len(), "an EchoMQ job ran twice");
    for id in &node_added {
        assert_eq!(node_runs.get(id), Some(&1), "job {id} of the Node phase");
    }
    for id in &rust_added {
        assert!(rust_set.contains(id), "job {id} of the EchoMQ phase");
    }
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.pending(), 0);
    let removed = removed_by_budget(&c, &q).await;
    // The budget did remove (the events stayed under their share here; the
    // trimming has its own test).
    assert!(removed > 0, "the budget removed nothing");
    assert_eq!(
        counts.completed + counts.failed + removed,
        added.len() as u64,
        "kept {} + {} and removed {removed}",
        counts.completed,
        counts.failed
    );
    let mut kept = 0u64;
    for chunk in added.chunks(1000) {
        let keys: Vec<String> = chunk.iter().map(|id| q.keys().job(id)).collect();
        let n: u64 = cmd(&c, "EXISTS", keys).await;
        kept += n;
    }
    let gone = added.len() as u64 - kept;
    assert_eq!(
        gone, removed,
        "ids without a hash = jobs the budget removed"
    );
    assert!(counts.failed > 0, "failed jobs kept too");

    // No call over 10 ms, unless the server itself stalled then (see
    // `over_10_ms`).
    let slow = slowlog(&c).await;
    let sha = echomq::protocol::scripts::ScriptId::EnforceBudget
        .def()
        .unwrap()
        .sha1;
    let enforce: Vec<&Slow> = slow
        .iter()
        .filter(|e| e.words.get(1).map(String::as_str) == Some(sha))
        .collect();
    eprintln!(
        "enforceBudget calls over 1 ms: {} of {}, longest {} µs",
        enforce.len(),
        stats.calls,
        enforce.iter().map(|e| e.micros).max().unwrap_or(0)
    );
    let over = over_10_ms(&slow);
    assert!(over.is_empty(), "calls over 10 ms: {over:?}");
    assert_consistent(&conn, Q).await;
}

/// A flow's children finished by BullMQ Node: the budget's removal of a
/// completed child leaves the parent's `:processed` as BullMQ's retention
/// does, and its removal of a failed child still pending for its parent
/// frees the parent exactly as BullMQ Node's own `queue.remove` does on a
/// twin flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_flows_child_leaves_the_parent_as_bullmq_does() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let fp = FlowProducer::new(&conn);
    let flow = |parent_q: &str, child_q: &str| {
        let job = |id: &str, q: &str, data: Value| {
            FlowJob::new(id, q, data).options(JobOptions::new().job_id(id))
        };
        job("p", parent_q, json!({}))
            .child(job("ok1", child_q, json!({"ret": 1})))
            .child(job("ok2", child_q, json!({"ret": 2})))
            .child(job("bad", child_q, json!({"mode": "fail", "reason": "no"})))
    };
    // Twin A: the budget removes; twin B: Node's queue.remove.
    fp.add(flow("pa", "ca")).await.unwrap();
    fp.add(flow("pb", "cb")).await.unwrap();
    for child_q in ["ca", "cb"] {
        let node = NodeChild::spawn(
            "worker.js",
            &redis.url(),
            child_q,
            json!({"concurrency": 2}),
        );
        let q = Queue::new(&conn, child_q).await.unwrap();
        wait_until(
            "the children to finish",
            Duration::from_secs(20),
            async || {
                let c = q.counts().await.unwrap();
                c.completed == 2 && c.failed == 1
            },
        )
        .await;
        node.finish();
    }
    let pa = Queue::new(&conn, "pa").await.unwrap();
    let ca = Queue::new(&conn, "ca").await.unwrap();
    let pb = Queue::new(&conn, "pb").await.unwrap();
    let cb = Queue::new(&conn, "cb").await.unwrap();
    // The failed child holds its parent (BullMQ 6.7.6 without a rule).
    assert_eq!(
        pa.get_job_state("p").await.unwrap(),
        JobState::WaitingChildren
    );
    assert_eq!(
        pb.get_job_state("p").await.unwrap(),
        JobState::WaitingChildren
    );

    // A: a budget of one byte on the children's queue removes all three.
    ca.set_byte_budget(1).await.unwrap();
    let enforcer = BudgetEnforcer::start(&conn, "ca", EnforcerSettings::default())
        .await
        .unwrap();
    wait_until(
        "the budget to remove the children",
        Duration::from_secs(10),
        async || {
            let c = ca.counts().await.unwrap();
            c.completed + c.failed == 0
        },
    )
    .await;
    enforcer.close().await;
    // B: BullMQ Node removes the failed child; retention would take the
    // completed ones the same way (removeJob, no hard removal).
    let removed = bullmq(
        "ops",
        &redis.url(),
        "cb",
        json!({"ops": [["remove", "bad"]]}),
    );
    assert_eq!(removed, json!([1]));

    for (parent, child_q) in [(&pa, &ca), (&pb, &cb)] {
        assert!(!exists(&c, &child_q.keys().job("bad")).await);
        assert_eq!(
            parent.get_job_state("p").await.unwrap(),
            JobState::Waiting,
            "the parent of {} moves on once its last pending child is gone",
            child_q.name()
        );
        assert!(
            members(&c, &format!("{}:dependencies", parent.keys().job("p")))
                .await
                .is_empty()
        );
    }
    // :processed as the children left it, in both twins.
    let processed = |parent: &Queue, child_q: &Queue| {
        let (pk, cq) = (parent.keys().job("p"), child_q.keys().clone());
        let c = c.clone();
        async move {
            let h = hash(&c, &format!("{pk}:processed")).await;
            let mut v: Vec<(String, String)> = h
                .into_iter()
                .map(|(k, v)| (k.replace(cq.prefix_key(), "{C}"), v))
                .collect();
            v.sort();
            v
        }
    };
    let a = processed(&pa, &ca).await;
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a, processed(&pb, &cb).await);
    // The budget removed the completed children too; their parent kept
    // their return values.
    assert!(!exists(&c, &ca.keys().job("ok1")).await);
    assert_consistent(&conn, "pa").await;
    assert_consistent(&conn, "ca").await;
}

/// A few huge events (the 229 MiB stream of 2,042 events of bullmq#2734, in
/// small): over the budget, the stream is trimmed to its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_stream_is_trimmed_to_its_share() {
    let (redis, conn, q) = RedisServer::with_queue("ev").await;
    let c = redis.client().await;
    let big = "y".repeat(40_000);
    for i in 0..60 {
        let _: String = cmd(
            &c,
            "XADD",
            vec![
                q.keys().events(),
                "*".into(),
                "event".into(),
                "progress".into(),
                "jobId".into(),
                i.to_string(),
                "data".into(),
                big.clone(),
            ],
        )
        .await;
    }
    let before = q.byte_budget().await.unwrap();
    assert!(before.events_bytes > 2 << 20, "{before:?}");
    let budget = 1u64 << 20;
    q.set_byte_budget(budget).await.unwrap();
    let enforcer = BudgetEnforcer::start(&conn, "ev", EnforcerSettings::default())
        .await
        .unwrap();
    wait_until("the stream trimmed", Duration::from_secs(10), async || {
        enforcer.stats().trimmed > 0
    })
    .await;
    enforcer.close().await;
    let n: u64 = cmd(&c, "MEMORY", vec!["USAGE".into(), q.keys().events()]).await;
    // Its share (25 %) and at most one entry more.
    assert!(n <= budget / 4 + 45_000, "events {n} B");
    let after = q.byte_budget().await.unwrap();
    assert!(after.trimmed > 0 && after.used <= budget, "{after:?}");
}

/// A queue without a budget: the enforcer only looks (the dormant tick),
/// and nothing is removed however much the queue keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_budget_nothing_is_removed() {
    let (redis, conn, q) = RedisServer::with_queue("free").await;
    let c = redis.client().await;
    for i in 0..20 {
        q.add("j", &payload(i), JobOptions::new()).await.unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let worker = rust_worker(&q, seen.clone()).await;
    wait_until("the jobs to finish", Duration::from_secs(10), async || {
        q.counts().await.unwrap().pending() == 0
    })
    .await;
    worker.stop(None);
    let enforcer = BudgetEnforcer::start(&conn, "free", EnforcerSettings::default())
        .await
        .unwrap();
    wait_until("two dormant ticks", Duration::from_secs(5), async || {
        enforcer.stats().calls >= 2
    })
    .await;
    let stats = enforcer.stats();
    enforcer.close().await;
    assert_eq!((stats.max, stats.removed, stats.trimmed), (0, 0, 0));
    assert!(
        !exists(&c, &q.keys().budget()).await,
        "a dormant tick writes nothing"
    );
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.completed + counts.failed, 20);
    let b = q.byte_budget().await.unwrap();
    assert_eq!(b.max, None);
    assert!(b.used > 20 * 2000, "{b:?}");
}
