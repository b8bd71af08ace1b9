//! Issue 16, proven both ways with the real BullMQ 6.7.0 Node client on one
//! queue: deduplication, global limits, rate limiting, manual processing
//! and the getters.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{
    processor_fn, Fetched, JobContext, ManualJob, ManualParking, ManualWorker, ProcessError,
};
use echomq::WorkerMsg;
use echomq::{
    flow_producer::ParentRef, Deduplication, FlowJob, FlowProducer, JobOptions, JobState, NewJob,
    Queue, RateLimit, WorkerArgs, WorkerOptions,
};
use echomq_integration_tests::{
    bullmq, bullmq_work_until, events, timeline, wait_until, NodeChild, NullSupervisor, RedisServer,
};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

use crate::limits_support;
use echomq_integration_tests::timeline::log_every_command;
use limits_support::{assert_window_budget, redis_peak, redis_starts, timed_worker, Ran};

const Q: &str = "par";

/// Runs Node ops (`driver.js ops`) and returns their results.
fn node(url: &str, ops: Json) -> Vec<Json> {
    match bullmq("ops", url, Q, json!({ "ops": ops })) {
        Json::Array(v) => v,
        other => panic!("ops answered {other}"),
    }
}

async fn hash(c: &Client, key: &str) -> std::collections::HashMap<String, String> {
    c.hgetall(key).await.unwrap()
}

#[tokio::test]
async fn deduplication_is_one_protocol_for_both_clients() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let de = json!({"id": "N", "ttl": 60000, "extend": true});
    let rust_de = || {
        Deduplication::new("N")
            .ttl(Duration::from_millis(60_000))
            .extend(true)
    };

    // Node owns N; a Rust add with the same settings is dropped in its favour.
    let r = node(&url, json!([["add", "a", {"v": 1}, {"deduplication": de}]]));
    assert_eq!(r, vec![json!("1")]);
    assert_eq!(
        q.dedup()
            .get_deduplication_job_id("N")
            .await
            .unwrap()
            .as_deref(),
        Some("1")
    );
    let dropped = q
        .add(
            "a",
            &json!({"v": 2}),
            JobOptions::new().deduplication(rust_de()),
        )
        .await
        .unwrap();
    assert_eq!(dropped, "1");

    // Rust owns R; Node's add is dropped and Node reads the owner.
    let r_id = q
        .add(
            "b",
            &json!({"v": 3}),
            JobOptions::new().deduplication(
                Deduplication::new("R")
                    .ttl(Duration::from_millis(60_000))
                    .extend(true),
            ),
        )
        .await
        .unwrap();
    assert_eq!(r_id, "3");
    let r = node(
        &url,
        json!([
            ["add", "b", {"v": 4}, {"deduplication": {"id": "R", "ttl": 60000, "extend": true}}],
            ["dedup-job-id", "R"],
            ["dedup-job-id", "N"]
        ]),
    );
    assert_eq!(r, vec![json!("3"), json!("3"), json!("1")]);

    // The stored forms are the same: `de` in opts, `deid` on the hash.
    let node_job = hash(&c, "emq:par:1").await;
    let rust_job = hash(&c, "emq:par:3").await;
    let opts = |h: &std::collections::HashMap<String, String>| -> Json {
        serde_json::from_str(&h["opts"]).unwrap()
    };
    assert_eq!(opts(&node_job)["de"], de);
    assert_eq!(
        opts(&rust_job)["de"],
        json!({"id": "R", "ttl": 60000, "extend": true})
    );
    assert_eq!(node_job["deid"], "N");
    assert_eq!(rust_job["deid"], "R");
    let read = bullmq("read-jobs", &url, Q, json!({"ids": ["3"]}));
    assert_eq!(
        read["3"]["opts"]["deduplication"],
        json!({"id": "R", "ttl": 60000, "extend": true}),
        "Node reads the Rust job's deduplication under its public name"
    );

    // The `deduplicated` events of both dropped adds have the same fields.
    let ev: Vec<Vec<(String, String)>> = events(&c, "emq:par:events")
        .await
        .into_iter()
        .filter(|(n, _)| n == "deduplicated")
        .map(|(_, f)| f)
        .collect();
    let pairs = |a: &str, b: &str, d: &str| {
        vec![
            ("jobId".to_string(), a.to_string()),
            ("deduplicationId".to_string(), b.to_string()),
            ("deduplicatedJobId".to_string(), d.to_string()),
        ]
    };
    assert_eq!(ev, vec![pairs("1", "N", "2"), pairs("3", "R", "4")]);

    // Each side frees the other's key through the owner-checked script…
    let r = node(
        &url,
        json!([["job-remove-dedup-key", "3"], ["dedup-job-id", "R"]]),
    );
    assert_eq!(r, vec![json!(true), Json::Null]);
    assert!(q.dedup().remove_job_deduplication_key("1").await.unwrap());
    assert_eq!(node(&url, json!([["dedup-job-id", "N"]])), vec![Json::Null]);

    // …and through the queue-wide delete.
    q.add(
        "c",
        &json!(0),
        JobOptions::new().deduplication(Deduplication::new("Z")),
    )
    .await
    .unwrap();
    assert_eq!(
        node(&url, json!([["remove-dedup-key", "Z"]])),
        vec![json!(1)]
    );
    node(
        &url,
        json!([["add", "c", {}, {"deduplication": {"id": "Y"}}]]),
    );
    assert!(q.dedup().remove_deduplication_key("Y").await.unwrap());
    assert_eq!(node(&url, json!([["dedup-job-id", "Y"]])), vec![Json::Null]);
}

/// The same adds, one side each on its own server, leave byte-identical job
/// options and the same key expiry.
#[tokio::test]
async fn deduplicated_adds_store_byte_identical_options() {
    let t = 1_700_000_000_000u64;
    for de in [
        json!({"id": "A"}),
        json!({"id": "A", "ttl": 5000}),
        json!({"id": "A", "ttl": 5000, "extend": true}),
        json!({"id": "A", "ttl": 5000, "extend": true, "replace": true}),
        json!({"id": "A", "keepLastIfActive": true}),
    ] {
        let node_redis = RedisServer::start();
        node(
            &node_redis.url(),
            json!([["add", "j", {"x": 1}, {"deduplication": de, "timestamp": t}]]),
        );
        let rust_redis = RedisServer::start();
        let conn = rust_redis.connect().await;
        let q = Queue::new(&conn, Q).await.unwrap();
        let m = de.as_object().unwrap();
        let mut d = Deduplication::new("A");
        d.ttl = m.get("ttl").and_then(Json::as_u64);
        d.extend = m.contains_key("extend");
        d.replace = m.contains_key("replace");
        d.keep_last_if_active = m.contains_key("keepLastIfActive");
        q.add(
            "j",
            &json!({"x": 1}),
            JobOptions::new().deduplication(d).timestamp(t),
        )
        .await
        .unwrap();
        let (nc, rc) = (node_redis.client().await, rust_redis.client().await);
        let (nh, rh) = (hash(&nc, "emq:par:1").await, hash(&rc, "emq:par:1").await);
        assert_eq!(nh["opts"], rh["opts"], "opts of {de}");
        assert_eq!(nh["deid"], rh["deid"]);
        let (nt, rt): (i64, i64) = (
            nc.pttl("emq:par:de:A").await.unwrap(),
            rc.pttl("emq:par:de:A").await.unwrap(),
        );
        assert_eq!(nt.signum(), rt.signum(), "expiry of {de}: {nt} vs {rt}");
    }
}

#[tokio::test]
async fn global_limits_written_by_one_client_are_read_by_the_other() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();

    q.limits().set_global_concurrency(3).await.unwrap();
    q.limits()
        .set_global_rate_limit(RateLimit {
            max: 7,
            duration: Duration::from_millis(900),
        })
        .await
        .unwrap();
    let r = node(
        &url,
        json!([
            ["get-global-concurrency"],
            ["get-global-rate-limit"],
            ["is-maxed"]
        ]),
    );
    assert_eq!(
        r,
        vec![json!(3), json!({"max": 7, "duration": 900}), json!(false)]
    );
    let _: () = c
        .lpush("emq:par:active", vec!["a", "b", "c"])
        .await
        .unwrap();
    assert_eq!(node(&url, json!([["is-maxed"]])), vec![json!(true)]);
    assert!(q.limits().is_maxed().await.unwrap());

    node(
        &url,
        json!([
            ["set-global-concurrency", 5],
            ["set-global-rate-limit", 4, 2500]
        ]),
    );
    assert_eq!(q.limits().get_global_concurrency().await.unwrap(), Some(5));
    assert_eq!(
        q.limits().get_global_rate_limit().await.unwrap(),
        Some(RateLimit {
            max: 4,
            duration: Duration::from_millis(2500)
        })
    );
    assert!(!q.limits().is_maxed().await.unwrap());
    node(
        &url,
        json!([["remove-global-concurrency"], ["remove-global-rate-limit"]]),
    );
    assert_eq!(q.limits().get_global_concurrency().await.unwrap(), None);
    assert_eq!(q.limits().get_global_rate_limit().await.unwrap(), None);

    // rateLimit / getRateLimitTtl across clients.
    node(&url, json!([["rate-limit", 2000]]));
    let ttl = q.limits().rate_limit_ttl(Some(1)).await.unwrap();
    assert!(ttl > Duration::from_millis(1500), "{ttl:?}");
    let _: () = c.del("emq:par:limiter").await.unwrap();
    q.limits()
        .rate_limit(Duration::from_millis(2000))
        .await
        .unwrap();
    let r = node(&url, json!([["rate-limit-ttl", 1], ["rate-limit-ttl"]]));
    // Bounded by the window and by the PTTL read once Node has answered: how
    // long Node takes to start does not matter.
    let after: i64 = c.pttl("emq:par:limiter").await.unwrap();
    assert!(after > 0, "the limit still runs: {after}");
    for ms in &r {
        let ms = ms.as_i64().unwrap();
        assert!(ms >= after && ms <= 2000, "{r:?}, PTTL after: {after}");
    }
    let mut keyspace_a: Vec<String> = c.hkeys("emq:par:meta").await.unwrap();
    keyspace_a.sort();
    assert_eq!(keyspace_a, vec!["opts.maxLenEvents", "version"]);
}

/// A fleet of Node workers and one Rust worker on one queue, run in three
/// phases so that each client's share of the claim is proven, not won in a
/// race: the Rust worker alone, then the Node workers alone, then both at
/// once. Timing is checked on Redis's clock over all three phases.
struct Fleet {
    /// Jobs added in each phase: Rust alone, Node alone, both.
    per_phase: [usize; 3],
    /// How long each job sleeps.
    sleep_ms: u64,
    /// How many Node workers.
    node_count: usize,
    /// Node `Worker` options.
    node_opts: Json,
    /// The Rust worker's options.
    rust_opts: WorkerOptions,
}

fn fleet_jobs(phase: usize, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob {
            name: "j".into(),
            data: json!({ "phase": phase, "i": i }),
            options: JobOptions::new(),
        })
        .collect()
}

/// Node workers (`driver.js work-until`) in a blocking task, each named
/// `node-<i>`, until every id of `finished` is finished (by anyone) or every
/// id of `mine` was theirs.
fn node_fleet(
    url: &str,
    fleet: &Fleet,
    mine: &[String],
    finished: &[String],
) -> tokio::task::JoinHandle<echomq_integration_tests::NodeRun> {
    let args = json!({
        "ids": mine, "finished": finished, "deadlineMs": 60_000,
        "count": fleet.node_count, "name": "node", "opts": fleet.node_opts,
        "sleepMs": fleet.sleep_ms,
    });
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || bullmq_work_until(&url, Q, args))
}

/// Runs a [`Fleet`] on `q`: every job runs once, each phase's by its side.
async fn mixed_fleet(q: &Queue, url: &str, fleet: Fleet) {
    let [n1, n2, n3] = fleet.per_phase;
    let ran: Ran = Default::default();
    let completed = |n: usize| {
        let q = q.clone();
        async move { q.counts().await.unwrap().completed == n as u64 }
    };

    // 1: the Rust worker alone runs every job of its phase.
    let w = timed_worker(q, fleet.rust_opts.clone(), fleet.sleep_ms, ran.clone()).await;
    let phase1 = q.add_bulk(fleet_jobs(1, n1)).await.unwrap();
    wait_until("phase 1 completed", Duration::from_secs(60), async || {
        completed(n1).await
    })
    .await;
    w.close().await;
    let mut by_rust = ran.lock().unwrap().clone();
    by_rust.sort();
    let mut want = phase1.clone();
    want.sort();
    assert_eq!(by_rust, want, "phase 1: Rust ran every job");

    // 2: the Node workers alone; the Rust worker is closed.
    let phase2 = q.add_bulk(fleet_jobs(2, n2)).await.unwrap();
    let solo = node_fleet(url, &fleet, &phase2, &[]).await.unwrap();
    let mut by_node = solo.ids();
    by_node.sort();
    let mut want = phase2.clone();
    want.sort();
    assert!(
        solo.done && by_node == want,
        "phase 2: Node ran every job: {solo:?}"
    );

    // 3: both at once. The jobs are added once Node's workers are up (listed
    // by getWorkers).
    let w = timed_worker(q, fleet.rust_opts.clone(), fleet.sleep_ms, ran.clone()).await;
    let ids: Vec<String> = (n1..n1 + n2 + n3).map(|i| (i + 1).to_string()).collect();
    let phase3_ids = ids[n2..].to_vec();
    let node_run = node_fleet(url, &fleet, &[], &phase3_ids);
    let names: Vec<String> = (0..fleet.node_count).map(|i| format!("node-{i}")).collect();
    wait_until(
        "the Node workers are up",
        Duration::from_secs(30),
        async || {
            let up: Vec<Option<String>> = q
                .get_workers()
                .await
                .unwrap()
                .into_iter()
                .map(|w| w.worker_name)
                .collect();
            names.iter().all(|n| up.contains(&Some(n.clone())))
        },
    )
    .await;
    let phase3 = q.add_bulk(fleet_jobs(3, n3)).await.unwrap();
    assert_eq!(phase3, phase3_ids, "ids follow the adds");
    let shared = node_run.await.unwrap();
    assert!(shared.done, "phase 3 not finished: {shared:?}");
    w.close().await;

    let rust = ran.lock().unwrap().clone();
    let mut node = solo.ids();
    node.extend(shared.ids());
    let mut all: Vec<String> = rust.iter().chain(&node).cloned().collect();
    all.sort();
    let mut want: Vec<String> = phase1
        .iter()
        .chain(&phase2)
        .chain(&phase3)
        .cloned()
        .collect();
    want.sort();
    assert_eq!(all, want, "every job ran once, by one side");
    // Who won phase 3's races is luck: reported, not asserted.
    let in_3 = |ids: &[String]| ids.iter().filter(|id| phase3.contains(id)).count();
    eprintln!(
        "fleet: phase 3 shared as Rust {} / Node {}",
        in_3(&rust),
        in_3(&node)
    );
}

/// Each run gives the wider concurrency to one side, which alone would go
/// over the cap: it runs alone in its phase, and the cap holds there and
/// when both run. The stays in `active` are read from the events stream.
#[tokio::test]
async fn rust_and_node_workers_share_the_global_concurrency() {
    for rust_is_wide in [true, false] {
        let redis = RedisServer::start();
        let url = redis.url();
        let conn = redis.connect().await;
        let c = redis.client().await;
        let q = Queue::new(&conn, Q).await.unwrap();
        // Set by one client, honoured by both.
        if rust_is_wide {
            q.limits().set_global_concurrency(2).await.unwrap();
        } else {
            node(&url, json!([["set-global-concurrency", 2]]));
        }
        let (node_c, rust_c) = if rust_is_wide { (1, 4) } else { (4, 1) };
        let fleet = Fleet {
            per_phase: [8, 8, 8],
            sleep_ms: 100,
            node_count: 1,
            node_opts: json!({"concurrency": node_c}),
            rust_opts: WorkerOptions::default()
                .concurrency(rust_c)
                .drain_delay(Duration::from_millis(200)),
        };
        mixed_fleet(&q, &url, fleet).await;
        let peak = redis_peak(&c, &q).await;
        assert!(
            peak <= 2,
            "rust wide {rust_is_wide}: {peak} jobs active at once, over the global concurrency of 2"
        );
        assert_eq!(peak, 2, "rust wide {rust_is_wide}: the cap was reached");
    }
}

#[tokio::test]
async fn rust_and_node_workers_share_one_worker_rate_limiter() {
    let (redis, _conn, q) = RedisServer::with_queue(Q).await;
    let c = redis.client().await;
    log_every_command(&c).await;
    let limit = RateLimit {
        max: 2,
        duration: Duration::from_millis(500),
    };
    let fleet = Fleet {
        per_phase: RACED_JOBS,
        sleep_ms: 5,
        node_count: 2,
        node_opts: json!({"concurrency": 4, "limiter": {"max": 2, "duration": 500}}),
        rust_opts: WorkerOptions::default()
            .concurrency(4)
            .drain_delay(Duration::from_millis(200))
            .limiter(limit),
    };
    mixed_fleet(&q, &redis.url(), fleet).await;
    assert_window_budget(&c, &redis_starts(&c, &q).await, limit, "mixed fleet").await;
}

/// Jobs per phase of a rate-limited fleet (2 per 500 ms window): a few
/// windows each.
const RACED_JOBS: [usize; 3] = [6, 6, 8];

fn state_of(name: &str) -> JobState {
    match name {
        "waiting" => JobState::Waiting,
        "prioritized" => JobState::Prioritized,
        "delayed" => JobState::Delayed,
        "active" => JobState::Active,
        "completed" => JobState::Completed,
        "failed" => JobState::Failed,
        "waiting-children" => JobState::WaitingChildren,
        other => panic!("state {other}"),
    }
}

#[tokio::test]
async fn getters_answer_as_node_does() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();

    // 1..=5 ready (priorities 0, 0, 3, 3, 7), 6 delayed, 7 completed, 8 failed.
    let setup = node(
        &url,
        json!([
            ["add", "a", {"mode": "ok"}, {}],
            ["add", "b", {"mode": "ok"}, {}],
            ["add", "c", {"mode": "ok"}, {"priority": 3}],
            ["add", "d", {"mode": "ok"}, {"priority": 3}],
            ["add", "e", {"mode": "ok"}, {"priority": 7}],
            ["add", "f", {"mode": "ok"}, {"delay": 60000}],
            ["log", "1", "one", 0], ["log", "1", "two", 0], ["log", "1", "three", 0],
            ["log", "1", "four", 0], ["log", "1", "five", 0]
        ]),
    );
    assert_eq!(setup[0], json!("1"));

    // Counts per priority, duplicates folded, as Node's object.
    let node_counts = node(&url, json!([["counts-per-priority", [0, 3, 7, 3, 9]]]));
    let rust_counts = q.get_counts_per_priority(&[0, 3, 7, 3, 9]).await.unwrap();
    let as_obj: serde_json::Map<String, Json> = rust_counts
        .iter()
        .map(|(p, n)| (p.to_string(), json!(n)))
        .collect();
    assert_eq!(node_counts[0], Json::Object(as_obj));
    assert_eq!(rust_counts, vec![(0, 2), (3, 2), (7, 1), (9, 0)]);
    assert!(q.get_counts_per_priority(&[2_097_152]).await.is_err());

    // Logs, both orders, with the total.
    for (start, end, asc) in [(0, -1, true), (1, 3, true), (1, 3, false), (0, 0, false)] {
        let n = node(&url, json!([["job-logs", "1", start, end, asc]]));
        let r = q
            .get_job_logs(
                "1",
                start,
                end,
                if asc {
                    echomq::RangeOrder::Ascending
                } else {
                    echomq::RangeOrder::Descending
                },
            )
            .await
            .unwrap();
        assert_eq!(
            n[0],
            json!({"logs": r.logs, "count": r.count}),
            "logs {start}..{end} asc {asc}"
        );
    }

    // Finish 7 and 8 by a Node worker run only on them: they are added now,
    // once the ready jobs above are out of the way (moved to delayed by hand).
    let _: () = c.del("emq:par:wait").await.unwrap();
    let _: () = c.del("emq:par:prioritized").await.unwrap();
    let ids = node(
        &url,
        json!([
            ["add", "g", {"mode": "ok", "ret": {"r": [1, "x"]}}, {}],
            ["add", "h", {"mode": "fail", "reason": "bad thing"}, {}],
            ["work"]
        ]),
    );
    assert_eq!((ids[0].clone(), ids[1].clone()), (json!("7"), json!("8")));
    let _: () = c.rpush("emq:par:wait", vec!["2", "1"]).await.unwrap();
    let _: () = c
        .zadd(
            "emq:par:prioritized",
            None,
            None,
            false,
            false,
            vec![
                (3.0 * 4294967296.0, "3"),
                (3.0 * 4294967296.0 + 1.0, "4"),
                (7.0 * 4294967296.0, "5"),
            ],
        )
        .await
        .unwrap();

    assert_eq!(
        q.is_finished("7").await.unwrap(),
        echomq::queue::Finished::Completed(json!({"r": [1, "x"]}))
    );
    assert_eq!(
        q.is_finished("8").await.unwrap(),
        echomq::queue::Finished::Failed("bad thing".into())
    );
    assert_eq!(
        q.is_finished("1").await.unwrap(),
        echomq::queue::Finished::No
    );

    // States by BullMQ's names.
    for id in ["1", "3", "6", "7", "8", "404"] {
        let n = node(&url, json!([["job-state", id]]));
        let r = q.get_job_state(id).await.unwrap();
        assert_eq!(n[0], json!(r.as_str()), "state of {id}");
    }

    // getJobs: the same ids in the same order, a vanished id skipped and the
    // bounded page refilled behind it.
    let _: () = c.del("emq:par:3").await.unwrap();
    let queries = [
        (vec!["waiting", "prioritized"], 0, 1, true),
        (vec!["waiting", "prioritized"], 0, 1, false),
        (vec!["prioritized"], 0, 1, true),
        (vec!["prioritized", "waiting", "waiting"], 0, -1, false),
        (vec!["completed", "failed", "delayed"], 0, 10, true),
        (vec!["waiting"], 5, 9, true),
        (vec!["waiting"], -1, -1, true),
    ];
    for (types, start, end, asc) in queries {
        let n = bullmq(
            "get-jobs",
            &url,
            Q,
            json!({"types": types, "start": start, "end": end, "asc": asc}),
        );
        let states: Vec<JobState> = types.iter().map(|t| state_of(t)).collect();
        let r: Vec<Json> = q
            .get_jobs(
                &states,
                start,
                end,
                if asc {
                    echomq::RangeOrder::Ascending
                } else {
                    echomq::RangeOrder::Descending
                },
            )
            .await
            .unwrap()
            .into_iter()
            .map(|j| json!(j.id))
            .collect();
        assert_eq!(
            n,
            Json::Array(r),
            "getJobs {types:?} {start}..{end} asc {asc}"
        );
    }
}

#[tokio::test]
async fn get_workers_lists_rust_and_node_workers_alike() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let w = timed_worker(
        &q,
        WorkerOptions::default().name("rusty"),
        0,
        Ran::default(),
    )
    .await;
    // A Node worker that runs until told to close (its stdin).
    let nodey = NodeChild::spawn("worker.js", &url, Q, json!({"name": "nodey"}));
    let b64 = "cGFy"; // base64("par")
    let both = [format!("emq:{b64}:w:rusty"), format!("emq:{b64}:w:nodey")];
    let mut rust_view: Vec<String> = Vec::new();
    wait_until("both workers listed", Duration::from_secs(30), async || {
        rust_view = q
            .get_workers()
            .await
            .unwrap()
            .into_iter()
            .map(|w| w.rawname)
            .collect();
        both.iter().all(|n| rust_view.contains(n))
    })
    .await;
    let u = url.clone();
    let node_view = tokio::task::spawn_blocking(move || bullmq("workers", &u, Q, json!({})))
        .await
        .unwrap();
    let mut node_view: Vec<String> = node_view
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            assert_eq!(w["name"], json!(Q));
            w["rawname"].as_str().unwrap().to_owned()
        })
        .collect();
    rust_view.sort();
    node_view.sort();
    assert_eq!(rust_view, node_view);
    let named: Vec<Option<String>> = q
        .get_workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.worker_name)
        .collect();
    assert!(named.contains(&Some("rusty".into())));
    nodey.finish();
    w.close().await;
}

/// `queue.rate_limit(ms)` + `ProcessError::RateLimited` in a Rust processor
/// hold Node workers too, and a Node `rateLimit` holds Rust workers. As in
/// BullMQ, the fetching scripts test the limiter key only for workers with a
/// limiter (or under a global rate limit), so both sides set a generous one.
#[tokio::test]
async fn a_rate_limit_set_by_either_client_holds_both() {
    const LIMIT_MS: u64 = 2500;
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();

    // A: the Rust processor rate-limits on its first job; the window's start
    // is read on Redis's clock just before (it ends no earlier than that
    // plus the limit).
    let limited_at = Arc::new(Mutex::new(None::<u64>));
    let (l, rc) = (limited_at.clone(), c.clone());
    let processor = processor_fn(move |job: JobContext| {
        let (l, rc) = (l.clone(), rc.clone());
        async move {
            if job.data()["rl"].as_bool() == Some(true) && l.lock().unwrap().is_none() {
                let before = timeline::now_ms(&rc).await;
                job.queue()
                    .limits()
                    .rate_limit(Duration::from_millis(LIMIT_MS))
                    .await
                    .map_err(|e| ProcessError::failed(e.to_string()))?;
                *l.lock().unwrap() = Some(before);
                return Err(ProcessError::RateLimited);
            }
            Ok(json!(null))
        }
    });
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .drain_delay(Duration::from_millis(200))
        .limiter(RateLimit {
            max: 100,
            duration: Duration::from_millis(1000),
        });
    let (worker, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    q.add("trigger", &json!({"rl": true}), JobOptions::new())
        .await
        .unwrap();
    wait_until("the rate limit", Duration::from_secs(10), async || {
        limited_at.lock().unwrap().is_some()
    })
    .await;
    let t_limit = limited_at.lock().unwrap().unwrap();
    // From here on only Node works: it must wait out the Rust window. The
    // Rust worker is closed (its fetch loop ended), not merely told to stop.
    call_t!(worker, WorkerMsg::Close, 15_000, Duration::from_secs(5)).unwrap();
    worker.wait(Some(Duration::from_secs(10))).await.unwrap();
    let mut ids = vec!["1".to_owned()];
    for i in 0..6 {
        ids.push(
            q.add("j", &json!({ "i": i }), JobOptions::new())
                .await
                .unwrap(),
        );
    }
    let u = url.clone();
    let args = json!({
        "ids": ids, "deadlineMs": 60_000,
        "opts": {"concurrency": 2, "limiter": {"max": 100, "duration": 1000}},
    });
    let run = tokio::task::spawn_blocking(move || bullmq_work_until(&u, Q, args))
        .await
        .unwrap();
    assert!(
        run.done && run.seen.len() == 7,
        "Node ran every job after the window: {run:?}"
    );
    assert_eq!(q.counts().await.unwrap().completed, 7);
    // Every start after the trigger's first, on Redis's clock, is past the
    // window.
    let starts = timeline::starts(&c, "emq:par:events").await;
    assert_eq!(starts[0].0, "1", "{starts:?}");
    assert_eq!(starts.len(), 8, "the trigger twice, 6 more: {starts:?}");
    for (id, at) in &starts[1..] {
        assert!(
            *at >= t_limit + LIMIT_MS,
            "job {id} started {} ms into the {LIMIT_MS} ms window",
            at - t_limit
        );
    }
    // The rate-limited run did not count an attempt.
    let atm: String = c.hget("emq:par:1", "atm").await.unwrap();
    assert_eq!(atm, "1");

    // B: Node's rateLimit holds a running Rust worker (listed by getWorkers:
    // its fetch loop has opened its blocking connection).
    let ran: Ran = Default::default();
    let limited = WorkerOptions::default()
        .name("rusty")
        .drain_delay(Duration::from_millis(200))
        .limiter(RateLimit {
            max: 100,
            duration: Duration::from_millis(1000),
        });
    let w = timed_worker(&q, limited, 0, ran.clone()).await;
    wait_until(
        "the Rust worker is up",
        Duration::from_secs(10),
        async || {
            q.get_workers()
                .await
                .unwrap()
                .iter()
                .any(|w| w.worker_name.as_deref() == Some("rusty"))
        },
    )
    .await;
    let t_node = timeline::now_ms(&c).await;
    node(&url, json!([["rate-limit", LIMIT_MS]]));
    let mut later = Vec::new();
    for i in 0..3 {
        later.push(
            q.add("k", &json!({ "i": i }), JobOptions::new())
                .await
                .unwrap(),
        );
    }
    wait_until("3 more", Duration::from_secs(10), async || {
        ran.lock().unwrap().len() == 3
    })
    .await;
    assert_eq!(*ran.lock().unwrap(), later);
    for (id, at) in timeline::starts(&c, "emq:par:events").await {
        if later.contains(&id) {
            assert!(
                at >= t_node + LIMIT_MS,
                "Rust job {id} started {} ms into Node's window",
                at - t_node
            );
        }
    }
    w.close().await;
}

/// A global rate limit (meta `max`/`duration`) set by Node holds Rust and
/// Node workers that have no limiter of their own.
#[tokio::test]
async fn rust_and_node_workers_share_a_global_rate_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    log_every_command(&c).await;
    node(&url, json!([["set-global-rate-limit", 2, 500]]));
    let limit = RateLimit {
        max: 2,
        duration: Duration::from_millis(500),
    };
    mixed_fleet(&q, &url, unlimited_fleet()).await;
    let starts = redis_starts(&c, &q).await;
    assert_window_budget(&c, &starts, limit, "global limit, mixed fleet").await;
}

/// Two Node workers and a Rust worker, none with a limiter of its own.
fn unlimited_fleet() -> Fleet {
    Fleet {
        per_phase: RACED_JOBS,
        sleep_ms: 5,
        node_count: 2,
        node_opts: json!({"concurrency": 4}),
        rust_opts: WorkerOptions::default()
            .concurrency(4)
            .drain_delay(Duration::from_millis(200)),
    }
}

/// A global rate limit set by Rust (`Limits::set_global_rate_limit`) holds a
/// mixed fleet of Rust and Node workers without a limiter of their own.
#[tokio::test]
async fn a_global_rate_limit_set_by_rust_holds_rust_and_node_workers() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    log_every_command(&c).await;
    let limit = RateLimit {
        max: 2,
        duration: Duration::from_millis(500),
    };
    q.limits().set_global_rate_limit(limit).await.unwrap();
    assert_eq!(
        node(&url, json!([["get-global-rate-limit"]])),
        vec![json!({"max": 2, "duration": 500})],
        "Node reads the limit Rust set"
    );
    mixed_fleet(&q, &url, unlimited_fleet()).await;
    let starts = redis_starts(&c, &q).await;
    assert_window_budget(&c, &starts, limit, "global limit set by Rust, mixed fleet").await;
}

/// Takes the next job by hand with `token`; panics when there is none.
async fn take_by_hand(m: &ManualWorker, token: &str) -> Box<ManualJob> {
    match m.get_next_job(token).await.unwrap() {
        Fetched::Job(j) => j,
        other => panic!("nothing to take: {other:?}"),
    }
}

/// `ManualJob::move_to_waiting_children` as BullMQ's
/// `job.moveToWaitingChildren(token)`: a parent with no pending child is not
/// parked; with a Rust-added child it is, the child runs on a Node worker,
/// and the parent comes back to `wait` and is finished by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_parent_waits_for_a_child_run_by_node() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    q.add("parent", &json!({}), JobOptions::new().job_id("p"))
        .await
        .unwrap();
    let m = ManualWorker::new(q.clone(), WorkerOptions::default()).unwrap();
    let p = take_by_hand(&m, "tok-p").await;
    assert_eq!(p.job().id, "p");

    // No child yet: not parked, the handle and the lock stay.
    let ManualParking::StillHeld(p) = p.move_to_waiting_children(None).await.unwrap() else {
        panic!("a parent without children was parked")
    };
    assert_eq!(q.get_job_state("p").await.unwrap(), JobState::Active);
    let lock: String = c.get("emq:par:p:lock").await.unwrap();
    assert_eq!(lock, "tok-p");

    // A child added by Rust to the active parent.
    let kid = FlowProducer::new(&conn)
        .add(
            FlowJob::new("kid", "kid", json!({"k": 1})).parent(ParentRef {
                id: "p".into(),
                queue: "emq:par".into(),
            }),
        )
        .await
        .unwrap();
    let kid_key = format!("emq:kid:{}", kid.id);
    let parked = p.move_to_waiting_children(None).await.unwrap();
    assert!(matches!(parked, ManualParking::Parked), "{parked:?}");
    assert_eq!(
        q.get_job_state("p").await.unwrap(),
        JobState::WaitingChildren
    );
    let lock: Option<String> = c.get("emq:par:p:lock").await.unwrap();
    assert_eq!(lock, None, "parking released the lock");
    let active: Vec<String> = c.lrange("emq:par:active", 0, -1).await.unwrap();
    assert!(active.is_empty(), "{active:?}");

    // The child runs on a Node worker (until it has); the parent goes back to
    // wait.
    let (u, kid_id) = (url.clone(), kid.id.clone());
    let run = tokio::task::spawn_blocking(move || {
        bullmq_work_until(&u, "kid", json!({"ids": [kid_id], "deadlineMs": 60_000}))
    })
    .await
    .unwrap();
    assert!(
        run.done && run.ids() == [kid.id.clone()],
        "the child ran once: {run:?}"
    );
    assert_eq!(q.get_job_state("p").await.unwrap(), JobState::Waiting);
    let processed: Vec<String> = c.hkeys("emq:par:p:processed").await.unwrap();
    assert_eq!(processed, vec![kid_key]);

    // Taken again by hand and finished; Node reads it completed.
    let p = take_by_hand(&m, "tok-p2").await;
    assert_eq!(p.job().id, "p");
    p.move_to_completed(&json!("done"), false).await.unwrap();
    assert_eq!(
        node(&url, json!([["job-state", "p"]])),
        vec![json!("completed")]
    );
}

/// Compat item 31: a job put back after a manual rate limit
/// (moveJobFromActiveToWait, Node `job.moveToWait(token)`, Rust
/// `ManualJob::move_to_wait`) goes back to the head of `wait` — the right
/// end, the next one taken — with no attempt counted, and the reply is the
/// limiter key's PTTL. Run once from each side on a fresh server.
#[tokio::test]
async fn a_job_put_back_after_a_manual_rate_limit_is_next_and_answers_the_pttl() {
    const LIMIT_MS: u64 = 5000;
    for rust_side in [true, false] {
        let redis = RedisServer::start();
        let url = redis.url();
        let conn = redis.connect().await;
        let c = redis.client().await;
        let q = Queue::new(&conn, Q).await.unwrap();
        for name in ["x", "b", "c"] {
            q.add(name, &json!({}), JobOptions::new()).await.unwrap();
        }
        let wait: Vec<String> = c.lrange("emq:par:wait", 0, -1).await.unwrap();
        assert_eq!(wait, ["3", "2", "1"], "1 is next");
        let (id, reply) = if rust_side {
            let m = ManualWorker::new(q.clone(), WorkerOptions::default()).unwrap();
            let x = take_by_hand(&m, "tok-x").await;
            let id = x.job().id.clone();
            q.limits()
                .rate_limit(Duration::from_millis(LIMIT_MS))
                .await
                .unwrap();
            let window = x.move_to_wait().await.unwrap();
            (id, window.as_millis() as u64)
        } else {
            let r = node(&url, json!([["take-and-move-to-wait", "tok-x", LIMIT_MS]]));
            (
                r[0]["id"].as_str().unwrap().to_owned(),
                r[0]["pttl"].as_u64().unwrap(),
            )
        };
        let left: i64 = c.pttl("emq:par:limiter").await.unwrap();
        assert_eq!(id, "1", "rust side {rust_side}");
        assert!(
            reply as i64 >= left && reply <= LIMIT_MS && reply + 1000 > LIMIT_MS,
            "rust side {rust_side}: reply {reply}, limiter PTTL now {left}"
        );
        let wait: Vec<String> = c.lrange("emq:par:wait", 0, -1).await.unwrap();
        assert_eq!(
            wait,
            ["3", "2", "1"],
            "rust side {rust_side}: back at the head (RPUSH)"
        );
        let active: Vec<String> = c.lrange("emq:par:active", 0, -1).await.unwrap();
        assert!(active.is_empty(), "{active:?}");
        let job = hash(&c, "emq:par:1").await;
        assert_eq!(job.get("atm"), None, "rust side {rust_side}: no attempt");
        assert_eq!(job.get("ats").map(String::as_str), Some("1"));
        let lock: Option<String> = c.get("emq:par:1:lock").await.unwrap();
        assert_eq!(lock, None, "rust side {rust_side}: lock released");
        let all = events(&c, "emq:par:events").await;
        let last = all.last().unwrap();
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            last,
            &(
                "waiting".to_owned(),
                vec![pair("jobId", "1"), pair("prev", "active")]
            ),
            "rust side {rust_side}: the last event"
        );

        // Without a limiter key the reply is 0.
        let _: () = c.del("emq:par:limiter").await.unwrap();
        let reply = if rust_side {
            let m = ManualWorker::new(q.clone(), WorkerOptions::default()).unwrap();
            let x = take_by_hand(&m, "tok-y").await;
            assert_eq!(x.job().id, "1", "the put-back job is taken first");
            x.move_to_wait().await.unwrap().as_millis() as u64
        } else {
            let r = node(&url, json!([["take-and-move-to-wait", "tok-y", 0]]));
            assert_eq!(r[0]["id"], "1", "the put-back job is taken first");
            r[0]["pttl"].as_u64().unwrap()
        };
        assert_eq!(reply, 0, "rust side {rust_side}: no limiter, reply 0");
    }
}
