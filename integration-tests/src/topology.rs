//! One lifecycle run shared by the TLS and cluster tests, through the public
//! API only: a worker tree (Worker, LockManager, StalledChecker), a
//! JobScheduler and a QueueEvents subscriber on one queue, with plain,
//! delayed, prioritized, retried-then-failed and scheduled jobs.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::protocol::EventKind;
use echomq::worker::processor_fn;
use echomq::{
    Connection, Delivery, JobOptions, JobScheduler, JobSchedulerArgs, JobSchedulerMsg, JobState,
    NewJob, ProcessError, Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg, SchedulerSpec,
    WorkerArgs, WorkerOptions, WorkerSetSpec,
};
use ractor::{call_t, Actor};
use serde_json::json;

/// What one run saw.
#[derive(Debug)]
pub struct Lifecycle {
    /// Ids that ended completed.
    pub completed: BTreeSet<String>,
    /// Ids that ended failed.
    pub failed: BTreeSet<String>,
    /// Ids of `completed` events the QueueEvents subscriber received.
    pub completed_events: BTreeSet<String>,
    /// Jobs the scheduler produced that completed.
    pub scheduled_completed: usize,
    /// How long the run took, first add to last finish.
    pub elapsed: Duration,
}

/// Adds 20 plain, 1 delayed, 2 prioritized and 1 always-failing (2 attempts)
/// job to `queue`, runs the four actors until all finished and a scheduler
/// (every 150 ms, limit 2) produced 2 more, and returns what happened.
/// Panics when it does not finish within 30 s.
pub async fn four_actors(conn: &Connection, queue: &str) -> Lifecycle {
    let q = Queue::new(conn, queue).await.expect("open the queue");
    let (host, _) = Actor::spawn(None, crate::NullSupervisor, ())
        .await
        .expect("host");
    let mut args = WorkerArgs::new(
        q.clone(),
        processor_fn(|ctx: echomq::JobContext| async move {
            if ctx.data()["fail"] == json!(true) {
                Err(ProcessError::failed("asked to fail"))
            } else {
                Ok(json!({ "echo": ctx.data().clone() }))
            }
        }),
    );
    args.options = WorkerOptions::default()
        .concurrency(4)
        .stalled_interval(Duration::from_millis(500))
        .drain_delay(Duration::from_millis(300));
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .expect("worker set");
    let mut qe_args = QueueEventsArgs::new(conn.clone(), queue);
    qe_args.block = Duration::from_millis(300);
    let (qe, _) = Actor::spawn_linked(None, QueueEvents, qe_args, host.get_cell())
        .await
        .expect("queue events");
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let sink = seen.clone();
    let subscriber = Box::new(move |d: Delivery| {
        if let Delivery::Event(e) = d {
            if let EventKind::Completed { job_id, .. } = e.kind {
                sink.lock().unwrap().insert(job_id);
            }
        }
        true
    });
    call_t!(qe, QueueEventsMsg::SubscribeActor, 5000, subscriber).expect("subscribe");
    let (sched, _) = Actor::spawn_linked(
        None,
        JobScheduler,
        JobSchedulerArgs::new(conn.clone(), queue),
        host.get_cell(),
    )
    .await
    .expect("job scheduler");

    let started = std::time::Instant::now();
    let mut jobs: Vec<NewJob> = (0..20)
        .map(|i| NewJob {
            name: "plain".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    let mut delayed = JobOptions::new();
    delayed.delay = Some(300);
    jobs.push(NewJob {
        name: "delayed".into(),
        data: json!({ "i": 20 }),
        options: delayed,
    });
    for p in [1, 5] {
        let mut prio = JobOptions::new();
        prio.priority = Some(p);
        jobs.push(NewJob {
            name: "prio".into(),
            data: json!({ "p": p }),
            options: prio,
        });
    }
    let mut failing = JobOptions::new();
    failing.attempts = Some(2);
    jobs.push(NewJob {
        name: "failing".into(),
        data: json!({ "fail": true }),
        options: failing,
    });
    let ids = q.add_bulk(jobs).await.expect("add_bulk");
    let failing_id = ids.last().cloned().expect("ids");
    let mut spec = SchedulerSpec::every("tick", Duration::from_millis(150));
    spec.limit = Some(2);
    call_t!(sched, JobSchedulerMsg::Upsert, 5000, Box::new(spec))
        .expect("upsert")
        .expect("upsert accepted");

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (completed, failed, scheduled_completed) = loop {
        let mut completed = BTreeSet::new();
        let mut failed = BTreeSet::new();
        for id in &ids {
            match q.get_job_state(id).await.expect("get_state") {
                JobState::Completed => {
                    completed.insert(id.clone());
                }
                JobState::Failed => {
                    failed.insert(id.clone());
                }
                _ => {}
            }
        }
        let counts = q.counts().await.expect("counts");
        let scheduled = (counts.completed as usize).saturating_sub(completed.len());
        if completed.len() + failed.len() == ids.len()
            && scheduled >= 2
            && seen.lock().unwrap().len() >= completed.len() + scheduled
        {
            break (completed, failed, scheduled);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "lifecycle not finished in 30 s: {counts:?}, {} completed events",
            seen.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = started.elapsed();
    assert!(failed.contains(&failing_id), "{failed:?}");
    // Closed, not merely told to stop: once `close` answers the fetch loop
    // has ended, so no job added after this function returns can be taken by
    // this worker (a stop() returns before the actor has even seen it).
    set.close(Duration::from_secs(5))
        .await
        .expect("the worker set closes");
    let gone = Some(Duration::from_secs(5));
    qe.stop_and_wait(None, gone)
        .await
        .expect("queue events stop");
    sched
        .stop_and_wait(None, gone)
        .await
        .expect("scheduler stops");
    host.stop_and_wait(None, gone).await.expect("host stops");
    let completed_events = seen.lock().unwrap().clone();
    Lifecycle {
        completed,
        failed,
        completed_events,
        scheduled_completed,
        elapsed,
    }
}

/// The shape of a [`Load`].
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Every n-th job (by its number) fails, with one attempt. Default none.
    pub fail_every: Option<u64>,
    /// Every n-th job runs for the given time instead of 10 ms, so that its
    /// lock is renewed while it runs. Default none.
    pub slow_every: Option<(u64, Duration)>,
    /// The worker's lock duration. Default 2 s.
    pub lock_duration: Duration,
    /// The worker's concurrency. Default 4.
    pub concurrency: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            fail_every: None,
            slow_every: None,
            lock_duration: Duration::from_secs(2),
            concurrency: 4,
        }
    }
}

/// A steady load for failover tests: a producer adding about 100 jobs/s,
/// each with its own id (so a retry after an ambiguous error never makes a
/// second job), and a worker tree (concurrency 4, 2 s locks, 1 s stalled
/// checks) counting how often each job is processed.
pub struct Load {
    queue: Queue,
    host: ractor::ActorRef<()>,
    set: echomq::WorkerSet,
    stop: Arc<std::sync::atomic::AtomicBool>,
    producer: tokio::task::JoinHandle<()>,
    acked: Arc<Mutex<Vec<String>>>,
    add_errors: Arc<std::sync::atomic::AtomicU64>,
    processed: Arc<Mutex<std::collections::BTreeMap<String, u32>>>,
}

/// What a [`Load`] ended with.
#[derive(Debug)]
pub struct LoadReport {
    /// Adds that returned an id.
    pub acked: usize,
    /// Acknowledged jobs that ended completed.
    pub completed: usize,
    /// Acknowledged jobs that ended failed (asked to, [`LoadOptions::fail_every`]).
    pub failed: usize,
    /// The failed jobs' `failedReason`s.
    pub failed_reasons: Vec<String>,
    /// Acknowledged jobs that no longer exist: lost by Redis's asynchronous
    /// replication when a primary died before its replica got them.
    pub lost: Vec<String>,
    /// Jobs the processor ran more than once.
    pub processed_twice: usize,
    /// Adds that failed (and were retried with the same id).
    pub add_errors: u64,
}

impl Load {
    /// Starts the worker tree and the producer on `queue`.
    pub async fn start(conn: &Connection, queue: &str) -> Load {
        Self::start_with(conn, queue, LoadOptions::default()).await
    }

    /// Starts the worker tree and the producer on `queue`, shaped by `opts`.
    pub async fn start_with(conn: &Connection, queue: &str, opts: LoadOptions) -> Load {
        use std::sync::atomic::Ordering;
        let q = Queue::new(conn, queue).await.expect("open the queue");
        let processed: Arc<Mutex<std::collections::BTreeMap<String, u32>>> = Arc::default();
        let seen = processed.clone();
        let shape = opts.clone();
        let (host, _) = Actor::spawn(None, crate::NullSupervisor, ())
            .await
            .expect("host");
        let mut args = WorkerArgs::new(
            q.clone(),
            processor_fn(move |ctx: echomq::JobContext| {
                let seen = seen.clone();
                let opts = shape.clone();
                async move {
                    *seen
                        .lock()
                        .unwrap()
                        .entry(ctx.job().id.clone())
                        .or_default() += 1;
                    let i = ctx.data()["i"].as_u64();
                    let every =
                        |n: Option<u64>| matches!((i, n), (Some(i), Some(n)) if i % n == n - 1);
                    let pause = match opts.slow_every {
                        Some((n, d)) if every(Some(n)) => d,
                        _ => Duration::from_millis(10),
                    };
                    tokio::time::sleep(pause).await;
                    if every(opts.fail_every) {
                        return Err(ProcessError::failed("asked to fail"));
                    }
                    Ok(json!(null))
                }
            }),
        );
        args.options = WorkerOptions::default()
            .concurrency(opts.concurrency)
            .lock_duration(opts.lock_duration)
            .stalled_interval(Duration::from_secs(1))
            .drain_delay(Duration::from_millis(300));
        let set = WorkerSetSpec::new(args)
            .spawn_linked(host.get_cell())
            .await
            .expect("worker set");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let add_errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let producer = {
            let (q, stop, acked, errors) =
                (q.clone(), stop.clone(), acked.clone(), add_errors.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut opts = JobOptions::new();
                    opts.job_id = Some(format!("p{i}"));
                    match q.add("p", &json!({ "i": i }), opts).await {
                        Ok(id) => {
                            acked.lock().unwrap().push(id);
                            i += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            })
        };
        Load {
            queue: q,
            host,
            set,
            stop,
            producer,
            acked,
            add_errors,
            processed,
        }
    }

    /// The last acknowledged id.
    pub fn last_acked(&self) -> Option<String> {
        self.acked.lock().unwrap().last().cloned()
    }

    /// How many distinct jobs whose id starts with `prefix` the processor
    /// ran (`repeat:<id>:` for a job scheduler's iterations).
    pub fn processed_with_prefix(&self, prefix: &str) -> usize {
        self.processed
            .lock()
            .unwrap()
            .keys()
            .filter(|id| id.starts_with(prefix))
            .count()
    }

    /// The queue the load runs on.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Adds acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits until `more` further adds were acknowledged and returns how
    /// long that took; panics after `limit`.
    pub async fn wait_for_adds(&self, more: usize, limit: Duration) -> Duration {
        let started = std::time::Instant::now();
        let target = self.acked() + more;
        while self.acked() < target {
            assert!(
                started.elapsed() < limit,
                "fewer than {more} adds acknowledged in {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        started.elapsed()
    }

    /// Stops the producer, waits until every acknowledged job is completed
    /// or gone (at most 30 s), closes the worker tree and reports.
    pub async fn finish(self) -> LoadReport {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        self.producer.await.expect("producer");
        let acked = self.acked.lock().unwrap().clone();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let (completed, failed, lost) = loop {
            let mut completed = 0;
            let mut failed = Vec::new();
            let mut lost = Vec::new();
            let mut pending = Vec::new();
            for id in &acked {
                match self.queue.get_job_state(id).await.expect("get_state") {
                    JobState::Completed => completed += 1,
                    JobState::Failed => failed.push(id.clone()),
                    JobState::Unknown => lost.push(id.clone()),
                    _ => pending.push(id.clone()),
                }
            }
            if pending.is_empty() {
                break (completed, failed, lost);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} acknowledged jobs unfinished after 30 s, e.g. {:?}",
                pending.len(),
                &pending[..pending.len().min(5)]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // Closed before the report: nothing of this load runs beside what
        // the test does next.
        self.set
            .close(Duration::from_secs(5))
            .await
            .expect("the load's worker set closes");
        self.host
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await
            .expect("host stops");
        let mut failed_reasons = Vec::new();
        for id in &failed {
            let job = self.queue.get_job(id).await.expect("get_job");
            failed_reasons.push(job.and_then(|j| j.failed_reason).unwrap_or_default());
        }
        let processed_twice = self
            .processed
            .lock()
            .unwrap()
            .values()
            .filter(|&&n| n > 1)
            .count();
        LoadReport {
            acked: acked.len(),
            completed,
            failed: failed.len(),
            failed_reasons,
            lost,
            processed_twice,
            add_errors: self.add_errors.load(Ordering::Relaxed),
        }
    }
}
