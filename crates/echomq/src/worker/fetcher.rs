//! The fetch loop: one task per worker instance that takes a free slot, waits
//! on the marker with BZPOPMIN on a dedicated connection when the queue looked
//! drained, and takes a job with moveToActive (worker-loop.md §2).
//!
//! It never runs inside a message handler, so the actor stays responsive while
//! the read blocks; it exits by itself when the actor is gone (its heartbeat
//! cast fails) or when told to stop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{
    Client, ClientInterface, ClientLike, EventInterface, SortedSetsInterface, Value,
};
use fred::types::ClientUnblockFlag;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::core::{lock, NextReply, WorkerCore};
use super::{run, Internal, WorkerMsg};
use crate::connection::blocking_options;
use crate::reply::{as_array, as_string};

/// The longest BZPOPMIN timeout (s), whatever the delayed jobs say.
pub(crate) const MAX_BLOCK_S: f64 = 10.0;
/// How long past its timeout a blocking read may stay unanswered before the
/// connection is declared dead and replaced.
pub(crate) const WATCHDOG_MARGIN: Duration = Duration::from_millis(2000);
/// Longest sleep of a rate-limited worker, so delayed jobs still get promoted.
const MAX_RATE_LIMIT_SLEEP_MS: i64 = 30_000;

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

pub(crate) fn spawn(core: Arc<WorkerCore>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let span =
        tracing::info_span!("fetcher", queue = %core.keys.name(), worker = ?core.name.as_deref());
    tokio::spawn(
        async move {
            run_loop(core.clone(), stop).await;
            if !core.alive() {
                // Nobody else will close it: the actor died without post_stop.
                discard_blocking_client(&core);
            }
        }
        .instrument(span),
    )
}

async fn sleep_or_stop(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

async fn run_loop(core: Arc<WorkerCore>, stop: CancellationToken) {
    let min_block = min_block(&core).await;
    let client_name = core.keys.worker_client_name(core.name.as_deref());
    let mut reconnects: Option<tokio::sync::broadcast::Receiver<fred::types::config::Server>> =
        None;
    // Open (and name) the blocking connection at start, as BullMQ does, so
    // `getWorkers()` lists this worker even while it never needs to block.
    if let Err(e) = blocking_client(&core, &client_name, &mut reconnects).await {
        warn!(error = %e, "cannot open the blocking connection yet");
    }
    loop {
        core.watch
            .heartbeat
            .store(crate::clock::now_ms(), Ordering::Relaxed);
        if core
            .myself
            .cast(WorkerMsg::Internal(Internal(super::InternalKind::Beat)))
            .is_err()
        {
            debug!("worker gone: fetcher exits");
            return;
        }
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            p = core.gate.acquire(&core) => match p { Some(p) => p, None => return },
        };
        if !core.alive() {
            return;
        }
        if core.drained.load(Ordering::Relaxed) {
            let now = crate::clock::now_ms() as i64;
            let drain_delay = core.opts.drain_delay.as_secs_f64();
            if let Some(timeout) = block_timeout(
                core.block_until.load(Ordering::Relaxed),
                now,
                drain_delay,
                min_block,
            ) {
                let client = match blocking_client(&core, &client_name, &mut reconnects).await {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(error = %e, "cannot open the blocking connection");
                        drop(permit);
                        if !sleep_or_stop(&stop, Duration::from_secs(1)).await {
                            return;
                        }
                        continue;
                    }
                };
                let block = Duration::from_secs_f64(timeout);
                let deadline =
                    crate::clock::now_ms() + (block + WATCHDOG_MARGIN).as_millis() as u64;
                core.watch
                    .blocking_deadline
                    .store(deadline, Ordering::Relaxed);
                let with_opts = client.with_options(&blocking_options(block));
                let read = with_opts.bzpopmin::<Value, _>(core.keys.marker(), timeout);
                let result = tokio::select! {
                    _ = stop.cancelled() => {
                        core.watch.blocking_deadline.store(0, Ordering::Relaxed);
                        return;
                    }
                    r = tokio::time::timeout(block + WATCHDOG_MARGIN, read) => r,
                };
                core.watch.blocking_deadline.store(0, Ordering::Relaxed);
                match result {
                    Err(_) => {
                        warn!(
                            timeout_s = timeout,
                            "blocking read overdue: replacing its connection"
                        );
                        discard_blocking_client(&core);
                        core.block_until.store(0, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => {
                        // A killed or broken connection: a fresh one next time
                        // round (with its name), never a replayed read.
                        warn!(error = %e, "blocking read failed: replacing its connection");
                        discard_blocking_client(&core);
                        drop(permit);
                        if !sleep_or_stop(&stop, Duration::from_millis(100)).await {
                            return;
                        }
                        continue;
                    }
                    Ok(Ok(v)) => match marker_score(v) {
                        None => core.block_until.store(0, Ordering::Relaxed),
                        Some(score) => {
                            let known = core.block_until.load(Ordering::Relaxed);
                            let score = score as i64;
                            if known <= 0 || score < known {
                                core.block_until.store(score, Ordering::Relaxed);
                            }
                        }
                    },
                }
                if !core.gate.runnable() {
                    continue;
                }
                let bu = core.block_until.load(Ordering::Relaxed);
                if bu > 0 && bu - crate::clock::now_ms() as i64 >= 1 {
                    continue;
                }
            }
        }
        let limit_until = core.limit_until.load(Ordering::Relaxed);
        let now = crate::clock::now_ms() as i64;
        if limit_until > now {
            drop(permit);
            let wait = (limit_until - now).min(MAX_RATE_LIMIT_SLEEP_MS) as u64;
            if !sleep_or_stop(&stop, Duration::from_millis(wait)).await {
                return;
            }
            continue;
        }
        // A fresh token per fetched job; fetch-next reuses it for the job it
        // brings, as BullMQ does.
        let token: Arc<str> = Arc::from(uuid::Uuid::new_v4().to_string());
        match core.move_to_active(&token).await {
            Ok(NextReply::Job { id, fields }) => {
                core.drained.store(false, Ordering::Relaxed);
                match core.adopt(id.clone(), fields, token) {
                    Ok(job) => {
                        tokio::spawn(run::run_slot(core.clone(), permit, job));
                    }
                    Err(e) => {
                        tracing::error!(job_id = %id, error = %e, "taken job cannot be decoded; left to the stalled checker")
                    }
                }
            }
            Ok(other) => core.note_no_job(&other),
            Err(e) => {
                warn!(error = %e, "moveToActive failed");
                drop(permit);
                if !sleep_or_stop(&stop, Duration::from_millis(500)).await {
                    return;
                }
            }
        }
    }
}

/// `[key, member, score]` → score; nil (timeout) → `None`.
fn marker_score(v: Value) -> Option<f64> {
    let items = as_array(v)?;
    let score = items.get(2)?;
    match score {
        Value::Double(d) => Some(*d),
        other => as_string(other)?.parse().ok(),
    }
}

async fn min_block(core: &WorkerCore) -> f64 {
    // 0.001 s needs Redis ≥ 7.0.8; older servers need 0.002 s.
    let info: Option<String> = core
        .conn
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

async fn blocking_client(
    core: &WorkerCore,
    name: &str,
    reconnects: &mut Option<tokio::sync::broadcast::Receiver<fred::types::config::Server>>,
) -> crate::Result<Client> {
    let current = lock(&core.blocking).as_ref().map(|(c, _)| c.clone());
    if let Some(client) = current {
        // fred reconnects by itself after an idle connection was dropped; the
        // new connection has no name, and getWorkers would miss this worker.
        let mut reconnected = false;
        if let Some(rx) = reconnects.as_mut() {
            while rx.try_recv().is_ok() {
                reconnected = true;
            }
        }
        if reconnected {
            let _ = client.client_setname(name).await;
            let id: Option<i64> = client.client_id().await.ok();
            if let Some(entry) = lock(&core.blocking).as_mut() {
                entry.1 = id;
            }
            info!(client_id = ?id, name, "blocking connection reconnected and renamed");
        }
        return Ok(client);
    }
    let client = core.conn.dedicated_client(Some(name)).await?;
    *reconnects = Some(client.reconnect_rx());
    let id: Option<i64> = client.client_id().await.ok();
    info!(client_id = ?id, name, "blocking connection opened");
    *lock(&core.blocking) = Some((client.clone(), id));
    Ok(client)
}

/// Drops the blocking connection: unblocks it server-side (through the pool,
/// since the connection itself may be stuck) and quits it in the background.
pub(crate) fn discard_blocking_client(core: &WorkerCore) {
    let Some((client, id)) = lock(&core.blocking).take() else {
        return;
    };
    let pool = core.conn.pool().clone();
    tokio::spawn(async move {
        if let Some(id) = id {
            let _ = pool
                .next()
                .client_unblock::<Value, _>(id, Some(ClientUnblockFlag::Timeout))
                .await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), client.quit()).await;
    });
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
