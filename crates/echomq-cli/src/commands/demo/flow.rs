//! The demo's flow step: a small fan-out/fan-in. A `report` parent waits for
//! five `fetch` children in another queue; workers on both queues run them,
//! and the parent sums its children's values.

use std::time::Duration;

use echomq::supervision::WorkerSetSpec;
use echomq::worker::{processor_fn, JobContext, ProcessError};
use echomq::{Connection, FlowJob, FlowProducer, Host, JobState, Queue, WorkerArgs};
use serde_json::json;

use super::Res;
use crate::style::{self, paint};

const CHILDREN: u64 = 5;

/// Runs the step and prints what happened; an error when the parent did not
/// complete with the expected sum.
pub(super) async fn demo_flow(conn: &Connection) -> Res {
    let tag = echomq::clock::now_ms() % 100_000;
    let (fetch, report) = (format!("demo-fetch-{tag}"), format!("demo-report-{tag}"));
    anstream::println!();
    anstream::println!(
        "{} a parent in {report} waits for {CHILDREN} children in {fetch}",
        paint(style::BOLD, "flow")
    );
    let mut flow = FlowJob::new("report", &report, json!({}));
    for i in 1..=CHILDREN {
        flow = flow.child(FlowJob::new("fetch", &fetch, json!({ "n": i })));
    }
    let tree = FlowProducer::new(conn).add(flow).await?;

    // The step's own host: the tour's is closed by now.
    let host = Host::start().await?;
    let fetcher = processor_fn(|job: JobContext| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, ProcessError>(json!(job.data()["n"].as_u64().unwrap_or(0) * 10))
    });
    let reporter = processor_fn(|job: JobContext| async move {
        let values = job
            .children_values()
            .await
            .map_err(|e| ProcessError::failed(e.to_string()))?;
        Ok::<_, ProcessError>(json!(values
            .values()
            .filter_map(|v| v.as_u64())
            .sum::<u64>()))
    });
    for (name, processor) in [(&fetch, fetcher), (&report, reporter)] {
        let mut args = WorkerArgs::new(Queue::new(conn, name).await?, processor);
        args.options.concurrency = CHILDREN as usize;
        // A Worker and its LockManager: nothing of the step can stall.
        let mut spec = WorkerSetSpec::new(args);
        spec.stalled_checker = None;
        host.add_worker(spec).await?;
    }

    let q = Queue::new(conn, &report).await?;
    let mut state = JobState::Unknown;
    for _ in 0..100 {
        state = q.get_job_state(&tree.id).await?;
        if state == JobState::Completed || state == JobState::Failed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = host.close(Duration::from_secs(2)).await;

    if let Some(node) = q.flows().get_flow(&tree.id, 2, 20).await? {
        for c in &node.children {
            anstream::println!(
                "  {} {} = {}",
                paint(style::DIM, "child"),
                c.job.id,
                c.job.return_value.clone().unwrap_or_default()
            );
        }
        let sum = node.job.return_value.clone().unwrap_or_default();
        anstream::println!("  {} {} = {sum}", paint(style::GOOD, "parent"), node.job.id);
        let expected = (1..=CHILDREN).map(|i| i * 10).sum::<u64>();
        if state == JobState::Completed && sum == json!(expected) {
            return Ok(());
        }
    }
    Err(format!("the flow's parent ended {state:?}, not completed with the children's sum").into())
}
