//! The live feed: one QueueEvents actor per queue shown, fanned out to every
//! SSE client through a broadcast channel, and tallies of completed and
//! failed events that the sampler turns into throughput.

use std::collections::HashMap;
use std::sync::Mutex;

use echomq::{
    Connection, Delivery, EventKind, QueueEvents, QueueEventsArgs, QueueEventsMsg, StartFrom,
    Subscribers,
};
use ractor::ActorRef;
use serde::Serialize;
use tokio::sync::broadcast;

/// Events buffered per SSE client before it is told it lagged.
const FEED_CAPACITY: usize = 1024;
/// Deliveries buffered between a QueueEvents actor and the hub.
const SUBSCRIPTION_CAPACITY: usize = 4096;
/// Queues read at most: each reader holds a blocking Redis connection, so
/// a prefix with more queues gets no live feed (nor rates) for the rest.
pub(crate) const MAX_WATCHED: usize = 100;

/// One line of the live feed, as the browser receives it (JSON).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LiveEvent {
    /// The queue.
    pub queue: String,
    /// BullMQ's event name (`completed`, `failed`, …), or `lagged`/`gap`.
    pub event: String,
    /// The job concerned, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// A short detail (failure reason, previous state, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Completed and failed events seen since the last sample.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    pub completed: u64,
    pub failed: u64,
}

/// The hub: the actors it runs and the channel the SSE clients read.
pub(crate) struct LiveHub {
    tx: broadcast::Sender<LiveEvent>,
    watched: Mutex<HashMap<String, ActorRef<QueueEventsMsg>>>,
    tallies: std::sync::Arc<Mutex<HashMap<String, Tally>>>,
}

impl LiveHub {
    pub fn new() -> Self {
        LiveHub {
            tx: broadcast::channel(FEED_CAPACITY).0,
            watched: Mutex::new(HashMap::new()),
            tallies: Default::default(),
        }
    }

    /// A new receiver of the feed.
    pub fn subscribe(&self) -> broadcast::Receiver<LiveEvent> {
        self.tx.subscribe()
    }

    /// Starts reading the events of `queue` unless already reading them.
    pub async fn watch(&self, conn: &Connection, queue: &str) {
        {
            let watched = self.lock_watched();
            if watched.contains_key(queue) {
                return;
            }
            if watched.len() >= MAX_WATCHED {
                tracing::debug!(queue, "live feed: {MAX_WATCHED} queues watched already");
                return;
            }
        }
        let subscribers = Subscribers::new();
        let mut sub = subscribers.subscribe(SUBSCRIPTION_CAPACITY);
        let args = QueueEventsArgs::new(conn.clone(), queue)
            .start(StartFrom::Now)
            .subscribers(subscribers);
        let actor = match ractor::Actor::spawn(None, QueueEvents, args).await {
            Ok((actor, _)) => actor,
            Err(e) => {
                tracing::warn!(queue, error = %e, "live feed: QueueEvents did not start");
                return;
            }
        };
        if let Some(other) = self.lock_watched().insert(queue.to_owned(), actor) {
            // Two requests raced to watch the same queue: keep one reader.
            other.cast(QueueEventsMsg::Close).ok();
        }
        let (tx, tallies, name) = (self.tx.clone(), self.tallies.clone(), queue.to_owned());
        tokio::spawn(async move {
            while let Some(d) = sub.recv().await {
                let ev = to_live(&name, d);
                if ev.event == "completed" || ev.event == "failed" {
                    let mut t = tallies.lock().unwrap_or_else(|p| p.into_inner());
                    let tally = t.entry(name.clone()).or_default();
                    if ev.event == "completed" {
                        tally.completed += 1;
                    } else {
                        tally.failed += 1;
                    }
                }
                // No receiver is fine: nobody is looking.
                tx.send(ev).ok();
            }
        });
    }

    /// Takes the tally of `queue` since the last call.
    pub fn take_tally(&self, queue: &str) -> Tally {
        self.tallies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(queue)
            .unwrap_or_default()
    }

    /// Stops every reader.
    pub fn close(&self) {
        for (_, actor) in self.lock_watched().drain() {
            actor.cast(QueueEventsMsg::Close).ok();
        }
    }

    fn lock_watched(&self) -> std::sync::MutexGuard<'_, HashMap<String, ActorRef<QueueEventsMsg>>> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn to_live(queue: &str, d: Delivery) -> LiveEvent {
    let (event, job_id, detail) = match d {
        Delivery::Event(e) => {
            let detail = match &e.kind {
                EventKind::Failed { failed_reason, .. } => Some(failed_reason.clone()),
                EventKind::Waiting { prev: Some(p), .. } => Some(format!("from {p}")),
                EventKind::Removed { prev, .. } => Some(format!("from {prev}")),
                EventKind::Cleaned { count } => Some(format!("{count} jobs")),
                EventKind::Progress { data, .. } => Some(data.to_string()),
                _ => None,
            };
            (
                e.kind.name().to_owned(),
                e.kind.job_id().map(str::to_owned),
                detail,
            )
        }
        Delivery::Lagged(n) => ("lagged".into(), None, Some(format!("{n} events skipped"))),
        Delivery::Gap { after, next } => (
            "gap".into(),
            None,
            Some(format!("stream trimmed between {after} and {next}")),
        ),
    };
    LiveEvent {
        queue: queue.to_owned(),
        event,
        job_id,
        detail: detail.map(|d| truncate(&d, 200)),
    }
}

/// At most `n` characters, with an ellipsis when cut.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}
