//! Flows both ways with the BullMQ Node client: the same flow built by Node's
//! FlowProducer and by EchoMQ's leaves the same keyspace; flows added on one
//! side are run by the other side's workers, every job exactly once, and each
//! parent sees its children's values.

use std::time::Duration;

use echomq::{FlowJob, FlowProducer, JobOptions, Queue};
use echomq_integration_tests::NodeBullmq;
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::{json, Map, Value as Json};

/// Every `emq:*` key as `{key: [type, value]}`; stream entries without ids,
/// JSON values parsed, sets sorted.
const DUMP: &str = r#"
local out = {}
for _, k in ipairs(redis.call('KEYS', 'emq:*')) do
  local t = redis.call('TYPE', k).ok
  local v
  if t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'set' then v = redis.call('SMEMBERS', k); table.sort(v)
  elseif t == 'string' then v = {redis.call('GET', k)}
  elseif t == 'stream' then
    v = {}
    for _, e in ipairs(redis.call('XRANGE', k, '-', '+')) do table.insert(v, e[2]) end
  end
  out[k] = {t, v}
end
return cjson.encode(out)
"#;

fn parse_maybe(v: &str) -> Json {
    match serde_json::from_str::<Json>(v) {
        Ok(j @ (Json::Object(_) | Json::Array(_))) => j,
        _ => Json::String(v.to_owned()),
    }
}

async fn snapshot(c: &Client) -> Map<String, Json> {
    let raw: String = c
        .eval(DUMP, Vec::<String>::new(), Vec::<String>::new())
        .await
        .unwrap();
    let dump: Map<String, Json> = serde_json::from_str(&raw).unwrap();
    let flat = |v: &Json| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x.as_str().map(str::to_owned).unwrap_or(x.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let pairs = |f: Vec<String>| -> Json {
        let mut m = Map::new();
        for p in f.chunks(2) {
            m.insert(p[0].clone(), parse_maybe(&p[1]));
        }
        Json::Object(m)
    };
    dump.into_iter()
        .map(|(k, tv)| {
            let t = tv[0].as_str().unwrap().to_owned();
            let v = tv.get(1).cloned().unwrap_or(Json::Null);
            let value = match t.as_str() {
                "hash" => pairs(flat(&v)),
                "stream" => Json::Array(
                    v.as_array()
                        .unwrap()
                        .iter()
                        .map(|e| pairs(flat(e)))
                        .collect(),
                ),
                _ => json!(flat(&v)),
            };
            (k, json!([t, value]))
        })
        .collect()
}

/// A two-level flow over two queues, in BullMQ's FlowJob shape, with fixed
/// ids and timestamps so that two runs are comparable.
fn sample_flow(t: u64) -> Json {
    let o = |id: &str, extra: Json| {
        let mut m = json!({"jobId": id, "timestamp": t});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    };
    json!({
        "name": "root", "queueName": "q", "data": {"r": 1}, "opts": o("root", json!({})),
        "children": [
            {"name": "mid", "queueName": "q2", "data": {"m": 1}, "opts": o("mid", json!({"failParentOnFailure": true})),
             "children": [
                {"name": "leaf1", "queueName": "q", "data": {"l": 1}, "opts": o("leaf1", json!({"attempts": 2}))},
                {"name": "leaf2", "queueName": "q2", "data": {"l": 2}, "opts": o("leaf2", json!({"priority": 3, "ignoreDependencyOnFailure": true}))},
             ]},
            {"name": "late", "queueName": "q", "data": {}, "opts": o("late", json!({"delay": 5000, "removeDependencyOnFailure": true}))},
            {"name": "cont", "queueName": "q2", "data": {}, "opts": o("cont", json!({"continueParentOnFailure": true}))},
        ]
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Node's keyspace against EchoMQ's. An older BullMQ line writes its own
/// `meta.version`; it is checked and then compared as EchoMQ's.
async fn assert_same(js: NodeBullmq, node: &Map<String, Json>, rust: &Map<String, Json>) {
    let mut node = node.clone();
    for (k, v) in node.iter_mut() {
        if k.ends_with(":meta") && v[1].get("version").is_some() {
            assert_eq!(v[1]["version"], json!(js.meta_version()), "{k}");
            v[1]["version"] = json!(echomq::protocol::PROTOCOL_VERSION);
        }
    }
    let node = &node;
    let keys = |m: &Map<String, Json>| {
        let mut k = m.keys().cloned().collect::<Vec<_>>();
        k.sort();
        k
    };
    assert_eq!(
        keys(rust),
        keys(node),
        "key sets differ (left Rust, right Node)"
    );
    for (k, v) in node {
        assert_eq!(&rust[k], v, "key {k} differs (left Rust, right Node)");
    }
}

/// The same flow, built by Node's FlowProducer and by EchoMQ's on two
/// servers: identical keyspaces (job hashes with parent descriptors and
/// options, dependencies sets, waiting-children, delayed, prioritized, wait,
/// id counters, event streams).
async fn the_same_flow_leaves_the_same_keyspace(js: NodeBullmq) {
    let t = now_ms();
    let flow = sample_flow(t);

    let node_redis = RedisServer::start();
    let node_tree = js.flows("add-flow", &node_redis.url(), "q", json!({ "flow": flow }));
    let node_state = snapshot(&node_redis.client().await).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    // Node's Queue handle writes the meta hash of the queues it opens; the
    // FlowProducer does not, and neither does EchoMQ's.
    let tree = FlowProducer::new(&conn)
        .add(FlowJob::from_json(&flow).unwrap())
        .await
        .unwrap();
    let rust_state = snapshot(&rust_redis.client().await).await;

    assert_eq!(serde_json::to_value(&tree).unwrap(), node_tree);
    assert_same(js, &node_state, &rust_state).await;
}

/// A child added under an existing parent (opts.parent), both ways, and the
/// missing-parent refusal, which writes nothing.
async fn adding_under_an_existing_parent_matches_node(js: NodeBullmq) {
    let t = now_ms();
    let parent = json!({"name": "p", "queueName": "q", "data": {}, "opts": {"jobId": "p", "timestamp": t},
        "children": [{"name": "c1", "queueName": "q", "data": {}, "opts": {"jobId": "c1", "timestamp": t}}]});
    let extra = json!({"name": "c2", "queueName": "q2", "data": {"x": 1},
        "opts": {"jobId": "c2", "timestamp": t, "parent": {"id": "p", "queue": "emq:q"}}});

    let node_redis = RedisServer::start();
    js.flows(
        "add-flow",
        &node_redis.url(),
        "q",
        json!({ "flow": parent }),
    );
    js.flows("add-flow", &node_redis.url(), "q", json!({ "flow": extra }));
    let node_state = snapshot(&node_redis.client().await).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    let fp = FlowProducer::new(&conn);
    fp.add(FlowJob::from_json(&parent).unwrap()).await.unwrap();
    fp.add(FlowJob::from_json(&extra).unwrap()).await.unwrap();
    let rust_state = snapshot(&rust_redis.client().await).await;
    assert_same(js, &node_state, &rust_state).await;

    let orphan = FlowJob::new("o", "q", json!({}))
        .options(JobOptions::new().job_id("o"))
        .parent(echomq::flow_producer::ParentRef {
            id: "nope".into(),
            queue: "emq:q".into(),
        });
    let err = fp.add(orphan).await.unwrap_err();
    assert_eq!(
        err.script_code(),
        Some(echomq::protocol::ScriptErrorCode::ParentJobNotExist)
    );
    let q = Queue::new(&conn, "q").await.unwrap();
    assert!(!q.job_exists("o").await.unwrap());
    let _ = Duration::ZERO;
}

/// What a worker saw of one run.
#[derive(Debug, Clone)]
struct Run {
    queue: String,
    id: String,
    children: Json,
    ignored: Json,
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<Run>>>;

/// Rust workers on `queues`: each run is recorded with the children values
/// its job saw; jobs behave as their data says (`behave`), and a job with
/// `spawn` adds that child to itself, waits for it, then returns
/// `{children}`.
async fn rust_workers(
    conn: &echomq::Connection,
    queues: &[&str],
    seen: &Seen,
) -> Vec<ractor::ActorRef<echomq::WorkerMsg>> {
    use echomq::worker::{processor_fn, JobContext};
    use echomq::ProcessError;
    use ractor::Actor;
    let (host, _) = Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let mut out = Vec::new();
    for name in queues {
        let q = Queue::new(conn, name).await.unwrap();
        let seen = seen.clone();
        let conn = conn.clone();
        let p = processor_fn(move |job: JobContext| {
            let seen = seen.clone();
            let conn = conn.clone();
            async move {
                let children = job.children_values().await.unwrap();
                let ignored = job.ignored_children_failures().await.unwrap();
                seen.lock().unwrap().push(Run {
                    queue: job.queue().name().to_owned(),
                    id: job.id().to_owned(),
                    children: json!(children),
                    ignored: json!(ignored),
                });
                let d = job.data().clone();
                if let Some(spawn) = d.get("spawn") {
                    if d.get("step").is_none() {
                        let child = FlowJob::new(
                            spawn["name"].as_str().unwrap(),
                            spawn["queue"].as_str().unwrap(),
                            spawn["data"].clone(),
                        )
                        .parent(echomq::flow_producer::ParentRef {
                            id: job.id().to_owned(),
                            queue: job.queue().keys().queue_key(),
                        });
                        FlowProducer::new(&conn).add(child).await.unwrap();
                        let mut d2 = d.clone();
                        d2["step"] = json!("waiting");
                        job.update_data(&d2).await.unwrap();
                        let parked = job.move_to_waiting_children(None).await.unwrap();
                        if parked == echomq::protocol::call::flow::WaitOutcome::Parked {
                            return Err(ProcessError::WaitingChildren);
                        }
                    }
                    return Ok(json!({ "children": children }));
                }
                echomq_integration_tests::behave(&job).await
            }
        });
        let mut args = echomq::WorkerArgs::new(q, p);
        args.options.drain_delay = Duration::from_millis(200);
        let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
            .await
            .unwrap();
        out.push(w);
    }
    out
}

async fn close_workers(workers: Vec<ractor::ActorRef<echomq::WorkerMsg>>) {
    for w in workers {
        let _ = ractor::call_t!(w, echomq::WorkerMsg::Close, 10_000, Duration::from_secs(2));
    }
}

/// A flow over two queues whose values the parents must see; returns the
/// flow and, per parent id, the children values it must report.
fn valued_flow(tag: &str) -> (Json, Vec<(String, Json)>) {
    let id = |s: &str| format!("{tag}-{s}");
    let ok = |ret: Json| json!({"mode": "ok", "ret": ret});
    let flow = json!({
        "name": "root", "queueName": "q", "data": ok(json!("root-done")), "opts": {"jobId": id("root")},
        "children": [
            {"name": "mid", "queueName": "q2", "data": ok(json!({"mid": true})), "opts": {"jobId": id("mid")},
             "children": [
                {"name": "a", "queueName": "q", "data": ok(json!(1)), "opts": {"jobId": id("a")}},
                {"name": "b", "queueName": "q2", "data": ok(json!([2, "two"])), "opts": {"jobId": id("b")}},
             ]},
            {"name": "c", "queueName": "q", "data": ok(json!(null)), "opts": {"jobId": id("c")}},
            {"name": "d", "queueName": "q2", "data": ok(json!("dee")), "opts": {"jobId": id("d")}},
        ]
    });
    let expect = vec![
        (
            id("root"),
            json!({format!("emq:q2:{}", id("mid")): {"mid": true}, format!("emq:q:{}", id("c")): null, format!("emq:q2:{}", id("d")): "dee"}),
        ),
        (
            id("mid"),
            json!({format!("emq:q:{}", id("a")): 1, format!("emq:q2:{}", id("b")): [2, "two"]}),
        ),
    ];
    (flow, expect)
}

const FLOW_IDS: [&str; 6] = ["root", "mid", "a", "b", "c", "d"];

fn assert_runs(runs: &[(String, String, Json)], tag: &str, expect: &[(String, Json)]) {
    for s in FLOW_IDS {
        let id = format!("{tag}-{s}");
        let n = runs.iter().filter(|r| r.1 == id).count();
        assert_eq!(n, 1, "{id} ran {n} times: {runs:?}");
    }
    for (id, children) in expect {
        let run = runs.iter().find(|r| &r.1 == id).unwrap();
        assert_eq!(&run.2, children, "children values seen by {id}");
    }
}

/// Node's FlowProducer adds; Rust workers on both queues run every job
/// exactly once, children before parents, and each parent reads its
/// children's values.
async fn node_flow_runs_on_rust_workers(js: NodeBullmq) {
    let redis = RedisServer::start();
    let (flow, expect) = valued_flow("n");
    js.flows("add-flow", &redis.url(), "q", json!({ "flow": flow }));
    let conn = redis.connect().await;
    let seen: Seen = Default::default();
    let workers = rust_workers(&conn, &["q", "q2"], &seen).await;
    let q = Queue::new(&conn, "q").await.unwrap();
    echomq_integration_tests::wait_until("root completed", Duration::from_secs(20), async || {
        q.get_job_state("n-root").await.unwrap() == echomq::JobState::Completed
    })
    .await;
    close_workers(workers).await;
    let runs: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.queue.clone(), r.id.clone(), r.children.clone()))
        .collect();
    assert_runs(&runs, "n", &expect);
    assert_eq!(
        q.flows().get_children_values("n-root").await.unwrap(),
        serde_json::from_value(expect[0].1.clone()).unwrap()
    );
}

/// EchoMQ's FlowProducer adds; Node workers run every job exactly once and
/// each parent reads its children's values (Node's getChildrenValues).
async fn rust_flow_runs_on_node_workers(js: NodeBullmq) {
    let redis = RedisServer::start();
    let (flow, expect) = valued_flow("r");
    let conn = redis.connect().await;
    FlowProducer::new(&conn)
        .add(FlowJob::from_json(&flow).unwrap())
        .await
        .unwrap();
    let seen = js.flows("work", &redis.url(), "q", json!({"queues": ["q", "q2"]}));
    let runs: Vec<_> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["queue"].as_str().unwrap().to_owned(),
                r["id"].as_str().unwrap().to_owned(),
                r["children"].clone(),
            )
        })
        .collect();
    assert_runs(&runs, "r", &expect);
    let q = Queue::new(&conn, "q").await.unwrap();
    assert_eq!(
        q.get_job_state("r-root").await.unwrap(),
        echomq::JobState::Completed
    );
}

/// A Rust processor adds a child to its own job, parks the job in
/// waiting-children and returns `WaitingChildren`; the child runs on a Node
/// worker, and the parent is resumed on the Rust worker and sees the value.
async fn rust_parent_waits_for_a_child_run_by_node(js: NodeBullmq) {
    let (redis, conn, q) = RedisServer::with_queue("q").await;
    let data = json!({"spawn": {"queue": "q2", "name": "kid", "data": {"mode": "ok", "ret": 42}}});
    q.add("parent", &data, JobOptions::new().job_id("p"))
        .await
        .unwrap();
    let seen: Seen = Default::default();
    let workers = rust_workers(&conn, &["q"], &seen).await;
    echomq_integration_tests::wait_until("parent parked", Duration::from_secs(10), async || {
        q.get_job_state("p").await.unwrap() == echomq::JobState::WaitingChildren
    })
    .await;
    let url = redis.url();
    let node = tokio::task::spawn_blocking(move || {
        js.flows("work", &url, "q2", json!({"queues": ["q2"]}))
    })
    .await
    .unwrap();
    assert_eq!(
        node.as_array().unwrap().len(),
        1,
        "the child ran once: {node}"
    );
    echomq_integration_tests::wait_until("parent completed", Duration::from_secs(10), async || {
        q.get_job_state("p").await.unwrap() == echomq::JobState::Completed
    })
    .await;
    close_workers(workers).await;
    let kid = format!("emq:q2:{}", node[0]["id"].as_str().unwrap());
    let runs: Vec<Json> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.children.clone())
        .collect();
    assert_eq!(
        runs,
        [json!({}), json!({ kid.clone(): 42 })],
        "two runs of the parent"
    );
    let job = q.get_job("p").await.unwrap().unwrap();
    assert_eq!(job.return_value, Some(json!({"children": {kid: 42}})));
}

/// The same pattern the other way: a Node processor spawns a child that a
/// Rust worker runs, and is resumed (WaitingChildrenError).
async fn node_parent_waits_for_a_child_run_by_rust(js: NodeBullmq) {
    let (redis, conn, q) = RedisServer::with_queue("q").await;
    let data = json!({"spawn": {"queue": "q2", "name": "kid", "data": {"mode": "ok", "ret": "v"}}});
    q.add("parent", &data, JobOptions::new().job_id("p"))
        .await
        .unwrap();
    let seen: Seen = Default::default();
    let workers = rust_workers(&conn, &["q2"], &seen).await;
    let url = redis.url();
    let node = tokio::task::spawn_blocking(move || {
        js.flows("work", &url, "q", json!({"queues": ["q"], "idleMs": 1000}))
    })
    .await
    .unwrap();
    close_workers(workers).await;
    assert_eq!(
        q.get_job_state("p").await.unwrap(),
        echomq::JobState::Completed
    );
    let kid_runs: Vec<Run> = seen.lock().unwrap().clone();
    assert_eq!(kid_runs.len(), 1, "the child ran once");
    let kid = format!("emq:q2:{}", kid_runs[0].id);
    let parent_runs: Vec<&Json> = node
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["children"])
        .collect();
    assert_eq!(parent_runs, [&json!({}), &json!({ kid: "v" })]);
}

/// The four failure options, each with the failing child on the Rust side
/// (queue q) and on the Node side (queue q2), its sibling on the other side.
/// Parents (queue q, Rust) end as BullMQ's rules say, every job runs once.
async fn failure_options_with_children_split_between_rust_and_node(js: NodeBullmq) {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let options = [
        "failParentOnFailure",
        "continueParentOnFailure",
        "ignoreDependencyOnFailure",
        "removeDependencyOnFailure",
    ];
    let mut flows = Vec::new();
    for opt in options {
        for (bad_q, good_q) in [("q", "q2"), ("q2", "q")] {
            let tag = format!("{opt}-{bad_q}");
            // The failing child fails twice; its retry waits (a backoff far
            // beyond the test) until its sibling is seen done, then is
            // promoted: a continued parent completes only without pending
            // children, so the order is made, not hoped for.
            flows.push(json!({
                "name": "parent", "queueName": "q", "data": {"mode": "ok", "ret": "p"}, "opts": {"jobId": format!("{tag}-p")},
                "children": [
                    {"name": "bad", "queueName": bad_q, "data": {"mode": "fail", "reason": "boom"},
                     "opts": {"jobId": format!("{tag}-bad"), opt: true, "attempts": 2, "backoff": 600_000}},
                    {"name": "good", "queueName": good_q, "data": {"mode": "ok", "ret": "g"}, "opts": {"jobId": format!("{tag}-good")}},
                ]
            }));
        }
    }
    let fp = FlowProducer::new(&conn);
    fp.add_bulk(
        flows
            .iter()
            .map(|f| FlowJob::from_json(f).unwrap())
            .collect(),
    )
    .await
    .unwrap();
    let seen: Seen = Default::default();
    let workers = rust_workers(&conn, &["q"], &seen).await;
    let url = redis.url();
    // The Node worker stays while q2 has delayed jobs (it leaves 4 s after
    // q2 is idle, or at its limit).
    let node = tokio::task::spawn_blocking(move || {
        js.flows(
            "work",
            &url,
            "q2",
            json!({"queues": ["q2"], "idleMs": 4000, "limitMs": 90000}),
        )
    });
    let q = Queue::new(&conn, "q").await.unwrap();
    let q2 = Queue::new(&conn, "q2").await.unwrap();
    let side = |name: &str| if name == "q" { &q } else { &q2 };
    echomq_integration_tests::wait_until(
        "every good child done and every bad one waiting for its retry",
        Duration::from_secs(60),
        async || {
            for opt in options {
                for (bad_q, good_q) in [("q", "q2"), ("q2", "q")] {
                    let tag = format!("{opt}-{bad_q}");
                    let good = side(good_q)
                        .get_job_state(&format!("{tag}-good"))
                        .await
                        .unwrap();
                    let bad = side(bad_q)
                        .get_job_state(&format!("{tag}-bad"))
                        .await
                        .unwrap();
                    if good != echomq::JobState::Completed || bad != echomq::JobState::Delayed {
                        return false;
                    }
                }
            }
            true
        },
    )
    .await;
    for opt in options {
        for bad_q in ["q", "q2"] {
            side(bad_q)
                .promote(&format!("{opt}-{bad_q}-bad"))
                .await
                .unwrap();
        }
    }
    let node = node.await.unwrap();
    let parents: Vec<String> = options
        .iter()
        .flat_map(|o| [format!("{o}-q-p"), format!("{o}-q2-p")])
        .collect();
    echomq_integration_tests::wait_until("parents finished", Duration::from_secs(20), async || {
        for p in &parents {
            let s = q.get_job_state(p).await.unwrap();
            if s != echomq::JobState::Completed && s != echomq::JobState::Failed {
                return false;
            }
        }
        true
    })
    .await;
    close_workers(workers).await;

    let rust_runs: Vec<Run> = seen.lock().unwrap().clone();
    let node_runs = node.as_array().unwrap();
    let runs_of = |id: &str| {
        rust_runs.iter().filter(|r| r.id == id).count()
            + node_runs.iter().filter(|r| r["id"] == id).count()
    };
    for opt in options {
        for bad_q in ["q", "q2"] {
            let tag = format!("{opt}-{bad_q}");
            let bad_key = format!("emq:{bad_q}:{tag}-bad");
            let good_q = if bad_q == "q" { "q2" } else { "q" };
            let good_key = format!("emq:{good_q}:{tag}-good");
            assert_eq!(runs_of(&format!("{tag}-good")), 1, "{tag}: good ran once");
            assert_eq!(
                runs_of(&format!("{tag}-bad")),
                2,
                "{tag}: bad ran its two attempts"
            );
            let parent = format!("{tag}-p");
            let state = q.get_job_state(&parent).await.unwrap();
            let ignored = q
                .flows()
                .get_ignored_children_failures(&parent)
                .await
                .unwrap();
            let values = q.flows().get_children_values(&parent).await.unwrap();
            let counts = q.flows().get_dependencies_count(&parent).await.unwrap();
            match opt {
                "failParentOnFailure" => {
                    assert_eq!(state, echomq::JobState::Failed, "{tag}");
                    assert_eq!(runs_of(&parent), 0, "{tag}: a failed parent never runs");
                    let job = q.get_job(&parent).await.unwrap().unwrap();
                    assert_eq!(
                        job.failed_reason.as_deref(),
                        Some(format!("child {bad_key} failed").as_str())
                    );
                    assert_eq!(counts.failed, 1, "{tag}");
                }
                _ => {
                    let why = q.get_job(&parent).await.unwrap().unwrap().failed_reason;
                    assert_eq!(state, echomq::JobState::Completed, "{tag}: {why:?}");
                    assert_eq!(runs_of(&parent), 1, "{tag}: the parent ran once");
                    assert_eq!(
                        values,
                        [(good_key.clone(), json!("g"))].into_iter().collect(),
                        "{tag}"
                    );
                    let run = rust_runs.iter().find(|r| r.id == parent).unwrap();
                    if opt == "removeDependencyOnFailure" {
                        assert!(ignored.is_empty(), "{tag}: {ignored:?}");
                    } else {
                        assert_eq!(
                            ignored,
                            [(bad_key.clone(), "boom".to_owned())].into_iter().collect(),
                            "{tag}"
                        );
                        assert_eq!(
                            run.ignored,
                            json!({ bad_key.clone(): "boom" }),
                            "{tag}: seen by the processor"
                        );
                        assert_eq!(counts.ignored, 1, "{tag}");
                    }
                }
            }
        }
    }
}

/// Removing inside a flow, both sides from the same flow: a middle node with
/// its subtree, a leaf (its parent's dependency goes), then obliterating one
/// of the flow's queues. Identical keyspaces after each side's calls.
async fn removing_in_a_flow_leaves_the_same_keyspace(js: NodeBullmq) {
    let t = now_ms();
    let flow = sample_flow(t);
    let ops = json!([
        ["q2", "remove", "mid", true],
        ["q", "remove", "late", false],
        ["q2", "obliterate"]
    ]);

    let node_redis = RedisServer::start();
    js.flows("add-flow", &node_redis.url(), "q", json!({ "flow": flow }));
    let node_out = js.flows("remove-ops", &node_redis.url(), "q", json!({ "ops": ops }));
    let node_state = snapshot(&node_redis.client().await).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    FlowProducer::new(&conn)
        .add(FlowJob::from_json(&flow).unwrap())
        .await
        .unwrap();
    let mut rust_out = Vec::new();
    for op in ops.as_array().unwrap() {
        // Like Node's, opening the Queue writes its meta hash.
        let q = Queue::new(&conn, op[0].as_str().unwrap()).await.unwrap();
        match op[1].as_str().unwrap() {
            "remove" => {
                let r = q
                    .remove(op[2].as_str().unwrap(), op[3].as_bool().unwrap())
                    .await
                    .unwrap();
                rust_out.push(json!(if r == echomq::queue::RemoveOutcome::Removed {
                    1
                } else {
                    0
                }));
            }
            _ => {
                q.obliterate(true).await.unwrap();
                rust_out.push(Json::Null);
            }
        }
    }
    let rust_state = snapshot(&rust_redis.client().await).await;
    assert_eq!(json!(rust_out), node_out);
    assert_same(js, &node_state, &rust_state).await;
}

/// `Queue::add` with `parent` and `on_failure` (once `add_child`) stores what Node's `queue.add` with `opts.parent`
/// stores (child hash, parent descriptor with the failure flag, the
/// parent's dependencies, events).
async fn add_child_matches_node_queue_add_with_parent(js: NodeBullmq) {
    let t = now_ms();
    let parent = json!({"name": "p", "queueName": "q", "data": {}, "opts": {"jobId": "p", "timestamp": t},
        "children": [{"name": "c1", "queueName": "q", "data": {}, "opts": {"jobId": "c1", "timestamp": t}}]});

    let node_redis = RedisServer::start();
    js.flows(
        "add-flow",
        &node_redis.url(),
        "q",
        json!({ "flow": parent }),
    );
    let opts = json!({"jobId": "c2", "timestamp": t, "parent": {"id": "p", "queue": "emq:q"}, "failParentOnFailure": true});
    js.bullmq(
        "ops",
        &node_redis.url(),
        "q2",
        json!({"ops": [["add", "c2", {"x": 1}, opts]]}),
    );
    let node_state = snapshot(&node_redis.client().await).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    FlowProducer::new(&conn)
        .add(FlowJob::from_json(&parent).unwrap())
        .await
        .unwrap();
    let q2 = Queue::new(&conn, "q2").await.unwrap();
    let id = q2
        .add(
            "c2",
            &json!({"x": 1}),
            JobOptions::new()
                .job_id("c2")
                .timestamp(t)
                .parent(echomq::flow_producer::ParentRef {
                    id: "p".into(),
                    queue: "emq:q".into(),
                })
                .on_failure(echomq::flow_producer::OnChildFailure::FailParent),
        )
        .await
        .unwrap();
    assert_eq!(id, "c2");
    let rust_state = snapshot(&rust_redis.client().await).await;
    assert_same(js, &node_state, &rust_state).await;
}

/// `Queue::add` with `options.parent` and a failure option stores what Node's
/// `queue.add(name, data, {parent, failParentOnFailure})` stores, the id from
/// the queue's counter included.
async fn queue_add_with_parent_matches_node(js: NodeBullmq) {
    let t = now_ms();
    let parent = json!({"name": "p", "queueName": "q", "data": {}, "opts": {"jobId": "p", "timestamp": t},
        "children": [{"name": "c1", "queueName": "q", "data": {}, "opts": {"jobId": "c1", "timestamp": t}}]});

    let node_redis = RedisServer::start();
    js.flows(
        "add-flow",
        &node_redis.url(),
        "q",
        json!({ "flow": parent }),
    );
    let opts = json!({"timestamp": t, "parent": {"id": "p", "queue": "emq:q"}, "removeDependencyOnFailure": true});
    js.bullmq(
        "ops",
        &node_redis.url(),
        "q2",
        json!({"ops": [["add", "c2", {"x": 1}, opts]]}),
    );
    let node_state = snapshot(&node_redis.client().await).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    FlowProducer::new(&conn)
        .add(FlowJob::from_json(&parent).unwrap())
        .await
        .unwrap();
    let q2 = Queue::new(&conn, "q2").await.unwrap();
    let id = q2
        .add(
            "c2",
            &json!({"x": 1}),
            JobOptions::new()
                .timestamp(t)
                .parent(echomq::flow_producer::ParentRef {
                    id: "p".into(),
                    queue: "emq:q".into(),
                })
                .on_failure(echomq::flow_producer::OnChildFailure::RemoveDependency),
        )
        .await
        .unwrap();
    assert_eq!(id, "1");
    let rust_state = snapshot(&rust_redis.client().await).await;
    assert_same(js, &node_state, &rust_state).await;
}

echomq_integration_tests::bullmq_matrix!(
    the_same_flow_leaves_the_same_keyspace,
    adding_under_an_existing_parent_matches_node,
    node_flow_runs_on_rust_workers,
    rust_flow_runs_on_node_workers,
    rust_parent_waits_for_a_child_run_by_node,
    node_parent_waits_for_a_child_run_by_rust,
    failure_options_with_children_split_between_rust_and_node,
    removing_in_a_flow_leaves_the_same_keyspace,
    add_child_matches_node_queue_add_with_parent,
    queue_add_with_parent_matches_node,
);
