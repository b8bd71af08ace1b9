//! The demo's flow step: a small fan-out/fan-in. A `report` parent waits for
//! five `fetch` children in another queue; workers on both queues run them,
//! and the parent sums its children's values.

use std::time::Duration;

use echomq::worker::{processor_fn, JobContext, ProcessError};
use echomq::{Connection, FlowJob, FlowProducer, JobState, Queue, WorkerArgs, WorkerMsg};
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::json;

use super::Res;
use crate::style::{self, paint};

const CHILDREN: u64 = 5;

/// Owns the step's two workers and ignores their exits: the step checks the
/// outcome itself.
struct Owner;

impl Actor for Owner {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        _: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

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

    let (owner, owner_handle) = Actor::spawn(None, Owner, ()).await?;
    let mut workers = Vec::new();
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
        let (w, _lm) = echomq::worker::spawn_linked(owner.get_cell(), args).await?;
        workers.push(w);
    }

    let q = Queue::new(conn, &report).await?;
    let mut state = JobState::Unknown;
    for _ in 0..100 {
        state = q.get_state(&tree.id).await?;
        if state == JobState::Completed || state == JobState::Failed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for w in workers {
        let _ = call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2));
    }
    owner.stop(None);
    let _ = owner_handle.await;

    if let Some(node) = q.get_flow(&tree.id, 2, 20).await? {
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
