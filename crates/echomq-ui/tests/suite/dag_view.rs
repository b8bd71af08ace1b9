//! A job page draws the DAG below the job (docs/flows.md §DAGs): every job
//! below it once, with its level, state and what it waits for, however many
//! jobs wait for it; escaped by maud; bounded to the first 50 jobs.

use crate::support::*;

use echomq::flow_producer::DagNode;
use echomq::FlowProducer;
use serde_json::json;

fn node(id: &str, deps: &[&str]) -> DagNode {
    let mut n = DagNode::new(id, "n", "d", json!({}));
    for d in deps {
        n = n.depends_on(*d);
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_page_draws_the_dag_below_it() {
    let h = start(fast()).await;
    // A diamond whose top node's id needs escaping: "<a>" -> (b, c, x) -> e.
    let nodes = vec![
        node("<a>", &[]),
        node("b", &["<a>"]),
        node("c", &["<a>"]),
        node("x", &["<a>"]),
        node("e", &["b", "c", "x"]),
    ];
    FlowProducer::new(&h.conn).add_dag(nodes).await.unwrap();

    let detail = h.json("/api/queues/d/jobs/e").await;
    let below = detail["below"]["nodes"].as_array().unwrap();
    let ids: Vec<&str> = below.iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["e", "b", "c", "x", "<a>"], "{detail}");
    assert_eq!(below[4]["depth"], 2);
    assert_eq!(below[4]["state"], "waiting");
    assert_eq!(below[2]["state"], "waiting-children");
    // c waits for <a> too, though <a>'s BullMQ parent is b.
    assert_eq!(below[2]["waitsFor"][0]["id"], "<a>");
    assert_eq!(detail["below"]["truncated"], false);

    let page = h.html("/queues/d/jobs/e").await;
    assert!(page.contains("id=\"job-dag\""), "{page}");
    assert!(page.contains("Jobs below (4;"), "{page}");
    assert!(!page.contains("<a>"), "an id reached the page unescaped");
    // <a> is listed once as a row and linked from each of b, c and x.
    assert_eq!(page.matches("d / &lt;a&gt;</a>").count(), 1, "{page}");
    assert_eq!(page.matches(">&lt;a&gt;</a>").count(), 3, "{page}");
    // A job without children has no DAG section.
    let page = h.html("/queues/d/jobs/%3Ca%3E").await;
    assert!(!page.contains("id=\"job-dag\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dag_on_a_job_page_is_bounded() {
    let h = start(fast()).await;
    // A sink over 80 nodes, each over its own leaf: 161 jobs below.
    let mut nodes = Vec::new();
    let mut mids = Vec::new();
    for i in 0..80 {
        nodes.push(node(&format!("l{i}"), &[]));
        nodes.push(node(&format!("m{i}"), &[&format!("l{i}")]));
        mids.push(format!("m{i}"));
    }
    let refs: Vec<&str> = mids.iter().map(String::as_str).collect();
    nodes.push(node("sink", &refs));
    FlowProducer::new(&h.conn).add_dag(nodes).await.unwrap();
    let detail = h.json("/api/queues/d/jobs/sink").await;
    assert_eq!(detail["below"]["nodes"].as_array().unwrap().len(), 50);
    assert_eq!(detail["below"]["truncated"], true);
    let page = h.html("/queues/d/jobs/sink").await;
    assert!(page.contains("the first 49 breadth first"), "{page}");
}
