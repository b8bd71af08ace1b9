//! F41–F47: real network faults. The worker is a real `worker_process` in a
//! network namespace of its own ([`crate::netns`]), started with `ip netns
//! exec` and serving `/livez` and `/readyz` there; Redis listens in the root
//! namespace on loopback (the runner's own clients) and on the veth's host
//! end (the worker's). The faults are the kernel's: a silent iptables DROP
//! of the Redis traffic (both directions, or one), a REJECT with a reset,
//! random loss, `tc netem`.
//!
//! A cut must show itself before it counts: the filter's counters dropped
//! packets, the worker's readiness answered 503 (and still did at the heal),
//! the locks it held at the cut lapsed or were finished, and (without a
//! rescuer) no job added during the cut completed. After the heal the same
//! process, never restarted, must report ready again and complete the jobs
//! added after the heal by itself within a deadline; then the usual
//! accounting (nothing lost, nothing finished twice, a clean audit).
//! `tests/suite/partition.rs` runs the same scenarios with shorter timeouts, and a
//! decoy fault that must fail these checks.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use echomq::{JobOptions, JobState};
use fred::prelude::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fleet::{InProc, Proc, SetOptions};
use super::server::Persistence;
use super::{expect, sleep_job, Bed, Ctx, Row};
use crate::netns::{self, Direction, Netns};

/// The port of the worker's health endpoints inside its namespace (the
/// namespace has its own ports: no clash between parallel scenarios).
const HEALTH_PORT: u16 = 9464;

/// What is done to the network between the worker and Redis.
#[derive(Clone, Debug)]
pub enum Fault {
    /// A silent DROP of the Redis traffic going this way, until healed.
    Cut(Direction),
    /// Random loss of the Redis traffic both ways, by the packet filter
    /// (each packet dropped with this probability).
    Loss(f64),
    /// `tc netem` with these arguments on both ends of the pair.
    Netem(Vec<String>),
    /// A flapping link: `cuts` silent DROPs both ways of `cut` each, `gap`
    /// apart (each cut lasts until readiness answered 503, each gap until it
    /// answered 200, and at least these lengths).
    Flap {
        /// How many cuts.
        cuts: usize,
        /// Shortest length of each.
        cut: Duration,
        /// Shortest time between two.
        gap: Duration,
    },
    /// The worker's Redis traffic refused with a reset (RST): every call and
    /// connection attempt fails at once, as when Redis is down.
    Refuse,
    /// A DROP of a port nobody uses: no fault at all, judged as a cut. The
    /// checks must fail on it (`tests/suite/partition.rs`).
    Decoy,
}

impl Fault {
    fn is_cut(&self) -> bool {
        matches!(self, Fault::Cut(_) | Fault::Refuse | Fault::Decoy)
    }

    fn is_degraded(&self) -> bool {
        matches!(self, Fault::Loss(_) | Fault::Netem(_))
    }
}

/// One scenario: the fault, how long it lasts at least, and the worker's
/// settings.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Catalogue id (also names the queue).
    pub id: &'static str,
    /// What is done, for the table.
    pub scenario: String,
    /// The fault.
    pub fault: Fault,
    /// Shortest length of the fault; a cut lasts until its effects were
    /// observed as well.
    pub hold: Duration,
    /// How much longer than `hold` a cut may take to show its effects.
    pub grace: Duration,
    /// A worker set outside the namespace runs during the cut (it takes over
    /// the cut-off worker's jobs) and is closed at the heal.
    pub rescuer: bool,
    /// The worker's lockDuration.
    pub lock: Duration,
    /// How long the jobs that run when the fault begins take.
    pub job: Duration,
    /// The worker's command timeout; `None`: the shipped default (10 s).
    pub command_timeout: Option<Duration>,
    /// The worker's watchdog interval; `None`: the shipped default (5 s).
    pub watchdog: Option<Duration>,
    /// The deadline, from the heal, for readiness and the jobs added after it.
    pub resume_within: Duration,
}

impl Spec {
    /// A catalogue row: the shipped connection and watchdog defaults, a
    /// 15 s fault (past the 10 s command timeout, so every socket the worker
    /// had is given up during it).
    pub fn catalogue(id: &'static str, scenario: &str, fault: Fault) -> Spec {
        Spec {
            id,
            scenario: scenario.into(),
            fault,
            hold: Duration::from_secs(15),
            grace: Duration::from_secs(30),
            rescuer: false,
            lock: Duration::from_secs(2),
            job: Duration::from_secs(1),
            command_timeout: None,
            watchdog: None,
            resume_within: Duration::from_secs(60),
        }
    }

    /// The quick version for `just test`: 2 s command timeout, 1 s watchdog,
    /// a 3 s fault.
    pub fn fast(id: &'static str, scenario: &str, fault: Fault) -> Spec {
        Spec {
            id,
            scenario: scenario.into(),
            fault,
            hold: Duration::from_secs(3),
            grace: Duration::from_secs(10),
            rescuer: false,
            lock: Duration::from_secs(2),
            job: Duration::from_secs(1),
            command_timeout: Some(Duration::from_secs(2)),
            watchdog: Some(Duration::from_secs(1)),
            resume_within: Duration::from_secs(20),
        }
    }

    /// With a rescuer during the cut.
    pub fn with_rescuer(mut self) -> Spec {
        self.rescuer = true;
        self
    }
}

/// F41: both directions dropped for 15 s, the worker alone.
pub async fn f41(ctx: Ctx) -> Row {
    let s = Spec::catalogue(
        "F41",
        "netns: worker process cut off from Redis, iptables DROP both directions ≥ 15 s, healed",
        Fault::Cut(Direction::Both),
    );
    run(ctx, s).await
}

/// F42: only Redis's replies dropped (commands still run, sockets stay
/// open), with a rescuer outside the namespace.
pub async fn f42(ctx: Ctx) -> Row {
    let s = Spec::catalogue(
        "F42",
        "netns: DROP of Redis → worker only ≥ 15 s (commands run, replies vanish, sockets stay open); a second worker outside takes over",
        Fault::Cut(Direction::RedisToWorker),
    )
    .with_rescuer();
    run(ctx, s).await
}

/// F43: only the worker's requests dropped.
pub async fn f43(ctx: Ctx) -> Row {
    let s = Spec::catalogue(
        "F43",
        "netns: DROP of worker → Redis only ≥ 15 s (replies still arrive), healed",
        Fault::Cut(Direction::WorkerToRedis),
    );
    run(ctx, s).await
}

/// F44: 30 % random loss both ways for 15 s, by the packet filter.
pub async fn f44(ctx: Ctx) -> Row {
    let s = Spec::catalogue(
        "F44",
        "netns: 30 % random packet loss both directions (iptables statistic) for 15 s",
        Fault::Loss(0.3),
    );
    run(ctx, s).await
}

/// F46: a flapping link, five cuts of 4 s, 3 s apart.
pub async fn f46(ctx: Ctx) -> Row {
    let s = Spec::catalogue(
        "F46",
        "netns: flapping link, 5 × (DROP both directions ≥ 4 s, healed ≥ 3 s)",
        Fault::Flap {
            cuts: 5,
            cut: Duration::from_secs(4),
            gap: Duration::from_secs(3),
        },
    );
    run(ctx, s).await
}

/// F47: every call and connection attempt refused with a reset for 15 s,
/// the worker holding jobs of 5 s with 1 s locks.
pub async fn f47(ctx: Ctx) -> Row {
    let mut s = Spec::catalogue(
        "F47",
        "netns: worker → Redis refused with RST (iptables REJECT) ≥ 15 s, 5 s jobs, lockDuration 1 s",
        Fault::Refuse,
    );
    s.lock = Duration::from_secs(1);
    s.job = Duration::from_secs(5);
    run(ctx, s).await
}

/// The netem arguments of F45 (and its fast twin).
pub fn netem_mix() -> Vec<String> {
    [
        "delay", "150ms", "50ms", "reorder", "25%", "50%", "loss", "5%",
    ]
    .map(String::from)
    .to_vec()
}

/// F45: netem latency, reordering and loss for 15 s.
pub async fn f45(ctx: Ctx) -> Row {
    let s = Spec::catalogue(
        "F45",
        "netns: tc netem delay 150 ± 50 ms, 25 % reordered, 5 % lost, both directions, 15 s",
        Fault::Netem(netem_mix()),
    );
    run(ctx, s).await
}

/// Runs one scenario.
pub async fn run(ctx: Ctx, spec: Spec) -> Row {
    if let Err(why) = netns::support() {
        return Row::not_run(
            spec.id,
            &spec.scenario,
            &format!("no network namespaces: {why}"),
        );
    }
    if matches!(spec.fault, Fault::Netem(_)) {
        if let Err(why) = netns::netem_support() {
            return Row::not_run(spec.id, &spec.scenario, &format!("no netem: {why}"));
        }
    }
    let ns = match Netns::create() {
        Ok(ns) => ns,
        Err(e) => return Row::not_run(spec.id, &spec.scenario, &format!("netns: {e}")),
    };
    let host_ip = ns.host_ip().to_string();
    // Reachable from the namespace only through its veth, so protected mode
    // (loopback only without a password) is turned off for this one server.
    // One value: the launcher takes a flag and its one value (Redis splits
    // the addresses itself).
    let bind = format!("127.0.0.1 {host_ip}");
    let mut bed = Bed::new(
        spec.id,
        Persistence::None,
        &["--bind", &bind, "--protected-mode", "no"],
    )
    .await;
    bed.max_lock = spec.lock;
    let port = bed.redis.port();
    let url = format!("redis://{host_ip}:{port}");
    let mut opts = json!({
        "concurrency": 4,
        "lockDuration": spec.lock.as_millis() as u64,
        "stalledInterval": 500,
        "verbose": true,
        "healthAddr": format!("0.0.0.0:{HEALTH_PORT}"),
    });
    if let Some(t) = spec.command_timeout {
        opts["commandTimeoutMs"] = json!(t.as_millis() as u64);
        opts["connectTimeoutMs"] = json!(t.as_millis() as u64);
    }
    if let Some(t) = spec.watchdog {
        opts["watchdogMs"] = json!(t.as_millis() as u64);
    }
    let mut worker = Proc::rust_in(&ns, &ctx.worker_bin, &url, &bed.name(), opts).await;
    let health = SocketAddr::from((ns.ns_ip(), HEALTH_PORT));
    let pid = worker.pid();
    let mut f = Vec::new();

    // Busy and ready before the fault, else a 503 during it proves nothing.
    for i in 0..8 {
        bed.add(
            &format!("before-{i:02}"),
            sleep_job(spec.job.as_millis() as u64),
            JobOptions::new(),
        )
        .await;
    }
    let busy = super::poll(Duration::from_secs(20), || async {
        bed.active().await >= 2 && status(health, "/readyz").await.map(|s| s.0) == Some(200)
    })
    .await;
    expect(
        &mut f,
        busy,
        "the worker was not ready and busy before the fault",
    );

    let held = held_locks(&bed).await;
    let mut m = Measures::default();
    let completed_before = completed(&bed).await;
    let t_fault = Instant::now();
    if let Err(e) = apply(&ns, port, &spec.fault) {
        f.push(format!("could not apply the fault: {e}"));
    }
    let rescuer = if spec.rescuer && spec.fault.is_cut() {
        Some(InProc::start(&bed.queue, rescuer_options(spec.lock)).await)
    } else {
        None
    };
    let during: Vec<String> = (0..if spec.fault.is_degraded() { 20 } else { 4 })
        .map(|i| format!("during-{i:02}"))
        .collect();
    for id in &during {
        bed.add(id, sleep_job(50), JobOptions::new()).await;
    }
    if let Fault::Flap { cuts, cut, gap } = spec.fault {
        flap(&ns, port, health, &spec, (cuts, cut, gap), &mut m, &mut f).await;
    } else if spec.fault.is_cut() {
        watch_cut(&bed, &ns, health, &spec, &held, t_fault, &mut m).await;
        cut_checks(&bed, &during, &m, rescuer.is_some(), &mut f).await;
    } else {
        watch_degraded(&ns, health, &spec, t_fault, &mut m).await;
        m.done_during = completed(&bed).await.saturating_sub(completed_before);
        degraded_checks(&spec, &m, &mut f);
    }

    // The heal.
    let dropped = clear(&ns, &spec.fault);
    m.dropped = m.dropped.max(dropped);
    let t_heal = Instant::now();
    let completed_at_heal = completed(&bed).await;
    if let Some(r) = rescuer {
        // From here only the worker that was cut off can take jobs.
        r.close().await;
    }
    let after: Vec<String> = (0..8).map(|i| format!("after-{i:02}")).collect();
    for id in &after {
        bed.add(id, sleep_job(50), JobOptions::new()).await;
    }
    resume(
        &bed,
        health,
        &after,
        completed_at_heal,
        t_heal,
        spec.resume_within,
        &mut m,
    )
    .await;
    let ran = started_ids(&mut worker);
    expect(
        &mut f,
        m.ready_after.is_some(),
        format!(
            "readiness not 200 again within {:?} of the heal",
            spec.resume_within
        ),
    );
    expect(
        &mut f,
        m.after_done.is_some(),
        format!(
            "jobs added after the heal not all completed within {:?}: a worker that never resumes",
            spec.resume_within
        ),
    );
    let missing: Vec<&String> = after.iter().filter(|id| !ran.contains(*id)).collect();
    expect(
        &mut f,
        missing.is_empty(),
        format!("the worker that was cut off did not run {missing:?} itself"),
    );
    expect(
        &mut f,
        !worker.exited() && worker.pid() == pid,
        "the worker process exited",
    );
    // The process's own supervisor may have restarted a member of the set
    // (a LockManager whose renewals failed for longer than a lock lives
    // fails by contract, docs/lock-manager.md): reported, and it must not
    // have given up.
    let livez = status(health, "/livez").await;
    m.restarts = livez
        .as_ref()
        .and_then(|(_, body)| supervisor_restarts(body));
    expect(
        &mut f,
        livez.as_ref().is_some_and(|(c, _)| *c == 200) && m.restarts.is_some(),
        format!("the worker's supervision tree is not live after the heal: /livez {livez:?}"),
    );
    let readies = worker.drain().iter().filter(|v| v["ev"] == "ready").count();
    expect(&mut f, readies == 1, format!("{readies} ready lines"));
    let drained = bed.drained(spec.resume_within).await;
    expect(&mut f, drained.is_some(), "not drained after the heal");
    worker.close(Duration::from_secs(15)).await;
    let recover = drained.map(|_| t_heal.elapsed());
    bed.row(spec.scenario.clone(), recover, f, Some(m.describe(&spec)))
        .await
}

/// What a scenario saw, for its checks and its row.
#[derive(Debug, Default)]
pub struct Measures {
    /// From the fault to the first 503.
    pub first_503: Option<Duration>,
    /// Readiness probes answered 503 during the fault.
    pub probes_503: usize,
    /// Readiness probes during the fault.
    pub probes: usize,
    /// The readiness answer just before the heal.
    pub at_heal: Option<u16>,
    /// Every lock held at the fault lapsed, was released, or changed hands.
    pub locks_gone: bool,
    /// Packets the fault dropped (filter or netem counters).
    pub dropped: u64,
    /// How long the fault lasted.
    pub length: Duration,
    /// Jobs completed during a degraded link.
    pub done_during: u64,
    /// Slowest readiness answer during the fault.
    pub slowest_probe: Duration,
    /// From the heal to readiness 200.
    pub ready_after: Option<Duration>,
    /// From the heal to the first job completed after it (any job).
    pub first_after: Option<Duration>,
    /// From the heal to the last of them completed.
    pub after_done: Option<Duration>,
    /// Restarts inside the worker process by its own supervisor (`/livez`).
    pub restarts: Option<u64>,
    /// A flapping link: cuts that drew a 503, gaps that drew a 200 again,
    /// the fewest packets one cut dropped, the longest wait for the 200.
    pub flap: Option<(usize, usize, u64, Duration)>,
}

impl Measures {
    fn describe(&self, spec: &Spec) -> String {
        let s = |d: Option<Duration>| {
            d.map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "never".into())
        };
        let head = if let (Fault::Flap { cuts, cut, gap }, Some((c503, c200, least, slow))) =
            (&spec.fault, self.flap)
        {
            format!(
                "{cuts} cuts of ≥ {:.0} s, ≥ {:.0} s apart: 503 in {c503} of them (first after {}), 200 again in {c200} of {} gaps (slowest {:.1} s); ≥ {least} packets dropped per cut",
                cut.as_secs_f64(),
                gap.as_secs_f64(),
                s(self.first_503),
                cuts - 1,
                slow.as_secs_f64()
            )
        } else if spec.fault.is_cut() {
            let verb = if matches!(spec.fault, Fault::Refuse) {
                "refused"
            } else {
                "dropped"
            };
            format!(
                "readiness 503 {} into the cut; {} packets {verb}; cut {:.1} s",
                s(self.first_503),
                self.dropped,
                self.length.as_secs_f64()
            )
        } else {
            format!(
                "{} packets dropped; {} jobs completed during the fault; readiness 503 in {} of {} probes, slowest {} ms",
                self.dropped,
                self.done_during,
                self.probes_503,
                self.probes,
                self.slowest_probe.as_millis()
            )
        };
        format!(
            "{head}; after the heal: ready in {}, a job completed in {}, the 8 added after it in {}; same process, {}",
            s(self.ready_after),
            s(self.first_after),
            s(self.after_done),
            match self.restarts {
                Some(0) => "nothing restarted inside it".to_string(),
                Some(n) => format!("{n} restart(s) by its own supervisor"),
                None => "its supervisor not live".to_string(),
            }
        )
    }
}

/// The port [`Fault::Decoy`] drops: TCP's discard service, unused here.
const DECOY_PORT: u16 = 9;

fn apply(ns: &Netns, port: u16, fault: &Fault) -> Result<(), String> {
    match fault {
        Fault::Cut(dir) => ns.drop_tcp(port, *dir),
        Fault::Flap { .. } => ns.drop_tcp(port, Direction::Both),
        Fault::Refuse => ns.reset_tcp(port),
        Fault::Loss(p) => ns.lose_tcp(port, Direction::Both, *p),
        Fault::Netem(args) => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ns.netem(&args)
        }
        // The discard port: nothing here listens on it, and it lies below
        // every ephemeral range. A port next to Redis's did not: the host's
        // readiness polls into the namespace come from ephemeral ports, and
        // one that was Redis's port + 1 matched the INPUT rule (--sport) and
        // was dropped, which made the decoy look like a cut.
        Fault::Decoy => ns.drop_tcp(DECOY_PORT, Direction::Both),
    }
}

/// Clears the fault; the packets it dropped.
fn clear(ns: &Netns, fault: &Fault) -> u64 {
    match fault {
        Fault::Netem(_) => {
            let n = ns.netem_dropped().unwrap_or(0);
            ns.clear_netem();
            n
        }
        _ => ns.clear_filter().unwrap_or(0),
    }
}

fn rescuer_options(lock: Duration) -> SetOptions {
    SetOptions {
        concurrency: 4,
        lock,
        stalled_interval: Duration::from_millis(500),
        ..Default::default()
    }
}

/// The active jobs and their lock tokens.
async fn held_locks(bed: &Bed) -> Vec<(String, Option<String>)> {
    let k = bed.queue.keys();
    let ids: Vec<String> = bed
        .client
        .lrange(k.key("active"), 0, -1)
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for id in ids {
        let token: Option<String> = bed.client.get(k.lock(&id)).await.unwrap_or(None);
        out.push((id, token));
    }
    out
}

/// True when none of `held` is still held with the token it had.
async fn locks_gone(bed: &Bed, held: &[(String, Option<String>)]) -> bool {
    let k = bed.queue.keys();
    for (id, token) in held {
        let now: Option<String> = bed.client.get(k.lock(id)).await.unwrap_or(None);
        if now.is_some() && &now == token {
            return false;
        }
    }
    true
}

/// Holds a cut until its effects were seen (a 503, dropped packets, every
/// lock held at the cut gone) and `hold` passed, or `hold + grace` passed.
async fn watch_cut(
    bed: &Bed,
    ns: &Netns,
    health: SocketAddr,
    spec: &Spec,
    held: &[(String, Option<String>)],
    t0: Instant,
    m: &mut Measures,
) {
    let limit = spec.hold + spec.grace;
    loop {
        if let Some((code, _)) = status(health, "/readyz").await {
            m.probes += 1;
            if code == 503 {
                m.probes_503 += 1;
                m.first_503.get_or_insert(t0.elapsed());
            }
        }
        if !m.locks_gone {
            m.locks_gone = locks_gone(bed, held).await;
        }
        m.dropped = ns.dropped().unwrap_or(0);
        let seen = m.first_503.is_some() && m.locks_gone && m.dropped > 0;
        if (seen && t0.elapsed() >= spec.hold) || t0.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    m.at_heal = status(health, "/readyz").await.map(|s| s.0);
    m.length = t0.elapsed();
}

async fn cut_checks(
    bed: &Bed,
    during: &[String],
    m: &Measures,
    rescued: bool,
    f: &mut Vec<String>,
) {
    expect(
        f,
        m.first_503.is_some(),
        "readiness never answered 503 during the cut: the worker did not see it, or there was no cut",
    );
    expect(
        f,
        m.at_heal == Some(503),
        format!(
            "readiness answered {:?} at the end of the cut, not 503",
            m.at_heal
        ),
    );
    expect(
        f,
        m.dropped > 0,
        "the packet filter dropped nothing: there was no cut",
    );
    expect(
        f,
        m.locks_gone,
        format!(
            "locks held at the cut were still held with the same token after {:.1} s: the worker still reached Redis",
            m.length.as_secs_f64()
        ),
    );
    if !rescued {
        let mut done = Vec::new();
        for id in during {
            if matches!(bed.queue.get_job_state(id).await, Ok(JobState::Completed)) {
                done.push(id.clone());
            }
        }
        expect(
            f,
            done.is_empty(),
            format!("jobs added during the cut completed in it: {done:?} (no cut?)"),
        );
    }
}

/// The cuts of a flapping link; the first is applied already and the last
/// is left for the heal. Each cut must draw a 503 and drop packets, each gap
/// a 200 again.
async fn flap(
    ns: &Netns,
    port: u16,
    health: SocketAddr,
    spec: &Spec,
    (cuts, cut, gap): (usize, Duration, Duration),
    m: &mut Measures,
    f: &mut Vec<String>,
) {
    let t_first = Instant::now();
    let (mut c503, mut c200, mut least, mut slow) = (0, 0, u64::MAX, Duration::ZERO);
    for i in 0..cuts {
        if i > 0 {
            if let Err(e) = ns.drop_tcp(port, Direction::Both) {
                f.push(format!("cut {i}: {e}"));
            }
        }
        let t0 = Instant::now();
        let mut seen = false;
        while !(seen && t0.elapsed() >= cut) && t0.elapsed() < cut + spec.grace {
            if status(health, "/readyz").await.map(|s| s.0) == Some(503) {
                seen = true;
                m.first_503.get_or_insert(t0.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c503 += usize::from(seen);
        if i + 1 == cuts {
            // The last cut is healed by the caller, which counts its drops.
            least = least.min(ns.dropped().unwrap_or(0));
            break;
        }
        least = least.min(ns.clear_filter().unwrap_or(0));
        let t1 = Instant::now();
        let mut back = None;
        while !(back.is_some() && t1.elapsed() >= gap) && t1.elapsed() < gap + spec.grace {
            if back.is_none() && status(health, "/readyz").await.map(|s| s.0) == Some(200) {
                back = Some(t1.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Some(b) = back {
            c200 += 1;
            slow = slow.max(b);
        }
    }
    m.length = t_first.elapsed();
    m.dropped = least;
    m.flap = Some((c503, c200, least, slow));
    expect(
        f,
        c503 == cuts,
        format!("readiness 503 in only {c503} of {cuts} cuts"),
    );
    expect(
        f,
        c200 + 1 == cuts,
        format!("readiness 200 again in only {c200} of {} gaps", cuts - 1),
    );
    expect(f, least > 0, "a cut dropped no packet");
}

/// A degraded link (loss, netem) for `hold`: probes readiness (how often
/// 503, how slow) and reads the drop counters at its end.
async fn watch_degraded(
    ns: &Netns,
    health: SocketAddr,
    spec: &Spec,
    t0: Instant,
    m: &mut Measures,
) {
    while t0.elapsed() < spec.hold {
        let p0 = Instant::now();
        if let Some((code, _)) = status(health, "/readyz").await {
            m.probes += 1;
            m.slowest_probe = m.slowest_probe.max(p0.elapsed());
            if code == 503 {
                m.probes_503 += 1;
                m.first_503.get_or_insert(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    m.dropped = match spec.fault {
        Fault::Netem(_) => ns.netem_dropped().unwrap_or(0),
        _ => ns.dropped().unwrap_or(0),
    };
    m.length = t0.elapsed();
}

fn degraded_checks(spec: &Spec, m: &Measures, f: &mut Vec<String>) {
    match &spec.fault {
        Fault::Loss(_) => expect(f, m.dropped > 0, "the packet filter dropped nothing"),
        Fault::Netem(args) => {
            // Each probe crosses the pair twice: at least twice the base
            // delay minus its jitter shows the delay was there.
            let base = netem_floor(args);
            expect(
                f,
                m.slowest_probe >= base,
                format!(
                    "slowest readiness probe {} ms < {} ms: no netem delay",
                    m.slowest_probe.as_millis(),
                    base.as_millis()
                ),
            );
        }
        _ => {}
    }
    expect(
        f,
        m.done_during > 0,
        "no job completed during the degraded link",
    );
}

/// Twice `delay` minus its jitter, from netem arguments.
fn netem_floor(args: &[String]) -> Duration {
    let ms = |s: &String| s.trim_end_matches("ms").parse::<u64>().ok();
    let i = args.iter().position(|a| a == "delay");
    let base = i.and_then(|i| args.get(i + 1)).and_then(ms).unwrap_or(0);
    let jitter = i.and_then(|i| args.get(i + 2)).and_then(ms).unwrap_or(0);
    Duration::from_millis(2 * base.saturating_sub(jitter))
}

/// Waits, from the heal, for readiness 200 and for every job of `after` to
/// complete, under one deadline.
async fn resume(
    bed: &Bed,
    health: SocketAddr,
    after: &[String],
    completed_at_heal: u64,
    t0: Instant,
    limit: Duration,
    m: &mut Measures,
) {
    loop {
        if m.ready_after.is_none() && status(health, "/readyz").await.map(|s| s.0) == Some(200) {
            m.ready_after = Some(t0.elapsed());
        }
        if m.first_after.is_none() && completed(bed).await > completed_at_heal {
            m.first_after = Some(t0.elapsed());
        }
        let mut done = 0;
        for id in after {
            if matches!(bed.queue.get_job_state(id).await, Ok(JobState::Completed)) {
                done += 1;
            }
        }
        if done == after.len() {
            m.after_done.get_or_insert(t0.elapsed());
        }
        if (m.ready_after.is_some() && m.after_done.is_some()) || t0.elapsed() >= limit {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `N` of the `/livez` line `[+]supervisor ok: running, N restarts`.
fn supervisor_restarts(body: &str) -> Option<u64> {
    let line = body.lines().find(|l| l.starts_with("[+]supervisor"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| w.starts_with("restart"))?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

/// Jobs in `completed` now.
async fn completed(bed: &Bed) -> u64 {
    bed.queue.counts().await.map(|c| c.completed).unwrap_or(0)
}

/// The ids the worker process started (its `start` lines).
fn started_ids(worker: &mut Proc) -> Vec<String> {
    worker
        .drain()
        .iter()
        .filter(|v| v["ev"] == "start")
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect()
}

/// `GET path` on the worker's health endpoints: the status and body, or
/// `None` when nothing answered within 5 s.
pub async fn status(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        let raw = String::from_utf8_lossy(&raw);
        let code = raw.split_whitespace().nth(1)?.parse().ok()?;
        let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
        Some((code, body.unwrap_or_default()))
    };
    tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .ok()
        .flatten()
}
