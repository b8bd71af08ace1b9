//! `echomq work`: a real EchoMQ worker tree (Worker + LockManager +
//! StalledChecker) under this process's own supervisor, with handler
//! processes, an HTTP endpoint (`processors.rs`) or a synthetic processor —
//! the last for smoke tests, load tests and the demo.

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::flow_producer::DagReleaserArgs;
use echomq::groups::GroupFeederArgs;
use echomq::health::{HealthCheck, HealthServer};
use echomq::worker::Processor;
use echomq::{Connection, HandleError, Host, Queue, WorkerArgs};

use super::settings::Settings;
use crate::style::{self, paint};

/// How often `--max-jobs` looks for the end: one call to the Worker actor,
/// no Redis command.
const MAX_JOBS_CHECK: Duration = Duration::from_millis(20);

/// Runs the worker tree until SIGINT, SIGTERM or `--max-jobs`, printing a
/// line a second; then closes it in order.
pub(super) async fn work(
    conn: Connection,
    queue: Queue,
    settings: Settings,
    processor: Arc<dyn Processor>,
    health: Option<&HealthServer>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Armed before the first job can start: a test (or an operator) that
    // sees one finish and sends SIGTERM gets the ordered close, not death by
    // the default disposition while the other components start.
    let mut stop = crate::commands::StopSignals::arm();
    let args = worker_args(queue.clone(), &settings, processor);
    // This process's supervisor: the shipped one-for-one HostSupervisor, with
    // the default restart budget.
    let host = Host::start().await?;
    let worker = host.add_worker(args).await?;
    // Group jobs (docs/groups.md) wait for a feeder; with none on the queue
    // it only reads the events stream. The look-ahead keeps what it releases
    // to about what this worker runs next.
    let feeder = GroupFeederArgs::new(conn.clone(), queue.name())
        .max_ready((settings.concurrency as u64 * 2).max(16));
    host.add_group_feeder(feeder).await?;
    // Nodes of a DAG that several nodes wait for (docs/flows.md §DAGs) are
    // handed to their extra parents by a releaser; with none on the queue it
    // only looks for `{P}dag:pending` four times a second.
    host.add_dag_releaser(DagReleaserArgs::new(conn.clone(), queue.name()))
        .await?;
    // Final failures of other workers (BullMQ Node's) follow this worker's
    // into the dead-letter queue.
    let follower = match &settings.dead_letter {
        Some(dlq) => Some(
            echomq::dead_letter::DeadLetterFollower::start(
                &conn,
                queue.name(),
                echomq::dead_letter::DeadLetterQueue::new(dlq.clone()),
            )
            .await?,
        ),
        None => None,
    };
    // The queue's byte budget holds whoever finishes its jobs; dormant (one
    // HGET a second) while it has none.
    let enforcer = echomq::budget::BudgetEnforcer::start(
        &conn,
        queue.name(),
        echomq::budget::EnforcerSettings::default(),
    )
    .await?;
    if let Some(server) = health {
        server.attach(HealthCheck::new(conn, host.actor().clone()).worker_set(worker.id()));
    }
    let started = Instant::now();
    let mut last_processed = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // With --max-jobs, the end is looked for more often than the status
    // line is printed: on the second's tick alone the process outlived its
    // last job by up to a second.
    let mut done_check = tokio::time::interval(MAX_JOBS_CHECK);
    done_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reason = loop {
        tokio::select! {
            _ = ticker.tick() => {
                match worker.refs().await {
                    Err(HandleError::ChildGone { .. }) => break "worker set gone",
                    Err(e) => return Err(e.into()),
                    Ok(_) => {}
                }
                // Counters only: a line a second must not cost per held job.
                let Ok(status) = worker.counts().await else { continue };
                let held = worker.lock_stats().await.map(|s| s.last_batch).unwrap_or(0);
                let rate = status.processed.saturating_sub(last_processed);
                last_processed = status.processed;
                if !settings.quiet {
                    anstream::println!(
                        "{} processed {:>8} ({:>6}/s)  failed {:>6}  active {:>4}  locks in last renewal {:>4}",
                        paint(style::DIM, format!("{:>5.0}s", started.elapsed().as_secs_f64())),
                        status.processed, rate, status.failed, status.active, held
                    );
                }
            }
            _ = done_check.tick(), if settings.max_jobs.is_some() => {
                // The worker fetches nothing past --max-jobs (WorkerOptions::
                // max_jobs); once it has taken them all (none still on its
                // way in a finishing call's fetch-next) and holds none, done.
                if worker.counts().await.is_ok_and(|s| s.max_jobs_done()) {
                    break "max jobs reached";
                }
            }
            signal = stop.recv() => break signal,
        }
    };
    // The ordered shutdown (HostSupervisor's Close): stop fetching, let running
    // jobs finish (--close-timeout) while their locks are renewed, move the rest back to
    // wait; then the LockManager and StalledChecker; then the supervisor.
    let report = host.close(settings.close_timeout).await?;
    if let Some(f) = follower {
        f.close().await;
    }
    enforcer.close().await;
    for (_, closed) in report.worker_sets {
        let closed = closed.map_err(|e| e.to_string())?;
        let (finished, moved) = closed
            .worker
            .map(|r| (r.finished_in_time, r.moved_back.len()))
            .unwrap_or_default();
        anstream::eprintln!(
            "{} ({reason}): {finished} jobs finished in time, {moved} moved back to wait",
            paint(style::BOLD, "worker closed"),
        );
    }
    Ok(())
}

/// The worker's arguments from the settings.
fn worker_args(queue: Queue, settings: &Settings, processor: Arc<dyn Processor>) -> WorkerArgs {
    let mut args = match settings.batch {
        Some(batch) => WorkerArgs::batched(queue, echomq::worker::each_job(processor), batch),
        None => WorkerArgs::new(queue, processor),
    };
    args.options.concurrency = settings.concurrency;
    args.options.lock_duration = settings.lock_duration;
    args.options.stalled_interval = settings.stalled_interval;
    args.options.default_timeout = settings.default_timeout;
    args.options.name = settings.name.clone();
    args.options.max_metrics_size = settings.metrics;
    if let Some(limit) = settings.limiter {
        args.options = args.options.limiter(limit);
    }
    args.options.group = settings.group;
    args.options.max_jobs = settings.max_jobs;
    args.options.dead_letter = settings
        .dead_letter
        .clone()
        .map(echomq::dead_letter::DeadLetterQueue::new);
    args
}
