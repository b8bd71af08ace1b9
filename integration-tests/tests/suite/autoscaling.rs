//! The autoscaling signal in a simulated scaling loop (docs/operations.md
//! §Autoscaling): a producer steps its load tenfold, a scaler reads
//! `desired_workers` like KEDA would and starts or closes real EchoMQ
//! workers to match, and the figure is checked to follow the step within
//! seconds, not to flap, and to bring the oldest job's age back under the
//! target.
//!
//! The load is 200 → 2,000 jobs/s of 50 ms jobs; on the 2-core CI
//! machine (shared with builds) it is scaled to 40 → 400 jobs/s of 20 ms
//! jobs with 2 slots per worker: 1 worker before the step, 5 or more after.
//! Once the figure followed, the high load comes in bursts (200 and 600
//! jobs/s by turns of 2 s): a steady mean the instant figure swings with,
//! so that "no flapping" is a property of the published figure, not luck.
//! One worker runs from the start; one the scaler asks for joins
//! [`STARTUP`] later, as a pod would: meanwhile the backlog grows past the
//! target age, and the test checks it did, so that "back under the target"
//! proves something. The scaler's 250 ms polling and the producer's 20 ms
//! batches are the simulated load and scaler, not waits: every wait of the
//! test is on what the log of readings shows, under one deadline, with
//! times on Redis's clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::capacity::{CapacityMonitor, CapacitySettings};
use echomq::worker::{processor_fn, JobContext};
use echomq::{JobOptions, LockManagerMsg, NewJob, Queue, WorkerArgs, WorkerMsg, WorkerOptions};
use echomq_integration_tests::{state, wait_until, NullSupervisor, RedisServer};
use ractor::{call_t, Actor, ActorCell, ActorRef};
use serde_json::json;

/// Jobs per second before and after the step.
const LOW: u64 = 40;
const HIGH: u64 = 400;
/// How long a job runs.
const JOB: Duration = Duration::from_millis(20);
/// Slots per worker.
const SLOTS: u32 = 2;
/// The target backlog age.
const TARGET: Duration = Duration::from_secs(2);
/// How often the scaler reads the figure (KEDA's `pollingInterval`).
const SCALER_PERIOD: Duration = Duration::from_millis(250);
/// The scaler's `minReplicaCount` and `maxReplicaCount` (the latter to
/// spare the machine a runaway figure).
const MIN_WORKERS: u64 = 1;
const MAX_WORKERS: u64 = 16;
/// How long a new worker takes to join (a pod's start-up).
const STARTUP: Duration = Duration::from_secs(4);
/// A figure at least this says "the step was seen": the low load needs 1
/// worker, the high one 5 (400/s × 20 ms / 80% / 2 slots).
const FOLLOWED: u64 = 4;

/// One read of the scaler, on Redis's clock.
#[derive(Clone, Debug)]
struct Sample {
    at_ms: u64,
    desired: u64,
    instant: u64,
    oldest_age_ms: u64,
    arrival_rate: f64,
    service_ms: Option<f64>,
    workers: u64,
}

/// Real workers on the queue, started and closed one by one.
struct Fleet {
    queue: Queue,
    host: ActorCell,
    running: Vec<(ActorRef<WorkerMsg>, ActorRef<LockManagerMsg>)>,
    /// Workers asked for, and when each joins.
    starting: Vec<Instant>,
    closing: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    /// Asks for `n` workers: missing ones join after [`STARTUP`], extra
    /// ones are cancelled (starting ones first) or closed at once.
    async fn resize(&mut self, n: u64) {
        let asked = (self.running.len() + self.starting.len()) as u64;
        for _ in asked..n {
            self.starting.push(Instant::now() + STARTUP);
        }
        while (self.running.len() + self.starting.len()) as u64 > n && !self.starting.is_empty() {
            self.starting.pop();
        }
        let now = Instant::now();
        let joining = self.starting.iter().filter(|at| **at <= now).count();
        self.starting.retain(|at| *at > now);
        self.start(joining).await;
        while (self.running.len() as u64) > n {
            // A closed worker finishes its running jobs first: none is lost.
            let (w, lm) = self.running.pop().unwrap();
            self.closing.push(tokio::spawn(async move {
                let _ = call_t!(w, WorkerMsg::Close, 30_000, Duration::from_secs(10));
                lm.stop(None);
            }));
        }
    }

    async fn start(&mut self, n: usize) {
        for _ in 0..n {
            let p = processor_fn(|_job: JobContext| async move {
                tokio::time::sleep(JOB).await;
                Ok(json!(null))
            });
            let mut args = WorkerArgs::new(self.queue.clone(), p);
            args.options = WorkerOptions::default().concurrency(SLOTS as usize);
            let set = echomq_integration_tests::spawn_worker(self.host.clone(), args)
                .await
                .unwrap();
            self.running.push(set);
        }
    }

    async fn close(mut self) {
        self.resize(0).await;
        for c in self.closing {
            c.await.unwrap();
        }
    }
}

/// The load: jobs per second, and whether it comes in bursts (half the
/// rate for [`BURST`], one and a half times it for the next, and so on:
/// the same mean, and an instant figure that swings with it).
struct Load {
    rate: AtomicU64,
    bursty: AtomicBool,
    stop: AtomicBool,
}

/// The length of a burst or a lull of the bursty load.
const BURST: Duration = Duration::from_secs(2);

/// Adds jobs as `load` says (paced in 20 ms batches) until it stops;
/// returns how many it added.
async fn produce(q: Queue, load: Arc<Load>) -> u64 {
    let mut added = 0u64;
    let mut due = 0.0f64;
    let started = Instant::now();
    let mut last = started;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let options = JobOptions::new();
    while !load.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let now = Instant::now();
        let mut rate = load.rate.load(Ordering::Relaxed) as f64;
        if load.bursty.load(Ordering::Relaxed) {
            let burst = (now - started).as_millis() / BURST.as_millis() % 2 == 1;
            rate *= if burst { 1.5 } else { 0.5 };
        }
        due += rate * (now - last).as_secs_f64();
        last = now;
        let n = (due as u64).saturating_sub(added);
        if n == 0 {
            continue;
        }
        let jobs = (0..n)
            .map(|i| NewJob {
                name: "work".into(),
                data: json!({ "i": added + i }),
                options: options.clone(),
            })
            .collect();
        q.add_bulk(jobs).await.unwrap();
        added += n;
    }
    added
}

/// When a series of `(at_ms, figure)` changed direction.
fn turns(figures: impl Iterator<Item = (u64, u64)>) -> Vec<u64> {
    let mut last: Option<u64> = None;
    let mut direction = 0i8;
    let mut turns = Vec::new();
    for (at, f) in figures {
        if let Some(prev) = last {
            let moved = (f as i128 - prev as i128).signum() as i8;
            if moved != 0 {
                if direction != 0 && moved != direction {
                    turns.push(at);
                }
                direction = moved;
            }
        }
        last = Some(f);
    }
    turns
}

/// At most two changes of direction in any minute (Redis's clock).
fn flaps_at_most_twice_a_minute(turns: &[u64]) -> bool {
    turns.windows(3).all(|w| w[2] - w[0] >= 60_000)
}

/// Whether the samples of the last `span_ms` (Redis's clock, and at least
/// that much history) all hold `ok`.
fn held_for(log: &[Sample], span_ms: u64, ok: impl Fn(&Sample) -> bool) -> bool {
    let Some(last) = log.last() else {
        return false;
    };
    let from = last.at_ms.saturating_sub(span_ms);
    let recent: Vec<&Sample> = log.iter().filter(|s| s.at_ms >= from).collect();
    log.first().is_some_and(|f| f.at_ms <= from) && recent.iter().all(|s| ok(s))
}

async fn redis_ms(c: &fred::clients::Client) -> u64 {
    let t: Vec<String> = state::cmd(c, "TIME", vec![]).await;
    t[0].parse::<u64>().unwrap() * 1000 + t[1].parse::<u64>().unwrap() / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desired_workers_follows_a_tenfold_step_without_flapping() {
    let (redis, conn, q) = RedisServer::with_queue("scale").await;
    let client = redis.client().await;
    let deadline = Instant::now() + Duration::from_secs(150);
    let left = || deadline.saturating_duration_since(Instant::now());

    let load = Arc::new(Load {
        rate: AtomicU64::new(LOW),
        bursty: AtomicBool::new(false),
        stop: AtomicBool::new(false),
    });
    let producer = tokio::spawn(produce(q.clone(), load.clone()));

    // The scaler: reads the figure and sizes the fleet to it.
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let settings = CapacitySettings::default()
        .target_age(TARGET)
        .concurrency(SLOTS);
    let log: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let stop_scaler = Arc::new(AtomicBool::new(false));
    let scaler = tokio::spawn({
        let (q, log, stop) = (q.clone(), log.clone(), stop_scaler.clone());
        let mut fleet = Fleet {
            queue: q.clone(),
            host: host.get_cell(),
            running: Vec::new(),
            starting: Vec::new(),
            closing: Vec::new(),
        };
        async move {
            // The deployment's one worker is there from the start.
            fleet.start(1).await;
            let mut monitor = CapacityMonitor::new(settings).unwrap();
            let mut tick = tokio::time::interval(SCALER_PERIOD);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let c = monitor.observe(&q).await.unwrap();
                fleet
                    .resize(c.desired_workers.clamp(MIN_WORKERS, MAX_WORKERS))
                    .await;
                log.lock().unwrap().push(Sample {
                    at_ms: c.reading.at_ms,
                    desired: c.desired_workers,
                    instant: c.instant_workers,
                    oldest_age_ms: c.reading.oldest_age_ms,
                    arrival_rate: c.reading.arrival_rate,
                    service_ms: c.reading.service_time_ms,
                    workers: fleet.running.len() as u64,
                });
            }
            fleet
        }
    });
    let snapshot = || log.lock().unwrap().clone();

    // Low load, settled: timed finishes, a small figure, a young backlog,
    // for 3 s.
    wait_until("the low load to settle", left(), async || {
        held_for(&snapshot(), 3_000, |s| {
            s.service_ms.is_some()
                && s.desired < FOLLOWED
                && s.oldest_age_ms < TARGET.as_millis() as u64
        })
    })
    .await;
    let low = snapshot();
    let low_desired = low.last().unwrap().desired;

    // The step.
    let step_at = redis_ms(&client).await;
    load.rate.store(HIGH, Ordering::Relaxed);
    wait_until("the figure to follow the step", left(), async || {
        snapshot()
            .iter()
            .any(|s| s.at_ms >= step_at && s.desired >= FOLLOWED)
    })
    .await;
    let followed_at = snapshot()
        .iter()
        .find(|s| s.at_ms >= step_at && s.desired >= FOLLOWED)
        .unwrap()
        .at_ms;
    let follow_ms = followed_at - step_at;

    // The high load, now in bursts (200 and 600 jobs/s by turns): the
    // instant figure swings with them, the published one must not. With the
    // fleet as the figure says: 20 s after the step at least, the last 5 s
    // of them with the fleet at the figure and the oldest job under the
    // target.
    load.bursty.store(true, Ordering::Relaxed);
    let target_ms = TARGET.as_millis() as u64;
    wait_until("the oldest job back under the target", left(), async || {
        let log = snapshot();
        // A figure that flaps keeps the fleet from ever settling: say so
        // at once rather than at the deadline.
        let turned = turns(
            log.iter()
                .filter(|s| s.at_ms >= followed_at)
                .map(|s| (s.at_ms, s.desired)),
        );
        assert!(
            flaps_at_most_twice_a_minute(&turned),
            "the figure flaps: turns at {turned:?}"
        );
        log.last().is_some_and(|s| s.at_ms >= step_at + 20_000)
            && held_for(&log, 5_000, |s| {
                s.oldest_age_ms < target_ms
                    && s.workers == s.desired.clamp(MIN_WORKERS, MAX_WORKERS)
            })
    })
    .await;
    stop_scaler.store(true, Ordering::Relaxed);
    let fleet = scaler.await.unwrap();
    let log = snapshot();
    let high: Vec<&Sample> = log.iter().filter(|s| s.at_ms >= followed_at).collect();
    let steady_turns = turns(high.iter().map(|s| (s.at_ms, s.desired)));
    let instant_turns = turns(high.iter().map(|s| (s.at_ms, s.instant))).len();
    let steady_span_ms = high.last().unwrap().at_ms - followed_at;
    let peak_age = log
        .iter()
        .filter(|s| s.at_ms >= step_at)
        .map(|s| s.oldest_age_ms)
        .max()
        .unwrap();
    let high_rate = high.iter().map(|s| s.arrival_rate).sum::<f64>() / high.len() as f64;
    eprintln!(
        "autoscaling: low desired {low_desired}, followed in {follow_ms} ms, high desired {} \
         (peak {}), {} turns of desired and {instant_turns} of the instant figure \
         in {steady_span_ms} ms, oldest age peak {peak_age} ms, mean arrivals {high_rate:.0}/s",
        high.last().unwrap().desired,
        high.iter().map(|s| s.desired).max().unwrap(),
        steady_turns.len(),
    );

    // The load did step (else nothing here proves anything).
    assert!(
        high_rate >= HIGH as f64 / 2.0,
        "the producer did not reach the high load: {high_rate}/s"
    );
    assert!(low_desired < FOLLOWED, "{low:?}");
    assert!(follow_ms <= 10_000, "followed after {follow_ms} ms");
    assert!(
        peak_age > target_ms,
        "the backlog never aged past the target ({peak_age} ms): nothing came back"
    );
    assert!(
        flaps_at_most_twice_a_minute(&steady_turns),
        "turns at {steady_turns:?}: {high:?}"
    );

    // Nothing lost by the scaling: every job added is finished.
    load.stop.store(true, Ordering::Relaxed);
    let added = producer.await.unwrap();
    let mut fleet = fleet;
    fleet.starting.clear();
    wait_until("every job finished", left(), async || {
        let c = q.counts().await.unwrap();
        c.waiting + c.active + c.delayed + c.prioritized == 0
    })
    .await;
    fleet.close().await;
    let c = q.counts().await.unwrap();
    assert_eq!((c.completed, c.failed), (added, 0), "{c:?}");
    drop(conn);
}

/// The figures of a queue that only BullMQ Node feeds and works: its
/// events are BullMQ's own, so the reading is the same whoever runs the
/// jobs. 30 jobs of 40 ms, one Node worker at concurrency 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bullmq_node_fleet_is_read_the_same() {
    let (redis, _conn, q) = RedisServer::with_queue("node-scale").await;
    let url = redis.url();
    let ids = echomq_integration_tests::bullmq(
        "add-many",
        &url,
        "node-scale",
        json!({ "n": 30, "name": "n", "from": 0 }),
    );
    assert_eq!(ids.as_array().unwrap().len(), 30);
    let before = q.telemetry().capacity_reading().await.unwrap();
    assert_eq!(before.backlog(), 30, "{before:?}");
    assert!(before.arrival_rate > 0.0, "{before:?}");
    assert_eq!(before.service_time_ms, None);

    let u = url.clone();
    let run = tokio::task::spawn_blocking(move || {
        echomq_integration_tests::bullmq_work_until(
            &u,
            "node-scale",
            json!({ "jobs": 30, "sleepMs": 40, "deadlineMs": 60_000 }),
        )
    })
    .await
    .unwrap();
    assert!(run.done, "the Node worker did not finish: {:?}", run.seen);
    let after = q.telemetry().capacity_reading().await.unwrap();
    assert_eq!((after.backlog(), after.active), (0, 0), "{after:?}");
    assert!(after.completion_rate > 0.0, "{after:?}");
    let service = after.service_time_ms.unwrap();
    // 40 ms of sleep plus a Node worker's finish; well under a second.
    assert!((39.0..1_000.0).contains(&service), "{after:?}");
    let mut monitor = CapacityMonitor::new(CapacitySettings::default()).unwrap();
    let figure = monitor.publish("node-scale", after);
    // The burst of 30 arrivals is still in the window: a worker or two.
    assert!((1..=3).contains(&figure.desired_workers), "{figure:?}");
}
