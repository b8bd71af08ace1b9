//! The actor tree embedded in a host: a host supervisor restarts whatever
//! fails (one-for-one) while 1000 jobs flow. Each actor type is panicked, then
//! killed. Nothing is lost or finished twice, no lock lapses (no stalled
//! counter anywhere), and the QueueEvents subscriber skips no event.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::protocol::{Event, EventKind};
use echomq::worker::processor_fn;
use echomq::{
    Delivery, JobOptions, JobScheduler, JobSchedulerArgs, JobSchedulerMsg, LockManagerMsg, NewJob,
    Queue, QueueEvents, QueueEventsArgs, QueueEventsMsg, StalledCheckerMsg, StartFrom, WorkerArgs,
    WorkerMsg, WorkerOptions, WorkerSet, WorkerSetSpec,
};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use ractor::{call_t, Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde_json::json;

struct Host;

struct HostArgs {
    spec: WorkerSetSpec,
    sched_args: JobSchedulerArgs,
    qe_args: QueueEventsArgs,
    seen: Arc<Mutex<Vec<Event>>>,
    restarts: Arc<Mutex<Vec<String>>>,
    stopping: Arc<AtomicBool>,
}

struct HostState {
    spec: WorkerSetSpec,
    set: WorkerSet,
    sched_args: JobSchedulerArgs,
    sched: ActorRef<JobSchedulerMsg>,
    qe: ActorRef<QueueEventsMsg>,
    qe_args: QueueEventsArgs,
    seen: Arc<Mutex<Vec<Event>>>,
    restarts: Arc<Mutex<Vec<String>>>,
    stopping: Arc<AtomicBool>,
    recent: echomq::RestartIntensity,
}

enum HostMsg {
    Refs(
        RpcReplyPort<(
            WorkerSet,
            ActorRef<QueueEventsMsg>,
            ActorRef<JobSchedulerMsg>,
        )>,
    ),
}

async fn spawn_qe(
    host: &ActorRef<HostMsg>,
    args: QueueEventsArgs,
    seen: Arc<Mutex<Vec<Event>>>,
) -> ActorRef<QueueEventsMsg> {
    let (qe, _) = Actor::spawn_linked(None, QueueEvents, args, host.get_cell())
        .await
        .unwrap();
    let sink = seen.clone();
    let f = Box::new(move |d: Delivery| {
        if let Delivery::Event(e) = d {
            sink.lock().unwrap().push(e);
        }
        true
    });
    let _ = call_t!(qe, QueueEventsMsg::SubscribeActor, 2000, f).unwrap();
    qe
}

impl Actor for Host {
    type Msg = HostMsg;
    type State = HostState;
    type Arguments = HostArgs;

    async fn pre_start(
        &self,
        me: ActorRef<HostMsg>,
        a: HostArgs,
    ) -> Result<HostState, ActorProcessingErr> {
        let set = a.spec.spawn_linked(me.get_cell()).await?;
        let qe = spawn_qe(&me, a.qe_args.clone(), a.seen.clone()).await;
        let (sched, _) =
            Actor::spawn_linked(None, JobScheduler, a.sched_args.clone(), me.get_cell()).await?;
        Ok(HostState {
            spec: a.spec,
            set,
            sched_args: a.sched_args,
            sched,
            qe,
            qe_args: a.qe_args,
            seen: a.seen,
            restarts: a.restarts,
            stopping: a.stopping,
            recent: echomq::RestartIntensity::new(10, Duration::from_secs(5)),
        })
    }

    async fn handle(
        &self,
        _me: ActorRef<HostMsg>,
        msg: HostMsg,
        s: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HostMsg::Refs(r) => {
                let _ = r.send((s.set.clone(), s.qe.clone(), s.sched.clone()));
            }
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
        if s.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
        // One-for-one with a restart intensity: more than 10 restarts in 5 s
        // means something is really wrong; give up (the host fails too).
        if !s.recent.allow() {
            return Err("restart intensity exceeded".into());
        }
        if let Some(m) = s.set.member_of(&cell) {
            s.spec.restart(&mut s.set, m, me.get_cell()).await?;
            s.restarts.lock().unwrap().push(format!("{m:?}"));
        } else if cell.get_id() == s.sched.get_id() {
            // Everything it knows lives in Redis: a fresh one is the same one.
            let (sched, _) =
                Actor::spawn_linked(None, JobScheduler, s.sched_args.clone(), me.get_cell())
                    .await?;
            s.sched = sched;
            s.restarts.lock().unwrap().push("JobScheduler".into());
        } else if cell.get_id() == s.qe.get_id() {
            // Resume from the last event the subscriber handled: nothing skipped.
            let mut args = s.qe_args.clone();
            if let Some(last) = s.seen.lock().unwrap().last() {
                args.start = StartFrom::After(last.id.clone());
            }
            s.qe = spawn_qe(&me, args, s.seen.clone()).await;
            s.restarts.lock().unwrap().push("QueueEvents".into());
        }
        Ok(())
    }
}

async fn refs(
    host: &ActorRef<HostMsg>,
) -> (
    WorkerSet,
    ActorRef<QueueEventsMsg>,
    ActorRef<JobSchedulerMsg>,
) {
    call_t!(host, HostMsg::Refs, 2000).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_supervisor_restarts_every_actor_while_jobs_flow() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "sup").await.unwrap();

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
    wargs.options = WorkerOptions {
        concurrency: 10,
        lock_duration: Duration::from_millis(1500),
        stalled_interval: Duration::from_millis(300),
        drain_delay: Duration::from_millis(200),
        watchdog_interval: Duration::from_millis(500),
        ..Default::default()
    };
    let spec = WorkerSetSpec::new(wargs);
    let mut qe_args = QueueEventsArgs::new(conn.clone(), "sup");
    qe_args.block = Duration::from_millis(200);
    let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
    let restarts: Arc<Mutex<Vec<String>>> = Arc::default();
    let stopping = Arc::new(AtomicBool::new(false));
    let (host, host_handle) = Actor::spawn(
        None,
        Host,
        HostArgs {
            spec,
            sched_args: JobSchedulerArgs::new(conn.clone(), "sup"),
            qe_args,
            seen: seen.clone(),
            restarts: restarts.clone(),
            stopping: stopping.clone(),
        },
    )
    .await
    .unwrap();

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
    for (who, kill) in &faults {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (set, qe, sched) = refs(&host).await;
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
        while restarts.lock().unwrap().len() < injected.load(Ordering::Relaxed) as usize {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{who} was not restarted"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // Control messages through the public refs take effect after restarts.
    let (set, _, sched) = refs(&host).await;
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
    stopping.store(true, Ordering::SeqCst);

    let r = restarts.lock().unwrap().clone();
    assert_eq!(r.len(), faults.len(), "{r:?}");
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

    host.stop(None);
    let _ = host_handle.await;
}
