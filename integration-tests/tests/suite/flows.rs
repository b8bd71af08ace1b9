//! Flows on EchoMQ alone: reading a flow (compared with Node's getFlow),
//! paged dependencies, detaching children, removing unprocessed children,
//! removing a parent with its subtree, and a bulk with a missing parent.

use echomq::protocol::call::flow::DependencyCounts;
use echomq::{
    flow_producer::ParentRef, queue::FlowNode, FlowJob, FlowProducer, JobOptions, JobState, Queue,
};
use echomq_integration_tests::node_flows;
use echomq_integration_tests::RedisServer;
use serde_json::{json, Value as Json};

fn job(name: &str, queue: &str, id: &str) -> FlowJob {
    FlowJob::new(name, queue, json!({})).options(JobOptions::new().job_id(id))
}

/// Node's getFlow tree, children sorted by id (both sides read sets).
fn shape(n: &FlowNode) -> Json {
    let mut children: Vec<Json> = n.children.iter().map(shape).collect();
    children.sort_by_key(|c| c["id"].as_str().unwrap().to_owned());
    json!({"id": n.job.id, "name": n.job.name, "queue": n.queue, "state": state_name(n.state),
           "returnvalue": n.job.return_value.clone().unwrap_or(Json::Null), "children": children})
}

/// The state as Node's getState names it.
fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Waiting => "waiting",
        other => other.key_suffix(),
    }
}

fn sort_node(v: &mut Json) {
    if let Some(c) = v["children"].as_array_mut() {
        c.iter_mut().for_each(sort_node);
        c.sort_by_key(|c| c["id"].as_str().unwrap().to_owned());
    }
}

fn tree() -> FlowJob {
    job("root", "q", "root")
        .child(
            job("mid", "q2", "mid")
                .child(job("a", "q", "a"))
                .child(job("b", "q2", "b")),
        )
        .child(job("c", "q", "c"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_flow_reads_the_tree_as_node_does() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    FlowProducer::new(&conn).add(tree()).await.unwrap();
    let q = Queue::new(&conn, "q").await.unwrap();
    let flow = q.flows().get_flow("root", 10, 20).await.unwrap().unwrap();
    assert_eq!(flow.state, JobState::WaitingChildren);
    let mut node = node_flows("get-flow", &redis.url(), "q", json!({"id": "root"}));
    sort_node(&mut node);
    assert_eq!(shape(&flow), node);
    // Depth 2: the children without theirs.
    let shallow = q.flows().get_flow("root", 2, 20).await.unwrap().unwrap();
    assert_eq!(shallow.children.len(), 2);
    assert!(shallow.children.iter().all(|c| c.children.is_empty()));
    let mut node = node_flows(
        "get-flow",
        &redis.url(),
        "q",
        json!({"id": "root", "depth": 2}),
    );
    sort_node(&mut node);
    assert_eq!(shape(&shallow), node);
    assert!(q.flows().get_flow("nope", 3, 10).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_are_paged_and_counted() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let mut root = job("root", "q", "root");
    for i in 0..25 {
        root = root.child(job("c", "q", &format!("c{i}")));
    }
    FlowProducer::new(&conn).add(root).await.unwrap();
    let q = Queue::new(&conn, "q").await.unwrap();
    assert_eq!(
        q.flows().get_dependencies_count("root").await.unwrap(),
        DependencyCounts {
            unprocessed: 25,
            ..Default::default()
        }
    );
    let mut all = Vec::new();
    for page in 0..3 {
        let d = q
            .flows()
            .get_dependencies("root", page * 10, 10)
            .await
            .unwrap();
        assert_eq!(d.counts.unprocessed, 25);
        all.extend(d.unprocessed);
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 25, "three pages cover every child once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detaching_and_removing_children() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let fp = FlowProducer::new(&conn);
    fp.add(
        job("p", "q", "p")
            .child(job("c1", "q", "c1"))
            .child(job("c2", "q2", "c2")),
    )
    .await
    .unwrap();
    let q = Queue::new(&conn, "q").await.unwrap();
    let q2 = Queue::new(&conn, "q2").await.unwrap();

    // Detach both children: the parent, left without pending children, moves to wait.
    assert!(q.flows().remove_child_dependency("c1").await.unwrap());
    assert!(
        !q.flows().remove_child_dependency("c1").await.unwrap(),
        "already detached"
    );
    assert_eq!(
        q.get_job_state("p").await.unwrap(),
        JobState::WaitingChildren
    );
    assert!(q2.flows().remove_child_dependency("c2").await.unwrap());
    assert_eq!(q.get_job_state("p").await.unwrap(), JobState::Waiting);
    let c1 = q.get_job("c1").await.unwrap().unwrap();
    assert!(c1.parent_key.is_none() && c1.parent.is_none());
    assert!(matches!(
        q.flows().remove_child_dependency("ghost").await,
        Err(echomq::Error::JobNotFound(_))
    ));

    // Unprocessed children go, recursively; the parent stays.
    fp.add(
        job("p2", "q", "p2")
            .child(job("m", "q2", "m").child(job("g", "q", "g")))
            .child(job("d", "q", "d")),
    )
    .await
    .unwrap();
    q.flows().remove_unprocessed_children("p2").await.unwrap();
    for (queue, id) in [(&q2, "m"), (&q, "g"), (&q, "d")] {
        assert!(!queue.job_exists(id).await.unwrap(), "{id} removed");
    }
    assert!(q.job_exists("p2").await.unwrap());

    // Removing a parent with its children removes the subtree.
    fp.add(job("p3", "q", "p3").child(job("x", "q2", "x").child(job("y", "q", "y"))))
        .await
        .unwrap();
    q.remove("p3", true).await.unwrap();
    for (queue, id) in [(&q, "p3"), (&q2, "x"), (&q, "y")] {
        assert!(!queue.job_exists(id).await.unwrap(), "{id} removed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_with_a_missing_parent_writes_the_other_flows() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let fp = FlowProducer::new(&conn);
    let orphan = job("o", "q", "o")
        .child(job("oc", "q", "oc"))
        .parent(ParentRef {
            id: "missing".into(),
            queue: "emq:q".into(),
        });
    let err = fp
        .add_bulk(vec![
            job("f1", "q", "f1").child(job("f1c", "q", "f1c")),
            orphan,
        ])
        .await
        .unwrap_err();
    assert_eq!(
        err.script_code(),
        Some(echomq::protocol::ScriptErrorCode::ParentJobNotExist)
    );
    let q = Queue::new(&conn, "q").await.unwrap();
    assert!(q.job_exists("f1").await.unwrap() && q.job_exists("f1c").await.unwrap());
    assert!(!q.job_exists("o").await.unwrap() && !q.job_exists("oc").await.unwrap());
    // Generated ids are UUIDs, as Node's FlowProducer makes them.
    let t = fp
        .add(FlowJob::new("g", "q", json!(1)).child(FlowJob::new("h", "q", json!(2))))
        .await
        .unwrap();
    assert_eq!(t.id.len(), 36);
    assert_eq!(
        q.get_job_state(&t.children[0].id).await.unwrap(),
        JobState::Waiting
    );
}

/// `Queue::add` with `options.parent`: the child joins the parent's pending
/// dependencies, its options keep `parent` and the failure flag, and a
/// missing parent is refused with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_add_with_a_parent_adds_a_dependency() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    FlowProducer::new(&conn)
        .add(job("p", "q", "p").child(job("c1", "q", "c1")))
        .await
        .unwrap();
    let q = Queue::new(&conn, "q").await.unwrap();
    let q2 = Queue::new(&conn, "q2").await.unwrap();
    let parent = ParentRef {
        id: "p".into(),
        queue: "emq:q".into(),
    };
    let id = q2
        .add(
            "c2",
            &json!(2),
            JobOptions::new()
                .parent(parent.clone())
                .on_failure(echomq::flow_producer::OnChildFailure::FailParent),
        )
        .await
        .unwrap();
    assert!(q
        .flows()
        .is_pending_child("p", &format!("emq:q2:{id}"))
        .await
        .unwrap());
    assert_eq!(
        q.flows().get_dependencies_count("p").await.unwrap(),
        DependencyCounts {
            unprocessed: 2,
            ..Default::default()
        }
    );
    let stored = q2.get_job(&id).await.unwrap().unwrap();
    assert_eq!(stored.parent_key.as_deref(), Some("emq:q:p"));
    let opts = &stored.opts;
    assert_eq!(opts.parent.as_ref(), Some(&parent));
    assert_eq!(
        opts.on_failure,
        Some(echomq::flow_producer::OnChildFailure::FailParent)
    );
    assert_eq!(
        q.get_job_state("p").await.unwrap(),
        JobState::WaitingChildren
    );

    let err = q2
        .add(
            "orphan",
            &json!(3),
            JobOptions::new().job_id("orphan").parent(ParentRef {
                id: "missing".into(),
                queue: "emq:q".into(),
            }),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.script_code(),
        Some(echomq::protocol::ScriptErrorCode::ParentJobNotExist)
    );
    assert!(!q2.job_exists("orphan").await.unwrap());
}

/// The audit's flow checks: a consistent flow passes; a dangling dependency
/// (F2) and a parked parent without pending children (F1) are hard findings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_checks_flow_invariants() {
    use fred::prelude::*;
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    FlowProducer::new(&conn).add(tree()).await.unwrap();
    for q in ["q", "q2"] {
        let r = echomq::audit::Audit::new(&conn, q).run().await.unwrap();
        assert!(r.is_consistent(), "{q}: {:?}", r.violations);
    }
    let c = redis.client().await;
    let _: () = c.del("emq:q:c").await.unwrap();
    let r = echomq::audit::Audit::new(&conn, "q").run().await.unwrap();
    let checks: Vec<_> = r
        .violations
        .iter()
        .filter(|v| v.check.starts_with('F'))
        .map(|v| (v.check.as_str(), v.job_id.as_deref()))
        .collect();
    assert_eq!(checks, [("F2", Some("root"))]);
    let _: () = c.del("emq:q2:mid:dependencies").await.unwrap();
    let r = echomq::audit::Audit::new(&conn, "q2").run().await.unwrap();
    let checks: Vec<_> = r
        .violations
        .iter()
        .filter(|v| v.check.starts_with('F'))
        .map(|v| (v.check.as_str(), v.job_id.as_deref()))
        .collect();
    assert_eq!(checks, [("F1", Some("mid"))]);
    assert!(!r.is_consistent());
}
