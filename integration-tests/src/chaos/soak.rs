//! The soak run: a mixed workload (plain, delayed, prioritized and retried
//! jobs, a scheduler, flows) on a mixed fleet (Rust worker processes, a
//! worker set behind the fault proxy, a BullMQ Node worker and a BullMQ for
//! Python worker when installed) under a random fault from the catalogue
//! every few seconds — SIGKILL and SIGSTOP of any worker of the fleet, Redis
//! stopped, killed and restarted from its AOF, the proxied set partitioned
//! away (blackhole) — with the time the fleet takes to complete a job again
//! after each fault, ending with the full accounting and the audit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{Backoff, FlowJob, FlowProducer, JobOptions, JobSchedulers, SchedulerSpec};
use fred::prelude::*;
use rand::Rng;
use serde_json::json;

use super::accounting::{Accounting, Ledger};
use super::fleet::{InProc, Proc, SetOptions};
use super::redis_faults::raw;
use super::server::Persistence;
use super::{Bed, Ctx};
use crate::fault_proxy::{FaultMode, FaultProxy};

/// What a soak run found.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// Wall time of the run (faults and workload), without the drain.
    pub length: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// The accounting at the end.
    pub accounting: Accounting,
    /// Adds refused with an error that is not a connection error.
    pub refused: usize,
    /// The first of those errors.
    pub refusals: Vec<String>,
    /// Time the queue took to drain once the faults stopped.
    pub drain: Option<Duration>,
    /// Failed assertions.
    pub failures: Vec<String>,
    /// Per fault kind: from the end of the fault to the next completion.
    pub recoveries: BTreeMap<&'static str, Vec<Duration>>,
    /// The kinds of worker in the fleet.
    pub fleet: Vec<&'static str>,
}

/// A worker process of the fleet; a killed one is replaced by one of its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Rust,
    Node,
    Python,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Rust => "EchoMQ worker process",
            Kind::Node => "BullMQ 6.7.6 Node worker",
            Kind::Python => "BullMQ for Python worker",
        }
    }

    async fn start(self, ctx: &Ctx, bed: &Bed, opts: &serde_json::Value) -> Proc {
        match self {
            Kind::Rust => Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), opts.clone()).await,
            Kind::Node => Proc::node(&bed.url(), &bed.name(), opts.clone()).await,
            Kind::Python => {
                let python = ctx.python.as_deref().expect("python only when installed");
                Proc::python(python, &bed.url(), &bed.name(), opts.clone()).await
            }
        }
    }
}

struct Member {
    kind: Kind,
    proc: Proc,
}

impl SoakReport {
    /// True when nothing failed.
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }

    fn recovery_cell(&self) -> String {
        let worst: Vec<String> = self
            .recoveries
            .iter()
            .filter_map(|(k, v)| {
                let max = v.iter().max()?;
                Some(format!("{k} {:.1} s", max.as_secs_f64()))
            })
            .collect();
        if worst.is_empty() {
            "—".into()
        } else {
            worst.join(", ")
        }
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let a = &self.accounting;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect();
        let total: u64 = self.faults.values().sum();
        format!(
            "| soak | value |\n|---|---|\n\
             | length | {:.1} min |\n\
             | faults | {total}: {} |\n\
             | jobs added (acknowledged) | {} |\n\
             | ambiguous adds | {} |\n\
             | adds refused (nothing written) | {} |\n\
             | completed | {} |\n\
             | failed | {} |\n\
             | pending at the end | {} |\n\
             | lost | {} |\n\
             | finished twice | {} |\n\
             | completed after a lost lock | {} |\n\
             | recovered by the StalledChecker | {} |\n\
             | fleet | {} |\n\
             | recovery after a fault (to the next completion), worst | {} |\n\
             | drain after the last fault | {} |\n\
             | audit | {} |\n\
             | verdict | {} |\n",
            self.length.as_secs_f64() / 60.0,
            faults.join(", "),
            a.acked,
            a.ambiguous,
            if self.refusals.is_empty() {
                self.refused.to_string()
            } else {
                format!("{}: {}", self.refused, self.refusals.join(" / "))
            },
            a.completed,
            a.failed,
            a.pending,
            a.lost.len(),
            a.completed_twice.len(),
            a.completed_without_lock.len(),
            a.stalled_events,
            self.fleet.join(", "),
            self.recovery_cell(),
            self.drain
                .map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "did not drain".into()),
            a.audit_cell(),
            if self.ok() {
                "pass".to_string()
            } else {
                format!("**FAIL**: {}", self.failures.join("; "))
            },
        )
    }
}

/// The producer: a mix of job kinds at about 20 adds a second.
async fn produce(
    bed_queue: echomq::Queue,
    conn: echomq::Connection,
    ledger: Ledger,
    stop: Arc<AtomicBool>,
) {
    let flows = FlowProducer::new(&conn);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let kind = n % 10;
        let id = format!("s-{n:07}");
        let ms = 20 + (n * 37) % 180;
        let (data, opts) = match kind {
            0 | 1 => (
                json!({"mode": "sleep", "ms": ms}),
                JobOptions::new().delay(Duration::from_millis(500 + (n * 53) % 2500)),
            ),
            2 | 3 => (
                json!({"mode": "sleep", "ms": ms}),
                JobOptions::new().priority(1 + (n % 10) as i64),
            ),
            4 => (
                json!({"mode": "fail-until", "n": 1 + n % 2, "reason": "retry me"}),
                JobOptions::new().attempts(4).backoff(Backoff::Fixed {
                    delay: 100,
                    jitter: None,
                }),
            ),
            5 => {
                let flow = FlowJob::new(
                    "parent",
                    bed_queue.name(),
                    json!({"mode": "sleep", "ms": 10}),
                )
                .options(JobOptions::new().job_id(format!("{id}-p")))
                .child(
                    FlowJob::new(
                        "child",
                        bed_queue.name(),
                        json!({"mode": "sleep", "ms": ms}),
                    )
                    .options(JobOptions::new().job_id(format!("{id}-c0"))),
                )
                .child(
                    FlowJob::new(
                        "child",
                        bed_queue.name(),
                        json!({"mode": "sleep", "ms": ms}),
                    )
                    .options(JobOptions::new().job_id(format!("{id}-c1"))),
                );
                match flows.add(flow).await {
                    Ok(_) => {
                        for s in ["-p", "-c0", "-c1"] {
                            ledger.acked(format!("{id}{s}"));
                        }
                    }
                    Err(e) if e.is_connection() => {
                        for s in ["-p", "-c0", "-c1"] {
                            ledger.ambiguous(format!("{id}{s}"));
                        }
                    }
                    Err(e) => ledger.refused_with(&e),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            _ => (json!({"mode": "sleep", "ms": ms}), JobOptions::new()),
        };
        match bed_queue.add("soak", &data, opts.job_id(&id)).await {
            Ok(got) => ledger.acked(got),
            Err(e) if e.is_connection() => ledger.ambiguous(id),
            Err(e) => ledger.refused_with(&e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the soak for `length`.
pub async fn run(ctx: &Ctx, length: Duration) -> SoakReport {
    let mut bed = Bed::new("SOAK", Persistence::AofAlways, &[]).await;
    bed.max_lock = Duration::from_secs(3);
    let mut report = SoakReport::default();
    let wopts =
        json!({"concurrency": 8, "lockDuration": 3000, "stalledInterval": 1000, "drainDelay": 500});
    let mut kinds = vec![Kind::Rust, Kind::Rust];
    if ctx.node {
        kinds.push(Kind::Node);
    }
    if ctx.python.is_some() {
        kinds.push(Kind::Python);
    }
    let mut procs = Vec::new();
    for kind in kinds {
        procs.push(Member {
            kind,
            proc: kind.start(ctx, &bed, &wopts).await,
        });
        report.fleet.push(kind.name());
    }
    report
        .fleet
        .push("EchoMQ worker set behind the fault proxy");
    let proxy = FaultProxy::start(bed.redis.port()).await;
    let pconn = super::connect(&proxy.url()).await;
    let pqueue = echomq::Queue::new(&pconn, &bed.name())
        .await
        .expect("queue via proxy");
    let proxied = InProc::start(
        &pqueue,
        SetOptions {
            concurrency: 8,
            lock: Duration::from_secs(3),
            stalled_interval: Duration::from_secs(1),
            ..Default::default()
        },
    )
    .await;
    let scheds = JobSchedulers::new(&bed.conn, &bed.name()).expect("schedulers");
    let mut tick = SchedulerSpec::every("soak-tick", Duration::from_secs(1));
    tick.template.data = json!({"mode": "sleep", "ms": 30});
    if scheds.upsert(&tick).await.is_err() {
        report.failures.push("scheduler upsert failed".into());
    }

    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(
        bed.queue.clone(),
        bed.conn.clone(),
        bed.ledger.clone(),
        stop.clone(),
    ));
    let t0 = Instant::now();
    let side = bed.redis.client().await;
    let minute = AtomicU64::new(0);
    while t0.elapsed() < length {
        let wait = rand::thread_rng().gen_range(3000..6000);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let kind = rand::thread_rng().gen_range(0..12);
        let name = inject(kind, &mut bed, &side, &mut procs, &proxy, ctx, &wopts).await;
        *report.faults.entry(name).or_default() += 1;
        // Recovery: the fleet completes a job again (the producer adds one
        // every 50 ms, so there is always one to complete).
        let done = |c: Option<echomq::JobCounts>| c.map_or(0, |c| c.completed);
        let before = done(bed.queue.counts().await.ok());
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) && done(bed.queue.counts().await.ok()) <= before
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = t.elapsed();
        if took >= Duration::from_secs(60) {
            report
                .failures
                .push(format!("no job completed within 60 s after {name}"));
        }
        report.recoveries.entry(name).or_default().push(took);
        let m = t0.elapsed().as_secs() / 60;
        if m > minute.load(Ordering::Relaxed) {
            minute.store(m, Ordering::Relaxed);
            let c = bed.queue.counts().await.ok();
            eprintln!(
                "soak: {m} min, {} adds, counts {c:?}",
                bed.ledger.acked_count()
            );
        }
    }
    report.length = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = producer.await;
    proxy.set_mode(FaultMode::Pass);
    let _ = scheds.remove("soak-tick").await;
    let t1 = Instant::now();
    report.drain = bed
        .drained(Duration::from_secs(180))
        .await
        .map(|_| t1.elapsed());
    // No settling pause: the orderly closes below wait for whatever runs.
    for m in procs {
        m.proc.close(Duration::from_secs(15)).await;
    }
    proxied.close().await;
    let mut acc = bed.account().await;
    // A scheduler iteration left pending after the removal is A12d's warning.
    acc.audit_hard.retain(|v| !v.starts_with("A12"));
    report.refused = bed.ledger.refused_count();
    report.refusals = bed.ledger.refusals();
    if report.drain.is_none() {
        report
            .failures
            .push("did not drain within 180 s after the faults".into());
    }
    // An add refused while Redis loads its AOF after a restart wrote
    // nothing and is the caller's to retry; any other refusal is a finding.
    let unexplained: Vec<&String> = report
        .refusals
        .iter()
        .filter(|r| !r.contains("LOADING"))
        .collect();
    if !unexplained.is_empty() || report.refused > report.refusals.len() {
        report
            .failures
            .push(format!("{} adds refused: {unexplained:?}", report.refused));
    }
    report.failures.extend(acc.broken());
    report.accounting = acc;
    report
}

/// Injects fault `kind`; its name.
async fn inject(
    kind: u32,
    bed: &mut Bed,
    side: &Client,
    procs: &mut [Member],
    proxy: &FaultProxy,
    ctx: &Ctx,
    wopts: &serde_json::Value,
) -> &'static str {
    let pick = rand::thread_rng().gen_range(0..procs.len());
    match kind {
        0 => {
            let kind = procs[pick].kind;
            procs[pick].proc.kill();
            procs[pick].proc = kind.start(ctx, bed, wopts).await;
            match kind {
                Kind::Rust => "SIGKILL EchoMQ worker",
                Kind::Node => "SIGKILL Node worker",
                Kind::Python => "SIGKILL Python worker",
            }
        }
        1 => {
            procs[pick].proc.signal("STOP");
            tokio::time::sleep(Duration::from_secs(4)).await;
            procs[pick].proc.signal("CONT");
            match procs[pick].kind {
                Kind::Rust => "SIGSTOP EchoMQ worker 4 s",
                Kind::Node => "SIGSTOP Node worker 4 s",
                Kind::Python => "SIGSTOP Python worker 4 s",
            }
        }
        2 => {
            let _ = raw(
                side,
                "CLIENT",
                vec!["KILL".into(), "TYPE".into(), "normal".into()],
            )
            .await;
            "CLIENT KILL normal"
        }
        3 => {
            let locks =
                crate::keys(side, &format!("{}*:lock", bed.queue.keys().prefix_key())).await;
            for l in locks.iter().take(5) {
                let _: Result<i64, _> = side.del(l).await;
            }
            "DEL 5 locks"
        }
        4 => {
            let locks =
                crate::keys(side, &format!("{}*:lock", bed.queue.keys().prefix_key())).await;
            for l in &locks {
                let _: Result<i64, _> = side.pexpire(l, 1, None).await;
            }
            "PEXPIRE all locks"
        }
        5 => {
            bed.redis.signal("STOP");
            tokio::time::sleep(Duration::from_millis(1500)).await;
            bed.redis.signal("CONT");
            "SIGSTOP redis 1.5 s"
        }
        6 => {
            let _ = raw(side, "DEBUG", vec!["SLEEP".into(), "1".into()]).await;
            "DEBUG SLEEP 1"
        }
        7 => {
            let _ = raw(
                side,
                "CLIENT",
                vec!["PAUSE".into(), "2000".into(), "WRITE".into()],
            )
            .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            "CLIENT PAUSE WRITE 2 s"
        }
        8 => {
            bed.redis.kill9();
            tokio::time::sleep(Duration::from_millis(500)).await;
            tokio::task::block_in_place(|| bed.redis.boot());
            "redis SIGKILL + restart (AOF always)"
        }
        9 => {
            proxy.reset_all();
            "proxy reset"
        }
        10 => {
            proxy.set_mode(FaultMode::Blackhole);
            tokio::time::sleep(Duration::from_secs(4)).await;
            proxy.set_mode(FaultMode::Pass);
            "proxy blackhole 4 s"
        }
        _ => {
            proxy.set_mode(FaultMode::Latency {
                base: Duration::from_millis(150),
                jitter: Duration::from_millis(100),
            });
            tokio::time::sleep(Duration::from_secs(3)).await;
            proxy.set_mode(FaultMode::Pass);
            "proxy latency 150 ± 100 ms 3 s"
        }
    }
}
