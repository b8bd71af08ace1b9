//! The dead-letter follower: moves the final failures of workers that do not
//! dead-letter themselves (BullMQ Node's, or EchoMQ workers without the
//! option) to the dead-letter queue, as the group feeder frees the slots of
//! finishes made by Node workers.
//!
//! It follows the source queue's events stream (`XREAD BLOCK` on a client of
//! its own) and, for each `failed` event, runs `deadLetterFailed` on the job:
//! the script moves a job still in `failed` and does nothing otherwise (a job
//! dead-lettered already by an EchoMQ worker, retried or removed), so a
//! failure seen twice, or by two followers, moves once. When it starts,
//! after a read fails, and every 10 s (events may have passed
//! unseen, or been trimmed), it sweeps the `failed` set a page at a time:
//! every job in `failed` then goes to the dead-letter queue. `echomq work --dead-letter <queue>` runs one beside its worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::dead_letter::{DeadLetterFailed, DeadLetterTarget};
use echomq_protocol::{EventKind, QueueKeys};
use fred::prelude::{ClientLike, SortedSetsInterface, StreamsInterface, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::target::DeadLetterQueue;
use crate::connection::blocking_reader::{BlockingReader, Read};
use crate::connection::pool::{blocking_options, Connection};
use crate::error::Result;
use crate::queue_events::actor::last_entry_id;

/// Stream entries per read.
const READ_BATCH: u64 = 500;
/// `failed` entries per sweep page.
const SWEEP_PAGE: i64 = 200;
/// Longest block on the stream.
const BLOCK: Duration = Duration::from_secs(1);
/// Time between sweeps of `failed`: the backstop for `failed` events the
/// stream dropped (trimmed past before they were read). One call when the
/// set is empty, as it is while every final failure is moved.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// Counters of one follower since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FollowerStats {
    /// Jobs it moved to the dead-letter queue.
    pub moved: u64,
    /// `failed` events and swept ids it looked at.
    pub seen: u64,
    /// Sweeps of the `failed` set it finished.
    pub sweeps: u64,
}

#[derive(Default)]
struct Counters {
    moved: AtomicU64,
    seen: AtomicU64,
    sweeps: AtomicU64,
}

/// A running follower; [`close`](Self::close) stops it (dropping it does too).
pub struct DeadLetterFollower {
    counters: Arc<Counters>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DeadLetterFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetterFollower")
            .field("stats", &self.stats())
            .finish()
    }
}

impl DeadLetterFollower {
    /// Starts following `queue`'s failures into `target`. Refuses a target
    /// that is the queue itself, or of another hash slot in a cluster.
    pub async fn start(
        conn: &Connection,
        queue: &str,
        mut target: DeadLetterQueue,
    ) -> Result<Self> {
        let keys = QueueKeys::new(conn.prefix(), queue)?;
        let dlq = target.resolve(conn, &keys)?;
        let reader = BlockingReader::new(conn.clone())
            .named(format!("{}:dlq", keys.events_client_name()))
            .first_pause(Duration::from_millis(200));
        if let Read::Failed(e) = reader.client().await {
            return Err(e);
        }
        let cursor = last_entry_id(conn, &keys.events()).await?;
        let counters = Arc::new(Counters::default());
        let stop = CancellationToken::new();
        let pump = Pump {
            conn: conn.clone(),
            keys,
            dlq,
            max_len: target.max_len,
            counters: counters.clone(),
        };
        let task = tokio::spawn(pump.run(reader, cursor, stop.clone()));
        Ok(DeadLetterFollower {
            counters,
            stop,
            task: Some(task),
        })
    }

    /// Its counters.
    pub fn stats(&self) -> FollowerStats {
        FollowerStats {
            moved: self.counters.moved.load(Ordering::Relaxed),
            seen: self.counters.seen.load(Ordering::Relaxed),
            sweeps: self.counters.sweeps.load(Ordering::Relaxed),
        }
    }

    /// Stops it and waits for its task to end.
    pub async fn close(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for DeadLetterFollower {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

struct Pump {
    conn: Connection,
    keys: QueueKeys,
    dlq: QueueKeys,
    max_len: u64,
    counters: Arc<Counters>,
}

impl Pump {
    async fn run(self, reader: BlockingReader, mut cursor: String, stop: CancellationToken) {
        let stream = self.keys.events();
        let mut sweep = true;
        let mut next_sweep = std::time::Instant::now() + SWEEP_INTERVAL;
        while !stop.is_cancelled() {
            if std::time::Instant::now() >= next_sweep {
                sweep = true;
            }
            if sweep {
                next_sweep = std::time::Instant::now() + SWEEP_INTERVAL;
                match self.sweep(&stop).await {
                    Ok(()) => {
                        sweep = false;
                        self.counters.sweeps.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        warn!(queue = %self.keys.name(), error = %e, "dead-letter sweep failed; retrying");
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                        }
                    }
                }
            }
            let (from, key) = (cursor.clone(), stream.clone());
            let read = tokio::select! {
                _ = stop.cancelled() => break,
                r = reader.read(|client| async move {
                    client
                        .with_options(&blocking_options(BLOCK))
                        .xread::<Value, _, _>(
                            Some(READ_BATCH),
                            Some(BLOCK.as_millis() as u64),
                            key.as_str(),
                            from.as_str(),
                        )
                        .await
                }) => r,
            };
            match read {
                Read::Value(v) => {
                    let events = crate::queue_events::actor::parse_xread(v);
                    if let Some(last) = events.last() {
                        cursor = last.id.clone();
                    }
                    let failed: Vec<&str> = events
                        .iter()
                        .filter(|e| matches!(e.kind, EventKind::Failed { .. }))
                        .filter_map(|e| e.kind.job_id())
                        .collect();
                    if let Err(e) = self.move_all(&failed).await {
                        debug!(error = %e, "dead-lettering failed jobs failed; the sweep takes them");
                        sweep = true;
                    }
                }
                Read::Refused => {}
                Read::Failed(e) => {
                    debug!(error = %e, "dead-letter follower XREAD failed; reconnecting");
                    sweep = true;
                }
                Read::Stopped => break,
            }
        }
        reader.close().await;
    }

    /// Runs `deadLetterFailed` on each id, in one pipelined round trip;
    /// answers, in order, whether each job was moved (the first error, after
    /// counting what the others did).
    async fn move_all(&self, ids: &[&str]) -> Result<Vec<bool>> {
        let calls: Vec<DeadLetterFailed> = ids
            .iter()
            .map(|id| DeadLetterFailed {
                keys: &self.keys,
                id,
                target: DeadLetterTarget {
                    dlq: &self.dlq,
                    max_len: self.max_len,
                },
            })
            .collect();
        self.counters
            .seen
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        let replies = self.conn.call_batch(&calls).await;
        let moved: Vec<bool> = replies.iter().map(|r| matches!(r, Ok(Some(_)))).collect();
        let n = moved.iter().filter(|m| **m).count();
        self.counters.moved.fetch_add(n as u64, Ordering::Relaxed);
        match replies.into_iter().find_map(|r| r.err()) {
            Some(e) => Err(e),
            None => Ok(moved),
        }
    }

    /// Every job in `failed`, a page at a time; the ones left (a flow's)
    /// are stepped over.
    async fn sweep(&self, stop: &CancellationToken) -> Result<()> {
        let mut offset = 0i64;
        while !stop.is_cancelled() {
            let ids: Vec<String> = self
                .conn
                .pool()
                .zrange(
                    self.keys.failed(),
                    offset,
                    offset + SWEEP_PAGE - 1,
                    None,
                    false,
                    None,
                    false,
                )
                .await?;
            if ids.is_empty() {
                return Ok(());
            }
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            // Those not moved (a flow's) stay in `failed`, ahead of the next page.
            let moved = self.move_all(&ids).await?;
            offset += moved.iter().filter(|m| !**m).count() as i64;
        }
        Ok(())
    }
}
