//! The GroupFeeder: releases group jobs into `wait` under each group's budget
//! and frees the slots of finished ones (docs/decisions.md §15).
//!
//! Its work runs in a pump task it owns: account the finishes the events
//! stream announced, sweep one page of released jobs, release a batch, then
//! block on the stream (`XREAD BLOCK`, dedicated client) until something
//! happens, a rate window frees or the next sweep is due. Everything it acts
//! on lives in Redis, so a restart (or another feeder) goes on from there.
//! On a queue that has never had a group it reads nothing but one EXISTS
//! every 250 ms, until the first group appears.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq_protocol::call::groups::{
    AccountGroupJobs, AccountScope, GroupDefaults, ReleaseGroupJobs,
};
use echomq_protocol::group::GroupKeys;
use echomq_protocol::QueueKeys;
use fred::prelude::{ClientLike, StreamsInterface, Value};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{debug, warn};

use crate::connection::blocking_reader::{BlockingReader, Read};
use crate::connection::pool::{blocking_options, Connection};
use crate::error::Result;
use crate::queue_events::actor::{finished_ids, last_entry_id};

/// Ids checked per accounting call.
const ACCOUNT_CHUNK: usize = 500;
/// `{P}gr:jobs` entries per sweep page.
const SWEEP_PAGE: u64 = 200;
/// Stream entries per read.
const READ_BATCH: u64 = 1000;
/// First pause before the reader reconnects after a failed read.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// How often a feeder of a queue that has never had a group looks for one.
const DORMANT_POLL: Duration = Duration::from_millis(250);

/// Arguments of a [`GroupFeeder`]: [`GroupFeederArgs::new`], then the setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupFeederArgs {
    /// The shared connection.
    pub connection: Connection,
    /// The queue.
    pub queue: String,
    /// Concurrency and rate limit of groups without settings of their own.
    /// Default: no bound (give every feeder of a queue the same).
    pub defaults: GroupDefaults,
    /// Release only while `wait` holds fewer ids than this (0: no bound), so
    /// that a group arriving later is not queued behind a released backlog.
    /// Default 64; about the fleet's total concurrency is a good value.
    pub max_ready: u64,
    /// Most jobs one release call moves. Default 100.
    pub batch: u64,
    /// Time to walk all released jobs once more (the backstop for finishes
    /// whose events were missed). Default 5 s.
    pub sweep_interval: Duration,
    /// Longest block on the events stream. Default 1 s.
    pub block: Duration,
}

impl GroupFeederArgs {
    /// Defaults for `queue`.
    pub fn new(connection: Connection, queue: impl Into<String>) -> Self {
        GroupFeederArgs {
            connection,
            queue: queue.into(),
            defaults: GroupDefaults::default(),
            max_ready: 64,
            batch: 100,
            sweep_interval: Duration::from_secs(5),
            block: Duration::from_secs(1),
        }
    }

    /// Sets the defaults for groups without settings.
    pub fn defaults(mut self, defaults: GroupDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// Sets the look-ahead bound on `wait`.
    pub fn max_ready(mut self, max_ready: u64) -> Self {
        self.max_ready = max_ready;
        self
    }

    /// Sets the release batch.
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Sets the sweep interval.
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_interval = every;
        self
    }

    /// Sets the longest block on the stream.
    pub fn block(mut self, block: Duration) -> Self {
        self.block = block.clamp(Duration::from_millis(1), Duration::from_secs(10));
        self
    }
}

/// Counters of one feeder since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FeederStats {
    /// Jobs released into wait.
    pub released: u64,
    /// Group slots freed.
    pub freed: u64,
    /// Rounds (account, sweep, release, block).
    pub rounds: u64,
}

#[derive(Default)]
struct Counters {
    released: AtomicU64,
    freed: AtomicU64,
    rounds: AtomicU64,
}

/// Messages of the [`GroupFeeder`].
#[derive(Debug)]
pub enum GroupFeederMsg {
    /// The counters.
    GetStats(RpcReplyPort<FeederStats>),
    /// Stop (reason `"closed"`, not restarted by a host).
    Close,
    /// Panics the actor (fault injection for supervision and chaos tests).
    #[cfg(feature = "fault-injection")]
    Crash,
}

/// The actor. Spawn it under the host's supervisor
/// (`HostSupervisorMsg::AddGroupFeeder`, or `Actor::spawn_linked(None,
/// GroupFeeder, args, supervisor)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupFeeder;

/// The feeder's state.
pub struct GroupFeederState {
    counters: Arc<Counters>,
    pump: Option<tokio::task::JoinHandle<()>>,
}

impl Actor for GroupFeeder {
    type Msg = GroupFeederMsg;
    type State = GroupFeederState;
    type Arguments = GroupFeederArgs;

    async fn pre_start(
        &self,
        me: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        let keys = QueueKeys::new(args.connection.prefix(), &args.queue)?;
        // Opened now, so that a server that refuses it fails the start.
        let reader = BlockingReader::new(args.connection.clone())
            .named(format!("{}:groups", keys.events_client_name()))
            .first_pause(RECONNECT_PAUSE);
        if let Read::Failed(e) = reader.client().await {
            return Err(e.into());
        }
        let cursor = last_entry_id(&args.connection, &keys.events()).await?;
        let counters = Arc::new(Counters::default());
        let pump = Pump {
            me,
            groups: GroupKeys::new(&keys),
            keys,
            args,
            counters: counters.clone(),
        };
        Ok(GroupFeederState {
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
            GroupFeederMsg::GetStats(reply) => {
                let c = &state.counters;
                let _ = reply.send(FeederStats {
                    released: c.released.load(Ordering::Relaxed),
                    freed: c.freed.load(Ordering::Relaxed),
                    rounds: c.rounds.load(Ordering::Relaxed),
                });
            }
            GroupFeederMsg::Close => {
                if let Some(p) = state.pump.take() {
                    p.abort();
                }
                me.stop(Some(crate::supervision::decision::CLOSED.into()));
            }
            #[cfg(feature = "fault-injection")]
            GroupFeederMsg::Crash => panic!("fault injection: group feeder crash"),
        }
        Ok(())
    }
}

struct Pump {
    me: ActorRef<GroupFeederMsg>,
    keys: QueueKeys,
    groups: GroupKeys,
    args: GroupFeederArgs,
    counters: Arc<Counters>,
}

impl Pump {
    async fn run(self, reader: BlockingReader, cursor: String) {
        if let Some(cursor) = self.wait_for_groups(cursor).await {
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

    /// A queue without groups has nothing to feed, and `echomq work` starts a
    /// feeder on every queue: until the queue's first group appears
    /// (`{P}gr:index`, written by every group add), the feeder only looks for
    /// it, one EXISTS every [`DORMANT_POLL`], instead of reading and decoding
    /// every event of a busy queue. Answers the cursor to follow the stream
    /// from (read before the look, so a group job added in between is not
    /// missed; the first round's sweep covers the rest), `None` once stopped.
    async fn wait_for_groups(&self, mut cursor: String) -> Option<String> {
        use fred::prelude::KeysInterface;
        let conn = &self.args.connection;
        let look = [self.groups.index.as_str(), self.groups.jobs.as_str()];
        loop {
            if self.stopping() {
                return None;
            }
            match conn.pool().exists::<u64, _>(look.to_vec()).await {
                Ok(n) if n > 0 => return Some(cursor),
                Ok(_) => {}
                Err(e) => debug!(error = %e, "group feeder: looking for groups failed"),
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
        // A (re)start sweeps first: finishes may have passed while no feeder ran.
        let mut next_sweep = Instant::now();
        loop {
            if self.stopping() {
                break;
            }
            self.counters.rounds.fetch_add(1, Ordering::Relaxed);
            let next_due = match self
                .round(&mut finished, &mut sweep_cursor, &mut next_sweep)
                .await
            {
                Ok(due) => due,
                Err(e) => {
                    warn!(queue = %self.args.queue, error = %e, "group feeder round failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let mut block = self.args.block;
            if let Some(due) = next_due {
                let wait = due.saturating_sub(crate::clock::now_ms());
                block = block.min(Duration::from_millis(wait));
            }
            block = block
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
                    debug!(error = %e, "group feeder XREAD failed; reconnecting");
                    // Missed events are the sweep's: run it now.
                    next_sweep = Instant::now();
                }
                Read::Stopped => break,
            }
        }
    }

    /// Account, sweep a page, release; answers when a rate window frees.
    async fn round(
        &self,
        finished: &mut Vec<String>,
        sweep_cursor: &mut String,
        next_sweep: &mut Instant,
    ) -> Result<Option<u64>> {
        let conn = &self.args.connection;
        for chunk in finished.chunks(ACCOUNT_CHUNK) {
            let r = conn
                .call(&AccountGroupJobs {
                    keys: &self.keys,
                    groups: &self.groups,
                    scope: AccountScope::Ids(chunk),
                })
                .await?;
            self.counters.freed.fetch_add(r.freed, Ordering::Relaxed);
        }
        finished.clear();
        if Instant::now() >= *next_sweep {
            let r = conn
                .call(&AccountGroupJobs {
                    keys: &self.keys,
                    groups: &self.groups,
                    scope: AccountScope::Scan {
                        cursor: sweep_cursor,
                        count: SWEEP_PAGE,
                    },
                })
                .await?;
            self.counters.freed.fetch_add(r.freed, Ordering::Relaxed);
            if r.cursor == "0" || r.cursor.is_empty() {
                *sweep_cursor = "0".to_owned();
                *next_sweep = Instant::now() + self.args.sweep_interval;
            } else {
                *sweep_cursor = r.cursor;
            }
        }
        loop {
            let r = conn
                .call(&ReleaseGroupJobs {
                    keys: &self.keys,
                    groups: &self.groups,
                    count: self.args.batch,
                    max_ready: self.args.max_ready,
                    defaults: self.args.defaults,
                })
                .await?;
            self.counters
                .released
                .fetch_add(r.released, Ordering::Relaxed);
            if r.released < self.args.batch {
                return Ok(r.next_due_ms);
            }
        }
    }
}
