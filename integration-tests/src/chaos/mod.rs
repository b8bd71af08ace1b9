//! The chaos runner: the fault catalogue (docs/reliability.md) as scenarios,
//! each against a fresh redis-server, each ending with an accounting from
//! Redis and the events stream and a quiescent audit.
//!
//! A scenario is an async function returning one [`Row`] of the results
//! table; [`catalogue`] lists them in catalogue order, [`run_all`] runs a
//! selection a few at a time and [`table`] prints the Markdown table. The
//! `chaos` binary runs them all (`just chaos`), `tests/suite/chaos_fast.rs`
//! those of the `Fast` and `Ci` tiers ([`Tier`]), `soak` mixes the faults
//! under a running workload.

pub mod accounting;
pub mod cluster_faults;
pub mod dag_faults;
pub mod fleet;
pub mod input_faults;
pub mod lock_faults;
pub mod network_faults;
pub mod partition_faults;
pub mod redis_faults;
pub mod scale_faults;
pub mod server;
pub mod soak;
pub mod worker_faults;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{Connection, ConnectionConfig, JobOptions, Queue, QueueOptions};
use fred::prelude::Client;
use serde_json::Value;

use accounting::{account, Accounting, Ledger};
use server::{ChaosRedis, Persistence};

/// The verdict of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every assertion held.
    Pass,
    /// The assertions held and the scenario measured a documented window.
    Measured(String),
    /// An assertion failed.
    Fail(String),
    /// Not run here, and why.
    NotRun(String),
}

/// One row of the results table.
#[derive(Clone, Debug)]
pub struct Row {
    /// Catalogue id (`F01` …).
    pub id: String,
    /// What was done.
    pub scenario: String,
    /// Acknowledged adds.
    pub jobs: usize,
    /// Acknowledged ids completed.
    pub completed: usize,
    /// Acknowledged ids failed.
    pub failed: usize,
    /// Acknowledged ids found in no state.
    pub lost: usize,
    /// Ids with two `completed` events.
    pub twice: usize,
    /// `stalled` events (jobs the StalledChecker moved back).
    pub stalled: usize,
    /// From the end of the fault to the last job finished.
    pub recover: Option<Duration>,
    /// The audit's finding.
    pub audit: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Wall time of the scenario.
    pub took: Duration,
}

impl Row {
    /// A row for a scenario that was not run here.
    pub fn not_run(id: &str, scenario: &str, why: &str) -> Row {
        Row {
            id: id.into(),
            scenario: scenario.into(),
            jobs: 0,
            completed: 0,
            failed: 0,
            lost: 0,
            twice: 0,
            stalled: 0,
            recover: None,
            audit: "—".into(),
            verdict: Verdict::NotRun(why.into()),
            took: Duration::ZERO,
        }
    }

    /// True unless an assertion failed.
    pub fn ok(&self) -> bool {
        !matches!(self.verdict, Verdict::Fail(_))
    }
}

/// What every scenario gets: where the worker-process binary is.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// Path of `worker_process`.
    pub worker_bin: PathBuf,
    /// Also run the BullMQ Node worker where the scenario is interop-relevant.
    pub node: bool,
    /// The venv's Python with BullMQ for Python, when installed (the soak
    /// runs a Python worker too).
    pub python: Option<PathBuf>,
}

impl Ctx {
    /// The binaries next to the running executable; Node when its packages
    /// are installed.
    pub fn discover() -> Ctx {
        let node = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("interop/node_modules/bullmq")
            .is_dir();
        Ctx {
            worker_bin: fleet::sibling_binary("worker_process"),
            node,
            python: crate::python_bullmq::installed_python(),
        }
    }
}

type RowFuture = Pin<Box<dyn Future<Output = Row> + Send>>;

/// A scenario of the catalogue.
#[derive(Clone)]
pub struct Scenario {
    /// Catalogue id.
    pub id: &'static str,
    /// Where it runs besides `just chaos`.
    pub tier: Tier,
    /// Runs it.
    pub run: Arc<dyn Fn(Ctx) -> RowFuture + Send + Sync>,
}

/// Which test of the suite runs a scenario (every one runs in `just chaos`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Takes seconds: `chaos_fast::the_fast_scenarios_pass`, in every `just test`.
    Fast,
    /// Takes up to a minute and asserts counts rather than timings (no "no
    /// stall within x s" on a loaded machine): `chaos_fast::the_ci_scenarios_pass`,
    /// in every `just test` too, alone (.config/nextest.toml).
    Ci,
    /// Needs what the suite does not start (a cluster, network namespaces
    /// as root, netem), or holds a timing only a quiet machine keeps:
    /// `just chaos` only.
    Manual,
}

fn sc<F, Fut>(id: &'static str, tier: Tier, f: F) -> Scenario
where
    F: Fn(Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Row> + Send + 'static,
{
    Scenario {
        id,
        tier,
        run: Arc::new(move |ctx| Box::pin(f(ctx))),
    }
}

/// Every scenario, in catalogue order.
pub fn catalogue() -> Vec<Scenario> {
    use input_faults as i;
    use lock_faults as l;
    use network_faults as n;
    use redis_faults as r;
    use scale_faults as s;
    use worker_faults as w;
    vec![
        sc("F01", Tier::Manual, w::f01),
        sc("F02", Tier::Ci, w::f02),
        sc("F03", Tier::Ci, w::f03),
        sc("F04", Tier::Ci, w::f04),
        sc("F05", Tier::Manual, w::f05),
        sc("F06", Tier::Manual, w::f06),
        sc("F07", Tier::Manual, w::f07),
        sc("F08", Tier::Fast, w::f08),
        sc("F09", Tier::Ci, w::f09),
        sc("F10", Tier::Ci, w::f10),
        sc("F11", Tier::Fast, l::f11),
        sc("F12", Tier::Ci, l::f12),
        sc("F13", Tier::Fast, l::f13),
        sc("F14", Tier::Manual, l::f14),
        sc("F15", Tier::Manual, l::f15),
        sc("F16", Tier::Ci, r::f16),
        sc("F17", Tier::Manual, r::f17),
        sc("F18", Tier::Ci, r::f18),
        sc("F19", Tier::Ci, r::f19),
        sc("F20", Tier::Ci, r::f20),
        sc("F21", Tier::Ci, r::f21),
        sc("F22", Tier::Manual, r::f22),
        sc("F23", Tier::Ci, r::f23),
        sc("F24", Tier::Ci, r::f24),
        sc("F25", Tier::Ci, r::f25),
        sc("F26", Tier::Fast, r::f26),
        sc("F27", Tier::Manual, s::f27),
        sc("F28", Tier::Ci, s::f28),
        sc("F29", Tier::Manual, s::f29),
        sc("F30", Tier::Manual, s::f30),
        sc("F31", Tier::Ci, i::f31),
        sc("F32", Tier::Ci, i::f32),
        sc("F33", Tier::Fast, i::f33),
        sc("F34", Tier::Fast, i::f34),
        sc("F35", Tier::Fast, i::f35),
        sc("F36", Tier::Manual, i::f36),
        sc("F37", Tier::Fast, n::f37),
        sc("F38", Tier::Manual, cluster_faults::f38),
        sc("F39", Tier::Manual, cluster_faults::f39),
        sc("F40", Tier::Ci, n::f40),
        sc("F40b", Tier::Ci, n::f40b),
        sc("F41", Tier::Manual, partition_faults::f41),
        sc("F42", Tier::Manual, partition_faults::f42),
        sc("F43", Tier::Manual, partition_faults::f43),
        sc("F44", Tier::Manual, partition_faults::f44),
        sc("F45", Tier::Manual, partition_faults::f45),
        sc("F46", Tier::Manual, partition_faults::f46),
        sc("F47", Tier::Manual, partition_faults::f47),
        sc("F48", Tier::Ci, dag_faults::f48),
    ]
}

/// Runs `scenarios`, `parallel` at a time, each in its own task (a panic
/// becomes a failed row); rows come back in catalogue order.
pub async fn run_all(ctx: &Ctx, scenarios: Vec<Scenario>, parallel: usize) -> Vec<Row> {
    let gate = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut handles = Vec::new();
    for s in scenarios {
        let gate = gate.clone();
        let ctx = ctx.clone();
        handles.push((
            s.id,
            tokio::spawn(async move {
                let _permit = gate.acquire_owned().await;
                let t0 = Instant::now();
                let mut row = tokio::spawn((s.run)(ctx)).await.unwrap_or_else(|e| {
                    let why = panic_text(e);
                    let mut r = Row::not_run(s.id, "(panicked)", "");
                    r.verdict = Verdict::Fail(format!("panicked: {why}"));
                    r
                });
                row.took = t0.elapsed();
                eprintln!(
                    "chaos: {} done in {:.1?}: {:?}",
                    row.id, row.took, row.verdict
                );
                row
            }),
        ));
    }
    let mut rows = Vec::new();
    for (id, h) in handles {
        rows.push(h.await.unwrap_or_else(|e| {
            let mut r = Row::not_run(id, "(runner)", "");
            r.verdict = Verdict::Fail(panic_text(e));
            r
        }));
    }
    rows
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into()),
        Err(e) => e.to_string(),
    }
}

/// The results as one Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| id | scenario | jobs | completed | failed | lost | finished twice | recovered by the StalledChecker | time to recover | audit | verdict |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let verdict = match &r.verdict {
            Verdict::Pass => "pass".to_string(),
            Verdict::Measured(m) => format!("pass (measured: {m})"),
            Verdict::Fail(why) => format!("**FAIL**: {why}"),
            Verdict::NotRun(why) => format!("not run: {why}"),
        };
        let run = !matches!(r.verdict, Verdict::NotRun(_));
        let n = |v: usize| if run { v.to_string() } else { "—".into() };
        let recover = r
            .recover
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| "—".into());
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.id,
            r.scenario.replace('|', "/"),
            n(r.jobs),
            n(r.completed),
            n(r.failed),
            n(r.lost),
            n(r.twice),
            n(r.stalled),
            recover,
            r.audit.replace('|', "/"),
            verdict.replace('|', "/"),
        ));
    }
    out
}

/// A scenario's test bed: its redis-server, a connection, a plain client,
/// the queue and the producer's ledger.
pub struct Bed {
    /// Catalogue id.
    pub id: &'static str,
    /// The server under test.
    pub redis: ChaosRedis,
    /// The runner's own connection.
    pub conn: Connection,
    /// A plain client for faults and reads.
    pub client: Client,
    /// The queue.
    pub queue: Queue,
    /// Adds made.
    pub ledger: Ledger,
    /// Largest lock duration used (for the audit).
    pub max_lock: Duration,
}

impl Bed {
    /// A fresh server with `persistence` and extra arguments, and the queue
    /// `chaos-<id>` with an events stream long enough never to trim.
    pub async fn new(id: &'static str, persistence: Persistence, extra: &[&str]) -> Bed {
        let redis = ChaosRedis::start(persistence, extra);
        let conn = connect(&redis.url()).await;
        let client = redis.client().await;
        let queue = Queue::with_options(
            &conn,
            &format!("chaos-{}", id.to_lowercase()),
            QueueOptions::default().max_len_events(1_000_000),
        )
        .await
        .expect("queue");
        Bed {
            id,
            redis,
            conn,
            client,
            queue,
            ledger: Ledger::default(),
            max_lock: Duration::from_secs(30),
        }
    }

    /// The server URL.
    pub fn url(&self) -> String {
        self.redis.url()
    }

    /// The queue name.
    pub fn name(&self) -> String {
        self.queue.name().to_owned()
    }

    /// Adds one job with the custom id `id`, recording the outcome.
    pub async fn add(&self, id: &str, data: Value, opts: JobOptions) -> bool {
        match self.queue.add("chaos", &data, opts.job_id(id)).await {
            Ok(got) => {
                self.ledger.acked(got);
                true
            }
            Err(e) if e.is_connection() => {
                self.ledger.ambiguous(id.to_owned());
                false
            }
            Err(_) => {
                self.ledger.refused();
                false
            }
        }
    }

    /// Adds `n` jobs `j-<i>` with `data(i)`.
    pub async fn add_n(&self, n: usize, data: impl Fn(usize) -> Value) {
        for i in 0..n {
            self.add(&format!("j-{i:06}"), data(i), JobOptions::new())
                .await;
        }
    }

    /// Jobs in `active` now.
    pub async fn active(&self) -> u64 {
        self.queue.counts().await.map(|c| c.active).unwrap_or(0)
    }

    /// Waits until at least `n` jobs are active; false after `limit`.
    pub async fn wait_active(&self, n: u64, limit: Duration) -> bool {
        poll(limit, || async { self.active().await >= n }).await
    }

    /// Waits until every acknowledged add is completed or failed; the time
    /// it took, or `None` after `limit`.
    pub async fn drained(&self, limit: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        let n = self.ledger.acked_count() as u64;
        poll(limit, || async {
            match self.queue.counts().await {
                Ok(c) if c.pending() == 0 => c.completed + c.failed >= n,
                // Jobs nobody added (scheduler iterations, foreign ids) may
                // stay pending: look at the acknowledged ids themselves.
                Ok(c) if c.completed + c.failed >= n => self.acked_all_finished().await,
                _ => false,
            }
        })
        .await
        .then(|| t0.elapsed())
    }

    /// Like [`Bed::drained`], for a scenario whose fault may lose acked
    /// adds: waits until every acknowledged id still in Redis is completed
    /// or failed (the lost ones are the accounting's to judge).
    pub async fn drained_or_lost(&self, limit: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        poll(limit, || async {
            let at = accounting::locate(&self.client, &self.queue).await;
            self.ledger.acked_ids().iter().all(|id| {
                matches!(
                    at.get(id).map(|s| s.as_slice()),
                    None | Some(["completed"]) | Some(["failed"])
                )
            })
        })
        .await
        .then(|| t0.elapsed())
    }

    async fn acked_all_finished(&self) -> bool {
        let at = accounting::locate(&self.client, &self.queue).await;
        self.ledger.acked_ids().iter().all(|id| {
            matches!(
                at.get(id).map(|s| s.as_slice()),
                Some(["completed"]) | Some(["failed"])
            )
        })
    }

    /// The accounting now.
    pub async fn account(&self) -> Accounting {
        account(
            &self.conn,
            &self.client,
            &self.queue,
            &self.ledger,
            self.max_lock,
        )
        .await
    }

    /// Accounts and builds the row: the standard invariants plus the
    /// scenario's own `failures`; `measured` turns a pass into a measured
    /// pass.
    pub async fn row(
        &self,
        scenario: impl Into<String>,
        recover: Option<Duration>,
        mut failures: Vec<String>,
        measured: Option<String>,
    ) -> Row {
        let a = self.account().await;
        failures.extend(a.broken());
        self.row_from(scenario, &a, recover, failures, measured)
    }

    /// Builds the row from an accounting already taken.
    pub fn row_from(
        &self,
        scenario: impl Into<String>,
        a: &Accounting,
        recover: Option<Duration>,
        failures: Vec<String>,
        measured: Option<String>,
    ) -> Row {
        row_of(self.id, scenario, a, recover, failures, measured)
    }
}

/// A row from an accounting: the verdict is a failure when `failures` is
/// not empty, a measured pass when `measured` is given, else a pass.
pub fn row_of(
    id: &str,
    scenario: impl Into<String>,
    a: &Accounting,
    recover: Option<Duration>,
    failures: Vec<String>,
    measured: Option<String>,
) -> Row {
    let verdict = if !failures.is_empty() {
        Verdict::Fail(failures.join("; "))
    } else if let Some(m) = measured {
        Verdict::Measured(m)
    } else {
        Verdict::Pass
    };
    Row {
        id: id.into(),
        scenario: scenario.into(),
        jobs: a.acked,
        completed: a.completed,
        failed: a.failed,
        lost: a.lost.len(),
        twice: a.completed_twice.len(),
        stalled: a.stalled_events,
        recover,
        audit: a.audit_cell(),
        verdict,
        took: Duration::ZERO,
    }
}

/// An EchoMQ connection to `url` with the defaults.
pub async fn connect(url: &str) -> Connection {
    Connection::connect(ConnectionConfig::with_url(url))
        .await
        .expect("connect to the chaos redis-server")
}

/// Polls `f` every 50 ms until it holds; false after `limit`.
pub async fn poll<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let t0 = Instant::now();
    loop {
        if f().await {
            return true;
        }
        if t0.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A sleeping job's data.
pub fn sleep_job(ms: u64) -> Value {
    serde_json::json!({"mode": "sleep", "ms": ms, "ret": 1})
}

/// Pushes a failure when `cond` does not hold.
pub fn expect(failures: &mut Vec<String>, cond: bool, what: impl Into<String>) {
    if !cond {
        failures.push(what.into());
    }
}
