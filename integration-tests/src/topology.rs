//! One lifecycle run shared by the TLS and cluster tests, through the public
//! API only: a worker tree (Worker, LockManager, StalledChecker), a
//! JobScheduler and a QueueEvents subscriber on one queue, with plain,
//! delayed, prioritized, retried-then-failed and scheduled jobs.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::protocol::EventKind;
use echomq::worker::processor_fn;
use echomq::{
    Connection, Delivery, JobOptions, JobScheduler, JobSchedulerArgs, JobSchedulerMsg, JobState,
    NewJob, ProcessError, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg, SchedulerSpec,
    WorkerArgs, WorkerOptions, WorkerSetSpec,
};
use ractor::{call_t, Actor};
use serde_json::json;

/// What one run saw.
#[derive(Debug)]
pub struct Lifecycle {
    /// Ids that ended completed.
    pub completed: BTreeSet<String>,
    /// Ids that ended failed.
    pub failed: BTreeSet<String>,
    /// Ids of `completed` events the QueueEvents subscriber received.
    pub completed_events: BTreeSet<String>,
    /// Jobs the scheduler produced that completed.
    pub scheduled_completed: usize,
    /// How long the run took, first add to last finish.
    pub elapsed: Duration,
}

/// Adds 20 plain, 1 delayed, 2 prioritized and 1 always-failing (2 attempts)
/// job to `queue`, runs the four actors until all finished and a scheduler
/// (every 150 ms, limit 2) produced 2 more, and returns what happened.
/// Panics when it does not finish within 30 s.
pub async fn four_actors(conn: &Connection, queue: &str) -> Lifecycle {
    let q = Queue::new(conn, queue).await.expect("open the queue");
    let (host, _) = Actor::spawn(None, crate::NullSupervisor, ())
        .await
        .expect("host");
    let mut args = WorkerArgs::new(
        q.clone(),
        processor_fn(|ctx: echomq::JobContext| async move {
            if ctx.data()["fail"] == json!(true) {
                Err(ProcessError::failed("asked to fail"))
            } else {
                Ok(json!({ "echo": ctx.data().clone() }))
            }
        }),
    );
    args.options = WorkerOptions {
        concurrency: 4,
        stalled_interval: Duration::from_millis(500),
        drain_delay: Duration::from_millis(300),
        ..Default::default()
    };
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .expect("worker set");
    let mut qe_args = QueueEventsArgs::new(conn.clone(), queue);
    qe_args.block = Duration::from_millis(300);
    let (qe, _) = Actor::spawn_linked(None, QueueEvents, qe_args, host.get_cell())
        .await
        .expect("queue events");
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let sink = seen.clone();
    let subscriber = Box::new(move |d: Delivery| {
        if let Delivery::Event(e) = d {
            if let EventKind::Completed { job_id, .. } = e.kind {
                sink.lock().unwrap().insert(job_id);
            }
        }
        true
    });
    call_t!(qe, QueueEventsMsg::SubscribeActor, 5000, subscriber).expect("subscribe");
    let (sched, _) = Actor::spawn_linked(
        None,
        JobScheduler,
        JobSchedulerArgs::new(conn.clone(), queue),
        host.get_cell(),
    )
    .await
    .expect("job scheduler");

    let started = std::time::Instant::now();
    let mut jobs: Vec<NewJob> = (0..20)
        .map(|i| NewJob {
            name: "plain".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    let mut delayed = JobOptions::new();
    delayed.delay = Some(300);
    jobs.push(NewJob {
        name: "delayed".into(),
        data: json!({ "i": 20 }),
        options: delayed,
    });
    for p in [1, 5] {
        let mut prio = JobOptions::new();
        prio.priority = Some(p);
        jobs.push(NewJob {
            name: "prio".into(),
            data: json!({ "p": p }),
            options: prio,
        });
    }
    let mut failing = JobOptions::new();
    failing.attempts = Some(2);
    jobs.push(NewJob {
        name: "failing".into(),
        data: json!({ "fail": true }),
        options: failing,
    });
    let ids = q.add_bulk(jobs).await.expect("add_bulk");
    let failing_id = ids.last().cloned().expect("ids");
    let mut spec = SchedulerSpec::every("tick", Duration::from_millis(150));
    spec.limit = Some(2);
    call_t!(sched, JobSchedulerMsg::Upsert, 5000, Box::new(spec))
        .expect("upsert")
        .expect("upsert accepted");

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (completed, failed, scheduled_completed) = loop {
        let mut completed = BTreeSet::new();
        let mut failed = BTreeSet::new();
        for id in &ids {
            match q.get_state(id).await.expect("get_state") {
                JobState::Completed => {
                    completed.insert(id.clone());
                }
                JobState::Failed => {
                    failed.insert(id.clone());
                }
                _ => {}
            }
        }
        let counts = q.counts().await.expect("counts");
        let scheduled = (counts.completed as usize).saturating_sub(completed.len());
        if completed.len() + failed.len() == ids.len()
            && scheduled >= 2
            && seen.lock().unwrap().len() >= completed.len() + scheduled
        {
            break (completed, failed, scheduled);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "lifecycle not finished in 30 s: {counts:?}, {} completed events",
            seen.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = started.elapsed();
    assert!(failed.contains(&failing_id), "{failed:?}");
    set.worker.stop(None);
    set.lock_manager.stop(None);
    if let Some(sc) = &set.stalled_checker {
        sc.stop(None);
    }
    qe.stop(None);
    sched.stop(None);
    host.stop(None);
    let completed_events = seen.lock().unwrap().clone();
    Lifecycle {
        completed,
        failed,
        completed_events,
        scheduled_completed,
        elapsed,
    }
}
