//! QueueEvents feeding a subscriber actor: the events stream of a queue
//! (BullMQ's `QueueEvents`: added, active, progress, completed, failed, …)
//! delivered as the host actor's own messages. The subscription lives in a
//! `Subscribers` registry, so a restarted QueueEvents resumes after the last
//! event delivered, without re-subscribing; a subscriber too slow for its
//! mailbox is told how many events it missed.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example queue_events`

use std::time::Duration;

use echomq::worker::processor_fn;
use echomq::{
    Connection, Delivery, EventKind, Host, JobOptions, ProcessError, Queue, QueueEventsArgs,
    WorkerArgs,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;

/// The host's subscriber: counts finished jobs and answers when all are.
struct Watcher;

enum WatchMsg {
    Event(echomq::protocol::Event),
    Missed(u64),
    /// Answered once `n` jobs finished.
    WaitFor(u64, RpcReplyPort<()>),
}

#[derive(Default)]
struct Seen {
    finished: u64,
    waiting: Option<(u64, RpcReplyPort<()>)>,
}

impl Actor for Watcher {
    type Msg = WatchMsg;
    type State = Seen;
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<WatchMsg>, _: ()) -> Result<Seen, ActorProcessingErr> {
        Ok(Seen::default())
    }

    async fn handle(
        &self,
        _: ActorRef<WatchMsg>,
        msg: WatchMsg,
        seen: &mut Seen,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WatchMsg::Event(e) => match &e.kind {
                EventKind::Progress { job_id, data } => println!("{job_id}: progress {data}"),
                EventKind::Completed {
                    job_id,
                    return_value,
                    ..
                } => {
                    println!("{job_id}: completed → {return_value}");
                    seen.finished += 1;
                }
                EventKind::Failed {
                    job_id,
                    failed_reason,
                    ..
                } => {
                    println!("{job_id}: failed: {failed_reason}");
                    seen.finished += 1;
                }
                _ => {}
            },
            WatchMsg::Missed(n) => println!("missed {n} events"),
            WatchMsg::WaitFor(n, port) => seen.waiting = Some((n, port)),
        }
        if seen
            .waiting
            .as_ref()
            .is_some_and(|(n, _)| seen.finished >= *n)
        {
            if let Some((_, port)) = seen.waiting.take() {
                let _ = port.send(());
            }
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    Queue::new(&conn, "watched").await?.obliterate(true).await?;
    let queue = Queue::new(&conn, "watched").await?;

    let host = Host::start().await?;
    let events = host
        .add_queue_events(QueueEventsArgs::new(conn.clone(), queue.name()))
        .await?;
    let (watcher, watcher_handle) = Actor::spawn(None, Watcher, ()).await?;
    events.subscribe_actor(watcher.clone(), |d| match d {
        Delivery::Event(e) => Some(WatchMsg::Event(e)),
        Delivery::Lagged(n) => Some(WatchMsg::Missed(n)),
        Delivery::Gap { .. } => Some(WatchMsg::Missed(0)),
    });
    let processor = processor_fn(|job| async move {
        job.update_progress(&json!({ "step": 1 })).await?;
        match job.data()["n"].as_u64() {
            Some(n) if n % 3 == 0 => Err(ProcessError::unrecoverable(format!(
                "{n} is a multiple of 3"
            ))),
            n => Ok(json!({ "double": n.unwrap_or(0) * 2 })),
        }
    });
    let args = WorkerArgs::new(queue.clone(), processor);
    host.add_worker(args).await?;

    for n in 1..=6 {
        queue
            .add("double", &json!({ "n": n }), JobOptions::new())
            .await?;
    }
    watcher
        .call(|r| WatchMsg::WaitFor(6, r), Some(Duration::from_secs(30)))
        .await?;
    host.close(Duration::from_secs(5)).await?;
    watcher.stop(None);
    watcher_handle.await?;
    conn.close().await;
    Ok(())
}
