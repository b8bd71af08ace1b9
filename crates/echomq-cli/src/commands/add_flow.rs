//! `echomq add-flow <file>`: a flow (or several) from BullMQ's FlowJob JSON
//! shape, printing the tree of ids; or a DAG, `{"dag": [{id, name,
//! queueName, data?, opts?, dependsOn?}, …]}` (docs/flows.md §DAGs),
//! printing what was written.

use echomq::flow_producer::DagNode;
use echomq::{Connection, FlowJob, FlowProducer, JobNode};

use super::Res;
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    file: std::path::PathBuf,
}

/// What a flow file holds.
enum FlowFile {
    /// Trees (one, or an array for a bulk).
    Trees(Vec<FlowJob>),
    /// One DAG.
    Dag(Vec<DagNode>),
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let file = read_flow_file(&a.file)?;
    let conn = Connection::connect(t.config.clone()).await?;
    let r = match file {
        FlowFile::Trees(flows) => add_flow(&conn, flows).await,
        FlowFile::Dag(nodes) => add_dag(&conn, nodes).await,
    };
    conn.close().await;
    r
}

/// Reads a flow file (BullMQ's FlowJob JSON shape, or an array of them for a
/// bulk, or `{"dag": [...]}`), validated before connecting.
fn read_flow_file(file: &std::path::Path) -> Res<FlowFile> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", file.display()))?;
    if v.get("dag").is_some() {
        return Ok(FlowFile::Dag(DagNode::list_from_json(&v)?));
    }
    let flows = match v {
        serde_json::Value::Array(a) => a,
        one => vec![one],
    };
    Ok(FlowFile::Trees(
        flows
            .iter()
            .map(FlowJob::from_json)
            .collect::<Result<Vec<_>, _>>()?,
    ))
}

/// `add-flow <file>` with a DAG: checked whole before anything is written.
async fn add_dag(conn: &Connection, nodes: Vec<DagNode>) -> Res {
    let added = FlowProducer::new(conn).add_dag(nodes).await?;
    anstream::println!(
        "{} {} nodes, {} BullMQ edges, {} extra edges, {} transactions",
        paint(style::BOLD, "dag added:"),
        added.nodes,
        added.bullmq_edges,
        added.extra_edges,
        added.transactions
    );
    Ok(())
}

/// `add-flow <file>`: adds the flow(s) and prints the tree of ids.
async fn add_flow(conn: &Connection, flows: Vec<FlowJob>) -> Res {
    let trees = FlowProducer::new(conn).add_bulk(flows).await?;
    for t in &trees {
        print_ids(t, 0);
    }
    Ok(())
}

fn print_ids(n: &JobNode, depth: usize) {
    anstream::println!(
        "{}{} {} {}",
        "  ".repeat(depth),
        paint(style::BOLD, &n.id),
        n.name,
        paint(style::DIM, format!("({})", n.queue))
    );
    for c in &n.children {
        print_ids(c, depth + 1);
    }
}
