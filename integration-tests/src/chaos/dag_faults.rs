//! DAG flows under worker faults (docs/flows.md §DAGs, issue 43): diamonds
//! `A → (B, C, D) → E` run by worker processes of which one is SIGKILLed and
//! another SIGSTOPped past its lock, the extra parents handed over by a
//! DagReleaser under a host.

use std::collections::HashMap;
use std::time::Duration;

use echomq::flow_producer::{DagNode, DagReleaserArgs};
use echomq::{FlowProducer, Host};
use fred::prelude::*;
use serde_json::{json, Value};

use super::accounting::read_events;
use super::fleet::Proc;
use super::server::Persistence;
use super::{expect, Bed, Ctx, Row, Verdict};

fn wopts() -> Value {
    json!({
        "concurrency": 8,
        "lockDuration": 1000,
        "stalledInterval": 300,
        "drainDelay": 300,
        "verbose": true,
    })
}

/// `n` diamonds in `queue`, ids `<i>-A` … `<i>-E`; every node sleeps 5 ms
/// and returns its id.
fn diamonds(queue: &str, n: usize) -> Vec<DagNode> {
    let mut nodes = Vec::with_capacity(n * 5);
    for i in 0..n {
        let id = |s: &str| format!("{i}-{s}");
        let node = |s: &str, deps: &[String]| {
            let mut d = DagNode::new(
                id(s),
                "n",
                queue,
                json!({"mode": "sleep", "ms": 5, "ret": id(s)}),
            );
            for dep in deps {
                d = d.depends_on(dep.clone());
            }
            d
        };
        nodes.push(node("A", &[]));
        for m in ["B", "C", "D"] {
            nodes.push(node(m, &[id("A")]));
        }
        nodes.push(node("E", &[id("B"), id("C"), id("D")]));
    }
    nodes
}

/// A worker process opens its queue with the default events bound (10,000,
/// written to meta as BullMQ does): set it back, so the order check reads
/// every event of the 5,000 nodes.
async fn keep_events(bed: &Bed) {
    let _: Result<(), _> = bed
        .client
        .hset(
            bed.queue.keys().key("meta"),
            ("opts.maxLenEvents", 1_000_000),
        )
        .await;
}

/// F48: 1,000 diamonds (5,000 nodes); one worker process SIGKILLed, another
/// SIGSTOPped 3 s (3 × lockDuration) and let go.
pub async fn f48(ctx: Ctx) -> Row {
    diamonds_under_faults(ctx, "F48", 1000).await
}

async fn diamonds_under_faults(ctx: Ctx, id: &'static str, n: usize) -> Row {
    let bed = Bed::new(id, Persistence::None, &[]).await;
    let name = bed.name();
    let nodes = diamonds(&name, n);
    let scenario = format!(
        "{n} DAG diamonds ({} nodes): SIGKILL a worker process, SIGSTOP another 3 s (lockDuration 1 s)",
        nodes.len()
    );
    let mut f = Vec::new();
    if let Err(e) = FlowProducer::new(&bed.conn).add_dag(nodes.clone()).await {
        let mut r = Row::not_run(id, &scenario, "");
        r.verdict = Verdict::Fail(format!("add_dag: {e}"));
        return r;
    }
    for node in &nodes {
        bed.ledger.acked(node.id.clone());
    }
    let host = Host::start().await.expect("host");
    host.add_dag_releaser(
        DagReleaserArgs::new(bed.conn.clone(), name.clone()).sweep_interval(Duration::from_secs(1)),
    )
    .await
    .expect("releaser");

    let mut a = Proc::rust(&ctx.worker_bin, &bed.url(), &name, wopts()).await;
    let b = Proc::rust(&ctx.worker_bin, &bed.url(), &name, wopts()).await;
    keep_events(&bed).await;
    // A fifth of the nodes in, so extra parents were released on both sides
    // of the faults.
    let quota = nodes.len() / 10;
    let mut seen = 0usize;
    a.wait_line(Duration::from_secs(60), |v| {
        seen += usize::from(v["ev"] == "start");
        seen >= quota
    })
    .await;
    expect(
        &mut f,
        seen >= quota,
        format!("a started {seen} of {quota} nodes"),
    );
    let killed = a.sigkill();
    expect(&mut f, killed, "the SIGKILL met no running process");
    let a2 = Proc::rust(&ctx.worker_bin, &bed.url(), &name, wopts()).await;
    keep_events(&bed).await;
    let held_by_b = bed.active().await;
    expect(
        &mut f,
        b.freeze(),
        "the worker process did not stop on SIGSTOP",
    );
    // The fault's length: 3 lock durations.
    tokio::time::sleep(Duration::from_secs(3)).await;
    expect(
        &mut f,
        b.thaw(),
        "the worker process did not resume on SIGCONT",
    );
    let drained = bed.drained(Duration::from_secs(180)).await;
    a2.close(Duration::from_secs(15)).await;
    b.close(Duration::from_secs(15)).await;
    let _ = host.close(Duration::from_secs(5)).await;
    expect(&mut f, drained.is_some(), "not drained within 180 s");
    expect(&mut f, held_by_b > 0, "the SIGSTOP met no active job");

    // No node became active before its last dependency completed (one
    // queue: the stream's order is Redis's order).
    let events = read_events(&bed.client, &bed.queue).await;
    let mut first_active: HashMap<&str, usize> = HashMap::new();
    let mut last_completed: HashMap<&str, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match e.name.as_str() {
            "active" => {
                first_active.entry(e.job_id.as_str()).or_insert(i);
            }
            "completed" => {
                last_completed.insert(e.job_id.as_str(), i);
            }
            _ => {}
        }
    }
    let mut early = Vec::new();
    for node in &nodes {
        let Some(&started) = first_active.get(node.id.as_str()) else {
            continue;
        };
        for d in &node.depends_on {
            let done = last_completed.get(d.as_str()).copied();
            if done.is_none_or(|c| c > started) {
                let story: Vec<String> = events
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.job_id == *d || e.job_id == node.id)
                    .map(|(i, e)| format!("{i}:{}:{}", e.job_id, e.name))
                    .collect();
                early.push(format!("{} before {d}: {}", node.id, story.join(" ")));
            }
        }
    }
    expect(
        &mut f,
        early.is_empty(),
        format!(
            "{} nodes started before a dependency completed, e.g. {:?}",
            early.len(),
            early.iter().take(3).collect::<Vec<_>>()
        ),
    );
    let keys = bed.queue.keys();
    let parked: u64 = bed
        .client
        .zcard(keys.key("waiting-children"))
        .await
        .unwrap_or(u64::MAX);
    let pending: u64 = bed
        .client
        .scard(keys.key("dag:pending"))
        .await
        .unwrap_or(u64::MAX);
    expect(
        &mut f,
        parked == 0 && pending == 0,
        format!("{parked} nodes still waiting for children, {pending} not handed over"),
    );
    let acc = bed.account().await;
    f.extend(acc.broken());
    bed.row_from(scenario, &acc, drained, f, None)
}
