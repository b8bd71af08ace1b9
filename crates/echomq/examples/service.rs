//! A service that embeds EchoMQ the way a production host would: the shipped
//! `HostSupervisor` owns every EchoMQ actor and restarts failed children
//! one-for-one, within the default restart budget. It runs
//!
//! * a worker set (Worker + LockManager + StalledChecker) from `WorkerSetSpec`,
//! * a JobScheduler with an `every` and a cron scheduler,
//! * a QueueEvents whose deliveries go to a subscriber *actor* of the host,
//!   subscribed once through a `Subscribers` registry that outlives restarts,
//! * a producer task,
//!
//! for ten seconds, then shuts down in order (`HostSupervisorMsg::Close`:
//! worker sets first, then the scheduler, then QueueEvents).
//!
//! A service that needs its own supervisor (other children, another policy)
//! copies `src/host_supervisor.rs`: it is built from `WorkerSet::classify`,
//! `WorkerSetSpec::restart`, `WorkerSet::close` and `RestartIntensity`.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example service`

use std::time::Duration;

use echomq::worker::{processor_fn, ProcessError};
use echomq::{
    supervision::SetCloseReport, Connection, Delivery, EventKind, HostSupervisor,
    HostSupervisorMsg, JobOptions, JobSchedulerArgs, JobSchedulerMsg, Queue, QueueEventsArgs,
    RestartIntensity, SchedulerSpec, Subscribers, WorkerArgs, WorkerSetSpec,
};
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef};
use serde_json::json;

/// The host's subscriber: it receives typed events as its own messages.
struct Feed;

enum FeedMsg {
    Event(echomq::protocol::Event),
    Missed(u64),
}

impl Actor for Feed {
    type Msg = FeedMsg;
    /// Events seen.
    type State = u64;
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<FeedMsg>, _: ()) -> Result<u64, ActorProcessingErr> {
        Ok(0)
    }

    async fn handle(
        &self,
        _: ActorRef<FeedMsg>,
        msg: FeedMsg,
        seen: &mut u64,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            FeedMsg::Event(e) => {
                *seen += 1;
                match &e.kind {
                    EventKind::Completed {
                        job_id,
                        return_value,
                        ..
                    } => println!("feed: {job_id} completed → {return_value}"),
                    EventKind::Failed {
                        job_id,
                        failed_reason,
                        ..
                    } => println!("feed: {job_id} failed: {failed_reason}"),
                    EventKind::Stalled { job_id } => {
                        println!("feed: {job_id} recovered from a dead worker")
                    }
                    _ => {}
                }
            }
            FeedMsg::Missed(n) => println!("feed: missed {n} events"),
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    let queue = Queue::new(&conn, "service").await?;

    // The host supervisor: the shipped one-for-one HostSupervisor with the
    // default budget (10 restarts in 10 s; past it, it fails and its own
    // supervisor — here, none — decides). Spawn it under your root actor with
    // `spawn_linked` in a real service.
    let (host, handle) = Actor::spawn(None, HostSupervisor, RestartIntensity::default()).await?;

    // A worker set: Worker + LockManager + StalledChecker.
    let processor = processor_fn(|ctx| async move {
        let n = ctx.job().data["n"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(50)).await;
        if n % 13 == 0 {
            return Err(ProcessError::failed(format!("{n} is unlucky")));
        }
        Ok(json!({ "square": n * n }))
    });
    let mut worker = WorkerArgs::new(queue.clone(), processor);
    worker.options.concurrency = 8;
    worker.options.name = Some("service-1".into());
    call_t!(
        host,
        HostSupervisorMsg::AddWorkerSet,
        5000,
        Box::new(WorkerSetSpec::new(worker))
    )??;

    // A JobScheduler with an `every` and a cron scheduler.
    let (scheduler_id, scheduler) = call_t!(
        host,
        HostSupervisorMsg::AddJobScheduler,
        5000,
        Box::new(JobSchedulerArgs::new(conn.clone(), queue.name()))
    )??;
    let mut every = SchedulerSpec::every("heartbeat", Duration::from_secs(2));
    every.template.data = json!({ "n": 2 });
    call_t!(scheduler, JobSchedulerMsg::Upsert, 5000, Box::new(every))??;
    let mut cron = SchedulerSpec::cron("report", "*/5 * * * * *", Some("UTC"));
    cron.template.data = json!({ "n": 3 });
    call_t!(scheduler, JobSchedulerMsg::Upsert, 5000, Box::new(cron))??;

    // QueueEvents feeding a subscriber actor. The subscription lives in the
    // registry, not in the QueueEvents actor: a restarted QueueEvents resumes
    // after the last event the feed got, with no re-subscription.
    let (feed, feed_handle) = Actor::spawn(None, Feed, ()).await?;
    let subscribers = Subscribers::new();
    subscribers.subscribe_actor(feed.clone(), |d| match d {
        Delivery::Event(e) => Some(FeedMsg::Event(e)),
        Delivery::Lagged(n) => Some(FeedMsg::Missed(n)),
        Delivery::Gap { .. } => Some(FeedMsg::Missed(0)),
    });
    call_t!(
        host,
        HostSupervisorMsg::AddQueueEvents,
        5000,
        Box::new(QueueEventsArgs::new(conn.clone(), queue.name()).subscribers(subscribers))
    )??;

    // The producer.
    for n in 1..=100u64 {
        queue
            .add("square", &json!({ "n": n }), JobOptions::new().attempts(2))
            .await?;
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The schedulers are this run's only: remove them through the current ref
    // (a restart may have replaced the first one).
    if let Some(scheduler) = call_t!(host, HostSupervisorMsg::GetJobScheduler, 5000, scheduler_id)?
    {
        for id in ["heartbeat", "report"] {
            call_t!(scheduler, JobSchedulerMsg::Remove, 5000, id.to_string())??;
        }
    }
    // The ordered shutdown: the worker set first (running jobs finish or go
    // back to wait while their locks are renewed), then the scheduler, then
    // QueueEvents; the supervisor answers and stops.
    let report = call_t!(
        host,
        HostSupervisorMsg::Close,
        30_000,
        Duration::from_secs(10)
    )?;
    for (_, closed) in &report.worker_sets {
        if let Ok(SetCloseReport {
            worker: Some(r), ..
        }) = closed
        {
            println!(
                "worker closed: {} finished in time, {} moved back",
                r.finished_in_time,
                r.moved_back.len()
            );
        }
    }
    handle.await?;
    feed.stop(None);
    feed_handle.await?;
    println!("counts: {:?}", queue.counts().await?);
    conn.close().await;
    Ok(())
}
