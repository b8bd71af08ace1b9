//! `GET /events` (and `/api/events`): the live feed as Server-Sent Events,
//! one JSON object per event, optionally for one queue (`?queue=`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::error::Failure;
use crate::live::LiveEvent;
use crate::state::App;

/// The optional queue filter.
#[derive(Deserialize)]
pub(crate) struct EventsQuery {
    queue: Option<String>,
}

pub(crate) async fn events(
    State(app): State<Arc<App>>,
    Query(eq): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Failure> {
    let queue = eq.queue.filter(|q| !q.is_empty());
    if let Some(name) = &queue {
        app.queue(name).await?;
        app.live.watch(&app.conn, name).await;
    }
    let rx = app.live.subscribe();
    let cancel = app.cancel.clone();
    // A first event tells the page the feed is connected: anything that
    // happens from now on reaches it.
    let ready = stream::once(async { Ok(Event::default().event("ready").data("{}")) });
    let feed = stream::unfold((rx, cancel, queue), |(mut rx, cancel, queue)| async move {
        loop {
            let got = tokio::select! {
                _ = cancel.cancelled() => return None,
                got = rx.recv() => got,
            };
            let ev = match got {
                Ok(e) if queue.as_deref().is_some_and(|q| q != e.queue) => continue,
                Ok(e) => e,
                Err(RecvError::Lagged(n)) => LiveEvent {
                    queue: queue.clone().unwrap_or_default(),
                    event: "lagged".into(),
                    job_id: None,
                    detail: Some(format!("{n} events skipped (this page was too slow)")),
                },
                Err(RecvError::Closed) => return None,
            };
            let data = serde_json::to_string(&ev).unwrap_or_default();
            return Some((Ok(Event::default().data(data)), (rx, cancel, queue)));
        }
    });
    Ok(Sse::new(ready.chain(feed)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
