//! The StalledChecker: recovers jobs whose worker died, in the two-phase
//! mark-then-recover sweep of `moveStalledJobsToWait-8.lua` (seed E2.03.2).
//!
//! Every sweep: (1) the probe, page by page ([`PROBE_PAGE`] ids): `LRANGE` of
//! a page of `active`, then one pipelined round trip of `EXISTS` on each of
//! its jobs' locks — reported as the jobs that have no lock right now; (2) the script, which recovers the jobs the *previous* sweep
//! marked and whose lock is still missing (back to `wait`, `stc` + 1, `defa`
//! once past `maxStalledCount`, never for scheduler iterations), then marks
//! every active job for the next sweep. The `stalled-check` key throttles the
//! whole fleet (Node workers included) to one sweep per interval.
//!
//! A job is therefore recovered only after its lock has been missing across two
//! sweeps: a live worker renews (and un-marks) its jobs in between. The actor
//! holds no durable state: stopping or restarting it at any moment does no harm.
//! Contract: `docs/stalled-checker.md`.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::stalled::MoveStalledJobsToWait;
use echomq_protocol::QueueKeys;
use fred::prelude::{KeysInterface, ListInterface, Value};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{info, info_span, warn, Instrument};

use crate::connection::pool::Connection;
use crate::error::{Error, Result};

/// Arguments of a [`StalledChecker`]: [`StalledCheckerArgs::new`], then set
/// the fields to change.
#[derive(Clone)]
#[non_exhaustive]
pub struct StalledCheckerArgs {
    /// The shared connection.
    pub connection: Connection,
    /// The queue to sweep.
    pub queue: String,
    /// Time between sweeps, and TTL of the fleet-wide throttle. Default 30 s.
    pub interval: Duration,
    /// Recoveries allowed before a job is marked to fail (`defa`). Default 1.
    pub max_stalled_count: u64,
    /// Told about every sweep that recovered jobs. Runs inside the actor:
    /// keep it short (a `cast` to a host actor, a channel send).
    pub on_recovered: Option<Arc<dyn Fn(JobsRecovered) + Send + Sync>>,
}

impl StalledCheckerArgs {
    /// Defaults for `queue`: a sweep every 30 s, maxStalledCount 1, no callback.
    pub fn new(connection: Connection, queue: impl Into<String>) -> Self {
        Self {
            connection,
            queue: queue.into(),
            interval: Duration::from_secs(30),
            max_stalled_count: 1,
            on_recovered: None,
        }
    }
}

impl std::fmt::Debug for StalledCheckerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StalledCheckerArgs")
            .field("queue", &self.queue)
            .field("interval", &self.interval)
            .field("max_stalled_count", &self.max_stalled_count)
            .finish()
    }
}

/// Jobs one sweep moved back to wait (the host's typed notice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobsRecovered {
    /// The queue.
    pub queue: String,
    /// The recovered ids, in the order the script handled them.
    pub job_ids: Vec<String>,
}

/// What one sweep found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Active jobs at the time of the probe.
    pub active: usize,
    /// Active jobs without a lock at the time of the probe (candidates).
    pub without_lock: Vec<String>,
    /// Jobs moved back to wait by this sweep.
    pub recovered: Vec<String>,
}

/// Counters since the actor started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StalledStats {
    /// Sweeps run (including those the fleet throttle turned into no-ops).
    pub sweeps: u64,
    /// Jobs recovered in total.
    pub recovered: u64,
    /// Sweeps that failed on a Redis error (retried at the next interval).
    pub errors: u64,
    /// Client time (ms) of the last successful sweep.
    pub last_sweep_ms: Option<u64>,
}

/// Messages of the [`StalledChecker`].
#[derive(Debug)]
pub enum StalledCheckerMsg {
    /// Sweep now and reply with what was found. Does not move the timer.
    CheckNow(RpcReplyPort<Result<SweepReport>>),
    /// Reply with the counters.
    GetStats(RpcReplyPort<StalledStats>),
    /// Panics the actor (fault injection for supervision and chaos tests).
    #[cfg(feature = "fault-injection")]
    Crash,
    /// The sweep timer (opaque to hosts: only the actor makes one, so there
    /// is one timer chain per actor).
    Tick(Tick),
}

/// A timer message; only the [`StalledChecker`] makes them.
#[derive(Debug)]
pub struct Tick(());

/// The actor. Spawn it under the host's supervisor:
/// `Actor::spawn_linked(None, StalledChecker, args, supervisor)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StalledChecker;

/// Runtime state (rebuilt from the arguments on every start).
pub struct StalledCheckerState {
    args: StalledCheckerArgs,
    keys: QueueKeys,
    stats: StalledStats,
    metrics: crate::telemetry::metrics::QueueMetrics,
}

impl Actor for StalledChecker {
    type Msg = StalledCheckerMsg;
    type State = StalledCheckerState;
    type Arguments = StalledCheckerArgs;

    async fn pre_start(
        &self,
        _me: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        if args.interval.is_zero() {
            return Err(Box::new(Error::Config(
                "stalled interval must be positive".into(),
            )));
        }
        let keys = QueueKeys::new(args.connection.prefix(), &args.queue)?;
        Ok(StalledCheckerState {
            metrics: crate::telemetry::metrics::QueueMetrics::new(&args.queue),
            args,
            keys,
            stats: StalledStats::default(),
        })
    }

    async fn post_start(
        &self,
        me: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        // The first sweep runs at once, as BullMQ Node does.
        me.send_message(StalledCheckerMsg::Tick(Tick(())))?;
        Ok(())
    }

    async fn handle(
        &self,
        me: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            StalledCheckerMsg::Tick(Tick(())) => {
                // Errors are counted and logged; the next tick retries. Only a
                // programming error would be worth a restart, and there is none
                // to detect here.
                let _ = state.sweep().await;
                me.send_after(state.args.interval, || StalledCheckerMsg::Tick(Tick(())));
            }
            StalledCheckerMsg::CheckNow(reply) => {
                let _ = reply.send(state.sweep().await);
            }
            #[cfg(feature = "fault-injection")]
            StalledCheckerMsg::Crash => panic!("fault injection: stalled checker crash"),
            StalledCheckerMsg::GetStats(reply) => {
                let _ = reply.send(state.stats.clone());
            }
        }
        Ok(())
    }
}

impl StalledCheckerState {
    async fn sweep(&mut self) -> Result<SweepReport> {
        let span = info_span!("stalled_sweep", queue = %self.args.queue);
        let started = std::time::Instant::now();
        let r = self.sweep_inner().instrument(span).await;
        let recovered = r.as_ref().ok().map(|report| report.recovered.len());
        self.metrics.stalled_sweep(recovered, started.elapsed());
        self.stats.sweeps += 1;
        match &r {
            Ok(report) => {
                self.stats.recovered += report.recovered.len() as u64;
                self.stats.last_sweep_ms = Some(crate::clock::now_ms());
                if !report.recovered.is_empty() {
                    for id in &report.recovered {
                        info!(queue = %self.args.queue, job_id = %id, "stalled job recovered");
                    }
                    if let Some(cb) = &self.args.on_recovered {
                        cb(JobsRecovered {
                            queue: self.args.queue.clone(),
                            job_ids: report.recovered.clone(),
                        });
                    }
                }
            }
            Err(e) => {
                self.stats.errors += 1;
                warn!(queue = %self.args.queue, error = %e, "stalled sweep failed; retrying next interval");
            }
        }
        r
    }

    async fn sweep_inner(&self) -> Result<SweepReport> {
        let conn = &self.args.connection;
        let k = &self.keys;
        let (active, without_lock) = probe(conn, k).await?;
        let recovered = conn
            .call(&MoveStalledJobsToWait {
                keys: k,
                max_stalled_count: self.args.max_stalled_count,
                now: crate::clock::now_ms(),
                interval: self.args.interval,
            })
            .await?;
        Ok(SweepReport {
            active,
            without_lock,
            recovered,
        })
    }
}

/// Ids per page of the probe. One pipeline for 100 000 active jobs took
/// 1.4 s and held as many replies in memory; pages of this size keep each
/// round trip short, so other clients' commands interleave between them.
pub const PROBE_PAGE: i64 = 1000;

/// The active jobs counted and those without a lock, page by page. `active`
/// may move while the pages are read (jobs taken at its head, finished jobs
/// removed): the probe is a report, the script decides on its own, so an id
/// seen twice is reported once and one shifted past a page edge is missed
/// until the next sweep.
async fn probe(conn: &Connection, keys: &QueueKeys) -> Result<(usize, Vec<String>)> {
    let mut seen = 0usize;
    let mut without_lock: Vec<String> = Vec::new();
    let mut reported = std::collections::HashSet::new();
    let mut start = 0i64;
    loop {
        let page: Vec<String> = conn
            .pool()
            .lrange(keys.active(), start, start + PROBE_PAGE - 1)
            .await?;
        seen += page.len();
        for id in probe_locks(conn, keys, &page).await? {
            if reported.insert(id.clone()) {
                without_lock.push(id);
            }
        }
        if (page.len() as i64) < PROBE_PAGE {
            return Ok((seen, without_lock));
        }
        start += PROBE_PAGE;
    }
}

/// One pipelined round trip of `EXISTS <lock>` for every id of a page.
async fn probe_locks(conn: &Connection, keys: &QueueKeys, ids: &[String]) -> Result<Vec<String>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let pipeline = conn.pool().next().pipeline();
    for id in ids {
        pipeline.exists::<(), _>(keys.lock(id)).await?;
    }
    let exists: Vec<Value> = pipeline.all().await?;
    Ok(ids
        .iter()
        .zip(exists)
        .filter(|(_, e)| matches!(e, Value::Integer(0)))
        .map(|(id, _)| id.clone())
        .collect())
}
