//! A worker simulated by hand: the worker scripts called through their typed
//! calls, for tests that need a job in `active` under a token they choose
//! without running a Worker.

use std::collections::HashMap;
use std::time::Duration;

use echomq::protocol::call::lifecycle::{
    EpochMs, FinishTarget, MoveToActive, MoveToFinished, NextJob, Verdict,
};
use echomq::protocol::packing::{FetchOpts, FinishOpts, MetricsSize};
use echomq::protocol::QueueKeys;
use echomq::Connection;

/// moveToActive with `token`: the taken job's id and hash, `None` when
/// nothing was ready.
pub async fn take(
    conn: &Connection,
    k: &QueueKeys,
    token: &str,
    lock: Duration,
) -> Option<(String, HashMap<String, String>)> {
    take_at(conn, k, token, lock, echomq::clock::now_ms()).await
}

/// [`take`] with the script's "now" (promotion cut-off, `processedOn`) given.
pub async fn take_at(
    conn: &Connection,
    k: &QueueKeys,
    token: &str,
    lock: Duration,
    now: u64,
) -> Option<(String, HashMap<String, String>)> {
    let call = MoveToActive {
        keys: k,
        now: EpochMs(now),
        fetch: FetchOpts {
            token,
            lock_duration: lock.as_millis() as u64,
            limiter: None,
            name: None,
        },
    };
    match conn.call(&call).await.expect("moveToActive") {
        NextJob::Job { id, fields } => Some((id, fields.into_iter().collect())),
        _ => None,
    }
}

/// moveToFinished to `completed` with a null return value, kept, without
/// fetching the next job: what the script answered.
pub async fn complete(
    conn: &Connection,
    k: &QueueKeys,
    id: &str,
    token: &str,
) -> Verdict<Option<NextJob>> {
    let now = echomq::clock::now_ms();
    finish(conn, k, id, token, FinishTarget::Completed, "null", now).await
}

/// moveToFinished to `target` with `value` (return value or failure reason)
/// at `now`, keeping every job, without fetching the next.
pub async fn finish(
    conn: &Connection,
    k: &QueueKeys,
    id: &str,
    token: &str,
    target: FinishTarget,
    value: &str,
    now: u64,
) -> Verdict<Option<NextJob>> {
    let call = finish_call(k, id, token, target, value, now, false);
    conn.call(&call).await.expect("moveToFinished")
}

/// The moveToFinished call of [`finish`], taking the next job when
/// `fetch_next` (a worker's defaults: jobs kept, no limiter, no metrics).
pub fn finish_call<'a>(
    k: &'a QueueKeys,
    id: &'a str,
    token: &'a str,
    target: FinishTarget,
    value: &'a str,
    now: u64,
    fetch_next: bool,
) -> MoveToFinished<'a> {
    MoveToFinished {
        keys: k,
        id,
        now: EpochMs(now),
        target,
        value,
        fetch_next,
        opts: FinishOpts {
            token,
            name: None,
            keep_jobs: None,
            limiter: None,
            lock_duration: 30_000,
            attempts: 0,
            max_metrics_size: MetricsSize::Off,
        },
        fields: &[],
    }
}
