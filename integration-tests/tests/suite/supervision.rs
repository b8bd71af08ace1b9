//! The actor tree embedded in a host: the shipped host supervisor restarts
//! whatever fails (one-for-one) while 1000 jobs flow. Each actor type is
//! panicked, then killed. Nothing is lost or finished twice, no lock lapses
//! (no stalled counter anywhere), and the QueueEvents subscriber skips no
//! event. Then the policy's edges: a cleanly closed set is not restarted, the
//! restart budget gives up, a subscription outlives QueueEvents restarts, and
//! a close runs in order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::protocol::{Event, EventKind};
use echomq::worker::processor_fn;
use echomq::{
    supervision::ChildId, supervision::ChildKind, supervision::SupervisionError, Delivery,
    HostSupervisor, HostSupervisorMsg, JobOptions, JobSchedulerArgs, JobSchedulerMsg,
    LockManagerMsg, NewJob, Queue, QueueEventsArgs, QueueEventsMsg, RestartIntensity,
    StalledCheckerMsg, Subscribers, WorkerArgs, WorkerMsg, WorkerOptions, WorkerSet, WorkerSetSpec,
};
use echomq_integration_tests::{wait_until, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, ActorStatus, SupervisionEvent};
use serde_json::json;

/// The host supervisor's children, by id.
struct Ids {
    set: ChildId,
    qe: ChildId,
    sched: ChildId,
}

async fn refs(
    host: &ActorRef<HostSupervisorMsg>,
    ids: &Ids,
) -> (
    WorkerSet,
    ActorRef<QueueEventsMsg>,
    ActorRef<JobSchedulerMsg>,
) {
    let set = call_t!(host, HostSupervisorMsg::GetWorkerSet, 2000, ids.set)
        .unwrap()
        .unwrap();
    let qe = call_t!(host, HostSupervisorMsg::GetQueueEvents, 2000, ids.qe)
        .unwrap()
        .unwrap();
    let sched = call_t!(host, HostSupervisorMsg::GetJobScheduler, 2000, ids.sched)
        .unwrap()
        .unwrap();
    (set, qe, sched)
}

async fn restarts(host: &ActorRef<HostSupervisorMsg>) -> u64 {
    call_t!(host, HostSupervisorMsg::GetStatus, 2000)
        .unwrap()
        .restarts
}

async fn add_set(host: &ActorRef<HostSupervisorMsg>, spec: WorkerSetSpec) -> ChildId {
    call_t!(host, HostSupervisorMsg::AddWorkerSet, 5000, Box::new(spec))
        .unwrap()
        .unwrap()
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_supervisor_restarts_every_actor_while_jobs_flow() {
    let (redis, conn, q) = RedisServer::with_queue("sup").await;
    let c = redis.client().await;

    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let r2 = runs.clone();
    let processor = processor_fn(move |ctx| {
        let r = r2.clone();
        async move {
            *r.lock().unwrap().entry(ctx.job().id.clone()).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(15)).await;
            Ok(json!(null))
        }
    });
    let mut wargs = WorkerArgs::new(q.clone(), processor);
    wargs.options = WorkerOptions::default()
        .concurrency(10)
        .lock_duration(Duration::from_millis(1500))
        .stalled_interval(Duration::from_millis(300))
        .drain_delay(Duration::from_millis(200))
        .watchdog_interval(Duration::from_millis(500));
    let spec = WorkerSetSpec::new(wargs);
    // The subscriber is registered once; restarts of QueueEvents re-attach it.
    let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
    let subscribers = Subscribers::new();
    let sink = seen.clone();
    subscribers.subscribe_with(move |d| {
        if let Delivery::Event(e) = d {
            sink.lock().unwrap().push(e);
        }
        true
    });
    let qe_args = QueueEventsArgs::new(conn.clone(), "sup")
        .block(Duration::from_millis(200))
        .subscribers(subscribers);
    let (host, host_handle) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
        .await
        .unwrap();
    let children = Ids {
        set: add_set(&host, spec).await,
        qe: call_t!(
            host,
            HostSupervisorMsg::AddQueueEvents,
            5000,
            Box::new(qe_args)
        )
        .unwrap()
        .unwrap()
        .0,
        sched: call_t!(
            host,
            HostSupervisorMsg::AddJobScheduler,
            5000,
            Box::new(JobSchedulerArgs::new(conn.clone(), "sup"))
        )
        .unwrap()
        .unwrap()
        .0,
    };

    let jobs: Vec<NewJob> = (0..1000)
        .map(|i| NewJob {
            name: "j".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    let ids = q.add_bulk(jobs).await.unwrap();

    // Panic, then kill, each actor type in turn, while the jobs flow.
    let faults: Vec<(&str, bool)> = vec![
        ("worker", false),
        ("worker", true),
        ("lock_manager", false),
        ("lock_manager", true),
        ("stalled_checker", false),
        ("stalled_checker", true),
        ("queue_events", false),
        ("queue_events", true),
        ("job_scheduler", false),
        ("job_scheduler", true),
    ];
    let injected = AtomicU32::new(0);
    let mut done_before = 0;
    for (who, kill) in &faults {
        // Jobs flow between two faults: a few more completed since the last
        // one (or all of them already).
        let q2 = q.clone();
        wait_until("jobs flowing", Duration::from_secs(10), async || {
            let done = q2.counts().await.unwrap().completed;
            done >= done_before + 5 || done == 1000
        })
        .await;
        done_before = q.counts().await.unwrap().completed;
        let (set, qe, sched) = refs(&host, &children).await;
        match (*who, *kill) {
            ("job_scheduler", false) => sched.cast(JobSchedulerMsg::Crash).unwrap(),
            ("job_scheduler", true) => sched.kill(),
            ("worker", false) => set.worker.cast(WorkerMsg::Crash).unwrap(),
            ("worker", true) => set.worker.kill(),
            ("lock_manager", false) => set.lock_manager.cast(LockManagerMsg::Crash).unwrap(),
            ("lock_manager", true) => set.lock_manager.kill(),
            ("stalled_checker", false) => set
                .stalled_checker
                .as_ref()
                .unwrap()
                .cast(StalledCheckerMsg::Crash)
                .unwrap(),
            ("stalled_checker", true) => set.stalled_checker.as_ref().unwrap().kill(),
            ("queue_events", false) => qe.cast(QueueEventsMsg::Crash).unwrap(),
            (_, _) => qe.kill(),
        }
        injected.fetch_add(1, Ordering::Relaxed);
        // Wait for the restart before the next fault.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while restarts(&host).await < u64::from(injected.load(Ordering::Relaxed)) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{who} was not restarted"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // Control messages through the public refs take effect after restarts.
    let (set, _, sched) = refs(&host, &children).await;
    let mut spec = echomq::SchedulerSpec::every("nightly", Duration::from_secs(3600));
    spec.start_date = Some(echomq::clock::now_ms() + 3_600_000); // not during this test
    let upserted = call_t!(sched, JobSchedulerMsg::Upsert, 5000, Box::new(spec))
        .unwrap()
        .unwrap();
    assert!(
        upserted.is_some(),
        "the upsert through the restarted JobScheduler took effect"
    );
    let got = call_t!(sched, JobSchedulerMsg::Get, 5000, "nightly".to_string())
        .unwrap()
        .unwrap();
    assert!(got.is_some());
    set.worker.cast(WorkerMsg::SetConcurrency(20)).unwrap();
    set.lock_manager.cast(LockManagerMsg::RenewNow).unwrap();
    let report = call_t!(
        set.stalled_checker.as_ref().unwrap(),
        StalledCheckerMsg::CheckNow,
        5000
    )
    .unwrap()
    .unwrap();
    assert!(report.recovered.is_empty(), "no job stalled: {report:?}");
    let status = call_t!(set.worker, WorkerMsg::GetStatus, 2000).unwrap();
    assert_eq!(status.concurrency, 20);

    // Every job completes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let counts = q.counts().await.unwrap();
        if counts.completed == 1000 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not all completed: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Give the QueueEvents subscriber time to catch up.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let done = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Completed { .. }))
            .count();
        if done >= 1000 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "subscriber saw {done} completions"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = call_t!(host, HostSupervisorMsg::GetStatus, 2000).unwrap();
    assert_eq!(r.restarts as usize, faults.len(), "{r:?}");
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 1000, "every job ran");
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    let counts = q.counts().await.unwrap();
    assert_eq!(
        (
            counts.completed,
            counts.failed,
            counts.active,
            counts.waiting
        ),
        (1000, 0, 0, 0)
    );
    for id in &ids {
        let stc: Option<String> = c.hget(q.keys().job(id), "stc").await.unwrap();
        assert!(stc.is_none(), "job {id} was stalled: no lock may lapse");
    }
    // No event skipped: each job's completion seen exactly once, in stream order.
    let seen = seen.lock().unwrap().clone();
    let mut completed: HashMap<String, u32> = HashMap::new();
    for e in &seen {
        if let EventKind::Completed { job_id, .. } = &e.kind {
            *completed.entry(job_id.clone()).or_default() += 1;
        }
    }
    assert_eq!(completed.len(), 1000);
    assert!(
        completed.values().all(|&n| n == 1),
        "an event delivered twice across a restart"
    );
    let parse = |id: &str| {
        let (ms, seq) = id.split_once('-').unwrap();
        (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
    };
    assert!(
        seen.windows(2).all(|w| parse(&w[0].id) < parse(&w[1].id)),
        "events out of order or repeated"
    );

    let _ = call_t!(
        host,
        HostSupervisorMsg::Close,
        20_000,
        Duration::from_secs(5)
    )
    .unwrap();
    let _ = host_handle.await;
}

fn quick_worker(q: &Queue, run_for: Duration) -> WorkerArgs {
    let processor = processor_fn(move |_ctx| async move {
        tokio::time::sleep(run_for).await;
        Ok(json!(null))
    });
    let mut wargs = WorkerArgs::new(q.clone(), processor);
    wargs.options = WorkerOptions::default()
        .concurrency(4)
        .lock_duration(Duration::from_millis(1000))
        .stalled_interval(Duration::from_millis(300))
        .drain_delay(Duration::from_millis(200));
    wargs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanly_closed_set_is_not_restarted() {
    let (_redis, _conn, q) = RedisServer::with_queue("clean").await;
    let (host, _h) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
        .await
        .unwrap();
    // One set closed by a Close sent straight to its Worker (the host did not
    // ask for it), one through WorkerSet::close on a clone of the set.
    let direct = add_set(&host, WorkerSetSpec::new(quick_worker(&q, Duration::ZERO))).await;
    let ordered = add_set(&host, WorkerSetSpec::new(quick_worker(&q, Duration::ZERO))).await;
    let get = |id| {
        let host = host.clone();
        async move {
            call_t!(host, HostSupervisorMsg::GetWorkerSet, 2000, id)
                .unwrap()
                .unwrap()
        }
    };
    let a = get(direct).await;
    call_t!(a.worker, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
    let b = get(ordered).await;
    let report = b.close(Duration::from_secs(2)).await.unwrap();
    assert_eq!(report.worker.map(|r| r.moved_back), Some(vec![]));

    wait_until(
        "the closed members to stop",
        Duration::from_secs(5),
        async || {
            a.worker.get_status() == ActorStatus::Stopped
                && a.lock_manager.get_status() == ActorStatus::Stopped
                && b.worker.get_status() == ActorStatus::Stopped
                && b.lock_manager.get_status() == ActorStatus::Stopped
                && b.stalled_checker.as_ref().unwrap().get_status() == ActorStatus::Stopped
        },
    )
    .await;
    // Each member told the host it stopped before its status turned Stopped,
    // and ractor hands an actor its supervision events before its messages:
    // this GetStatus is answered after the host decided about every stop.
    assert_eq!(restarts(&host).await, 0, "a clean close is not a crash");
    assert_eq!(get(direct).await.worker.get_id(), a.worker.get_id());
    assert_eq!(get(ordered).await.worker.get_id(), b.worker.get_id());
    // The set whose Worker alone was closed keeps its StalledChecker.
    assert_eq!(
        a.stalled_checker.as_ref().unwrap().get_status(),
        ActorStatus::Running
    );
    host.stop(None);
}

/// Receives the failure of the supervisor it parents.
struct Parent;

impl Actor for Parent {
    type Msg = ();
    type State = tokio::sync::mpsc::UnboundedSender<Option<String>>;
    type Arguments = tokio::sync::mpsc::UnboundedSender<Option<String>>;

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        evt: SupervisionEvent,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(_, e) = evt {
            let gave_up = match e.downcast_ref::<SupervisionError>() {
                Some(SupervisionError::GaveUp { child, max, .. }) => {
                    Some(format!("{child:?} {max}"))
                }
                _ => None,
            };
            let _ = tx.send(gave_up);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_member_is_restarted_within_the_budget_and_the_set_gives_up_beyond_it() {
    let (_redis, _conn, q) = RedisServer::with_queue("budget").await;
    let (tx, mut failures) = tokio::sync::mpsc::unbounded_channel();
    let (parent, _ph) = Actor::spawn(None, Parent, tx).await.unwrap();
    let (host, host_handle) = Actor::spawn_linked(
        None,
        HostSupervisor,
        RestartIntensity::new(2, Duration::from_secs(60)),
        parent.get_cell(),
    )
    .await
    .unwrap();
    let id = add_set(&host, WorkerSetSpec::new(quick_worker(&q, Duration::ZERO))).await;
    for n in 1..=2u64 {
        let set = call_t!(host, HostSupervisorMsg::GetWorkerSet, 2000, id)
            .unwrap()
            .unwrap();
        set.worker.cast(WorkerMsg::Crash).unwrap();
        let host2 = host.clone();
        wait_until("the restart", Duration::from_secs(5), async || {
            restarts(&host2).await == n
        })
        .await;
        let status = call_t!(host, HostSupervisorMsg::GetStatus, 2000).unwrap();
        assert_eq!(status.recent.last(), Some(&(id, ChildKind::Worker)));
    }
    let set = call_t!(host, HostSupervisorMsg::GetWorkerSet, 2000, id)
        .unwrap()
        .unwrap();
    assert_eq!(
        call_t!(set.worker, WorkerMsg::GetStatus, 2000)
            .unwrap()
            .concurrency,
        4,
        "the restarted worker runs"
    );
    // The third crash in the window spends the budget: the supervisor stops
    // its children and fails with a typed error its parent can read.
    set.worker.cast(WorkerMsg::Crash).unwrap();
    let failure = tokio::time::timeout(Duration::from_secs(5), failures.recv())
        .await
        .expect("the supervisor gave up")
        .unwrap();
    assert_eq!(failure.as_deref(), Some("Worker 2"));
    let _ = host_handle.await;
    wait_until("the children to stop", Duration::from_secs(5), async || {
        set.lock_manager.get_status() == ActorStatus::Stopped
            && set.stalled_checker.as_ref().unwrap().get_status() == ActorStatus::Stopped
    })
    .await;
    parent.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_events_subscriber_keeps_receiving_across_restarts() {
    let (_redis, conn, q) = RedisServer::with_queue("qer").await;
    let subscribers = Subscribers::new();
    let mut sub = subscribers.subscribe(1000);
    let args = QueueEventsArgs::new(conn.clone(), "qer")
        .block(Duration::from_millis(200))
        .subscribers(subscribers.clone());
    let (host, _h) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
        .await
        .unwrap();
    let (qe_id, _) = call_t!(
        host,
        HostSupervisorMsg::AddQueueEvents,
        5000,
        Box::new(args)
    )
    .unwrap()
    .unwrap();
    let mut job_ids = Vec::new();
    for round in 0..3u64 {
        for _ in 0..3 {
            q.add("x", &json!({}), JobOptions::new()).await.unwrap();
        }
        // Each add writes `added` and `waiting`: wait until this round's six
        // events are in, then crash (round 0) or kill (round 1) the actor.
        while job_ids.len() < ((round + 1) * 6) as usize {
            let d = tokio::time::timeout(Duration::from_secs(5), sub.recv())
                .await
                .expect("an event after the restart")
                .expect("the subscription survives");
            match d {
                Delivery::Event(e) => job_ids.push((e.id, e.kind.job_id().unwrap().to_owned())),
                other => panic!("{other:?}"),
            }
        }
        let qe = call_t!(host, HostSupervisorMsg::GetQueueEvents, 2000, qe_id)
            .unwrap()
            .unwrap();
        match round {
            0 => qe.cast(QueueEventsMsg::Crash).unwrap(),
            1 => qe.kill(),
            _ => break,
        }
        let host2 = host.clone();
        wait_until("the restart", Duration::from_secs(5), async || {
            restarts(&host2).await == round + 1
        })
        .await;
    }
    let jobs: Vec<&str> = job_ids.iter().map(|(_, j)| j.as_str()).collect();
    let expected: Vec<String> = (1..=9)
        .flat_map(|i| [i.to_string(), i.to_string()])
        .collect();
    assert_eq!(
        jobs, expected,
        "every event once, in order, no re-subscription"
    );
    assert_eq!(
        subscribers.last_id(),
        job_ids.last().map(|(id, _)| id.clone())
    );
    // A clean close ends the subscription.
    call_t!(
        host,
        HostSupervisorMsg::Close,
        10_000,
        Duration::from_secs(1)
    )
    .unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(2), sub.recv())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_supervisor_runs_a_set_and_closes_it_in_order() {
    let (redis, _conn, q) = RedisServer::with_queue("order").await;
    let c = redis.client().await;
    let (host, host_handle) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
        .await
        .unwrap();
    // Jobs outlive their 1 s lock: they finish during the close only if the
    // LockManager keeps renewing until the Worker has let them go.
    let id = add_set(
        &host,
        WorkerSetSpec::new(quick_worker(&q, Duration::from_millis(1800))),
    )
    .await;
    let set = call_t!(host, HostSupervisorMsg::GetWorkerSet, 2000, id)
        .unwrap()
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(q.add("slow", &json!({}), JobOptions::new()).await.unwrap());
    }
    // Running as the worker sees them (its held locks): Redis's `active`
    // count moves first, while a (batched) take's reply is on its way.
    let lm = set.lock_manager.clone();
    wait_until("four running jobs", Duration::from_secs(5), async || {
        call_t!(lm, LockManagerMsg::GetTracked, 2000)
            .map(|t: Vec<echomq::locks::TrackedLock>| t.len() == 4)
            .unwrap_or(false)
    })
    .await;
    let report = call_t!(
        host,
        HostSupervisorMsg::Close,
        20_000,
        Duration::from_secs(5)
    )
    .unwrap();
    assert_eq!(report.worker_sets.len(), 1);
    let (closed_id, result) = &report.worker_sets[0];
    assert_eq!(*closed_id, id);
    let worker = result.as_ref().unwrap().worker.clone().unwrap();
    assert_eq!((worker.finished_in_time, worker.moved_back.len()), (4, 0));
    let _ = host_handle.await;
    assert_eq!(host.get_status(), ActorStatus::Stopped);
    for cell in [
        set.worker.get_cell(),
        set.lock_manager.get_cell(),
        set.stalled_checker.as_ref().unwrap().get_cell(),
    ] {
        assert_eq!(cell.get_status(), ActorStatus::Stopped);
    }
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.completed, counts.active), (4, 0));
    for id in &ids {
        let stc: Option<String> = c.hget(q.keys().job(id), "stc").await.unwrap();
        assert!(stc.is_none(), "job {id}'s lock lapsed during the close");
    }
}
