//! The fetch loop: one task per worker instance that takes a free slot, waits
//! when the queue looked drained, and takes a job with moveToActive
//! (docs/worker.md). The wait ends with whichever comes first: a marker popped
//! by BZPOPMIN on a dedicated connection (a new job) or the local due timer
//! set for the earliest delayed job, on Redis's clock (docs/worker.md §Due
//! timer).
//!
//! It never runs inside a message handler, so the actor stays responsive while
//! the read blocks; it exits by itself when the actor is gone (its heartbeat
//! cast fails) or when told to stop.

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::lifecycle::NextJob;
use fred::prelude::{ClientLike, Value};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

pub(crate) use super::blocking::WATCHDOG_MARGIN;
use super::blocking::{ArmedRead, ReadOutcome};
use super::gate::SlotPermit;
use crate::connection::blocking_reader::Read;
use crate::worker::finish::job::ActiveJob;
use crate::worker::messages::{Internal, InternalKind, WorkerMsg};
use crate::worker::options::WorkerProcessor;
use crate::worker::process::run;
use crate::worker::shared::WorkerShared;

/// The longest BZPOPMIN timeout (s), whatever the delayed jobs say.
pub(crate) const MAX_BLOCK_S: f64 = 10.0;
/// Longest sleep of a rate-limited worker, so delayed jobs still get promoted.
const MAX_RATE_LIMIT_SLEEP: Duration = Duration::from_secs(30);
/// Most jobs one fetch takes when several slots are free (moveJobsToActive):
/// the group commit's bound, so no call holds Redis much longer than a
/// group of finishes does.
const FETCH_BATCH: usize = 16;

/// BZPOPMIN timeout in seconds: the drain delay, within bounds. Due delayed
/// jobs are the due timer's business, not the read's.
pub(crate) fn read_timeout(drain_delay_s: f64, min_block: f64) -> f64 {
    // Never 0: BZPOPMIN 0 blocks forever.
    drain_delay_s.max(min_block).min(MAX_BLOCK_S)
}

async fn sleep_or_stop(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

pub(crate) fn spawn(
    core: Arc<WorkerShared>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
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
    core: Arc<WorkerShared>,
    stop: CancellationToken,
    min_block: f64,
    /// The marker read in flight, if any; it outlives waits the timer ended.
    read: Option<ArmedRead>,
}

async fn run_loop(core: Arc<WorkerShared>, stop: CancellationToken) {
    let mut f = Box::pin(Fetcher::start(core, stop)).await;
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
    async fn start(core: Arc<WorkerShared>, stop: CancellationToken) -> Self {
        let min_block = min_block(&core).await;
        let f = Fetcher {
            core,
            stop,
            min_block,
            read: None,
        };
        f.sync_clock().await;
        // Open (and name) the blocking connection at start, as BullMQ does,
        // so `getWorkers()` lists this worker even while it never blocks.
        if let Some(Read::Failed(e)) = f.client().await {
            warn!(error = %e, "cannot open the blocking connection yet");
        }
        f
    }

    /// The blocking connection's client (opened after its backoff when the
    /// last one failed); `None` when stopped meanwhile.
    async fn client(&self) -> Option<Read<fred::prelude::Client>> {
        tokio::select! {
            _ = self.stop.cancelled() => None,
            r = self.core.blocking().client() => Some(r),
        }
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

    /// Measures Redis's time again when the last measurement is old.
    async fn sync_clock(&self) {
        let clock = self.core.hints().clock();
        if clock.stale() {
            // Boxed: a fred command future is ~6.7 KB, and this rare step
            // would otherwise size every fetch loop's future.
            if let Err(e) = Box::pin(clock.sync(self.core.conn())).await {
                warn!(error = %e, "cannot read Redis's time: due times are compared with this host's clock");
            }
        }
    }

    /// When the queue looked drained: wait for a marker (BZPOPMIN) or for the
    /// earliest known delayed job to fall due (the local timer), whichever
    /// comes first. A read the timer beat stays armed for the next wait.
    async fn wait_for_marker(&mut self, permit: SlotPermit) -> Next {
        let core = self.core.clone();
        loop {
            if !core.hints().drained() {
                return Next::Go(permit);
            }
            self.sync_clock().await;
            let due = core.hints().block_until();
            let timer = if due > 0 {
                match core.hints().clock().until(due) {
                    Some(left) => Some(left),
                    None => return Next::Go(permit),
                }
            } else {
                None
            };
            if self.read.is_none() {
                match Box::pin(self.client()).await {
                    None | Some(Read::Stopped) => return Next::Exit,
                    Some(Read::Value(_)) | Some(Read::Refused) => {}
                    Some(Read::Failed(e)) => {
                        // The next open waits the reader's backoff.
                        warn!(error = %e, "cannot open the blocking connection");
                        return self.back_off(permit, Duration::ZERO).await;
                    }
                }
                let timeout = read_timeout(core.opts().drain_delay.as_secs_f64(), self.min_block);
                self.read = Some(ArmedRead::arm(core.blocking().clone(), timeout));
            }
            let Some(read) = self.read.as_mut() else {
                continue;
            };
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Next::Exit,
                outcome = read.outcome() => {
                    self.read = None;
                    if !self.on_marker(outcome) {
                        // The next open waits the reader's backoff.
                        return self.back_off(permit, Duration::ZERO).await;
                    }
                    if !core.gate().runnable() || core.hints().delayed_job_pending() {
                        return Next::Again;
                    }
                    return Next::Go(permit);
                }
                _ = tokio::time::sleep(timer.unwrap_or_default()), if timer.is_some() => {
                    // Due now on Redis's clock: moveToActive promotes and
                    // takes it (or finds that another worker did).
                    if !core.gate().runnable() {
                        return Next::Again;
                    }
                    return Next::Go(permit);
                }
                _ = core.hints().changed() => continue,
            }
        }
    }

    /// Applies what the marker read answered; `false` when the connection
    /// failed and the loop should pause before the next wait.
    fn on_marker(&self, outcome: ReadOutcome) -> bool {
        let core = &self.core;
        match outcome {
            Err(_) => {
                warn!("blocking read overdue: replacing its connection");
                core.blocking().discard();
                core.hints().forget_due_time();
                true
            }
            Ok(Err(e)) => {
                // A killed or broken connection: a fresh one next time round
                // (with its name), never a replayed read.
                warn!(error = %e, "blocking read failed: replacing its connection");
                core.blocking().discard();
                false
            }
            Ok(Ok(v)) => {
                core.hints().marker_popped(marker_score(v));
                true
            }
        }
    }

    /// Sleeps out a rate limit with the slot given back.
    async fn respect_rate_limit(&self, permit: SlotPermit) -> Next {
        match self.core.hints().rate_limit_left() {
            Some(left) => self.back_off(permit, left.min(MAX_RATE_LIMIT_SLEEP)).await,
            None => Next::Go(permit),
        }
    }

    /// No take of `max_jobs` is left: the loop waits, alive (so the
    /// watchdog leaves it be), until one is given back or it is stopped.
    async fn park(&self, permit: SlotPermit) -> Next {
        drop(permit);
        self.core.blocking().set_deadline(0);
        let Some(takes) = self.core.takes() else {
            return Next::Again;
        };
        tokio::select! {
            _ = self.stop.cancelled() => Next::Exit,
            _ = takes.given_back() => Next::Again,
        }
    }

    /// moveToActive with a fresh token; a job taken runs in its own task. A
    /// batched worker takes a batch instead.
    async fn fetch(&self, permit: SlotPermit) -> Next {
        let core = &self.core;
        if let WorkerProcessor::Batches(_, batch) = core.processor() {
            let batch = *batch;
            let cap = core.reserve_takes(batch.size as u64);
            if cap == 0 {
                return self.park(permit).await;
            }
            let jobs = Box::pin(
                crate::worker::process::batch::take(core, batch, cap as usize)
                    .instrument(tracing::debug_span!("fetch_batch")),
            )
            .await;
            core.settle_takes(jobs.len() as u64);
            core.return_takes(cap - jobs.len() as u64);
            if !jobs.is_empty() {
                if !core.alive() {
                    // As for a single job below: a batch taken after the
                    // actor stopped goes back to `wait`.
                    for job in jobs {
                        Box::pin(hand_back(job)).await;
                    }
                    return Next::Exit;
                }
                core.hints().wake();
                tokio::spawn(crate::worker::process::batch::run(
                    core.clone(),
                    permit,
                    jobs,
                ));
            }
            return Next::Again;
        }
        // A fresh token per fetched job; fetch-next reuses it for the job it
        // brings, as BullMQ does.
        if core.reserve_takes(1) == 0 {
            return self.park(permit).await;
        }
        if let Some(more) = self.free_slots() {
            return self.fetch_several(permit, more).await;
        }
        let token: Arc<str> = Arc::from(uuid::Uuid::new_v4().to_string());
        let span = tracing::debug_span!("fetch");
        match core.move_to_active(&token).instrument(span).await {
            Ok(reply) => {
                if let NextJob::Job { .. } = reply {
                    core.hints().wake();
                }
                if let Some(job) = ActiveJob::take(core, reply, token) {
                    core.settle_takes(1);
                    if !core.alive() {
                        // The actor stopped while this call was on its way
                        // (a stop does not wait for the fetch loop): no
                        // actor would hear of the job, so it goes back to
                        // `wait` rather than run under a stopped worker.
                        Box::pin(hand_back(job)).await;
                        return Next::Exit;
                    }
                    tokio::spawn(run::run_slot(core.clone(), permit, job));
                } else {
                    core.return_takes(1);
                }
                Next::Again
            }
            Err(e) => {
                core.return_takes(1);
                warn!(error = %e, "moveToActive failed");
                self.back_off(permit, Duration::from_millis(500)).await
            }
        }
    }
}

impl Fetcher {
    /// The slots free besides the one in hand (at most [`FETCH_BATCH`] in
    /// all, within the takes left of `max_jobs`); `None` when there are none.
    fn free_slots(&self) -> Option<Vec<SlotPermit>> {
        let core = &self.core;
        let mut more = Vec::new();
        while more.len() + 1 < FETCH_BATCH {
            match core.gate().try_acquire(core.myself()) {
                Some(p) => more.push(p),
                None => break,
            }
        }
        if more.is_empty() {
            return None;
        }
        let cap = core.reserve_takes(more.len() as u64) as usize;
        // Slots beyond the takes left go back (dropped) at once.
        more.truncate(cap);
        (!more.is_empty()).then_some(more)
    }

    /// One moveJobsToActive for the slot in hand and `more`: each job taken
    /// runs in its own task with its own slot and token, as after that many
    /// moveToActive calls; the slots and takes of the takes not made go back.
    async fn fetch_several(&self, permit: SlotPermit, more: Vec<SlotPermit>) -> Next {
        let core = &self.core;
        let asked = 1 + more.len();
        let tokens: Vec<Arc<str>> = (0..asked)
            .map(|_| Arc::from(uuid::Uuid::new_v4().to_string()))
            .collect();
        let span = tracing::debug_span!("fetch", batch = asked);
        let replies = match core.move_jobs_to_active(&tokens).instrument(span).await {
            Ok(replies) => replies,
            Err(e) => {
                core.return_takes(asked as u64);
                drop(more);
                warn!(error = %e, "moveJobsToActive failed");
                return self.back_off(permit, Duration::from_millis(500)).await;
            }
        };
        if let Some(NextJob::Job { .. }) = replies.first() {
            core.hints().wake();
        }
        let mut taken = 0u64;
        let mut stopped = false;
        let permits = std::iter::once(permit).chain(more);
        for ((reply, token), permit) in replies.into_iter().zip(tokens).zip(permits) {
            let Some(job) = ActiveJob::take(core, reply, token) else {
                continue;
            };
            taken += 1;
            if stopped || !core.alive() {
                // As for a single take: no actor would hear of the job.
                stopped = true;
                Box::pin(hand_back(job)).await;
                continue;
            }
            tokio::spawn(run::run_slot(core.clone(), permit, job));
        }
        // The permits of the takes not made were dropped with the iterator.
        core.settle_takes(taken);
        core.return_takes(asked as u64 - taken);
        if stopped {
            Next::Exit
        } else {
            Next::Again
        }
    }
}

/// Puts a job taken after the worker stopped back at the head of `wait`
/// (moveJobFromActiveToWait, fenced by its token); when that fails the job
/// is left to the stalled checker.
async fn hand_back(job: ActiveJob) {
    let id = job.id().to_owned();
    match job.move_to_wait().await {
        Ok(_) => debug!(job_id = %id, "taken after the worker stopped: handed back to wait"),
        Err(f) => {
            warn!(job_id = %id, error = %f.error, "taken after the worker stopped and not handed back; left to the stalled checker");
            f.job.abandon();
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

async fn min_block(core: &WorkerShared) -> f64 {
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
    fn read_timeouts() {
        assert_eq!(read_timeout(5.0, 0.001), 5.0);
        assert_eq!(read_timeout(0.0, 0.001), 0.001);
        assert_eq!(read_timeout(0.0, 0.002), 0.002);
        assert_eq!(read_timeout(30.0, 0.001), 10.0);
    }
}
