//! What BullMQ 6.7.0 changed in the scripts, proven against the real 6.7.0
//! Node client (issue 29 §1). Each test runs the same steps through Node on
//! one fresh Redis and through EchoMQ on another, and compares the whole
//! `emq:q:*` keyspace after every step, so the intermediate states are
//! proven too, not only what a final drain leaves.

use std::time::Duration;

use echomq::protocol::FinishTarget;
use echomq::worker::{processor_fn, Fetched, JobContext, ManualWorker};
use echomq::{
    Deduplication, FlowJob, FlowProducer, JobOptions, Queue, RateLimit, WorkerArgs, WorkerMsg,
    WorkerOptions,
};
use echomq_integration_tests::keyspace::{self, Mask};
use echomq_integration_tests::{bullmq, NodeBullmq, NullSupervisor, RedisServer};
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

const Q: &str = "q";

/// Node on one server, EchoMQ on another, the same steps on both.
struct Twin {
    node: RedisServer,
    _rust: RedisServer,
    nc: Client,
    rc: Client,
    q: Queue,
    mask: Mask,
}

impl Twin {
    async fn new(mask: Mask) -> Twin {
        let node = RedisServer::start();
        let rust = RedisServer::start();
        let conn = rust.connect().await;
        let q = Queue::new(&conn, Q).await.unwrap();
        Twin {
            nc: node.client().await,
            rc: rust.client().await,
            node,
            _rust: rust,
            q,
            mask,
        }
    }

    /// Runs driver.js `ops` on the Node server and returns its results.
    fn node(&self, ops: Json) -> Vec<Json> {
        let out = bullmq("ops", &self.node.url(), Q, json!({ "ops": ops }));
        serde_json::from_value(out).unwrap()
    }

    /// The same raw commands on both servers: states no client call makes
    /// (a job hash lost to an outage, a parked next job).
    async fn raw(&self, cmds: &[&[&str]]) {
        for c in [&self.nc, &self.rc] {
            for cmd in cmds {
                let command = CustomCommand::new(cmd[0].to_owned(), ClusterHash::FirstKey, false);
                let args: Vec<String> = cmd[1..].iter().map(|s| s.to_string()).collect();
                let _: fred::types::Value = c.custom(command, args).await.unwrap();
            }
        }
    }

    /// Both keyspaces must be the same now.
    async fn same(&self, step: &str) {
        let node = keyspace::snapshot(&self.nc, Q, self.mask).await;
        let rust = keyspace::snapshot(&self.rc, Q, self.mask).await;
        keyspace::assert_same(step, &node, &rust);
    }

    async fn rust_hash(&self, key: &str) -> std::collections::HashMap<String, String> {
        self.rc.hgetall(format!("emq:{Q}:{key}")).await.unwrap()
    }
}

/// `{timestamp: t}` plus `more`, in Node's spelling.
fn opts(t: u64, more: Json) -> Json {
    let mut o = json!({ "timestamp": t });
    for (k, v) in more.as_object().unwrap() {
        o[k] = v.clone();
    }
    o
}

/// The same options for EchoMQ, from BullMQ's public names.
fn rust_opts(o: &Json) -> JobOptions {
    JobOptions::from_public(o.as_object().unwrap()).unwrap()
}

/// An add on both sides; both answer the same id.
async fn add(twin: &Twin, name: &str, data: Json, o: Json) -> String {
    let node = twin.node(json!([["add", name, data, o]]));
    let rust = twin.q.add(name, &data, rust_opts(&o)).await.unwrap();
    assert_eq!(json!(rust), node[0], "the id answered for {name} {o}");
    rust
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An EchoMQ worker with `options` until nothing is ready or active; jobs
/// behave as their data says.
async fn rust_work(q: &Queue, options: WorkerOptions) {
    rust_work_until(
        q,
        options,
        "the queue is idle",
        async |c: echomq::JobCounts| c.waiting + c.active + c.prioritized == 0,
    )
    .await
}

/// An EchoMQ worker with `options` until the counts satisfy `done`.
async fn rust_work_until(
    q: &Queue,
    options: WorkerOptions,
    what: &str,
    mut done: impl AsyncFnMut(echomq::JobCounts) -> bool,
) {
    let p =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), p);
    args.options = options;
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    echomq_integration_tests::wait_until(what, Duration::from_secs(20), async || {
        done(q.counts().await.unwrap()).await
    })
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
}

/// Both sides' workers run what is ready.
async fn work(twin: &Twin, node_options: Json, rust_options: WorkerOptions) {
    if node_options.as_object().is_some_and(|o| o.is_empty()) {
        twin.node(json!([["work"]]));
    } else {
        twin.node(json!([["work-with", node_options]]));
    }
    rust_work(&twin.q, rust_options).await;
}

fn worked() -> Mask {
    Mask {
        worked: true,
        ..Mask::default()
    }
}

// ---------------------------------------------------------------- deduplication

/// A `de:` key without expiry whose owner's hash is gone (lost to an outage)
/// is taken over by the next add, which is stored, in every mode that can
/// leave such a key (simple, keepLastIfActive with its stale parked job,
/// replace, debounce persisted by keepLastIfActive); a key with a TTL is not
/// stale and keeps dropping adds until it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_deduplication_key_is_taken_over_by_the_next_add() {
    let twin = Twin::new(Mask::default()).await;
    let t = now_ms();
    let de = |d: Json| opts(t, json!({ "deduplication": d }));
    assert_eq!(
        add(&twin, "a", json!({"n": 1}), de(json!({"id": "S"}))).await,
        "1"
    );
    twin.same("simple owner added").await;

    // The owner's hash is lost; its key stays, without expiry.
    twin.raw(&[&["DEL", "emq:q:1"], &["LREM", "emq:q:wait", "0", "1"]])
        .await;
    let stale_ones: &[&[&str]] = &[
        &["SET", "emq:q:de:K", "91"],
        &[
            "HSET",
            "emq:q:dn:K",
            "name",
            "parked",
            "data",
            "{}",
            "opts",
            "{}",
            "jid",
            "92",
        ],
        &["SET", "emq:q:de:R", "93"],
        &["SET", "emq:q:de:E", "94"],
        &["SET", "emq:q:de:T", "95", "PX", "60000"],
    ];
    twin.raw(stale_ones).await;
    twin.same("owners lost").await;

    let id = add(&twin, "b", json!({"n": 2}), de(json!({"id": "S"}))).await;
    assert_eq!(id, "2", "stored, not dropped in favour of the lost job 1");
    twin.same("simple key taken over").await;

    let keep = add(
        &twin,
        "k",
        json!({}),
        de(json!({"id": "K", "keepLastIfActive": true})),
    )
    .await;
    assert_eq!(keep, "3");
    twin.same("keepLastIfActive key taken over, its parked job dropped")
        .await;
    let replace = add(
        &twin,
        "r",
        json!({}),
        de(json!({"id": "R", "replace": true})),
    )
    .await;
    assert_eq!(replace, "4");
    twin.same("replace key taken over").await;
    let extend = add(
        &twin,
        "e",
        json!({}),
        de(json!({"id": "E", "ttl": 5000, "extend": true})),
    )
    .await;
    assert_eq!(extend, "5");
    twin.same("debounce key taken over, with its TTL again")
        .await;
    let throttled = add(&twin, "t", json!({}), de(json!({"id": "T", "ttl": 60000}))).await;
    assert_eq!(throttled, "95", "a key that expires is never stale");
    twin.same("throttle key kept").await;

    let h = twin.rust_hash("2").await;
    assert_eq!(h["deid"], "S");
    let owner: String = twin.rc.get("emq:q:de:S").await.unwrap();
    assert_eq!(owner, "2");
    let parked: bool = twin.rc.exists("emq:q:dn:K").await.unwrap();
    assert!(!parked, "the lost owner's parked job is gone");
    let ttl: i64 = twin.rc.pttl("emq:q:de:E").await.unwrap();
    assert!(ttl > 0, "the debounce window runs again: {ttl}");
}

/// A replace removes the still delayed owner and the next job parked for it
/// (`dn:`), which would otherwise become an extra job when the replacing job
/// finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_drops_the_next_job_parked_for_the_replaced_owner() {
    let twin = Twin::new(worked()).await;
    let t = now_ms();
    let d = json!({"id": "D", "replace": true, "keepLastIfActive": true});
    let first = add(
        &twin,
        "a",
        json!({"mode": "ok"}),
        opts(t, json!({"delay": 60000, "deduplication": d})),
    )
    .await;
    assert_eq!(first, "1");
    // What an add made while the owner ran left behind, before a retry put
    // the owner back in delayed.
    twin.raw(&[&[
        "HSET",
        "emq:q:dn:D",
        "name",
        "parked",
        "data",
        r#"{"mode":"ok"}"#,
        "opts",
        r#"{"attempts":0,"de":{"id":"D","replace":true,"keepLastIfActive":true}}"#,
        "jid",
        "parked-1",
    ]])
    .await;
    twin.same("owner delayed, a next job parked").await;

    let second = add(
        &twin,
        "b",
        json!({"mode": "ok"}),
        opts(t, json!({"deduplication": d})),
    )
    .await;
    assert_eq!(second, "2");
    twin.same("owner replaced").await;
    let parked: bool = twin.rc.exists("emq:q:dn:D").await.unwrap();
    assert!(!parked, "the replaced owner's parked job went with it");

    work(&twin, json!({}), WorkerOptions::default()).await;
    twin.same("the replacing job finished").await;
    let resurrected: bool = twin.rc.exists("emq:q:parked-1").await.unwrap();
    assert!(!resurrected, "no job came back from the parked payload");
}

/// `deduplication.reschedule`: a dropped add moves a still delayed owner to
/// its own due time (hash `delay`, delayed score, a `delayed` event after
/// `deduplicated`); the owner keeps its id, data, timestamp and opts. Without
/// the flag a dropped add changes nothing. EchoMQ reads the due time from the
/// score, not from `timestamp + delay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reschedule_moves_a_delayed_owner_to_the_dropped_adds_due_time() {
    let twin = Twin::new(Mask::default()).await;
    let t = now_ms();
    let d = json!({"id": "D", "reschedule": true});
    assert_eq!(
        rust_opts(&json!({"deduplication": d})).deduplication,
        Some(Deduplication::new("D").reschedule(true)),
        "a typed option"
    );
    let first = add(
        &twin,
        "a",
        json!({"n": 1}),
        opts(t, json!({"delay": 60000, "deduplication": d})),
    )
    .await;
    twin.same("owner delayed").await;

    let dropped = add(
        &twin,
        "b",
        json!({"n": 2}),
        opts(t + 1000, json!({"delay": 120000, "deduplication": d})),
    )
    .await;
    assert_eq!(dropped, first, "the add is dropped in favour of the owner");
    twin.same("owner rescheduled").await;
    let due = t + 1000 + 120000;
    let score: f64 = twin.rc.zscore("emq:q:delayed", &first).await.unwrap();
    assert_eq!(score as u64, due * 4096);
    let h = twin.rust_hash(&first).await;
    assert_eq!(h["delay"], "120000");
    assert_eq!(
        h["timestamp"],
        t.to_string(),
        "the owner keeps its timestamp"
    );
    let names = echomq_integration_tests::event_names(&twin.rc, "emq:q:events").await;
    assert_eq!(names[names.len() - 2..], ["deduplicated", "delayed"]);
    let job = twin.q.get_job(&first).await.unwrap().unwrap();
    assert_eq!(twin.q.get_due_time(&first).await.unwrap(), Some(due));
    assert_ne!(
        job.timestamp + job.delay as u64,
        due,
        "timestamp + delay is not the due time of a rescheduled job"
    );

    let plain = json!({"id": "D"});
    add(
        &twin,
        "c",
        json!({"n": 3}),
        opts(t + 2000, json!({"delay": 5000, "deduplication": plain})),
    )
    .await;
    twin.same("an add without reschedule leaves the owner's time")
        .await;
    assert_eq!(twin.q.get_due_time(&first).await.unwrap(), Some(due));
}

/// A job rescheduled by Node is run by an EchoMQ worker at its new due time
/// (the worker reads due times from the scores), not at the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echomq_worker_runs_a_job_rescheduled_by_node_at_its_new_time() {
    let (redis, _conn, q) = RedisServer::with_queue(Q).await;
    let d = json!({"id": "D", "reschedule": true});
    let out = bullmq(
        "ops",
        &redis.url(),
        Q,
        json!({"ops": [
            ["add", "a", {"mode": "ok"}, {"delay": 300, "deduplication": d}],
            ["add", "a", {"mode": "ok"}, {"delay": 1500, "deduplication": d}],
        ]}),
    );
    assert_eq!(out, json!(["1", "1"]));
    let due = q.get_due_time("1").await.unwrap().expect("still delayed");
    let job = q.get_job("1").await.unwrap().unwrap();
    assert!(due >= job.timestamp + 1500, "moved past the first due time");
    rust_work_until(
        &q,
        WorkerOptions::default(),
        "the job completed",
        async |c: echomq::JobCounts| c.completed == 1,
    )
    .await;
    let done = q.get_job("1").await.unwrap().unwrap();
    assert!(
        done.processed_on.unwrap() >= due,
        "started at {:?}, due {due}",
        done.processed_on
    );
}

// ---------------------------------------------------------------- flows

/// The flow's children in BullMQ's FlowJob shape, all in queue `q`.
fn flow(parent: &str, t: u64, children: Json) -> Json {
    let kids: Vec<Json> = children
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c["queueName"] = json!(Q);
            c
        })
        .collect();
    json!({"name": "parent", "queueName": Q, "data": {"mode": "ok"},
           "opts": {"jobId": parent, "timestamp": t}, "children": kids})
}

/// The same flow added by Node's FlowProducer and EchoMQ's.
async fn add_flow(twin: &Twin, f: &Json) {
    let children: Vec<Json> = f["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!({"name": c["name"], "data": c["data"], "opts": c["opts"]}))
        .collect();
    let node = twin.node(json!([["flow", f["name"], f["data"], children, f["opts"]]]));
    assert_eq!(node[0], f["opts"]["jobId"]);
    FlowProducer::new(twin.q.connection())
        .add(FlowJob::from_json(f).unwrap())
        .await
        .unwrap();
}

/// A flow that reuses an already completed child keeps its parent in
/// waiting-children until its other children are done: the parent is
/// released after the whole flow is inserted (packed add argument [10] and
/// releaseParentIfNoPendingDependencies in the same transaction), not when
/// the completed child is met first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_reusing_a_completed_child_waits_for_its_other_children() {
    let twin = Twin::new(worked()).await;
    let t = now_ms();
    add(
        &twin,
        "c",
        json!({"mode": "ok", "ret": 1}),
        opts(t, json!({"jobId": "C"})),
    )
    .await;
    work(&twin, json!({}), WorkerOptions::default()).await;
    twin.same("child C completed").await;

    let f = flow(
        "P",
        t,
        json!([
            {"name": "c", "data": {"mode": "ok", "ret": 1}, "opts": {"jobId": "C", "timestamp": t}},
            {"name": "d", "data": {"mode": "ok", "ret": 2}, "opts": {"jobId": "D", "timestamp": t}},
        ]),
    );
    add_flow(&twin, &f).await;
    twin.same("flow added").await;
    let parked: Option<f64> = twin.rc.zscore("emq:q:waiting-children", "P").await.unwrap();
    assert!(parked.is_some(), "P waits for D");
    let deps: Vec<String> = twin.rc.smembers("emq:q:P:dependencies").await.unwrap();
    assert_eq!(deps, ["emq:q:D"]);
    let wait: Vec<String> = twin.rc.lrange("emq:q:wait", 0, -1).await.unwrap();
    assert_eq!(wait, ["D"], "only the pending child is ready");

    work(&twin, json!({}), WorkerOptions::default()).await;
    twin.same("D, then P, done").await;
    let p = twin.q.get_job("P").await.unwrap().unwrap();
    assert!(p.finished_on.is_some(), "P ran after D: {p:?}");
}

/// A flow whose child already exists under a parent that no longer exists
/// takes the child over: it becomes the new parent's dependency, so the new
/// parent runs once the child is done instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_whose_parent_is_gone_joins_the_new_parent() {
    let twin = Twin::new(worked()).await;
    let t = now_ms();
    let child = json!([
        {"name": "c", "data": {"mode": "ok", "ret": 7}, "opts": {"jobId": "C", "timestamp": t}},
    ]);
    add_flow(&twin, &flow("P1", t, child.clone())).await;
    twin.same("first flow").await;
    let node = twin.node(json!([["remove-keep-children", "P1"]]));
    assert_eq!(node, [json!(1)]);
    twin.q.remove("P1", false).await.unwrap();
    twin.same("first parent removed, its child kept").await;

    add_flow(&twin, &flow("P2", t, child)).await;
    twin.same("second flow over the same child").await;
    let h = twin.rust_hash("C").await;
    assert_eq!(h["parentKey"], "emq:q:P2", "re-attached");
    let deps: Vec<String> = twin.rc.smembers("emq:q:P2:dependencies").await.unwrap();
    assert_eq!(deps, ["emq:q:C"]);

    work(&twin, json!({}), WorkerOptions::default()).await;
    twin.same("child, then the new parent, done").await;
    let p2 = twin.q.get_job("P2").await.unwrap().unwrap();
    assert!(p2.finished_on.is_some(), "P2 ran: {p2:?}");
}

// ---------------------------------------------------------------- retries

/// `job.retry()` (reprocessJob-9) puts a job with a priority back in
/// `prioritized`, one without in `wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_with_a_priority_goes_back_to_prioritized() {
    let twin = Twin::new(worked()).await;
    let t = now_ms();
    let fail = json!({"mode": "fail", "reason": "no"});
    add(&twin, "p", fail.clone(), opts(t, json!({"priority": 5}))).await;
    add(&twin, "w", fail, opts(t, json!({}))).await;
    work(&twin, json!({}), WorkerOptions::default()).await;
    twin.same("both failed").await;

    twin.node(json!([
        ["retry-state", "1", "failed"],
        ["retry-state", "2", "failed"]
    ]));
    twin.q.retry_job("1", false).await.unwrap();
    twin.q.retry_job("2", false).await.unwrap();
    twin.same("both retried").await;
    let prioritized: Vec<(String, f64)> = twin
        .rc
        .zrange("emq:q:prioritized", 0, -1, None, false, None, true)
        .await
        .unwrap();
    assert_eq!(prioritized.len(), 1);
    assert_eq!(prioritized[0].0, "1");
    assert_eq!((prioritized[0].1 as u64) >> 32, 5, "in its priority band");
    let wait: Vec<String> = twin.rc.lrange("emq:q:wait", 0, -1).await.unwrap();
    assert_eq!(wait, ["2"]);
    assert_eq!(
        twin.q.get_job_state("1").await.unwrap(),
        echomq::JobState::Prioritized
    );
}

/// `queue.retryJobs` (moveJobsToWait) makes a retried child pending for its
/// parent again: a completed child leaves `:processed`, a failed one
/// `:failed`, both go back to `:dependencies`, and their new outcome is what
/// the parent sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_finished_children_makes_them_pending_for_their_parents() {
    let twin = Twin::new(worked()).await;
    let t = now_ms();
    // A delayed second child keeps each parent in waiting-children.
    let hold = |id: &str| {
        json!({"name": "hold", "data": {"mode": "ok"},
               "opts": {"jobId": id, "timestamp": t, "delay": 600000}})
    };
    add_flow(
        &twin,
        &flow(
            "PC",
            t,
            json!([
                {"name": "ok", "data": {"mode": "ok", "ret": "a"}, "opts": {"jobId": "OK", "timestamp": t}},
                hold("H1"),
            ]),
        ),
    )
    .await;
    add_flow(
        &twin,
        &flow(
            "PF",
            t,
            json!([
                {"name": "flaky", "data": {"mode": "fail-until", "n": 1, "reason": "once", "ret": "b"},
                 "opts": {"jobId": "FL", "timestamp": t, "ignoreDependencyOnFailure": true}},
                hold("H2"),
            ]),
        ),
    )
    .await;
    work(&twin, json!({}), WorkerOptions::default()).await;
    twin.same("one child completed, one failed (ignored)").await;

    let later = t + 3_600_000;
    twin.node(json!([
        ["retry-jobs", 10, "completed", later],
        ["retry-jobs", 10, "failed", later]
    ]));
    twin.q
        .chunked(10)
        .retry_jobs(FinishTarget::Completed, Some(later))
        .await
        .unwrap();
    twin.q
        .chunked(10)
        .retry_jobs(FinishTarget::Failed, Some(later))
        .await
        .unwrap();
    twin.same("both children retried").await;
    let mut deps: Vec<String> = twin.rc.smembers("emq:q:PC:dependencies").await.unwrap();
    deps.sort();
    assert_eq!(deps, ["emq:q:H1", "emq:q:OK"]);
    let processed: bool = twin.rc.exists("emq:q:PC:processed").await.unwrap();
    assert!(!processed, "the completed child's old result is gone");
    let mut deps: Vec<String> = twin.rc.smembers("emq:q:PF:dependencies").await.unwrap();
    deps.sort();
    assert_eq!(deps, ["emq:q:FL", "emq:q:H2"]);
    let failed: bool = twin.rc.exists("emq:q:PF:failed").await.unwrap();
    assert!(!failed, "the failed child's old failure is gone");

    work(&twin, json!({}), WorkerOptions::default()).await;
    twin.same("the retried children ran again").await;
    let rv: Option<String> = twin
        .rc
        .hget("emq:q:PF:processed", "emq:q:FL")
        .await
        .unwrap();
    assert_eq!(
        rv.as_deref(),
        Some("\"b\""),
        "the parent sees the new result"
    );
}

// ---------------------------------------------------------------- limiter, counts

/// A job carrying a deferred failure (`defa`) is failed without running and
/// takes no token of the rate limit: the next job still starts in the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_a_deferred_failure_takes_no_rate_limit_token() {
    let twin = Twin::new(worked()).await;
    let t = now_ms();
    add(&twin, "stalled", json!({}), opts(t, json!({}))).await;
    add(&twin, "next", json!({}), opts(t, json!({}))).await;
    twin.raw(&[&[
        "HSET",
        "emq:q:1",
        "defa",
        "job stalled more than allowable limit",
    ]])
    .await;
    twin.same("job 1 marked by a stalled sweep").await;

    let limiter = json!({"max": 1, "duration": 60000});
    let mut limited = WorkerOptions::default();
    limited.limiter = Some(RateLimit {
        max: 1,
        duration: Duration::from_secs(60),
    });
    let rust = ManualWorker::new(twin.q.clone(), limited).unwrap();
    let node = twin.node(json!([["take-limited", "tok", limiter]]));
    assert_eq!(node, [json!("1")]);
    let Fetched::Job(first) = rust.get_next_job("tok").await.unwrap() else {
        panic!("job 1 taken")
    };
    assert_eq!(first.job().id, "1");
    twin.same("job 1 taken").await;
    let counted: bool = twin.rc.exists("emq:q:limiter").await.unwrap();
    assert!(!counted, "no token taken for a job that will not run");

    let node = twin.node(json!([["take-limited", "tok", limiter]]));
    assert_eq!(node, [json!("2")], "Node: the window still has its token");
    let Fetched::Job(second) = rust.get_next_job("tok").await.unwrap() else {
        panic!("job 2 taken in the same window")
    };
    assert_eq!(second.job().id, "2");
    twin.same("job 2 taken, its token used").await;
    let used: String = twin.rc.get("emq:q:limiter").await.unwrap();
    assert_eq!(used, "1");
}

/// `getDelayedCount(timestamp)`: the optional cutoff of getCounts counts
/// only the delayed jobs due strictly before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delayed_count_takes_a_cutoff() {
    let twin = Twin::new(Mask::default()).await;
    let t = now_ms();
    for delay in [1000, 2000, 2000, 3000] {
        add(&twin, "d", json!({}), opts(t, json!({ "delay": delay }))).await;
    }
    for (cutoff, want) in [
        (None, 4),
        (Some(t + 1000), 0),
        (Some(t + 1001), 1),
        (Some(t + 2000), 1),
        (Some(t + 2001), 3),
        (Some(t + 5000), 4),
    ] {
        let node = twin.node(json!([["delayed-count", cutoff]]));
        let rust = twin.q.get_delayed_count(cutoff).await.unwrap();
        assert_eq!(node, [json!(want)], "Node, cutoff {cutoff:?}");
        assert_eq!(rust, want, "EchoMQ, cutoff {cutoff:?}");
    }
    twin.same("nothing written").await;
}

// ---------------------------------------------------------------- arity, pause

/// EchoMQ's scripts carry BullMQ 6.7's names and KEYS counts
/// (`moveToDelayed-11`, `reprocessJob-9`, …): every script that is not one
/// of EchoMQ's own extensions is a script of the 6.7.6 package (6.7.0's are
/// the same files).
#[test]
fn the_scripts_have_bullmq_6_7_names_and_arity() {
    let commands = NodeBullmq::V6_7
        .packages_dir()
        .join("node_modules/bullmq/dist/cjs/commands");
    // docs/protocol.md §Scripts names these EchoMQ extensions and
    // docs/decisions.md §1 the eight-KEYS stalled check.
    let own = [
        "auditFlows-1",
        "auditHead-1",
        "auditKeys-1",
        "auditPage-1",
        "drainChunk-2",
        "getStateBounded-8",
        "searchJobs-1",
        "moveStalledJobsToWait-8",
        // Groups (docs/groups.md).
        "accountGroupJobs-3",
        "addGroupJob-10",
        "auditGroups-2",
        "getGroups-1",
        "groupDefaults-1",
        "groupSettings-6",
        "releaseGroupJobs-10",
        "removeGroup-7",
        // Group commit (docs/decisions.md §16).
        "moveJobsToFinished-15",
        // Fetch and adds in groups (issue 42, docs/protocol.md §Extensions).
        "moveJobsToActive-11",
        "addStandardJobs-9",
        // `echomq adopt` (docs/migrating.md).
        "adoptLegacyRepeatable-5",
        // Dead letters (docs/operations.md §Dead letters).
        "moveToDeadLetter-18",
        "deadLetterFailed-5",
        "replayDeadLetter-9",
        // DAG flows (docs/flows.md §DAGs).
        "releaseDagParents-5",
        "auditDag-1",
        "addDagEdges-4",
        "dagGate-2",
        "repairDagWrite-2",
        // Byte budgets (docs/operations.md §Memory).
        "enforceBudget-4",
        // Payload offload (docs/operations.md §Memory).
        "collectBlobs-2",
    ];
    let mut missing = Vec::new();
    for (stem, _, _) in echomq::protocol::scripts::compiled() {
        if !own.contains(&stem) && !commands.join(format!("{stem}.lua")).is_file() {
            missing.push(stem);
        }
    }
    assert!(
        missing.is_empty(),
        "not scripts of BullMQ 6.7.6: {missing:?}"
    );
}

/// A queue paused by either client, of either BullMQ line, is paused for
/// the other: the flag is meta `paused`, and no worker takes a job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_paused_by_either_version_stays_paused_for_the_other() {
    for js in [NodeBullmq::V6_7, NodeBullmq::V6_7_0, NodeBullmq::V6_2] {
        let (redis, _conn, q) = RedisServer::with_queue(Q).await;
        let url = redis.url();
        js.bullmq(
            "ops",
            &url,
            Q,
            json!({"ops": [["pause"], ["add", "a", {}, {}]]}),
        );
        assert!(
            q.is_paused().await.unwrap(),
            "paused by Node {}",
            js.version()
        );
        let rust = ManualWorker::new(q.clone(), WorkerOptions::default()).unwrap();
        assert!(
            matches!(rust.get_next_job("tok").await.unwrap(), Fetched::Empty),
            "EchoMQ takes nothing from a queue Node {} paused",
            js.version()
        );
        q.resume().await.unwrap();
        q.pause().await.unwrap();
        let seen = js.bullmq("ops", &url, Q, json!({"ops": [["job-state", "1"]]}));
        assert_eq!(seen, json!(["waiting"]));
        let taken = js.bullmq(
            "ops",
            &url,
            Q,
            json!({"ops": [["take-and-move-to-wait", "tok", 0]]}),
        );
        assert_eq!(
            taken,
            json!(["error"]),
            "Node {} takes nothing",
            js.version()
        );
        let counts = js.bullmq("counts", &url, Q, json!({}));
        assert_eq!(counts["active"], json!(0));
        assert_eq!(counts["waiting"], json!(1));
        let paused: bool = redis
            .client()
            .await
            .hexists("emq:q:meta", "paused")
            .await
            .unwrap();
        assert!(paused);
    }
}

// ---------------------------------------------------------------- worker semantics

/// `maxStartedAttempts`: a failed attempt of a job started that many times
/// is not retried; the job fails with its own error at the limit (BullMQ
/// 6.7), not with "job started more than allowable limit" one attempt later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_started_attempts_fails_the_job_with_its_error_at_the_limit() {
    let twin = Twin::new(worked()).await;
    let t = now_ms();
    add(
        &twin,
        "f",
        json!({"mode": "fail", "reason": "broken"}),
        opts(t, json!({"attempts": 3})),
    )
    .await;
    work(
        &twin,
        json!({"maxStartedAttempts": 1}),
        WorkerOptions::default().max_started_attempts(1),
    )
    .await;
    twin.same("failed at the limit").await;
    let job = twin.q.get_job("1").await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some("broken"));
    assert_eq!((job.attempts_made, job.attempts_started), (1, 1));
    assert_eq!(
        twin.q.get_job_state("1").await.unwrap(),
        echomq::JobState::Failed
    );
}
