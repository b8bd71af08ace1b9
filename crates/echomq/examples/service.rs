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
//! for ten seconds, then shuts down in order (`Host::close`: worker sets
//! first, then the scheduler, then QueueEvents).
//!
//! Everything goes through typed handles (`echomq::host`): they resolve the
//! current actor on every call, so a handle taken before a child's crash
//! still works after its restart. A service that needs its own supervisor
//! (other children, another policy) copies `src/supervision/host.rs`: it is
//! built from `WorkerSet::classify`, `WorkerSetSpec::restart`,
//! `WorkerSet::close` and `RestartIntensity`.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example service`

use std::time::Duration;

use echomq::worker::{processor_fn, ProcessError};
use echomq::{
    supervision::SetCloseReport, Connection, Delivery, EventKind, Host, JobOptions,
    JobSchedulerArgs, Queue, QueueEventsArgs, SchedulerSpec, WorkerArgs,
};
use ractor::{Actor, ActorProcessingErr, ActorRef};
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

    // The host: the shipped one-for-one HostSupervisor with the default
    // budget (10 restarts in 10 s; past it, it stops its children and ends).
    // Under your own root actor use `Host::start_linked(root, budget)`.
    let host = Host::start().await?;

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
    let worker = host.add_worker(worker).await?;

    // A JobScheduler with an `every` and a cron scheduler.
    let scheduler = host
        .add_scheduler(JobSchedulerArgs::new(conn.clone(), queue.name()))
        .await?;
    let mut every = SchedulerSpec::every("heartbeat", Duration::from_secs(2));
    every.template.data = json!({ "n": 2 });
    scheduler.upsert(every).await?;
    let mut cron = SchedulerSpec::cron("report", "*/5 * * * * *", Some("UTC"));
    cron.template.data = json!({ "n": 3 });
    scheduler.upsert(cron).await?;

    // QueueEvents feeding a subscriber actor. The subscription lives in the
    // handle's registry, not in the QueueEvents actor: a restarted QueueEvents
    // resumes after the last event the feed got, with no re-subscription.
    let events = host
        .add_queue_events(QueueEventsArgs::new(conn.clone(), queue.name()))
        .await?;
    let (feed, feed_handle) = Actor::spawn(None, Feed, ()).await?;
    events.subscribe_actor(feed.clone(), |d| match d {
        Delivery::Event(e) => Some(FeedMsg::Event(e)),
        Delivery::Lagged(n) => Some(FeedMsg::Missed(n)),
        Delivery::Gap { .. } => Some(FeedMsg::Missed(0)),
    });

    // The producer.
    for n in 1..=100u64 {
        queue
            .add("square", &json!({ "n": n }), JobOptions::new().attempts(2))
            .await?;
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let counts = worker.counts().await?;
    println!("worker: {} jobs done so far", counts.processed);

    // The schedulers are this run's only (the handle reaches the current
    // actor, even if a restart replaced the first one).
    for id in ["heartbeat", "report"] {
        scheduler.remove(id).await?;
    }
    // The ordered shutdown: the worker set first (running jobs finish or go
    // back to wait while their locks are renewed), then the scheduler, then
    // QueueEvents; the host answers and stops.
    let report = host.close(Duration::from_secs(10)).await?;
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
    feed.stop(None);
    feed_handle.await?;
    println!("counts: {:?}", queue.counts().await?);
    conn.close().await;
    Ok(())
}
