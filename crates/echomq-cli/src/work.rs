//! `echomq work`: a real EchoMQ worker tree (Worker + LockManager +
//! StalledChecker) under this process's own supervisor, with a synthetic
//! processor — for smoke tests, load tests and the demo.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::worker::{processor_fn, JobContext, ProcessError};
use echomq::{
    LockManagerMsg, Queue, WorkerArgs, WorkerMsg, WorkerOptions, WorkerSet, WorkerSetSpec,
};
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
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
pub struct WorkSettings {
    pub concurrency: usize,
    pub processor: Synthetic,
    pub lock_duration: Duration,
    pub stalled_interval: Duration,
    pub max_jobs: Option<u64>,
    pub name: Option<String>,
    pub quiet: bool,
}

/// This process's supervisor: one-for-one restarts of the worker set, with a
/// restart intensity of 10 in 10 s.
struct Host;

struct HostState {
    spec: WorkerSetSpec,
    set: WorkerSet,
    restarts: echomq::RestartIntensity,
    stopping: bool,
}

enum HostMsg {
    Set(RpcReplyPort<WorkerSet>),
    Stopping,
}

impl Actor for Host {
    type Msg = HostMsg;
    type State = HostState;
    type Arguments = WorkerSetSpec;

    async fn pre_start(
        &self,
        me: ActorRef<HostMsg>,
        spec: WorkerSetSpec,
    ) -> Result<HostState, ActorProcessingErr> {
        let set = spec.spawn_linked(me.get_cell()).await?;
        Ok(HostState {
            spec,
            set,
            restarts: echomq::RestartIntensity::new(10, Duration::from_secs(10)),
            stopping: false,
        })
    }

    async fn handle(
        &self,
        _me: ActorRef<HostMsg>,
        msg: HostMsg,
        s: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HostMsg::Set(r) => {
                let _ = r.send(s.set.clone());
            }
            HostMsg::Stopping => s.stopping = true,
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        me: ActorRef<HostMsg>,
        evt: SupervisionEvent,
        s: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        let cell = match &evt {
            SupervisionEvent::ActorFailed(c, _) | SupervisionEvent::ActorTerminated(c, _, _) => {
                c.clone()
            }
            _ => return Ok(()),
        };
        if s.stopping {
            return Ok(());
        }
        let Some(member) = s.set.member_of(&cell) else {
            return Ok(());
        };
        if !s.restarts.allow() {
            return Err("worker set restarted more than 10 times in 10 s".into());
        }
        anstream::eprintln!(
            "{}",
            paint(style::WARN, format!("restarting {member:?}: {evt}"))
        );
        s.spec.restart(&mut s.set, member, me.get_cell()).await?;
        Ok(())
    }
}

pub async fn work(
    queue: Queue,
    settings: WorkSettings,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let kind = settings.processor.clone();
    let processor = processor_fn(move |ctx| run_synthetic(kind.clone(), ctx));
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options = WorkerOptions {
        concurrency: settings.concurrency,
        lock_duration: settings.lock_duration,
        stalled_interval: settings.stalled_interval,
        name: settings.name.clone(),
        ..Default::default()
    };
    let (host, host_handle) = Actor::spawn(None, Host, WorkerSetSpec::new(args))
        .await
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut last_processed = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let total = Arc::new(AtomicU64::new(0));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let reason = loop {
        tokio::select! {
            _ = ticker.tick() => {
                let set: WorkerSet = call_t!(host, HostMsg::Set, 2000).map_err(|e| e.to_string())?;
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
    // The ordered shutdown: stop fetching, let running jobs finish (10 s), move
    // the rest back to wait, close connections; then stop the other members.
    let _ = host.cast(HostMsg::Stopping);
    let set: WorkerSet = call_t!(host, HostMsg::Set, 2000).map_err(|e| e.to_string())?;
    let report = call_t!(
        set.worker,
        WorkerMsg::Close,
        15_000,
        Duration::from_secs(10)
    )
    .map_err(|e| e.to_string())?;
    anstream::eprintln!(
        "{} ({reason}): {} jobs finished in time, {} moved back to wait",
        paint(style::BOLD, "worker closed"),
        report.finished_in_time,
        report.moved_back.len()
    );
    host.stop(None);
    let _ = host_handle.await;
    Ok(())
}
