//! Issue 16, proven both ways with the real BullMQ 6.2.0 Node client on one
//! queue: deduplication, global limits, rate limiting and the getters.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{processor_fn, spawn_linked, JobContext, ProcessError};
use echomq::{
    Deduplication, JobOptions, LockManagerMsg, NewJob, Queue, RateLimit, WorkerArgs,
    WorkerMsg, WorkerOptions,
};
use echomq_integration_tests::{bullmq, events, wait_until, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::{Actor, ActorRef};
use serde_json::{json, Value as Json};

mod parity_support;
use parity_support::{assert_window_budget, peak_overlap};

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
    let rust_de = || Deduplication::new("N").ttl(60_000).extend(true);

    // Node owns N; a Rust add with the same settings is dropped in its favour.
    let r = node(&url, json!([["add", "a", {"v": 1}, {"deduplication": de}]]));
    assert_eq!(r, vec![json!("1")]);
    assert_eq!(
        q.get_deduplication_job_id("N").await.unwrap().as_deref(),
        Some("1")
    );
    let dropped = q
        .add("a", &json!({"v": 2}), JobOptions::new().deduplication(rust_de()))
        .await
        .unwrap();
    assert_eq!(dropped, "1");

    // Rust owns R; Node's add is dropped and Node reads the owner.
    let r_id = q
        .add(
            "b",
            &json!({"v": 3}),
            JobOptions::new().deduplication(Deduplication::new("R").ttl(60_000).extend(true)),
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
    let r = node(&url, json!([["job-remove-dedup-key", "3"], ["dedup-job-id", "R"]]));
    assert_eq!(r, vec![json!(true), Json::Null]);
    assert!(q.remove_job_deduplication_key("1").await.unwrap());
    assert_eq!(node(&url, json!([["dedup-job-id", "N"]])), vec![Json::Null]);

    // …and through the queue-wide delete.
    q.add("c", &json!(0), JobOptions::new().deduplication(Deduplication::new("Z")))
        .await
        .unwrap();
    assert_eq!(node(&url, json!([["remove-dedup-key", "Z"]])), vec![json!(1)]);
    node(&url, json!([["add", "c", {}, {"deduplication": {"id": "Y"}}]]));
    assert!(q.remove_deduplication_key("Y").await.unwrap());
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

    q.set_global_concurrency(3).await.unwrap();
    q.set_global_rate_limit(RateLimit {
        max: 7,
        duration: Duration::from_millis(900),
    })
    .await
    .unwrap();
    let r = node(
        &url,
        json!([["get-global-concurrency"], ["get-global-rate-limit"], ["is-maxed"]]),
    );
    assert_eq!(r, vec![json!(3), json!({"max": 7, "duration": 900}), json!(false)]);
    let _: () = c.lpush("emq:par:active", vec!["a", "b", "c"]).await.unwrap();
    assert_eq!(node(&url, json!([["is-maxed"]])), vec![json!(true)]);
    assert!(q.is_maxed().await.unwrap());

    node(
        &url,
        json!([["set-global-concurrency", 5], ["set-global-rate-limit", 4, 2500]]),
    );
    assert_eq!(q.get_global_concurrency().await.unwrap(), Some(5));
    assert_eq!(
        q.get_global_rate_limit().await.unwrap(),
        Some(RateLimit {
            max: 4,
            duration: Duration::from_millis(2500)
        })
    );
    assert!(!q.is_maxed().await.unwrap());
    node(
        &url,
        json!([["remove-global-concurrency"], ["remove-global-rate-limit"]]),
    );
    assert_eq!(q.get_global_concurrency().await.unwrap(), None);
    assert_eq!(q.get_global_rate_limit().await.unwrap(), None);

    // rateLimit / getRateLimitTtl across clients.
    node(&url, json!([["rate-limit", 2000]]));
    let ttl = q.rate_limit_ttl(Some(1)).await.unwrap();
    assert!(ttl > Duration::from_millis(1500), "{ttl:?}");
    let _: () = c.del("emq:par:limiter").await.unwrap();
    q.rate_limit(Duration::from_millis(2000)).await.unwrap();
    let r = node(&url, json!([["rate-limit-ttl", 1], ["rate-limit-ttl"]]));
    for ms in &r {
        let ms = ms.as_i64().unwrap();
        assert!(ms > 1500 && ms <= 2000, "{r:?}");
    }
    let mut keyspace_a: Vec<String> = c.hkeys("emq:par:meta").await.unwrap();
    keyspace_a.sort();
    assert_eq!(keyspace_a, vec!["opts.maxLenEvents", "version"]);
}

/// (start ms, end ms) of every job the Rust worker ran.
type Spans = Arc<Mutex<Vec<(u64, u64)>>>;

struct Running {
    worker: ActorRef<WorkerMsg>,
    _lm: ActorRef<LockManagerMsg>,
    _host: ActorRef<()>,
}

async fn rust_worker(q: &Queue, options: WorkerOptions, sleep_ms: u64, spans: Spans) -> Running {
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(move |_job: JobContext| {
        let spans = spans.clone();
        async move {
            let t0 = echomq::clock::now_ms();
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
            spans.lock().unwrap().push((t0, echomq::clock::now_ms()));
            Ok::<_, ProcessError>(json!(null))
        }
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = options;
    let (worker, lm) = spawn_linked(host.get_cell(), args).await.unwrap();
    Running {
        worker,
        _lm: lm,
        _host: host,
    }
}

/// Runs Node workers (`work-timed`) beside one Rust worker on `n` jobs added
/// once both are up; answers (Rust spans, Node spans).
async fn mixed_fleet(
    q: &Queue,
    url: &str,
    n: usize,
    sleep_ms: u64,
    node_opts: Json,
    rust_opts: WorkerOptions,
    node_ms: u64,
    require_both: bool,
) -> (Vec<(u64, u64)>, Vec<(u64, u64)>) {
    let (url2, opts2) = (url.to_owned(), node_opts.clone());
    let node_run = tokio::task::spawn_blocking(move || {
        node(&url2, json!([["work-timed", node_ms, opts2, sleep_ms]]))
    });
    // Node needs about a second to start its workers.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let spans: Spans = Default::default();
    let w = rust_worker(q, rust_opts, sleep_ms, spans.clone()).await;
    let jobs = (0..n)
        .map(|i| NewJob {
            name: "j".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
    let c = q.clone();
    wait_until("every job completed", Duration::from_secs(30), async || {
        c.counts().await.unwrap().completed == n as u64
    })
    .await;
    w.worker.stop(None);
    let node_seen = node_run.await.unwrap();
    let node_spans: Vec<(u64, u64)> = node_seen[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap()))
        .collect();
    let rust_spans = spans.lock().unwrap().clone();
    assert_eq!(rust_spans.len() + node_spans.len(), n, "every job once");
    assert!(
        !require_both || (!rust_spans.is_empty() && !node_spans.is_empty()),
        "both clients worked: rust {}, node {}",
        rust_spans.len(),
        node_spans.len()
    );
    (rust_spans, node_spans)
}

/// A worker that finishes a job takes the next in the same call, so at the
/// cap the side holding the slots keeps them: each run gives the wider
/// concurrency to one side, which alone would go over the cap.
#[tokio::test]
async fn rust_and_node_workers_share_the_global_concurrency() {
    for rust_is_wide in [true, false] {
        let redis = RedisServer::start();
        let url = redis.url();
        let conn = redis.connect().await;
        let q = Queue::new(&conn, Q).await.unwrap();
        // Set by one client, honoured by both.
        if rust_is_wide {
            q.set_global_concurrency(2).await.unwrap();
        } else {
            node(&url, json!([["set-global-concurrency", 2]]));
        }
        let (node_c, rust_c) = if rust_is_wide { (1, 4) } else { (4, 1) };
        let (rust, node_spans) = mixed_fleet(
            &q,
            &url,
            24,
            100,
            json!({"concurrency": node_c, "count": 1}),
            WorkerOptions::default()
                .concurrency(rust_c)
                .drain_delay(Duration::from_millis(200)),
            6000,
            rust_is_wide,
        )
        .await;
        let all: Vec<(u64, u64)> = rust.iter().chain(&node_spans).copied().collect();
        let peak = peak_overlap(&all);
        assert!(
            peak <= 2,
            "rust wide {rust_is_wide}: peak {peak} over the global concurrency of 2"
        );
        let wide = if rust_is_wide { &rust } else { &node_spans };
        assert!(
            peak_overlap(wide) >= 1 && wide.len() >= 4,
            "the wide side worked"
        );
    }
}

#[tokio::test]
async fn rust_and_node_workers_share_one_worker_rate_limiter() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let limit = RateLimit {
        max: 2,
        duration: Duration::from_millis(500),
    };
    let (rust, node_spans) = mixed_fleet(
        &q,
        &redis.url(),
        12,
        5,
        json!({"concurrency": 4, "count": 2, "limiter": {"max": 2, "duration": 500}}),
        WorkerOptions::default()
            .concurrency(4)
            .drain_delay(Duration::from_millis(200))
            .limiter(limit),
        7000,
        true,
    )
    .await;
    let mut starts: Vec<u64> = rust.iter().chain(&node_spans).map(|s| s.0).collect();
    starts.sort();
    assert_window_budget(&starts, limit, "mixed fleet");
}
