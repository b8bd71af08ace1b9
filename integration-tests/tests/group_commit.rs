//! Group commit in the worker (docs/decisions.md §16): a burst of finishes at
//! concurrency 16 goes in fewer script calls than jobs, part of them in
//! moveJobsToFinished; a lone job at concurrency 1 always goes alone, as one
//! moveToFinished; with group commit off nothing is grouped. Which script
//! each call ran is read on Redis's side: the slow log, set to log every
//! command, keeps each EVALSHA with its SHA.

use std::collections::HashSet;
use std::time::Duration;

use echomq::protocol::ScriptId;
use echomq::worker::{processor_fn, spawn_linked, JobContext, ProcessError};
use echomq::{
    JobOptions, LockManagerMsg, NewJob, Queue, WorkerArgs, WorkerEvent, WorkerMsg, WorkerOptions,
};
use echomq_integration_tests::state::cmd;
use echomq_integration_tests::{NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::{Actor, ActorRef};
use serde_json::json;

struct Running {
    worker: ActorRef<WorkerMsg>,
    _lm: ActorRef<LockManagerMsg>,
    events: tokio::sync::mpsc::Receiver<WorkerEvent>,
    _host: ActorRef<()>,
}

async fn start(queue: &Queue, options: WorkerOptions) -> Running {
    let processor = processor_fn(|job: JobContext| async move {
        // A yield lets the other slots finish around the same time, as real
        // work of equal length would.
        tokio::task::yield_now().await;
        if job.data()["fail"] == json!(true) {
            return Err(ProcessError::unrecoverable("told to fail"));
        }
        Ok::<_, ProcessError>(json!({ "i": job.data()["i"] }))
    });
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(100_000);
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options = options;
    args.events = Some(tx);
    let (worker, lm) = spawn_linked(host.get_cell(), args).await.unwrap();
    Running {
        worker,
        _lm: lm,
        events: rx,
        _host: host,
    }
}

/// Every command from now on goes to the slow log.
async fn log_every_command(c: &Client) {
    let _: String = cmd(
        c,
        "CONFIG",
        vec!["SET".into(), "slowlog-max-len".into(), "1000000".into()],
    )
    .await;
    let _: String = cmd(
        c,
        "CONFIG",
        vec!["SET".into(), "slowlog-log-slower-than".into(), "0".into()],
    )
    .await;
    let _: String = cmd(c, "SLOWLOG", vec!["RESET".into()]).await;
}

/// EVALSHA calls of `script` in the slow log.
async fn calls_of(c: &Client, script: ScriptId) -> usize {
    let sha = script.def().unwrap().sha1;
    let log: Value = cmd(c, "SLOWLOG", vec!["GET".into(), "1000000".into()]).await;
    let Value::Array(entries) = log else {
        panic!("SLOWLOG GET: {log:?}")
    };
    entries
        .iter()
        .filter(|e| {
            let Value::Array(parts) = e else { return false };
            let Some(Value::Array(args)) = parts.get(3) else {
                return false;
            };
            let text = |v: &Value| v.as_str().map(|s| s.to_string()).unwrap_or_default();
            args.len() > 1
                && text(&args[0]).eq_ignore_ascii_case("evalsha")
                && text(&args[1]) == sha
        })
        .count()
}

async fn add_jobs(q: &Queue, n: usize, fail_every: usize) {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob {
            name: "n".into(),
            data: json!({ "i": i, "fail": fail_every > 0 && i % fail_every == 0 }),
            options: JobOptions::new(),
        })
        .collect();
    for chunk in jobs.chunks(500) {
        q.add_bulk(chunk.to_vec()).await.unwrap();
    }
}

/// Drains the worker's events until every job has its one completion or
/// failure; answers (completed ids, failed ids).
async fn outcomes(w: &mut Running, n: usize) -> (HashSet<String>, HashSet<String>) {
    let mut completed = HashSet::new();
    let mut failed = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while completed.len() + failed.len() < n {
        let event = tokio::time::timeout_at(deadline, w.events.recv())
            .await
            .expect("every job finishes within 60 s")
            .expect("the worker's events");
        match event {
            WorkerEvent::Completed { job_id } => assert!(completed.insert(job_id), "twice"),
            WorkerEvent::Failed {
                job_id, retrying, ..
            } => {
                assert!(!retrying);
                assert!(failed.insert(job_id), "failed twice");
            }
            WorkerEvent::LockLost { job_id } | WorkerEvent::FinishRejected { job_id } => {
                panic!("job {job_id} lost its finish")
            }
            _ => {}
        }
    }
    (completed, failed)
}

async fn stop(w: Running) {
    w.worker.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_at_concurrency_16_finishes_in_fewer_calls_than_jobs() {
    const N: usize = 600;
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "gc16").await.unwrap();
    add_jobs(&q, N, 7).await;
    log_every_command(&c).await;
    let mut w = start(
        &q,
        WorkerOptions::default()
            .concurrency(16)
            .drain_delay(Duration::from_millis(500)),
    )
    .await;
    let (completed, failed) = outcomes(&mut w, N).await;
    stop(w).await;
    assert_eq!(completed.len() + failed.len(), N);
    assert_eq!(failed.len(), N.div_ceil(7), "every seventh job fails");
    let completed_set: i64 = c.zcard("emq:gc16:completed").await.unwrap();
    let failed_set: i64 = c.zcard("emq:gc16:failed").await.unwrap();
    assert_eq!(
        (completed_set as usize, failed_set as usize),
        (completed.len(), failed.len())
    );
    let singles = calls_of(&c, ScriptId::MoveToFinished).await;
    let groups = calls_of(&c, ScriptId::MoveJobsToFinished).await;
    assert!(groups > 0, "no finish was grouped ({singles} single calls)");
    assert!(
        singles + groups < N,
        "{N} finishes took {singles} single and {groups} grouped calls"
    );
    echomq_integration_tests::assert_consistent(&conn, "gc16").await;
    eprintln!("c16: {N} jobs finished in {singles} moveToFinished + {groups} moveJobsToFinished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_job_at_concurrency_1_always_goes_alone() {
    const N: usize = 40;
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "gc1").await.unwrap();
    log_every_command(&c).await;
    let mut w = start(
        &q,
        WorkerOptions::default()
            .concurrency(1)
            .drain_delay(Duration::from_millis(500)),
    )
    .await;
    // One job at a time, each added once the previous one is done, and a
    // burst the single slot takes one by one (fetch-next).
    for i in 0..N / 2 {
        q.add("n", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap();
        let (done, _) = outcomes(&mut w, 1).await;
        assert_eq!(done.len(), 1);
    }
    add_jobs(&q, N / 2, 0).await;
    let (done, _) = outcomes(&mut w, N / 2).await;
    assert_eq!(done.len(), N / 2);
    stop(w).await;
    assert_eq!(calls_of(&c, ScriptId::MoveJobsToFinished).await, 0);
    assert_eq!(calls_of(&c, ScriptId::MoveToFinished).await, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_off_sends_every_finish_alone() {
    const N: usize = 300;
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "gc0").await.unwrap();
    add_jobs(&q, N, 0).await;
    log_every_command(&c).await;
    let mut w = start(
        &q,
        WorkerOptions::default()
            .concurrency(16)
            .group_commit(0)
            .drain_delay(Duration::from_millis(500)),
    )
    .await;
    let (done, _) = outcomes(&mut w, N).await;
    stop(w).await;
    assert_eq!(done.len(), N);
    assert_eq!(calls_of(&c, ScriptId::MoveJobsToFinished).await, 0);
    assert_eq!(calls_of(&c, ScriptId::MoveToFinished).await, N);
}

/// Every connection reset again and again while a c16 burst finishes in
/// groups: replies of group calls are lost, each slot resends its finish,
/// and still every job completes exactly once, none reported as a lost lock
/// (a resend that finds its own first send applied is taken as done). Jobs a
/// lost reply's fetch-next took are recovered by the stalled checker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_of_group_calls_lose_no_job_and_finish_none_twice() {
    use echomq_integration_tests::fault_proxy::{FaultMode, FaultProxy};
    const N: usize = 800;
    const RESETS: usize = 30;
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port()).await;
    let c = redis.client().await;
    let mut config = echomq::ConnectionConfig::with_url(proxy.url());
    config.command_timeout = Duration::from_secs(2);
    let conn = echomq::Connection::connect(config).await.unwrap();
    let q = Queue::new(&conn, "gcf").await.unwrap();
    add_jobs(&q, N, 0).await;
    log_every_command(&c).await;

    let processor = processor_fn(|job: JobContext| async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok::<_, ProcessError>(json!({ "i": job.data()["i"] }))
    });
    let (tx, mut rx) = tokio::sync::mpsc::channel(100_000);
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(16)
        .drain_delay(Duration::from_millis(500));
    // Short enough that jobs a lost fetch-next took come back soon, long
    // enough that renewals across the storm keep every held lock.
    args.options.lock_duration = Duration::from_secs(5);
    args.options.stalled_interval = Duration::from_secs(2);
    args.options.max_stalled_count = 10;
    args.events = Some(tx);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = echomq::WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    // Replies held in the proxy a while: a reset then often comes after
    // Redis ran a call and before its reply arrived.
    proxy.set_mode(FaultMode::Latency {
        base: Duration::from_millis(4),
        jitter: Duration::from_millis(2),
    });

    let mut completed = HashSet::new();
    let mut lock_lost = 0;
    let mut resets_mid_run = 0;
    let accepted_before = proxy.accepted();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut next_reset = tokio::time::Instant::now() + Duration::from_millis(60);
    while completed.len() < N {
        tokio::select! {
            event = tokio::time::timeout_at(deadline, rx.recv()) => {
                let Ok(event) = event else {
                    let wait: i64 = c.llen("emq:gcf:wait").await.unwrap();
                    let active: Vec<String> = c.lrange("emq:gcf:active", 0, -1).await.unwrap();
                    panic!("{} of {N} completed after 90 s; wait {wait}, active {active:?}", completed.len());
                };
                match event.expect("events") {
                    WorkerEvent::Completed { job_id } => {
                        assert!(completed.insert(job_id.clone()), "{job_id} completed twice")
                    }
                    WorkerEvent::LockLost { .. } => lock_lost += 1,
                    WorkerEvent::Failed { job_id, reason, .. } => {
                        panic!("{job_id} failed: {reason}")
                    }
                    _ => {}
                }
            }
            _ = tokio::time::sleep_until(next_reset) => {
                // A bounded storm: a worker whose connections keep failing
                // long enough gives up (its host's supervisor restarts it).
                if resets_mid_run < RESETS {
                    proxy.reset_all();
                    resets_mid_run += 1;
                    if resets_mid_run == RESETS {
                        proxy.set_mode(FaultMode::Pass);
                    }
                }
                next_reset = tokio::time::Instant::now() + Duration::from_millis(60);
            }
        }
    }
    set.worker.stop(None);
    host.stop(None);
    let completed_set: i64 = c.zcard("emq:gcf:completed").await.unwrap();
    assert_eq!(completed_set as usize, N, "every job in completed once");
    let failed: i64 = c.zcard("emq:gcf:failed").await.unwrap();
    assert_eq!(failed, 0);
    assert!(
        resets_mid_run >= 3 && proxy.accepted() > accepted_before + 3,
        "the resets hit live connections ({resets_mid_run} resets, {} reconnections)",
        proxy.accepted() - accepted_before
    );
    let groups = calls_of(&c, ScriptId::MoveJobsToFinished).await;
    eprintln!(
        "{resets_mid_run} resets, {} reconnections, {lock_lost} lock-lost reports; {groups} group calls logged",
        proxy.accepted() - accepted_before
    );
    assert!(groups > 0, "no group call was made");
    assert_eq!(
        lock_lost, 0,
        "a resend of an applied finish is no lost lock"
    );
}
