//! What every handler shares, and the prefix fence: a queue is opened only
//! when it exists under the configured prefix.

use echomq::{Connection, Queue, QueueOptions};
use tokio_util::sync::CancellationToken;

use crate::config::UiConfig;
use crate::discover;
use crate::error::Failure;
use crate::live::LiveHub;
use crate::security::Sessions;
use crate::series::Series;

/// The dashboard's shared state.
pub(crate) struct App {
    pub conn: Connection,
    pub config: UiConfig,
    pub sessions: Sessions,
    pub live: LiveHub,
    pub series: Series,
    pub cancel: CancellationToken,
    /// The queues found so far (a bounded walk per request, docs/ui.md §Scale).
    pub discovery: discover::Discovery,
}

impl App {
    /// The prefix the dashboard shows.
    pub fn prefix(&self) -> &str {
        self.conn.prefix()
    }

    /// Opens queue `name` of the prefix, never writing its meta hash; a
    /// name that is not a queue of the prefix is refused, so no request can
    /// reach keys outside it.
    pub async fn queue(&self, name: &str) -> Result<Queue, Failure> {
        let q = Queue::with_options(
            &self.conn,
            name,
            QueueOptions::default()
                .skip_meta_update(true)
                .codec(self.config.codec.clone()),
        )
        .await
        .map_err(|e| Failure::bad_request(e.to_string()))?;
        if !discover::exists(&self.conn, q.keys()).await? {
            return Err(Failure::not_found(format!(
                "no queue {name:?} under prefix {:?}",
                self.prefix()
            )));
        }
        Ok(q)
    }
}
