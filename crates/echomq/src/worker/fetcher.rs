//! The fetch loop: one task per worker instance that takes a free slot, waits
//! on the marker with BZPOPMIN on a dedicated connection when the queue looked
//! drained, and takes a job with moveToActive (docs/worker.md).
//!
//! It never runs inside a message handler, so the actor stays responsive while
//! the read blocks; it exits by itself when the actor is gone (its heartbeat
//! cast fails) or when told to stop.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::lifecycle::NextJob;
use fred::prelude::{ClientLike, SortedSetsInterface, Value};
use fred::types::config::Server;
use tokio::sync::broadcast::Receiver;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use super::core::WorkerCore;
use super::gate::SlotPermit;
use super::job::ActiveJob;
use super::{run, Internal, InternalKind, WorkerMsg};
use crate::connection::blocking_options;

/// The longest BZPOPMIN timeout (s), whatever the delayed jobs say.
pub(crate) const MAX_BLOCK_S: f64 = 10.0;
/// How long past its timeout a blocking read may stay unanswered before the
/// connection is declared dead and replaced.
pub(crate) const WATCHDOG_MARGIN: Duration = Duration::from_millis(2000);
/// Longest sleep of a rate-limited worker, so delayed jobs still get promoted.
const MAX_RATE_LIMIT_SLEEP: Duration = Duration::from_secs(30);

/// BZPOPMIN timeout in seconds, or `None` to skip the wait and fetch now.
pub(crate) fn block_timeout(
    block_until: i64,
    now: i64,
    drain_delay_s: f64,
    min_block: f64,
) -> Option<f64> {
    if block_until > 0 {
        let d = block_until - now;
        if d <= 0 {
            return None;
        }
        let s = d as f64 / 1000.0;
        // Never 0: BZPOPMIN 0 blocks forever.
        return Some(if s < min_block {
            min_block
        } else {
            s.min(MAX_BLOCK_S)
        });
    }
    Some(drain_delay_s.max(min_block).min(MAX_BLOCK_S))
}

async fn sleep_or_stop(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

pub(crate) fn spawn(core: Arc<WorkerCore>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let span = tracing::info_span!("fetcher", queue = %core.keys().name(), worker = ?core.name().map(|n| &**n));
    tokio::spawn(
        async move {
            run_loop(core.clone(), stop).await;
            if !core.alive() {
                // Nobody else will close it: the actor died without post_stop.
                core.blocking().discard();
            }
        }
        .instrument(span),
    )
}

/// What the loop does after a step.
enum Next {
    /// Go on to the next step with the slot.
    Go(SlotPermit),
    /// Start over (the slot, if any, given back).
    Again,
    /// The worker stops.
    Exit,
}

/// The fetch loop's own state.
struct Fetcher {
    core: Arc<WorkerCore>,
    stop: CancellationToken,
    min_block: f64,
    client_name: String,
    reconnects: Option<Receiver<Server>>,
}

async fn run_loop(core: Arc<WorkerCore>, stop: CancellationToken) {
    let mut f = Fetcher::start(core, stop).await;
    loop {
        let permit = match f.slot().await {
            Next::Go(p) => p,
            Next::Again => continue,
            Next::Exit => return,
        };
        let permit = match f.wait_for_marker(permit).await {
            Next::Go(p) => p,
            Next::Again => continue,
            Next::Exit => return,
        };
        let permit = match f.respect_rate_limit(permit).await {
            Next::Go(p) => p,
            Next::Again => continue,
            Next::Exit => return,
        };
        if let Next::Exit = f.fetch(permit).await {
            return;
        }
    }
}

impl Fetcher {
    async fn start(core: Arc<WorkerCore>, stop: CancellationToken) -> Self {
        let min_block = min_block(&core).await;
        let client_name = core.keys().worker_client_name(core.name().map(|n| &**n));
        let mut f = Fetcher {
            core,
            stop,
            min_block,
            client_name,
            reconnects: None,
        };
        // Open (and name) the blocking connection at start, as BullMQ does,
        // so `getWorkers()` lists this worker even while it never blocks.
        if let Err(e) = f.client().await {
            warn!(error = %e, "cannot open the blocking connection yet");
        }
        f
    }

    async fn client(&mut self) -> crate::Result<fred::prelude::Client> {
        let core = self.core.clone();
        core.blocking()
            .client(&self.client_name, &mut self.reconnects)
            .await
    }

    /// Gives the slot back and pauses; `Exit` when stopped meanwhile.
    async fn back_off(&self, permit: SlotPermit, d: Duration) -> Next {
        drop(permit);
        if sleep_or_stop(&self.stop, d).await {
            Next::Again
        } else {
            Next::Exit
        }
    }

    /// Heartbeat, then a free slot.
    async fn slot(&self) -> Next {
        let core = &self.core;
        core.blocking().beat();
        if core
            .myself()
            .cast(WorkerMsg::Internal(Internal(InternalKind::Beat)))
            .is_err()
        {
            debug!("worker gone: fetcher exits");
            return Next::Exit;
        }
        let permit = tokio::select! {
            _ = self.stop.cancelled() => return Next::Exit,
            p = core.gate().acquire(core.myself()) => match p { Some(p) => p, None => return Next::Exit },
        };
        if core.alive() {
            Next::Go(permit)
        } else {
            Next::Exit
        }
    }

    /// When the queue looked drained: BZPOPMIN on the marker until a job may
    /// be ready (or the next delayed one is due).
    async fn wait_for_marker(&mut self, permit: SlotPermit) -> Next {
        let core = self.core.clone();
        if !core.hints().drained() {
            return Next::Go(permit);
        }
        let now = crate::clock::now_ms() as i64;
        let drain_delay = core.opts().drain_delay.as_secs_f64();
        let Some(timeout) =
            block_timeout(core.hints().block_until(), now, drain_delay, self.min_block)
        else {
            return Next::Go(permit);
        };
        let client = match self.client().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot open the blocking connection");
                return self.back_off(permit, Duration::from_secs(1)).await;
            }
        };
        let Some(result) = self.read_marker(&client, timeout).await else {
            return Next::Exit;
        };
        match result {
            Err(_) => {
                warn!(
                    timeout_s = timeout,
                    "blocking read overdue: replacing its connection"
                );
                core.blocking().discard();
                core.hints().forget_due_time();
            }
            Ok(Err(e)) => {
                // A killed or broken connection: a fresh one next time round
                // (with its name), never a replayed read.
                warn!(error = %e, "blocking read failed: replacing its connection");
                core.blocking().discard();
                return self.back_off(permit, Duration::from_millis(100)).await;
            }
            Ok(Ok(v)) => core.hints().marker_popped(marker_score(v)),
        }
        if !core.gate().runnable() || core.hints().delayed_job_pending() {
            return Next::Again;
        }
        Next::Go(permit)
    }

    /// One BZPOPMIN under the watchdog's deadline; `None` when stopped.
    async fn read_marker(
        &self,
        client: &fred::prelude::Client,
        timeout: f64,
    ) -> Option<Result<Result<Value, fred::error::Error>, tokio::time::error::Elapsed>> {
        let blocking = self.core.blocking();
        let block = Duration::from_secs_f64(timeout);
        let deadline = crate::clock::now_ms() + (block + WATCHDOG_MARGIN).as_millis() as u64;
        blocking.set_deadline(deadline);
        let with_opts = client.with_options(&blocking_options(block));
        let read = with_opts.bzpopmin::<Value, _>(self.core.keys().marker(), timeout);
        let result = tokio::select! {
            _ = self.stop.cancelled() => None,
            r = tokio::time::timeout(block + WATCHDOG_MARGIN, read) => Some(r),
        };
        blocking.set_deadline(0);
        result
    }

    /// Sleeps out a rate limit with the slot given back.
    async fn respect_rate_limit(&self, permit: SlotPermit) -> Next {
        match self.core.hints().rate_limit_left() {
            Some(left) => self.back_off(permit, left.min(MAX_RATE_LIMIT_SLEEP)).await,
            None => Next::Go(permit),
        }
    }

    /// moveToActive with a fresh token; a job taken runs in its own task.
    async fn fetch(&self, permit: SlotPermit) -> Next {
        let core = &self.core;
        // A fresh token per fetched job; fetch-next reuses it for the job it
        // brings, as BullMQ does.
        let token: Arc<str> = Arc::from(uuid::Uuid::new_v4().to_string());
        match core.move_to_active(&token).await {
            Ok(reply) => {
                if let NextJob::Job { .. } = reply {
                    core.hints().wake();
                }
                if let Some(job) = ActiveJob::take(core, reply, token) {
                    tokio::spawn(run::run_slot(core.clone(), permit, job));
                }
                Next::Again
            }
            Err(e) => {
                warn!(error = %e, "moveToActive failed");
                self.back_off(permit, Duration::from_millis(500)).await
            }
        }
    }
}

/// `[key, member, score]` → score; nil (timeout) → `None`.
fn marker_score(v: Value) -> Option<f64> {
    let Value::Array(items) = v else {
        return None;
    };
    match items.get(2)? {
        Value::Double(d) => Some(*d),
        other => other.as_string()?.parse().ok(),
    }
}

async fn min_block(core: &WorkerCore) -> f64 {
    // 0.001 s needs Redis ≥ 7.0.8; older servers need 0.002 s.
    let info: Option<String> = core
        .conn()
        .pool()
        .next()
        .info::<String>(Some(fred::types::InfoKind::Server))
        .await
        .ok();
    let version = info
        .as_deref()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("redis_version:")))
        .map(|v| {
            v.trim()
                .split('.')
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if version.len() >= 3 && (version[0], version[1], version[2]) >= (7, 0, 8) {
        0.001
    } else {
        0.002
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_timeouts() {
        assert_eq!(block_timeout(0, 1000, 5.0, 0.001), Some(5.0));
        assert_eq!(block_timeout(0, 1000, 0.0, 0.001), Some(0.001));
        assert_eq!(block_timeout(0, 1000, 30.0, 0.001), Some(10.0));
        assert_eq!(block_timeout(900, 1000, 5.0, 0.001), None);
        assert_eq!(block_timeout(1000, 1000, 5.0, 0.001), None);
        assert_eq!(block_timeout(1500, 1000, 5.0, 0.001), Some(0.5));
        assert_eq!(block_timeout(100_000, 1000, 5.0, 0.001), Some(10.0));
    }
}
