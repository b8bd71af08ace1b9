//! A service that embeds EchoMQ the way a production host would: its own
//! supervisor actor owns every EchoMQ actor and restarts failed children
//! one-for-one, within a restart limit. It runs
//!
//! * a worker set (Worker + LockManager + StalledChecker) from `WorkerSetSpec`,
//! * a JobScheduler with an `every` and a cron scheduler,
//! * a QueueEvents whose deliveries go to a subscriber *actor* of the host,
//! * a producer task,
//!
//! for ten seconds, then shuts down in order (worker Close first).
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example service`

use std::time::Duration;

use echomq::queue_events::actor_subscriber;
use echomq::worker::{processor_fn, ProcessError};
use echomq::{
    Connection, Delivery, EventKind, JobOptions, JobScheduler, JobSchedulerArgs, JobSchedulerMsg,
    Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg, RestartIntensity, SchedulerSpec,
    StartFrom, WorkerArgs, WorkerMsg, WorkerSet, WorkerSetSpec,
};
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::json;

/// The host's subscriber: it receives typed events as its own messages.
struct Feed;

enum FeedMsg {
    Event(echomq::protocol::Event),
    Missed(u64),
}

impl Actor for Feed {
    type Msg = FeedMsg;
    /// Events seen, and the id of the last one — shared with the host, which
    /// resumes a restarted QueueEvents from it.
    type State = (u64, LastId);
    type Arguments = LastId;

    async fn pre_start(
        &self,
        _: ActorRef<FeedMsg>,
        last: LastId,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok((0, last))
    }

    async fn handle(
        &self,
        _: ActorRef<FeedMsg>,
        msg: FeedMsg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            FeedMsg::Event(e) => {
                s.0 += 1;
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
                *s.1.lock().unwrap() = Some(e.id);
            }
            FeedMsg::Missed(n) => println!("feed: missed {n} events"),
        }
        Ok(())
    }
}

type LastId = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// The host supervisor: one-for-one, at most 5 restarts in 10 s.
struct Host;

struct HostState {
    spec: WorkerSetSpec,
    set: WorkerSet,
    scheduler_args: JobSchedulerArgs,
    scheduler: ActorRef<JobSchedulerMsg>,
    events_args: QueueEventsArgs,
    events: ActorRef<QueueEventsMsg>,
    feed: ActorRef<FeedMsg>,
    last_event: LastId,
    restarts: RestartIntensity,
    stopping: bool,
}

enum HostMsg {
    Shutdown(ractor::RpcReplyPort<()>),
}

async fn start_events(
    me: &ActorRef<HostMsg>,
    args: QueueEventsArgs,
    feed: &ActorRef<FeedMsg>,
) -> Result<ActorRef<QueueEventsMsg>, ActorProcessingErr> {
    let (events, _) = Actor::spawn_linked(None, QueueEvents, args, me.get_cell()).await?;
    let sub = actor_subscriber(feed.clone(), |d| match d {
        Delivery::Event(e) => Some(FeedMsg::Event(e)),
        Delivery::Lagged(n) => Some(FeedMsg::Missed(n)),
        Delivery::Gap { .. } => Some(FeedMsg::Missed(0)),
    });
    call_t!(events, QueueEventsMsg::SubscribeActor, 5000, sub)?;
    Ok(events)
}

impl Actor for Host {
    type Msg = HostMsg;
    type State = HostState;
    type Arguments = (Queue, Connection);

    async fn pre_start(
        &self,
        me: ActorRef<HostMsg>,
        (queue, conn): (Queue, Connection),
    ) -> Result<HostState, ActorProcessingErr> {
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
        let spec = WorkerSetSpec::new(worker);
        let set = spec.spawn_linked(me.get_cell()).await?;

        let scheduler_args = JobSchedulerArgs::new(conn.clone(), queue.name());
        let (scheduler, _) =
            Actor::spawn_linked(None, JobScheduler, scheduler_args.clone(), me.get_cell()).await?;
        let mut every = SchedulerSpec::every("heartbeat", Duration::from_secs(2));
        every.template.data = json!({ "n": 2 });
        call_t!(scheduler, JobSchedulerMsg::Upsert, 5000, Box::new(every))??;
        let mut cron = SchedulerSpec::cron("report", "*/5 * * * * *", Some("UTC"));
        cron.template.data = json!({ "n": 3 });
        call_t!(scheduler, JobSchedulerMsg::Upsert, 5000, Box::new(cron))??;

        let last_event = LastId::default();
        let (feed, _) = Actor::spawn_linked(None, Feed, last_event.clone(), me.get_cell()).await?;
        let events_args = QueueEventsArgs::new(conn, queue.name());
        let events = start_events(&me, events_args.clone(), &feed).await?;
        Ok(HostState {
            spec,
            set,
            scheduler_args,
            scheduler,
            events_args,
            events,
            feed,
            last_event,
            restarts: RestartIntensity::new(5, Duration::from_secs(10)),
            stopping: false,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<HostMsg>,
        msg: HostMsg,
        s: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HostMsg::Shutdown(reply) => {
                s.stopping = true;
                // The ordered shutdown: the worker first (running jobs finish or
                // go back to wait), then everything else.
                let report = call_t!(
                    s.set.worker,
                    WorkerMsg::Close,
                    15_000,
                    Duration::from_secs(10)
                )?;
                println!(
                    "worker closed: {} finished in time, {} moved back",
                    report.finished_in_time,
                    report.moved_back.len()
                );
                let _ = call_t!(
                    s.scheduler,
                    JobSchedulerMsg::Remove,
                    5000,
                    "heartbeat".to_string()
                );
                let _ = call_t!(
                    s.scheduler,
                    JobSchedulerMsg::Remove,
                    5000,
                    "report".to_string()
                );
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        me: ActorRef<HostMsg>,
        evt: SupervisionEvent,
        s: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        let (SupervisionEvent::ActorFailed(cell, _)
        | SupervisionEvent::ActorTerminated(cell, _, _)) = &evt
        else {
            return Ok(());
        };
        if s.stopping {
            return Ok(());
        }
        if !s.restarts.allow() {
            return Err("restart limit reached: giving up".into()); // our own supervisor decides next
        }
        println!("restarting a failed child: {evt}");
        if let Some(member) = s.set.member_of(cell) {
            s.spec.restart(&mut s.set, member, me.get_cell()).await?;
        } else if cell.get_id() == s.scheduler.get_id() {
            s.scheduler =
                Actor::spawn_linked(None, JobScheduler, s.scheduler_args.clone(), me.get_cell())
                    .await?
                    .0;
        } else if cell.get_id() == s.events.get_id() {
            let mut args = s.events_args.clone();
            if let Some(id) = s.last_event.lock().unwrap().clone() {
                args.start = StartFrom::After(id);
            }
            s.events = start_events(&me, args, &s.feed).await?;
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    let queue = Queue::new(&conn, "service").await?;
    let (host, handle) = Actor::spawn(None, Host, (queue.clone(), conn.clone())).await?;

    // The producer.
    for n in 1..=100u64 {
        queue
            .add("square", &json!({ "n": n }), JobOptions::new().attempts(2))
            .await?;
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    call_t!(host, HostMsg::Shutdown, 30_000)?;
    host.stop(None);
    handle.await?;
    println!("counts: {:?}", queue.counts().await?);
    conn.close().await;
    Ok(())
}
