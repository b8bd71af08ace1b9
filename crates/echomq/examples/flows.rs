//! Flows: a parent job that runs once all its children are done, and reads
//! their return values (BullMQ's FlowProducer). Here a `report` in queue
//! `flow-reports` waits for three `page` jobs in queue `flow-pages`; each
//! page counts its words, the report adds them up.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example flows`

use std::time::{Duration, Instant};

use echomq::worker::processor_fn;
use echomq::{Connection, FlowJob, FlowProducer, Host, ProcessError, Queue, WorkerArgs};
use serde_json::{json, Value};

/// Runs one flow; answers the report's return value.
pub async fn run(url: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let conn = Connection::connect_url(url).await?;
    for name in ["flow-reports", "flow-pages"] {
        Queue::new(&conn, name).await?.obliterate(true).await?;
    }
    let reports = Queue::new(&conn, "flow-reports").await?;
    let pages = Queue::new(&conn, "flow-pages").await?;

    let texts = ["the quick brown fox", "jumps over", "the lazy dog"];
    let mut flow = FlowJob::new("report", "flow-reports", json!({ "title": "words" }));
    for (n, text) in texts.iter().enumerate() {
        flow = flow.child(FlowJob::new(
            "page",
            "flow-pages",
            json!({ "n": n, "text": text }),
        ));
    }
    let node = FlowProducer::new(&conn).add(flow).await?;
    println!(
        "flow added: report {} with pages {:?}",
        node.id,
        node.children.iter().map(|c| &c.id).collect::<Vec<_>>()
    );

    let page = processor_fn(|job| async move {
        let words = job.data()["text"]
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .count();
        Ok::<_, ProcessError>(json!({ "words": words }))
    });
    let report = processor_fn(|job| async move {
        // Keyed by child job key (`emq:flow-pages:<id>`).
        let children = job.queue().flows().get_children_values(job.id()).await?;
        let total: u64 = children
            .values()
            .map(|v| v["words"].as_u64().unwrap_or(0))
            .sum();
        Ok::<_, ProcessError>(json!({ "pages": children.len(), "words": total }))
    });
    let host = Host::start().await?;
    for (queue, processor) in [(pages.clone(), page), (reports.clone(), report)] {
        let args = WorkerArgs::new(queue, processor);
        host.add_worker(args).await?;
    }

    let deadline = Instant::now() + Duration::from_secs(30);
    let value = loop {
        if let Some(v) = reports
            .get_job(&node.id)
            .await?
            .and_then(|j| j.return_value)
        {
            break v;
        }
        if Instant::now() > deadline {
            return Err("the report did not complete in time".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    host.close(Duration::from_secs(5)).await?;
    conn.close().await;
    Ok(value)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    println!("report: {}", run(&url).await?);
    Ok(())
}
