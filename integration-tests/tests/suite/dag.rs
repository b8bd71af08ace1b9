//! DAG flows (docs/flows.md §DAGs, issue 43): refusals that write nothing, a
//! diamond run by EchoMQ workers and one whose upper nodes a BullMQ Node
//! worker runs, a tree-shaped DAG whose keyspace is Node's FlowProducer's,
//! the failure rules on extra parents, gated chunked writes, and a SIGKILLed
//! worker process in the middle of 200 diamonds.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use echomq::flow_producer::{DagError, DagNode, DagReleaser, DagReleaserArgs, DagReleaserMsg};
use echomq::worker::{processor_fn, JobContext};
use echomq::{Connection, FlowProducer, JobState, Queue, WorkerArgs, WorkerMsg};
use echomq_integration_tests::keyspace::{self, Mask};
use echomq_integration_tests::{
    events, keys, wait_until, NodeBullmq, NodeChild, NullSupervisor, RedisServer,
};
use fred::prelude::*;
use ractor::{call_t, Actor, ActorRef};
use serde_json::{json, Value as Json};

const WORKER_PROCESS: &str = env!("CARGO_BIN_EXE_worker_process");

/// What a refusal must be.
type Expect = fn(&DagError) -> bool;

fn node(id: &str, queue: &str, ret: Json, deps: &[&str]) -> DagNode {
    let mut n = DagNode::new(id, "n", queue, json!({"mode": "ok", "ret": ret}));
    for d in deps {
        n = n.depends_on(*d);
    }
    n
}

/// A -> (B, C, D) -> E: A to D in queue `upper`, E in `sink`; ids
/// prefixed by `tag`.
fn diamond(tag: &str, upper: &str, sink: &str) -> Vec<DagNode> {
    let id = |s: &str| format!("{tag}{s}");
    vec![
        node(&id("A"), upper, json!("a"), &[]),
        node(&id("B"), upper, json!("b"), &[&id("A")]),
        node(&id("C"), upper, json!("c"), &[&id("A")]),
        node(&id("D"), upper, json!("d"), &[&id("A")]),
        node(&id("E"), sink, json!("e"), &[&id("B"), &id("C"), &id("D")]),
    ]
}

async fn releaser(conn: &Connection, queue: &str) -> ActorRef<DagReleaserMsg> {
    let args = DagReleaserArgs::new(conn.clone(), queue)
        .sweep_interval(Duration::from_millis(200))
        .block(Duration::from_millis(200));
    Actor::spawn(None, DagReleaser, args).await.unwrap().0
}

/// In-process workers on `queues`; jobs behave as their data says.
async fn workers(conn: &Connection, queues: &[&str]) -> Vec<ActorRef<WorkerMsg>> {
    workers_with(conn, queues, 2).await
}

/// [`workers`] with this group commit (`0`: off, every finish a plain
/// moveToFinished, so no DAG node is handed over in its finish).
async fn workers_with(
    conn: &Connection,
    queues: &[&str],
    group_commit: usize,
) -> Vec<ActorRef<WorkerMsg>> {
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let mut out = Vec::new();
    for name in queues {
        let q = Queue::new(conn, name).await.unwrap();
        let p =
            processor_fn(
                |job: JobContext| async move { echomq_integration_tests::behave(&job).await },
            );
        let mut args = WorkerArgs::new(q, p);
        args.options.concurrency = 4;
        args.options.drain_delay = Duration::from_millis(200);
        args.options.group_commit = group_commit;
        let (w, _) = echomq_integration_tests::spawn_worker(sup.get_cell(), args)
            .await
            .unwrap();
        out.push(w);
    }
    out
}

async fn close(workers: Vec<ActorRef<WorkerMsg>>) {
    for w in workers {
        let _ = call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(5));
    }
}

async fn state(conn: &Connection, queue: &str, id: &str) -> JobState {
    Queue::new(conn, queue)
        .await
        .unwrap()
        .get_job_state(id)
        .await
        .unwrap()
}

async fn children_values(conn: &Connection, queue: &str, id: &str) -> BTreeMap<String, Json> {
    Queue::new(conn, queue)
        .await
        .unwrap()
        .flows()
        .get_children_values(id)
        .await
        .unwrap()
}

/// Position in `queue`'s stream of each job's first `active` and last
/// `completed` event.
async fn positions(
    c: &Client,
    queue: &str,
) -> (
    HashMap<String, usize>,
    HashMap<String, usize>,
    HashMap<String, usize>,
) {
    let mut active = HashMap::new();
    let mut completed = HashMap::new();
    let mut completions = HashMap::new();
    for (i, (name, fields)) in events(c, &format!("emq:{queue}:events"))
        .await
        .into_iter()
        .enumerate()
    {
        let Some(id) = fields
            .iter()
            .find(|(k, _)| k == "jobId")
            .map(|(_, v)| v.clone())
        else {
            continue;
        };
        match name.as_str() {
            "active" => {
                active.entry(id).or_insert(i);
            }
            "completed" => {
                *completions.entry(id.clone()).or_insert(0) += 1;
                completed.insert(id, i);
            }
            _ => {}
        }
    }
    (active, completed, completions)
}

/// No node became active before its last dependency completed (stream
/// order of one queue: Redis's order).
fn assert_order(
    nodes: &[DagNode],
    active: &HashMap<String, usize>,
    completed: &HashMap<String, usize>,
) {
    for n in nodes {
        let started = active[&n.id];
        for d in &n.depends_on {
            assert!(
                completed[d] < started,
                "{} became active (event {started}) before its dependency {d} completed (event {})",
                n.id,
                completed[d]
            );
        }
    }
}

async fn set_max_events(c: &Client, queue: &str, n: u64) {
    let _: () = c
        .hset(format!("emq:{queue}:meta"), ("opts.maxLenEvents", n))
        .await
        .unwrap();
}

/// Each refusal is typed and leaves the keyspace as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_dag_writes_nothing() {
    let (redis, conn, q) = RedisServer::with_queue("d").await;
    let c = redis.client().await;
    q.add(
        "existing",
        &json!({}),
        echomq::JobOptions::new().job_id("taken"),
    )
    .await
    .unwrap();
    let before = keyspace::snapshot(&c, "d", Mask::default()).await;
    let all_before = keys(&c, "emq:*").await;
    let fp = FlowProducer::new(&conn);
    let ok = diamond("", "d", "d");

    let mut cycle = ok.clone();
    cycle[0].depends_on.push("E".into());
    let mut unknown = ok.clone();
    unknown[4].depends_on.push("Z".into());
    let mut duplicate = ok.clone();
    duplicate[3].id = "C".into();
    let mut bad_queue = ok.clone();
    bad_queue[2].queue = "bad:queue".into();
    let mut bad_id = ok.clone();
    bad_id[1].id = "7".into();
    bad_id[4].depends_on[0] = "7".into();
    let mut taken = ok.clone();
    taken[4].id = "taken".into();

    let cases: Vec<(&str, Vec<DagNode>, Expect)> = vec![
        (
            "cycle",
            cycle,
            |e| matches!(e, DagError::Cycle(ids) if ids.len() == 5),
        ),
        (
            "unknown",
            unknown,
            |e| matches!(e, DagError::UnknownDependency { dependency, .. } if dependency == "Z"),
        ),
        (
            "duplicate",
            duplicate,
            |e| matches!(e, DagError::DuplicateId(id) if id == "C"),
        ),
        (
            "bad queue",
            bad_queue,
            |e| matches!(e, DagError::InvalidNode { id, .. } if id == "C"),
        ),
        (
            "integer id",
            bad_id,
            |e| matches!(e, DagError::InvalidNode { id, .. } if id == "7"),
        ),
        (
            "taken id",
            taken,
            |e| matches!(e, DagError::IdTaken { id, .. } if id == "taken"),
        ),
    ];
    for (what, nodes, expect) in cases {
        let err = fp.add_dag(nodes).await.unwrap_err();
        assert!(expect(&err), "{what}: unexpected {err:?}");
        assert_eq!(keys(&c, "emq:*").await, all_before, "{what} wrote keys");
        assert_eq!(
            keyspace::snapshot(&c, "d", Mask::default()).await,
            before,
            "{what} changed the queue"
        );
    }
    // The same DAG, valid, is written (the checks above refused only the faults).
    fp.add_dag(ok).await.unwrap();
    assert_ne!(keys(&c, "emq:*").await, all_before);
}

/// The diamond on EchoMQ workers: every node runs once, after its last
/// dependency; each node sees the values of all its dependencies, the ones
/// BullMQ records (A for B, B/C/D for E) and the extra ones (A for C and D).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_runs_in_dependency_order_on_echomq_workers() {
    let (redis, conn, _q) = RedisServer::with_queue("d").await;
    let c = redis.client().await;
    let nodes = diamond("", "d", "d");
    let added = FlowProducer::new(&conn)
        .add_dag(nodes.clone())
        .await
        .unwrap();
    assert_eq!((added.bullmq_edges, added.extra_edges), (4, 2));
    // What a BullMQ client reads: C waits for A too, and the flow below E
    // (BullMQ's getFlow, `echomq flow`) is the DAG unrolled: A below each of
    // B, C and D.
    assert_eq!(state(&conn, "d", "C").await, JobState::WaitingChildren);
    let below = |f: &echomq::queue::FlowNode| {
        let mut v: Vec<(String, Vec<String>)> = f
            .children
            .iter()
            .map(|c| {
                let g = c.children.iter().map(|g| g.job.id.clone()).collect();
                (c.job.id.clone(), g)
            })
            .collect();
        v.sort();
        v
    };
    let q = Queue::new(&conn, "d").await.unwrap();
    let flow = q.flows().get_flow("E", 10, 20).await.unwrap().unwrap();
    let unrolled = vec![
        ("B".to_owned(), vec!["A".to_owned()]),
        ("C".to_owned(), vec!["A".to_owned()]),
        ("D".to_owned(), vec!["A".to_owned()]),
    ];
    assert_eq!(below(&flow), unrolled);
    let rel = releaser(&conn, "d").await;
    let ws = workers(&conn, &["d"]).await;
    wait_until("E completes", Duration::from_secs(30), async || {
        state(&conn, "d", "E").await == JobState::Completed
    })
    .await;
    close(ws).await;
    rel.stop(None);

    let (active, completed, completions) = positions(&c, "d").await;
    assert_order(&nodes, &active, &completed);
    assert!(completions.values().all(|&n| n == 1), "{completions:?}");
    assert_eq!(completions.len(), 5);
    for mid in ["B", "C", "D"] {
        assert_eq!(
            children_values(&conn, "d", mid).await,
            BTreeMap::from([("emq:d:A".to_owned(), json!("a"))]),
            "{mid}"
        );
    }
    assert_eq!(
        children_values(&conn, "d", "E").await,
        BTreeMap::from([
            ("emq:d:B".to_owned(), json!("b")),
            ("emq:d:C".to_owned(), json!("c")),
            ("emq:d:D".to_owned(), json!("d")),
        ])
    );
    let flow = q.flows().get_flow("E", 10, 20).await.unwrap().unwrap();
    assert_eq!(below(&flow), unrolled, "the finished DAG reads the same");
    echomq_integration_tests::assert_consistent(&conn, "d").await;
    // Handed over: nothing left for a releaser.
    assert!(!echomq_integration_tests::state::exists(&c, "emq:d:A:dag:parents").await);
    assert_eq!(c.scard::<u64, _>("emq:d:dag:pending").await.unwrap(), 0);
}

/// With no DagReleaser anywhere, an EchoMQ worker's own finish hands a node
/// to its extra parents in the same call: A's completion puts B (its BullMQ
/// parent) and C and D (its extra parents) in wait together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echomq_finish_hands_a_node_to_its_extra_parents_in_the_same_call() {
    let (redis, conn, _q) = RedisServer::with_queue("at").await;
    let c = redis.client().await;
    let nodes = diamond("", "at", "at");
    FlowProducer::new(&conn)
        .add_dag(nodes.clone())
        .await
        .unwrap();
    // The mark the worker routes by, on A only (the one node with extra parents).
    let opts: String = c.hget("emq:at:A", "opts").await.unwrap();
    assert!(opts.contains(r#""emqDag":1"#), "{opts}");
    let opts: String = c.hget("emq:at:B", "opts").await.unwrap();
    assert!(!opts.contains("emqDag"), "{opts}");
    let ws = workers(&conn, &["at"]).await;
    wait_until("E completes", Duration::from_secs(30), async || {
        state(&conn, "at", "E").await == JobState::Completed
    })
    .await;
    close(ws).await;
    let (active, completed, completions) = positions(&c, "at").await;
    assert_order(&nodes, &active, &completed);
    assert!(completions.values().all(|&n| n == 1), "{completions:?}");
    // No DagReleaser ran: only A's finish can have handed it to C and D
    // (with group commit off they stay waiting: the audit test below).
    assert_eq!(
        children_values(&conn, "at", "C").await,
        BTreeMap::from([("emq:at:A".to_owned(), json!("a"))])
    );
    assert_eq!(c.scard::<u64, _>("emq:at:dag:pending").await.unwrap(), 0);
    echomq_integration_tests::assert_consistent(&conn, "at").await;
}

/// A, B, C and D run by a BullMQ 6.7.6 Node worker, E by EchoMQ: A's extra
/// parents (C, D) are released by the DagReleaser following the Node
/// worker's `completed` events, E by BullMQ's own finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_worker_runs_the_upper_nodes_of_a_diamond() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let nodes = diamond("", "n", "d");
    FlowProducer::new(&conn)
        .add_dag(nodes.clone())
        .await
        .unwrap();
    let rel = releaser(&conn, "n").await;
    let ws = workers(&conn, &["d"]).await;
    let url = redis.url();
    let run = tokio::task::spawn_blocking(move || {
        NodeBullmq::V6_7.work_until(
            &url,
            "n",
            json!({"ids": ["A", "B", "C", "D"], "deadlineMs": 30000}),
        )
    })
    .await
    .unwrap();
    assert!(run.done, "the Node worker did not run A-D: {:?}", run.ids());
    let mut ran = run.ids();
    ran.sort();
    assert_eq!(
        ran,
        ["A", "B", "C", "D"],
        "each upper node ran once, on Node"
    );
    wait_until("E completes", Duration::from_secs(20), async || {
        state(&conn, "d", "E").await == JobState::Completed
    })
    .await;
    close(ws).await;
    rel.stop(None);
    let (active, completed, _) = positions(&c, "n").await;
    assert_order(&nodes[..4], &active, &completed);
    for mid in ["C", "D"] {
        let v = children_values(&conn, "n", mid).await;
        assert_eq!(v.keys().collect::<Vec<_>>(), ["emq:n:A"], "{mid}");
    }
    let v = children_values(&conn, "d", "E").await;
    assert_eq!(
        v.keys().cloned().collect::<Vec<_>>(),
        ["emq:n:B", "emq:n:C", "emq:n:D"]
    );
}

/// A tree-shaped DAG is BullMQ's flow on the wire: the same keyspace as
/// Node's FlowProducer adding the same tree (two queues, failure options,
/// delay and priority), and no extension key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_shaped_dag_leaves_node_flow_producers_keyspace() {
    let t = 1_700_000_000_000u64;
    let o = |id: &str, extra: Json| {
        let mut m = json!({"jobId": id, "timestamp": t});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    };
    let flow = json!({
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
    });
    // The same tree as a DAG: each node depends on its children.
    fn flatten(v: &Json, out: &mut Vec<Json>) {
        let mut n = v.clone();
        let children = n["children"].as_array().cloned().unwrap_or_default();
        n.as_object_mut().unwrap().remove("children");
        n["id"] = n["opts"]["jobId"].clone();
        n["dependsOn"] = json!(children
            .iter()
            .map(|c| c["opts"]["jobId"].clone())
            .collect::<Vec<_>>());
        out.push(n);
        for c in &children {
            flatten(c, out);
        }
    }
    let mut dag = Vec::new();
    flatten(&flow, &mut dag);
    let nodes = DagNode::list_from_json(&json!({ "dag": dag })).unwrap();

    let node_redis = RedisServer::start();
    NodeBullmq::V6_7.flows("add-flow", &node_redis.url(), "q", json!({ "flow": flow }));
    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    let added = FlowProducer::new(&conn).add_dag(nodes).await.unwrap();
    assert_eq!((added.bullmq_edges, added.extra_edges), (5, 0));
    let (nc, rc) = (node_redis.client().await, rust_redis.client().await);
    for queue in ["q", "q2"] {
        keyspace::assert_same(
            queue,
            &keyspace::snapshot(&nc, queue, Mask::default()).await,
            &keyspace::snapshot(&rc, queue, Mask::default()).await,
        );
    }
    assert_eq!(keys(&nc, "emq:*").await, keys(&rc, "emq:*").await);
}

/// A failed dependency's rule applies to every node waiting for it, its
/// extra parents too: fail parent fails them all; ignore and continue let
/// them all go on with the failure recorded; remove lets them go on without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dependency_applies_its_rule_to_every_parent() {
    let (redis, conn, _q) = RedisServer::with_queue("f").await;
    let _c = redis.client().await;
    let failing = |id: &str, rule| {
        DagNode::new(id, "n", "f", json!({"mode": "fail", "reason": "boom"})).on_failure(rule)
    };
    use echomq::flow_producer::OnChildFailure;
    let nodes = vec![
        failing("A", OnChildFailure::FailParent),
        node("B", "f", json!("b"), &["A"]),
        node("C", "f", json!("c"), &["A"]),
        node("D", "f", json!("d"), &["A"]),
        failing("X", OnChildFailure::IgnoreDependency),
        node("Y", "f", json!("y"), &["X"]),
        node("Z", "f", json!("z"), &["X"]),
        failing("R", OnChildFailure::RemoveDependency),
        node("R1", "f", json!("r1"), &["R"]),
        node("R2", "f", json!("r2"), &["R"]),
        failing("K", OnChildFailure::ContinueParent),
        node("K1", "f", json!("k1"), &["K"]),
        node("K2", "f", json!("k2"), &["K"]),
    ];
    FlowProducer::new(&conn).add_dag(nodes).await.unwrap();
    let rel = releaser(&conn, "f").await;
    let ws = workers(&conn, &["f"]).await;
    wait_until("every node finishes", Duration::from_secs(30), async || {
        for (id, want) in [
            ("B", JobState::Failed),
            ("C", JobState::Failed),
            ("D", JobState::Failed),
            ("Y", JobState::Completed),
            ("Z", JobState::Completed),
            ("R1", JobState::Completed),
            ("R2", JobState::Completed),
            ("K1", JobState::Completed),
            ("K2", JobState::Completed),
        ] {
            if state(&conn, "f", id).await != want {
                return false;
            }
        }
        true
    })
    .await;
    close(ws).await;
    rel.stop(None);
    let q = Queue::new(&conn, "f").await.unwrap();
    for id in ["B", "C", "D"] {
        let job = q.get_job(id).await.unwrap().unwrap();
        assert!(
            job.failed_reason
                .as_deref()
                .is_some_and(|r| r.contains("emq:f:A")),
            "{id}: {:?}",
            job.failed_reason
        );
    }
    // Ignore and continue record the failure for each parent; remove drops
    // the dependency without a trace.
    for (ids, failed) in [
        (["Y", "Z"], Some("X")),
        (["K1", "K2"], Some("K")),
        (["R1", "R2"], None),
    ] {
        for id in ids {
            let ignored = q.flows().get_ignored_children_failures(id).await.unwrap();
            let want = failed
                .map(|f| BTreeMap::from([(format!("emq:f:{f}"), "boom".to_owned())]))
                .unwrap_or_default();
            assert_eq!(ignored, want, "{id}");
            assert!(children_values(&conn, "f", id).await.is_empty(), "{id}");
        }
    }
}

/// Written in chunks of 3 nodes, 20 diamonds (100 nodes) can run only once
/// the last chunk is in: until the gates are lifted no node is waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_dag_runs_nothing_before_it_is_whole() {
    let (redis, conn, _q) = RedisServer::with_queue("g").await;
    let c = redis.client().await;
    let mut nodes = Vec::new();
    for i in 0..20 {
        nodes.extend(diamond(&format!("{i}-"), "g", "g"));
    }
    let added = FlowProducer::new(&conn)
        .add_dag_in_chunks(nodes.clone(), 3)
        .await
        .unwrap();
    // Every `waiting` event of a root comes after the last `added`.
    let evs = events(&c, "emq:g:events").await;
    let last_added = evs.iter().rposition(|(n, _)| n == "added").unwrap();
    let first_waiting = evs.iter().position(|(n, _)| n == "waiting").unwrap();
    assert!(
        first_waiting > last_added,
        "a root was released before the whole DAG was written"
    );
    assert_eq!(c.llen::<u64, _>("emq:g:wait").await.unwrap(), 20);
    assert_eq!(
        added.transactions,
        34 + 7,
        "100/3 node chunks, 20/3 gate lifts"
    );
    let rel = releaser(&conn, "g").await;
    let ws = workers(&conn, &["g"]).await;
    wait_until(
        "every node completes",
        Duration::from_secs(60),
        async || c.zcard::<u64, _>("emq:g:completed").await.unwrap() == 100,
    )
    .await;
    close(ws).await;
    rel.stop(None);
    let (active, completed, _) = positions(&c, "g").await;
    assert_order(&nodes, &active, &completed);
}

/// 200 diamonds run by a worker process SIGKILLed mid-way (and the releaser
/// stopped with it, so finishes pass unseen), then by a second process with
/// a new releaser: every node completes exactly once, none before its last
/// dependency, nothing waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_in_200_diamonds_loses_nothing() {
    const DIAMONDS: usize = 200;
    const N: u64 = (DIAMONDS * 5) as u64;
    let (redis, conn, _q) = RedisServer::with_queue("k").await;
    let c = redis.client().await;
    set_max_events(&c, "k", 1_000_000).await;
    let mut nodes = Vec::new();
    for i in 0..DIAMONDS {
        nodes.extend(diamond(&format!("{i}-"), "k", "k"));
    }
    for n in &mut nodes {
        n.data = json!({"mode": "sleep", "ms": 5, "ret": n.id});
    }
    FlowProducer::new(&conn)
        .add_dag(nodes.clone())
        .await
        .unwrap();
    let rel = releaser(&conn, "k").await;
    let opts = json!({"concurrency": 8, "verbose": true, "lockDuration": 1000,
                      "stalledInterval": 300, "drainDelay": 200});
    let mut victim = NodeChild::spawn_rust_worker(WORKER_PROCESS, &redis.url(), "k", opts.clone());
    // Past the first diamonds' middle nodes, so extra parents were released.
    for _ in 0..300 {
        victim.wait_line(Duration::from_secs(60), |v| v["ev"] == "start");
    }
    victim.kill();
    rel.stop(None);
    let outage_from = echomq_integration_tests::timeline::now_ms(&c).await;
    let held: Vec<String> = c.lrange("emq:k:active", 0, -1).await.unwrap();
    assert!(
        !held.is_empty(),
        "the kill met no active job: the test proves nothing"
    );
    let done_at_kill: u64 = c.zcard("emq:k:completed").await.unwrap();
    assert!(done_at_kill < N, "killed after the work was done");

    let survivor = NodeChild::spawn_rust_worker(WORKER_PROCESS, &redis.url(), "k", opts);
    let rel = releaser(&conn, "k").await;
    let outage_to = echomq_integration_tests::timeline::now_ms(&c).await;
    wait_until(
        "every node completes",
        Duration::from_secs(120),
        async || c.zcard::<u64, _>("emq:k:completed").await.unwrap() == N,
    )
    .await;
    let _ = survivor.finish();
    rel.stop(None);
    assert_eq!(c.zcard::<u64, _>("emq:k:failed").await.unwrap(), 0);
    assert_eq!(
        c.zcard::<u64, _>("emq:k:waiting-children").await.unwrap(),
        0
    );
    assert_eq!(c.scard::<u64, _>("emq:k:dag:pending").await.unwrap(), 0);
    echomq_integration_tests::assert_consistent(&conn, "k").await;
    let (active, completed, completions) = positions(&c, "k").await;
    assert_eq!(completions.len() as u64, N);
    assert!(
        completions.values().all(|&n| n == 1),
        "a node completed twice"
    );
    assert_order(&nodes, &active, &completed);
    // Release latency on Redis's clock, from A's `completed` to the
    // `waiting` of B (BullMQ's parent, released inside A's finish) and of C
    // and D (extra parents, released by the DagReleaser), over the diamonds
    // whose release did not span the outage (no releaser ran from the kill
    // until the second one started: those wait for its first sweep).
    let stamps = echomq_integration_tests::timeline::stamps(&c, "emq:k:events").await;
    let at = |name: &str, id: &str| {
        stamps
            .iter()
            .rev()
            .find(|s| s.name == name && s.job_id == id)
            .map(|s| s.at_ms)
    };
    let (mut bullmq, mut extra) = (Vec::new(), Vec::new());
    for i in 0..DIAMONDS {
        let Some(done) = at("completed", &format!("{i}-A")) else {
            continue;
        };
        let outside = |w: u64| w < outage_from || done > outage_to;
        if let Some(w) = at("waiting", &format!("{i}-B")).filter(|&w| outside(w)) {
            bullmq.push(w.saturating_sub(done));
        }
        for m in ["C", "D"] {
            if let Some(w) = at("waiting", &format!("{i}-{m}")).filter(|&w| outside(w)) {
                extra.push(w.saturating_sub(done));
            }
        }
    }
    let pct = |v: &mut Vec<u64>, p: f64| {
        v.sort_unstable();
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    eprintln!(
        "dag release latency (ms, Redis clock): BullMQ parent median {} p99 {} ({} samples); extra parents median {} p99 {} ({} samples)",
        pct(&mut bullmq, 0.5),
        pct(&mut bullmq, 0.99),
        bullmq.len(),
        pct(&mut extra, 0.5),
        pct(&mut extra, 0.99),
        extra.len()
    );
    for i in [0, DIAMONDS / 2, DIAMONDS - 1] {
        let v = children_values(&conn, "k", &format!("{i}-D")).await;
        assert_eq!(
            v,
            BTreeMap::from([(format!("emq:k:{i}-A"), json!(format!("{i}-A")))])
        );
    }
}

/// The audit's DAG check: a completed node no releaser handed over is a
/// violation at quiescence (D1), none once a releaser ran; the diamond is
/// then consistent for every check of the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_finds_a_node_no_releaser_handed_over() {
    let (redis, conn, _q) = RedisServer::with_queue("a").await;
    let c = redis.client().await;
    FlowProducer::new(&conn)
        .add_dag(diamond("", "a", "a"))
        .await
        .unwrap();
    // Group commit off: A's finish is BullMQ's plain moveToFinished, which
    // knows only its first parent, as when a Node worker finishes it.
    let ws = workers_with(&conn, &["a"], 0).await;
    wait_until("B completes", Duration::from_secs(30), async || {
        state(&conn, "a", "B").await == JobState::Completed
    })
    .await;
    close(ws).await;
    assert_eq!(state(&conn, "a", "C").await, JobState::WaitingChildren);
    let audit = |quiescent| {
        let conn = conn.clone();
        async move {
            echomq::audit::Audit::new(&conn, "a")
                .options(echomq::audit::AuditOptions {
                    quiescent,
                    ..Default::default()
                })
                .run()
                .await
                .unwrap()
        }
    };
    let report = audit(true).await;
    let d1: Vec<_> = report
        .violations
        .iter()
        .filter(|v| v.check == "D1")
        .collect();
    assert_eq!(d1.len(), 1, "{:?}", report.violations);
    assert_eq!(d1[0].job_id.as_deref(), Some("A"));
    assert!(d1[0].hard);
    assert!(
        audit(false).await.is_consistent(),
        "D1 is a quiescent check"
    );

    let rel = releaser(&conn, "a").await;
    let ws = workers(&conn, &["a"]).await;
    wait_until("E completes", Duration::from_secs(30), async || {
        state(&conn, "a", "E").await == JobState::Completed
    })
    .await;
    close(ws).await;
    rel.stop(None);
    echomq_integration_tests::assert_consistent(&conn, "a").await;
    let _ = c;
}

/// 200 diamonds run by an EchoMQ worker process SIGSTOPped past its lock
/// while it holds nodes, then let go, and a BullMQ 6.7.6 Node worker that
/// recovers the held nodes and runs them: the late finishes are refused;
/// every node completes exactly once, none before its last dependency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_worker_beside_a_node_worker_in_200_diamonds_finishes_nothing_twice() {
    use echomq_integration_tests::chaos::fleet::Proc;
    const DIAMONDS: usize = 200;
    const N: u64 = (DIAMONDS * 5) as u64;
    let (redis, conn, _q) = RedisServer::with_queue("s").await;
    let c = redis.client().await;
    set_max_events(&c, "s", 1_000_000).await;
    let mut nodes = Vec::new();
    for i in 0..DIAMONDS {
        nodes.extend(diamond(&format!("{i}-"), "s", "s"));
    }
    for n in &mut nodes {
        n.data = json!({"mode": "sleep", "ms": 5, "ret": n.id});
    }
    FlowProducer::new(&conn)
        .add_dag(nodes.clone())
        .await
        .unwrap();
    let rel = releaser(&conn, "s").await;
    let opts = json!({"concurrency": 8, "verbose": true, "lockDuration": 1000,
                      "stalledInterval": 300, "drainDelay": 200});
    let bin = std::path::Path::new(WORKER_PROCESS);
    let mut victim = Proc::rust(bin, &redis.url(), "s", opts.clone()).await;
    for _ in 0..100 {
        victim
            .wait_line(Duration::from_secs(60), |v| v["ev"] == "start")
            .await
            .expect("the victim starts jobs");
    }
    assert!(victim.freeze(), "SIGSTOP did not stop the victim");
    let held: Vec<String> = c.lrange("emq:s:active", 0, -1).await.unwrap();
    assert!(
        !held.is_empty(),
        "the stop met no active job: the test proves nothing"
    );
    // The survivor is a BullMQ 6.7.6 Node worker: its stalled check
    // recovers the EchoMQ worker's nodes, the DagReleaser hands over the
    // nodes it finishes.
    let survivor = Proc::node(
        &redis.url(),
        "s",
        json!({"concurrency": 8, "lockDuration": 1000, "stalledInterval": 300,
               "name": "node-survivor"}),
    )
    .await;
    // Past its lock: the held nodes are recovered as stalled and run again.
    wait_until(
        "the held nodes are recovered",
        Duration::from_secs(60),
        async || {
            let evs = events(&c, "emq:s:events").await;
            held.iter().all(|id| {
                evs.iter()
                    .any(|(n, f)| n == "stalled" && f.iter().any(|(k, v)| k == "jobId" && v == id))
            })
        },
    )
    .await;
    assert!(victim.thaw(), "SIGCONT did not wake the victim");
    wait_until(
        "every node completes",
        Duration::from_secs(120),
        async || c.zcard::<u64, _>("emq:s:completed").await.unwrap() == N,
    )
    .await;
    assert!(survivor.close(Duration::from_secs(20)).await);
    assert!(victim.close(Duration::from_secs(20)).await);
    rel.stop(None);
    assert_eq!(c.zcard::<u64, _>("emq:s:failed").await.unwrap(), 0);
    assert_eq!(c.scard::<u64, _>("emq:s:dag:pending").await.unwrap(), 0);
    // Both sides ran nodes, the held ones on Node.
    let mut by_node = 0;
    for n in &nodes {
        let pb: Option<String> = c.hget(format!("emq:s:{}", n.id), "pb").await.unwrap();
        if pb.as_deref() == Some("node-survivor") {
            by_node += 1;
        }
    }
    assert!(
        by_node > 0 && by_node < N,
        "{by_node} of {N} nodes run by Node"
    );
    let (active, completed, completions) = positions(&c, "s").await;
    assert_eq!(completions.len() as u64, N);
    assert!(
        completions.values().all(|&n| n == 1),
        "a node completed twice"
    );
    assert_order(&nodes, &active, &completed);
    echomq_integration_tests::assert_consistent(&conn, "s").await;
}

/// A DAG of 10 000 nodes (2 000 diamonds) goes out in bounded transactions
/// (200 nodes each, then the gates), and no node is released before the
/// last node is written. Prints the add cost per node against the same
/// number of nodes added as BullMQ trees (`add_bulk`, 40 trees of 5 per call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10000_node_dag_is_written_in_bounded_chunks() {
    const DIAMONDS: usize = 2_000;
    let (redis, conn, _q) = RedisServer::with_queue("big").await;
    let c = redis.client().await;
    set_max_events(&c, "big", 1_000_000).await;
    let mut nodes = Vec::new();
    for i in 0..DIAMONDS {
        nodes.extend(diamond(&format!("{i}-"), "big", "big"));
    }
    let t0 = std::time::Instant::now();
    let added = FlowProducer::new(&conn).add_dag(nodes).await.unwrap();
    let dag_time = t0.elapsed();
    assert_eq!(added.nodes, 10_000);
    assert_eq!(
        added.transactions,
        50 + 10,
        "10 000/200 node chunks, 2 000/200 gate lifts"
    );
    let evs = events(&c, "emq:big:events").await;
    let last_added = evs.iter().rposition(|(n, _)| n == "added").unwrap();
    let first_waiting = evs.iter().position(|(n, _)| n == "waiting").unwrap();
    assert!(
        first_waiting > last_added,
        "a node was released before the DAG was whole"
    );
    assert_eq!(
        c.llen::<u64, _>("emq:big:wait").await.unwrap(),
        DIAMONDS as u64
    );
    assert_eq!(
        c.zcard::<u64, _>("emq:big:waiting-children").await.unwrap(),
        8_000
    );

    // The same number of nodes as trees: E over B, C, D, with A under B.
    let fp = FlowProducer::new(&conn);
    let tree = |i: usize| {
        let j = |s: &str| {
            echomq::FlowJob::new("n", "trees", json!({"mode": "ok"}))
                .options(echomq::JobOptions::new().job_id(format!("{i}-{s}")))
        };
        j("E")
            .child(j("B").child(j("A")))
            .child(j("C"))
            .child(j("D"))
    };
    let t0 = std::time::Instant::now();
    for part in (0..DIAMONDS).collect::<Vec<_>>().chunks(40) {
        fp.add_bulk(part.iter().map(|&i| tree(i)).collect())
            .await
            .unwrap();
    }
    let tree_time = t0.elapsed();
    eprintln!(
        "add cost per node: DAG {:.1} µs (2 extra edges per diamond, gated), BullMQ trees {:.1} µs",
        dag_time.as_micros() as f64 / 10_000.0,
        tree_time.as_micros() as f64 / 10_000.0
    );
}

/// A DagReleaser under a Host: crashed, it is restarted from its args, and
/// the new one hands a diamond's A over (no other releaser runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarts_a_crashed_dag_releaser() {
    let (_redis, conn, _q) = RedisServer::with_queue("hr").await;
    let host = echomq::Host::start().await.unwrap();
    let args = DagReleaserArgs::new(conn.clone(), "hr")
        .sweep_interval(Duration::from_millis(200))
        .block(Duration::from_millis(200));
    let rel = host.add_dag_releaser(args).await.unwrap();
    let first = rel.actor().await.unwrap();
    first.cast(DagReleaserMsg::Crash).unwrap();
    wait_until(
        "the releaser restarted",
        Duration::from_secs(10),
        async || {
            rel.actor()
                .await
                .is_ok_and(|a| a.get_id() != first.get_id())
        },
    )
    .await;
    let status = host.status().await.unwrap();
    assert_eq!(status.restarts, 1);
    assert_eq!(
        status.recent.last().map(|(_, k)| *k),
        Some(echomq::supervision::ChildKind::DagReleaser)
    );

    let nodes = diamond("", "hr", "hr");
    FlowProducer::new(&conn).add_dag(nodes).await.unwrap();
    // Group commit off: the hand-over is left to the restarted releaser.
    let ws = workers_with(&conn, &["hr"], 0).await;
    wait_until("E completes", Duration::from_secs(30), async || {
        state(&conn, "hr", "E").await == JobState::Completed
    })
    .await;
    close(ws).await;
    assert_eq!(rel.stats().await.unwrap().handed_over, 1);
    let report = host.close(Duration::from_secs(5)).await.unwrap();
    assert!(report.worker_sets.is_empty());
    echomq_integration_tests::assert_consistent(&conn, "hr").await;
}

/// `echomq work` starts a releaser on every queue: on a queue without DAG
/// nodes it reads no events, only looks for `{P}dag:pending`; the first
/// DAG node several nodes wait for wakes it, and it follows the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releaser_reads_no_events_until_its_queue_has_dag_nodes() {
    use echomq_integration_tests::scale::Monitor;
    let (redis, conn, q) = RedisServer::with_queue("dorm").await;
    let c = redis.client().await;
    let m = Monitor::start(redis.port(), &c).await;
    let rel = releaser(&conn, "dorm").await;
    for i in 0..50 {
        q.add("plain", &json!({ "i": i }), echomq::JobOptions::new())
            .await
            .unwrap();
    }
    let mut calls = Vec::new();
    wait_until(
        "three looks for DAG nodes",
        Duration::from_secs(10),
        async || {
            calls.extend(m.take(&c).await);
            calls
                .iter()
                .filter(|c| {
                    c.command == "EXISTS" && c.args.iter().any(|a| a == "emq:dorm:dag:pending")
                })
                .count()
                >= 3
        },
    )
    .await;
    assert!(
        !calls.iter().any(|c| c.command == "XREAD"),
        "the releaser read the events of a queue without DAG nodes"
    );
    assert_eq!(
        call_t!(rel, DagReleaserMsg::GetStats, 5000).unwrap().rounds,
        0
    );
    // A diamond: A has extra parents, so dag:pending appears.
    FlowProducer::new(&conn)
        .add_dag(diamond("", "dorm", "dorm"))
        .await
        .unwrap();
    wait_until("the stream followed", Duration::from_secs(10), async || {
        m.take(&c).await.iter().any(|c| c.command == "XREAD")
    })
    .await;
    let ws = workers(&conn, &["dorm"]).await;
    wait_until("E completes", Duration::from_secs(30), async || {
        state(&conn, "dorm", "E").await == JobState::Completed
    })
    .await;
    close(ws).await;
    rel.cast(DagReleaserMsg::Close).unwrap();
}

/// Every key of a queue but its stream, meta and the DAG-free ones.
async fn node_keys(c: &Client, queue: &str, tag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let (next, keys): (String, Vec<String>) = c
            .custom(
                fred::cmd!("SCAN"),
                vec![
                    cursor.clone(),
                    "MATCH".into(),
                    format!("emq:{queue}:{tag}*"),
                    "COUNT".into(),
                    "1000".into(),
                ],
            )
            .await
            .unwrap();
        out.extend(keys);
        if next == "0" {
            return out;
        }
        cursor = next;
    }
}

/// A writer that dies between chunks (the library write stopped after 2 of
/// its 4 transactions, as a killed process would) leaves 60 nodes parked
/// and its gate open; once the gate's lease has passed, the home queue's
/// releaser rolls the write back: no node ran, no node key is left, the
/// audit is clean, and the same DAG can then be written and run whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_dag_write_is_rolled_back_by_the_releaser() {
    use echomq::flow_producer::DagWriteStop;
    let (redis, conn, q) = RedisServer::with_queue("ab").await;
    let c = redis.client().await;
    let mut nodes = Vec::new();
    for i in 0..20 {
        nodes.extend(diamond(&format!("k{i}-"), "ab", "ab"));
    }
    let stop = DagWriteStop {
        after_transactions: 2,
        lease: Duration::from_millis(500),
    };
    let added = FlowProducer::new(&conn)
        .add_dag_abandoned(nodes.clone(), 30, stop)
        .await
        .unwrap();
    assert_eq!(added.transactions, 2);
    assert_eq!(q.counts().await.unwrap().waiting_children, 60);
    assert_eq!(c.zcard::<u64, _>("emq:ab:dag:gates").await.unwrap(), 1);

    // A write whose lease has not passed is nobody's to end: the repair
    // leaves it as it is (a live writer is still renewing).
    let live = FlowProducer::new(&conn)
        .add_dag_abandoned(
            diamond("", "live", "live"),
            2,
            DagWriteStop {
                after_transactions: 1,
                lease: Duration::from_secs(600),
            },
        )
        .await
        .unwrap();
    assert_eq!(live.transactions, 1);
    let home = echomq::protocol::QueueKeys::new("emq", "live").unwrap();
    let gates: Vec<String> = c
        .zrange("emq:live:dag:gates", 0, -1, None, false, None, false)
        .await
        .unwrap();
    assert_eq!(gates.len(), 1);
    let repair = echomq::protocol::call::dag::RepairDagWrite {
        home: &home,
        gate: &gates[0],
        budget: 100,
    };
    assert_eq!(
        conn.call(&repair).await.unwrap(),
        echomq::protocol::call::dag::DagRepair::Alive
    );
    assert_eq!(
        Queue::new(&conn, "live")
            .await
            .unwrap()
            .counts()
            .await
            .unwrap()
            .waiting_children,
        2
    );

    let ws = workers(&conn, &["ab"]).await;
    let rel = releaser(&conn, "ab").await;
    wait_until(
        "the abandoned write rolled back",
        Duration::from_secs(30),
        async || {
            !echomq_integration_tests::state::exists(&c, "emq:ab:dag:gates").await
                && q.counts().await.unwrap().waiting_children == 0
        },
    )
    .await;
    let counts = q.counts().await.unwrap();
    assert_eq!(
        (
            counts.completed,
            counts.active,
            counts.waiting,
            counts.failed
        ),
        (0, 0, 0, 0),
        "a node of a half-written DAG ran: {counts:?}"
    );
    assert!(node_keys(&c, "ab", "k").await.is_empty());
    assert!(node_keys(&c, "ab", "dag:").await.is_empty());
    echomq_integration_tests::assert_consistent(&conn, "ab").await;
    assert_eq!(
        call_t!(rel, DagReleaserMsg::GetStats, 5000)
            .unwrap()
            .repaired,
        1
    );

    // The ids are free again: the whole DAG is written and runs.
    FlowProducer::new(&conn)
        .add_dag_in_chunks(nodes.clone(), 30)
        .await
        .unwrap();
    wait_until(
        "every node completes",
        Duration::from_secs(60),
        async || q.counts().await.unwrap().completed == 100,
    )
    .await;
    close(ws).await;
    rel.stop(None);
    echomq_integration_tests::assert_consistent(&conn, "ab").await;
}

/// A writer that dies while lifting its gates (every node written, 1 of 4
/// lift transactions done): the releaser finishes the lift once the lease
/// has passed, and every node runs exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_write_abandoned_while_lifting_is_finished_by_the_releaser() {
    use echomq::flow_producer::DagWriteStop;
    let (redis, conn, q) = RedisServer::with_queue("fin").await;
    let c = redis.client().await;
    let mut nodes = Vec::new();
    for i in 0..20 {
        nodes.extend(diamond(&format!("k{i}-"), "fin", "fin"));
    }
    // 100 nodes in chunks of 5: 20 node transactions, then 20 roots in 4 lifts.
    let stop = DagWriteStop {
        after_transactions: 21,
        lease: Duration::from_millis(500),
    };
    let added = FlowProducer::new(&conn)
        .add_dag_abandoned(nodes.clone(), 5, stop)
        .await
        .unwrap();
    assert_eq!(added.transactions, 21);
    assert_eq!(q.counts().await.unwrap().waiting, 5, "one lift of 5 roots");

    let rel = releaser(&conn, "fin").await;
    let ws = workers(&conn, &["fin"]).await;
    wait_until(
        "every node completes",
        Duration::from_secs(60),
        async || q.counts().await.unwrap().completed == 100,
    )
    .await;
    close(ws).await;
    assert_eq!(
        call_t!(rel, DagReleaserMsg::GetStats, 5000)
            .unwrap()
            .repaired,
        1
    );
    rel.stop(None);
    let (active, completed, completions) = positions(&c, "fin").await;
    assert_order(&nodes, &active, &completed);
    assert!(completions.values().all(|&n| n == 1), "{completions:?}");
    assert!(node_keys(&c, "fin", "dag:").await.is_empty());
    echomq_integration_tests::assert_consistent(&conn, "fin").await;
}
