//! `echomq add-flow <file>`: a flow (or several) from BullMQ's FlowJob JSON
//! shape; prints the tree of ids.

use echomq::{Connection, FlowJob, FlowProducer, JobNode};

use super::Res;
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    file: std::path::PathBuf,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let flows = read_flow_file(&a.file)?;
    let conn = Connection::connect(t.config.clone()).await?;
    let r = add_flow(&conn, flows).await;
    conn.close().await;
    r
}

/// Reads a flow file (BullMQ's FlowJob JSON shape, or an array of them for a
/// bulk), validated before connecting.
fn read_flow_file(file: &std::path::Path) -> Res<Vec<FlowJob>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", file.display()))?;
    let flows = match v {
        serde_json::Value::Array(a) => a,
        one => vec![one],
    };
    Ok(flows
        .iter()
        .map(FlowJob::from_json)
        .collect::<Result<Vec<_>, _>>()?)
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
