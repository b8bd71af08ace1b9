//! The DagReleaser: hands finished DAG nodes of one queue to their extra
//! parents (releaseDagParents-5), whoever finished them — an EchoMQ worker or
//! a BullMQ Node one. It follows the queue's events stream (`completed`,
//! `failed`, `removed`) for low latency, and sweeps `{P}dag:pending` (the
//! nodes not handed over yet) as the backstop for events it missed: a
//! restart, a trimmed stream, a dropped read. Every release is idempotent,
//! so several releasers of one queue, a replayed event or a sweep that meets
//! a node the stream already handled change nothing.
//!
//! Each sweep also ends the gated DAG writes homed in its queue whose writer
//! let the deadline pass (`{P}dag:gates`, repairDagWrite-2): rolled back, or
//! finished when every node was written.
//!
//! `echomq work` starts one per queue under its host
//! ([`Host::add_dag_releaser`](crate::host::Host::add_dag_releaser)): on a
//! queue that holds no DAG node several nodes wait for, it reads nothing but
//! one EXISTS of `{P}dag:pending` every 250 ms, until the first appears.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq_protocol::call::dag::{
    gates_key, pending_key, DagRelease, DagRepair, ReleaseDagParents, RepairDagWrite,
};
use echomq_protocol::call::lifecycle::EpochMs;
use echomq_protocol::QueueKeys;
use fred::prelude::{ClientLike, SetsInterface, StreamsInterface, Value};
use fred::types::{ClusterHash, CustomCommand};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{debug, warn};

use crate::connection::blocking_reader::{BlockingReader, Read};
use crate::connection::pool::{blocking_options, Connection};
use crate::error::Result;
use crate::queue_events::actor::{finished_ids, last_entry_id};

/// Stream entries per read.
const READ_BATCH: u64 = 1000;
/// `{P}dag:pending` members per sweep page.
const SWEEP_PAGE: u64 = 200;
/// Extra parents handed over per script call.
const PARENTS_PER_CALL: u64 = 100;
/// Gated writes looked at per sweep (the earliest deadlines).
const GATES_PER_SWEEP: i64 = 10;
/// Nodes rolled back or lifted per repair call.
const NODES_PER_REPAIR: u64 = 200;
/// How often a releaser of a queue without DAG nodes looks for one.
const DORMANT_POLL: Duration = Duration::from_millis(250);

/// Arguments of a [`DagReleaser`]: [`DagReleaserArgs::new`], then the setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DagReleaserArgs {
    /// The shared connection.
    pub connection: Connection,
    /// The queue whose finished nodes it hands over.
    pub queue: String,
    /// Time to walk `{P}dag:pending` once more (the backstop for missed
    /// events, and for a failed node retried later). Default 5 s.
    pub sweep_interval: Duration,
    /// Longest block on the events stream. Default 1 s.
    pub block: Duration,
}

impl DagReleaserArgs {
    /// Defaults for `queue`.
    pub fn new(connection: Connection, queue: impl Into<String>) -> Self {
        DagReleaserArgs {
            connection,
            queue: queue.into(),
            sweep_interval: Duration::from_secs(5),
            block: Duration::from_secs(1),
        }
    }

    /// Sets the sweep interval.
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_interval = every.max(Duration::from_millis(10));
        self
    }

    /// Sets the longest block on the stream.
    pub fn block(mut self, block: Duration) -> Self {
        self.block = block.clamp(Duration::from_millis(1), Duration::from_secs(10));
        self
    }
}

/// Counters of one releaser since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DagReleaserStats {
    /// Nodes fully handed over to their extra parents.
    pub handed_over: u64,
    /// Abandoned gated writes ended (rolled back or finished).
    pub repaired: u64,
    /// Rounds (handle events, sweep, block).
    pub rounds: u64,
}

#[derive(Default)]
struct Counters {
    handed_over: AtomicU64,
    repaired: AtomicU64,
    rounds: AtomicU64,
}

/// Messages of the [`DagReleaser`].
#[derive(Debug)]
pub enum DagReleaserMsg {
    /// The counters.
    GetStats(RpcReplyPort<DagReleaserStats>),
    /// Stop (reason `"closed"`, not restarted by a host).
    Close,
    /// Panics the actor (fault injection for supervision tests).
    #[cfg(feature = "fault-injection")]
    Crash,
}

/// The actor (`Actor::spawn` or `Actor::spawn_linked` with
/// [`DagReleaserArgs`]); one per queue that holds nodes several nodes wait for.
#[derive(Debug, Clone, Copy, Default)]
pub struct DagReleaser;

/// The releaser's state.
pub struct DagReleaserState {
    counters: Arc<Counters>,
    pump: Option<tokio::task::JoinHandle<()>>,
}

impl Actor for DagReleaser {
    type Msg = DagReleaserMsg;
    type State = DagReleaserState;
    type Arguments = DagReleaserArgs;

    async fn pre_start(
        &self,
        me: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        let keys = QueueKeys::new(args.connection.prefix(), &args.queue)?;
        let reader = BlockingReader::new(args.connection.clone())
            .named(format!("{}:dag", keys.events_client_name()))
            .first_pause(Duration::from_millis(200));
        if let Read::Failed(e) = reader.client().await {
            return Err(e.into());
        }
        // From the stream's end: what finished before is the first sweep's.
        let cursor = last_entry_id(&args.connection, &keys.events()).await?;
        let counters = Arc::new(Counters::default());
        let pump = Pump {
            me,
            keys,
            args,
            counters: counters.clone(),
        };
        Ok(DagReleaserState {
            counters,
            pump: Some(tokio::spawn(pump.run(reader, cursor))),
        })
    }

    async fn post_stop(
        &self,
        _me: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        if let Some(p) = state.pump.take() {
            p.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        me: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            DagReleaserMsg::GetStats(reply) => {
                let c = &state.counters;
                let _ = reply.send(DagReleaserStats {
                    handed_over: c.handed_over.load(Ordering::Relaxed),
                    repaired: c.repaired.load(Ordering::Relaxed),
                    rounds: c.rounds.load(Ordering::Relaxed),
                });
            }
            DagReleaserMsg::Close => {
                if let Some(p) = state.pump.take() {
                    p.abort();
                }
                me.stop(Some(crate::supervision::decision::CLOSED.into()));
            }
            #[cfg(feature = "fault-injection")]
            DagReleaserMsg::Crash => panic!("fault injection: DAG releaser crash"),
        }
        Ok(())
    }
}

struct Pump {
    me: ActorRef<DagReleaserMsg>,
    keys: QueueKeys,
    args: DagReleaserArgs,
    counters: Arc<Counters>,
}

impl Pump {
    async fn run(self, reader: BlockingReader, cursor: String) {
        if let Some(cursor) = self.wait_for_nodes(cursor).await {
            self.follow(&reader, cursor).await;
        }
        reader.close().await;
    }

    fn stopping(&self) -> bool {
        // Not `!= Running`: the pump starts inside pre_start, while the
        // actor is still `Starting`.
        matches!(
            self.me.get_status(),
            ractor::ActorStatus::Stopping | ractor::ActorStatus::Stopped
        )
    }

    /// Most queues hold no DAG node several nodes wait for, and `echomq work`
    /// starts a releaser on every queue: until `{P}dag:pending` or
    /// `{P}dag:gates` exists (the add writes them), the releaser only looks for them, one
    /// EXISTS every [`DORMANT_POLL`], instead of reading and decoding every
    /// event of a busy queue. Answers the cursor to follow the stream from
    /// (read before the look, so a finish in between is not missed; the
    /// first round's sweep covers the rest), `None` once stopped.
    async fn wait_for_nodes(&self, mut cursor: String) -> Option<String> {
        use fred::prelude::KeysInterface;
        let conn = &self.args.connection;
        let look = vec![pending_key(&self.keys), gates_key(&self.keys)];
        loop {
            if self.stopping() {
                return None;
            }
            match conn.pool().exists::<u64, _>(look.clone()).await {
                Ok(n) if n > 0 => return Some(cursor),
                Ok(_) => {}
                Err(e) => debug!(error = %e, "dag releaser: looking for DAG nodes failed"),
            }
            tokio::time::sleep(DORMANT_POLL).await;
            if let Ok(id) = last_entry_id(conn, &self.keys.events()).await {
                cursor = id;
            }
        }
    }

    async fn follow(&self, reader: &BlockingReader, mut cursor: String) {
        let stream = self.keys.events();
        let mut finished: Vec<String> = Vec::new();
        let mut sweep_cursor = "0".to_owned();
        let mut next_sweep = Instant::now();
        loop {
            if self.stopping() {
                break;
            }
            self.counters.rounds.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self
                .round(&mut finished, &mut sweep_cursor, &mut next_sweep)
                .await
            {
                warn!(queue = %self.args.queue, error = %e, "dag releaser round failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let block = self
                .args
                .block
                .min(next_sweep.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1));
            let (from, key) = (cursor.clone(), stream.clone());
            let read = reader
                .read(|client| async move {
                    client
                        .with_options(&blocking_options(block))
                        .xread::<Value, _, _>(
                            Some(READ_BATCH),
                            Some(block.as_millis() as u64),
                            key.as_str(),
                            from.as_str(),
                        )
                        .await
                })
                .await;
            match read {
                Read::Value(v) => {
                    let events = crate::queue_events::actor::parse_xread(v);
                    if let Some(last) = events.last() {
                        cursor = last.id.clone();
                    }
                    finished.extend(finished_ids(&events));
                }
                Read::Refused => {}
                Read::Failed(e) => {
                    debug!(error = %e, "dag releaser XREAD failed; reconnecting");
                    next_sweep = Instant::now();
                }
                Read::Stopped => break,
            }
        }
    }

    /// Hands over the finishes the stream announced, then a sweep page when due.
    async fn round(
        &self,
        finished: &mut Vec<String>,
        sweep_cursor: &mut String,
        next_sweep: &mut Instant,
    ) -> Result<()> {
        let conn = &self.args.connection;
        let pending = pending_key(&self.keys);
        for part in finished.chunks(500) {
            // Only the nodes with extra parents cost a script call.
            let member: Vec<bool> = conn.pool().smismember(&pending, part.to_vec()).await?;
            let ids: Vec<&str> = part
                .iter()
                .zip(member)
                .filter(|(_, m)| *m)
                .map(|(id, _)| id.as_str())
                .collect();
            self.release_all(&ids).await?;
        }
        finished.clear();
        if Instant::now() >= *next_sweep {
            let sscan = CustomCommand::new_static("SSCAN", ClusterHash::FirstKey, false);
            let page: Value = conn
                .pool()
                .custom(
                    sscan,
                    vec![
                        pending.clone(),
                        sweep_cursor.clone(),
                        "COUNT".to_owned(),
                        SWEEP_PAGE.to_string(),
                    ],
                )
                .await?;
            let (next, ids) = scan_page(page);
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            self.release_all(&ids).await?;
            if next == "0" {
                self.repair_writes().await?;
                *sweep_cursor = "0".to_owned();
                *next_sweep = Instant::now() + self.args.sweep_interval;
            } else {
                *sweep_cursor = next;
            }
        }
        Ok(())
    }

    /// Ends the gated writes homed here whose deadline passed, earliest
    /// first; the first live one ends the look (deadlines are in order).
    async fn repair_writes(&self) -> Result<()> {
        use fred::prelude::SortedSetsInterface;
        let conn = &self.args.connection;
        let gates: Vec<String> = conn
            .pool()
            .zrange(
                gates_key(&self.keys),
                0,
                GATES_PER_SWEEP - 1,
                None,
                false,
                None,
                false,
            )
            .await?;
        for gate in gates {
            loop {
                let call = RepairDagWrite {
                    home: &self.keys,
                    gate: &gate,
                    budget: NODES_PER_REPAIR,
                };
                match conn.call(&call).await? {
                    DagRepair::Alive => return Ok(()),
                    DagRepair::Left(0) => {
                        warn!(queue = %self.args.queue, gate = %gate, "ended a DAG write abandoned by its writer");
                        self.counters.repaired.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    DagRepair::Left(_) => {}
                }
            }
        }
        Ok(())
    }

    /// Hands these nodes over in one pipelined round trip (a burst of
    /// finishes, say the first nodes of many DAGs, would otherwise wait for
    /// each other's round trips); a node with more extra parents than one
    /// call takes goes on alone.
    async fn release_all(&self, ids: &[&str]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = EpochMs(crate::clock::now_ms());
        let calls: Vec<ReleaseDagParents<'_>> = ids
            .iter()
            .map(|id| ReleaseDagParents {
                keys: &self.keys,
                id,
                now,
                budget: PARENTS_PER_CALL,
            })
            .collect();
        let results = self.args.connection.call_batch(&calls).await;
        for (id, r) in ids.iter().zip(results) {
            match r? {
                DagRelease::NotFinished => {}
                DagRelease::Left(0) => {
                    self.counters.handed_over.fetch_add(1, Ordering::Relaxed);
                }
                DagRelease::Left(_) => self.release(id).await?,
            }
        }
        Ok(())
    }

    async fn release(&self, id: &str) -> Result<()> {
        loop {
            let r = self
                .args
                .connection
                .call(&ReleaseDagParents {
                    keys: &self.keys,
                    id,
                    now: EpochMs(crate::clock::now_ms()),
                    budget: PARENTS_PER_CALL,
                })
                .await?;
            match r {
                DagRelease::NotFinished => return Ok(()),
                DagRelease::Left(0) => {
                    self.counters.handed_over.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                DagRelease::Left(_) => {}
            }
        }
    }
}

/// `SSCAN`'s reply: the next cursor and the members.
fn scan_page(v: Value) -> (String, Vec<String>) {
    let Value::Array(mut parts) = v else {
        return ("0".to_owned(), Vec::new());
    };
    let members = match parts.pop() {
        Some(Value::Array(m)) => m.iter().filter_map(Value::as_string).collect(),
        _ => Vec::new(),
    };
    let next = parts
        .pop()
        .and_then(|c| c.as_string())
        .unwrap_or_else(|| "0".to_owned());
    (next, members)
}
