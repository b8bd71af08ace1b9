//! The blocking connection of one worker instance: a
//! [`BlockingReader`] opened and named at start (so `getWorkers()` lists the
//! worker), renamed after fred reconnects it, replaced when a read on it is
//! overdue or failed, and watched by the actor's watchdog through its
//! deadline. A marker read runs as an
//! [`ArmedRead`], in its own task, so it stays armed while the fetcher takes a
//! due job on the pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Client, ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand};

use crate::connection::blocking_reader::{BlockingReader, Read};
use crate::connection::pool::{blocking_options, Connection};
use crate::error::Error;

/// How long past its timeout a blocking read may stay unanswered before the
/// connection is declared dead and replaced.
pub(crate) const WATCHDOG_MARGIN: Duration = Duration::from_millis(2000);

/// First pause before the blocking connection is reopened after a failure.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// The longest one: a Redis that is back is read again within a second.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// The dedicated client and the liveness of the read it runs.
pub(crate) struct BlockingConn {
    /// Opens, names (again after a reconnect), unblocks and replaces the
    /// client; the reads block on the marker.
    reader: BlockingReader,
    /// The key the reads block on (the marker).
    route_key: String,
    /// ms after which a pending BZPOPMIN is overdue; 0 when none is pending.
    deadline: AtomicU64,
    /// Last time the fetcher went round its loop, ms.
    heartbeat: AtomicU64,
}

impl BlockingConn {
    /// The blocking connection of a worker named `name` (`CLIENT SETNAME`),
    /// reading the marker `route_key`.
    pub fn new(conn: Connection, route_key: String, name: String) -> Self {
        BlockingConn {
            reader: BlockingReader::new(conn)
                .named(name)
                .unblocks_on(route_key.clone())
                .first_pause(RECONNECT_PAUSE)
                .max_pause(MAX_RECONNECT_PAUSE),
            route_key,
            deadline: AtomicU64::new(0),
            heartbeat: AtomicU64::new(0),
        }
    }

    pub fn beat(&self) {
        self.heartbeat
            .store(crate::clock::now_ms(), Ordering::Relaxed);
    }

    /// A read is pending until `deadline_ms`; 0 = none pending.
    pub fn set_deadline(&self, deadline_ms: u64) {
        self.deadline.store(deadline_ms, Ordering::Relaxed);
    }

    pub fn deadline(&self) -> u64 {
        self.deadline.load(Ordering::Relaxed)
    }

    /// The client, opened (and named) when there is none, after the backoff
    /// when the last one failed; renamed when fred reconnected it.
    pub async fn client(&self) -> Read<Client> {
        self.reader.client().await
    }

    /// Drops the client: unblocked server-side (through the pool, since the
    /// connection itself may be stuck) and quit in the background.
    pub fn discard(&self) {
        self.reader.discard();
    }
}

/// What a marker read answered: the popped `[key, member, score]` or nil, a
/// connection error, or nothing before the watchdog's deadline.
pub(crate) type ReadOutcome = Result<Result<Value, Error>, tokio::time::error::Elapsed>;

/// One BZPOPMIN on the blocking connection, running in its own task until it
/// answers. The fetcher collects the answer when it next waits, so the read
/// can outlive a wait that the due timer ended first: a new-job marker is
/// never missed, and no second read is ever sent on the connection.
pub(crate) struct ArmedRead {
    conn: Arc<BlockingConn>,
    task: tokio::task::JoinHandle<ReadOutcome>,
}

impl ArmedRead {
    /// Sends BZPOPMIN with `timeout` (s) on the connection's client, under
    /// the watchdog's deadline, cleared when the read answers.
    pub fn arm(conn: Arc<BlockingConn>, timeout: f64) -> Self {
        let block = Duration::from_secs_f64(timeout);
        let deadline = crate::clock::now_ms() + (block + WATCHDOG_MARGIN).as_millis() as u64;
        conn.set_deadline(deadline);
        let key = conn.route_key.clone();
        let owner = conn.clone();
        let task = tokio::spawn(async move {
            let read = owner.reader.read(|client| async move {
                // A raw command rather than fred's typed `bzpopmin`, which
                // turns the server's nil (the block time passed, no marker)
                // into a `Timeout` error indistinguishable from its own
                // client-side timeout: the fetcher would take every quiet
                // read for a broken connection and replace it.
                let bzpopmin = CustomCommand::new_static("BZPOPMIN", ClusterHash::FirstKey, true);
                client
                    .with_options(&blocking_options(block))
                    .custom::<Value, _>(bzpopmin, vec![Value::from(key), Value::from(timeout)])
                    .await
            });
            let outcome = match tokio::time::timeout(block + WATCHDOG_MARGIN, read).await {
                Ok(Read::Value(v)) => Ok(Ok(v)),
                // The marker's slot moved (or is failing over); the reader
                // kept the client and paused. Answered as a read that timed
                // out, so the fetcher tries moveToActive (which waits for the
                // slot to settle) and reads again.
                Ok(Read::Refused) => Ok(Ok(Value::Null)),
                Ok(Read::Failed(e)) => Ok(Err(e)),
                Ok(Read::Stopped) => Ok(Err(Error::Config("blocking read stopped".into()))),
                Err(elapsed) => Err(elapsed),
            };
            owner.set_deadline(0);
            outcome
        });
        ArmedRead { conn, task }
    }

    /// The read's answer; a task that died answers as a failed read.
    pub async fn outcome(&mut self) -> ReadOutcome {
        match (&mut self.task).await {
            Ok(outcome) => outcome,
            Err(e) => Ok(Err(Error::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Unknown,
                format!("marker read task: {e}"),
            )))),
        }
    }
}

impl Drop for ArmedRead {
    fn drop(&mut self) {
        if !self.task.is_finished() {
            // The fetcher stopped (or was replaced) with the read in flight:
            // nobody waits for it any more, and the connection is discarded
            // by whoever stopped the fetcher.
            self.task.abort();
            self.conn.set_deadline(0);
        }
    }
}
