//! `echomq work`: a real EchoMQ worker tree (Worker + LockManager +
//! StalledChecker) under this process's own supervisor, with a synthetic
//! processor — for smoke tests, load tests and the demo.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::groups::GroupFeederArgs;
use echomq::health::{HealthCheck, HealthServer};
use echomq::worker::{processor_fn, JobContext, ProcessError};
use echomq::{
    Connection, HostSupervisor, HostSupervisorMsg, LockManagerMsg, Queue, RestartIntensity,
    WorkerArgs, WorkerMsg, WorkerOptions, WorkerSetSpec,
};
use ractor::{call_t, Actor};
use serde_json::{json, Value};

use crate::style::{self, paint};

/// What the synthetic processor does with each job.
#[derive(Clone, Debug)]
pub enum Synthetic {
    /// Sleep this long, then complete with `null`.
    Sleep(Duration),
    /// Complete with the job's data.
    Echo,
    /// Fail every attempt.
    Fail,
    /// Fail an attempt with this probability, else complete.
    FailRate(f64),
    /// Burn this much CPU, then complete.
    Cpu(Duration),
}

impl std::str::FromStr for Synthetic {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let ms = |a: &str| {
            a.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| format!("{kind}: {a:?} is not a number of ms"))
        };
        match kind {
            "sleep" => Ok(Synthetic::Sleep(ms(arg)?)),
            "echo" => Ok(Synthetic::Echo),
            "fail" => Ok(Synthetic::Fail),
            "fail-rate" => match arg.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(Synthetic::FailRate(p)),
                _ => Err(format!("fail-rate: {arg:?} is not a probability in 0..=1")),
            },
            "cpu" => Ok(Synthetic::Cpu(ms(arg)?)),
            _ => Err(format!(
                "unknown processor {s:?} (sleep:MS, echo, fail, fail-rate:P, cpu:MS)"
            )),
        }
    }
}

async fn run_synthetic(kind: Synthetic, ctx: JobContext) -> Result<Value, ProcessError> {
    match kind {
        Synthetic::Sleep(d) => {
            tokio::time::sleep(d).await;
            Ok(Value::Null)
        }
        Synthetic::Echo => Ok(ctx.job().data.clone()),
        Synthetic::Fail => Err(ProcessError::failed("synthetic failure")),
        Synthetic::FailRate(p) => {
            if rand_unit() < p {
                Err(ProcessError::failed("synthetic failure"))
            } else {
                Ok(Value::Null)
            }
        }
        Synthetic::Cpu(d) => {
            let until = Instant::now() + d;
            let mut x = 0u64;
            while Instant::now() < until {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            Ok(json!(x & 1))
        }
    }
}

fn rand_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded per instance: enough entropy for a synthetic fail rate.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Settings of `echomq work`.
#[derive(Debug)]
pub struct WorkSettings {
    pub concurrency: usize,
    pub processor: Synthetic,
    pub lock_duration: Duration,
    pub stalled_interval: Duration,
    pub max_jobs: Option<u64>,
    pub name: Option<String>,
    /// The worker rate limiter, when given.
    pub limiter: Option<echomq::RateLimit>,
    /// Minutes of metrics kept (`metrics.maxDataPoints`), when recording.
    pub metrics: Option<u64>,
    pub quiet: bool,
    /// How long running jobs may finish at shutdown.
    pub close_timeout: Duration,
}

pub async fn work(
    conn: Connection,
    queue: Queue,
    settings: WorkSettings,
    health: Option<&HealthServer>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let kind = settings.processor.clone();
    let processor = processor_fn(move |ctx| run_synthetic(kind.clone(), ctx));
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(settings.concurrency)
        .lock_duration(settings.lock_duration)
        .stalled_interval(settings.stalled_interval);
    args.options.name = settings.name.clone();
    args.options.max_metrics_size = settings.metrics;
    if let Some(limit) = settings.limiter {
        args.options = args.options.limiter(limit);
    }
    // This process's supervisor: the shipped one-for-one HostSupervisor, with
    // the default restart budget.
    let (host, host_handle) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
        .await
        .map_err(|e| e.to_string())?;
    let (set_id, _) = call_t!(
        host,
        HostSupervisorMsg::AddWorkerSet,
        5000,
        Box::new(WorkerSetSpec::new(args))
    )
    .map_err(|e| e.to_string())??;
    // Group jobs (docs/groups.md) wait for a feeder; with none on the queue
    // it only reads the events stream. The look-ahead keeps what it releases
    // to about what this worker runs next.
    let feeder = GroupFeederArgs::new(conn.clone(), queue.name())
        .max_ready((settings.concurrency as u64 * 2).max(16));
    call_t!(
        host,
        HostSupervisorMsg::AddGroupFeeder,
        5000,
        Box::new(feeder)
    )
    .map_err(|e| e.to_string())??;
    if let Some(server) = health {
        server.attach(HealthCheck::new(conn, host.clone()).worker_set(set_id));
    }
    let started = Instant::now();
    let mut last_processed = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let total = Arc::new(AtomicU64::new(0));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let reason = loop {
        tokio::select! {
            _ = ticker.tick() => {
                let Some(set) = call_t!(host, HostSupervisorMsg::GetWorkerSet, 2000, set_id).map_err(|e| e.to_string())? else { break "worker set gone" };
                let Ok(status) = call_t!(set.worker, WorkerMsg::GetStatus, 2000) else { continue };
                let held = call_t!(set.lock_manager, LockManagerMsg::GetTracked, 2000).map(|t| t.len()).unwrap_or(0);
                let rate = status.processed.saturating_sub(last_processed);
                last_processed = status.processed;
                total.store(status.processed, Ordering::Relaxed);
                if !settings.quiet {
                    anstream::println!(
                        "{} processed {:>8} ({:>6}/s)  failed {:>6}  active {:>4}  held locks {:>4}",
                        paint(style::DIM, format!("{:>5.0}s", started.elapsed().as_secs_f64())),
                        status.processed, rate, status.failed, status.active_jobs.len(), held
                    );
                }
                if settings.max_jobs.is_some_and(|m| status.processed >= m) {
                    break "max jobs reached";
                }
            }
            _ = tokio::signal::ctrl_c() => break "SIGINT",
            _ = sigterm.recv() => break "SIGTERM",
        }
    };
    // The ordered shutdown (HostSupervisor's Close): stop fetching, let running
    // jobs finish (--close-timeout) while their locks are renewed, move the rest back to
    // wait; then the LockManager and StalledChecker; then the supervisor.
    let report = call_t!(
        host,
        HostSupervisorMsg::Close,
        settings.close_timeout.as_millis() as u64 + 10_000,
        settings.close_timeout
    )
    .map_err(|e| e.to_string())?;
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
    let _ = host_handle.await;
    Ok(())
}
