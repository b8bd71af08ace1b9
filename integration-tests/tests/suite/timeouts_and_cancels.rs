//! Job timeouts and cancelling a job from any process, against a real Redis:
//! a job past its timeout fails with a timeout reason (retried per its
//! attempts) and frees its slot even when its processor ignores the
//! cancellation; `Queue::cancel` from another connection stops a running
//! job's processor and ends the job as the caller chose, removes a job not
//! running yet, and takes effect whatever the holder: partitioned away, or a
//! BullMQ Node worker whose finish is then refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::queue::{CancelMode, CancelOutcome};
use echomq::{
    Connection, ConnectionConfig, JobContext, JobOptions, JobState, ProcessError, Queue,
    WorkerArgs, WorkerEvent, WorkerOptions, WorkerSetSpec,
};
use echomq_integration_tests::fault_proxy::{FaultMode, FaultProxy};
use echomq_integration_tests::{
    bullmq, events, wait_until, NodeChild, NullSupervisor, RedisServer,
};
use fred::prelude::*;
use ractor::{Actor, ActorRef};
use serde_json::{json, Value as Json};

async fn stream_with_ids(c: &Client, key: &str) -> Vec<(u64, String, Json)> {
    echomq_integration_tests::timeline::stamps(c, key)
        .await
        .into_iter()
        .map(|s| {
            let mut m = serde_json::Map::new();
            m.insert("event".into(), Json::String(s.name.clone()));
            for (k, v) in s.fields {
                m.insert(k, Json::String(v));
            }
            (s.at_ms, s.name, Json::Object(m))
        })
        .collect()
}

struct Host {
    host: ActorRef<()>,
    set: echomq::WorkerSet,
}

async fn start(args: WorkerArgs) -> Host {
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    Host { host, set }
}

impl Host {
    async fn stop(self) {
        self.set.close(Duration::from_secs(5)).await.unwrap();
        self.host.stop(None);
    }
}

/// A processor that sleeps `ms` and ignores its cancellation.
fn stubborn(ms: u64, finished: Arc<AtomicUsize>) -> Arc<dyn echomq::Processor> {
    echomq::processor_fn(move |_job: JobContext| {
        let finished = finished.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            finished.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ProcessError>(json!("too late"))
        }
    })
}

/// `timeout(200 ms)` on a job whose processor sleeps 5 s: the attempt fails
/// after about 200 ms (on Redis's clock, from its `active` event to its retry),
/// with a reason BullMQ Node reads as any `failedReason`, and is retried; the
/// second attempt times out too and the job fails for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_timeout_fails_with_a_timeout_reason_and_is_retried() {
    let (redis, _conn, q) = RedisServer::with_queue("to").await;
    let c = redis.client().await;
    let id = q
        .add(
            "slow",
            &json!({}),
            JobOptions::new()
                .attempts(2)
                .timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    let mut args = WorkerArgs::new(q.clone(), stubborn(5_000, finished.clone()));
    args.options = WorkerOptions::default().cancel_grace(Duration::from_millis(100));
    let host = start(args).await;
    wait_until("failed for good", Duration::from_secs(20), async || {
        q.get_job_state(&id).await.unwrap() == JobState::Failed
    })
    .await;
    let stream = stream_with_ids(&c, "emq:to:events").await;
    let active: Vec<u64> = stream
        .iter()
        .filter(|(_, e, _)| e == "active")
        .map(|(t, _, _)| *t)
        .collect();
    let failed: Vec<u64> = stream
        .iter()
        .filter(|(_, e, f)| e == "failed" || (e == "waiting" && f["prev"] == "failed"))
        .map(|(t, _, _)| *t)
        .collect();
    assert_eq!(active.len(), 2, "two attempts: {stream:?}");
    assert!(!failed.is_empty(), "{stream:?}");
    let first_attempt = failed[0] - active[0];
    eprintln!("first attempt ended {first_attempt} ms after it started (Redis's clock)");
    assert!(
        (200..2_500).contains(&first_attempt),
        "the timeout cut a 5 s run after {first_attempt} ms"
    );
    let read = bullmq("read-jobs", &redis.url(), "to", json!({ "ids": [id] }));
    let job = &read[id.as_str()];
    assert_eq!(
        job["failedReason"],
        format!("job {id} timed out after 200 ms")
    );
    assert_eq!(job["attemptsMade"], 2);
    assert!(job["stacktrace"][0]
        .as_str()
        .unwrap()
        .starts_with("TimeoutError: "));
    assert_eq!(
        job["opts"]["emqTimeout"], 200,
        "Node carries the option through"
    );
    assert_eq!(finished.load(Ordering::SeqCst), 0, "no run was let finish");
    host.stop().await;
}

/// A processor that ignores its cancellation does not keep its slot: with
/// concurrency 1 and the worker's default timeout, the next job runs once
/// the grace period after the timeout is over, while the abandoned run would
/// still be sleeping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stubborn_processor_frees_its_slot_after_the_grace_period() {
    let (_redis, _conn, q) = RedisServer::with_queue("slot").await;
    let first = q.add("a", &json!({}), JobOptions::new()).await.unwrap();
    let second = q.add("b", &json!({}), JobOptions::new()).await.unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    let mut args = WorkerArgs::new(q.clone(), stubborn(30_000, finished.clone()));
    args.options = WorkerOptions::default()
        .default_timeout(Duration::from_millis(300))
        .cancel_grace(Duration::from_millis(200));
    let host = start(args).await;
    wait_until(
        "both failed by their timeout",
        Duration::from_secs(10),
        async || {
            q.get_job_state(&first).await.unwrap() == JobState::Failed
                && q.get_job_state(&second).await.unwrap() == JobState::Failed
        },
    )
    .await;
    assert_eq!(finished.load(Ordering::SeqCst), 0);
    let job = q.get_job(&second).await.unwrap().unwrap();
    assert_eq!(
        job.failed_reason.as_deref(),
        Some(format!("job {second} timed out after 300 ms").as_str())
    );
    host.stop().await;
}

/// A processor that waits for its cancellation and counts it.
fn patient(
    cancelled: Arc<AtomicUsize>,
    at: Arc<std::sync::Mutex<Option<Instant>>>,
) -> Arc<dyn echomq::Processor> {
    echomq::processor_fn(move |job: JobContext| {
        let (cancelled, at) = (cancelled.clone(), at.clone());
        async move {
            if job.attempt() > 1 {
                return Ok(json!("second attempt"));
            }
            tokio::select! {
                _ = job.cancelled() => {
                    *at.lock().unwrap() = Some(Instant::now());
                    cancelled.fetch_add(1, Ordering::SeqCst);
                }
                _ = tokio::time::sleep(Duration::from_secs(60)) => {}
            }
            Ok::<_, ProcessError>(json!("not stored"))
        }
    })
}

/// A cancel from another connection reaches the worker holding the job: its
/// processor is cancelled at once (the holder hears of it on the cancel
/// channel, long before its next renewal), the job fails for good with the
/// reason; with `Retry` it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_connection_stops_the_running_job() {
    let (redis, _conn, q) = RedisServer::with_queue("cx").await;
    let cancelled = Arc::new(AtomicUsize::new(0));
    let at = Arc::new(std::sync::Mutex::new(None));
    let (tx, mut events) = tokio::sync::mpsc::channel(100);
    let mut args = WorkerArgs::new(q.clone(), patient(cancelled.clone(), at.clone()));
    args.events = Some(tx);
    let host = start(args).await;
    // The canceller: another connection, as another process would have.
    let other = Connection::connect(ConnectionConfig::with_url(redis.url()))
        .await
        .unwrap();
    let oq = Queue::new(&other, "cx").await.unwrap();
    for mode in [CancelMode::Fail, CancelMode::Retry] {
        let id = q
            .add("long", &json!({}), JobOptions::new().attempts(2))
            .await
            .unwrap();
        wait_until("the job running", Duration::from_secs(10), async || {
            q.get_job_state(&id).await.unwrap() == JobState::Active
        })
        .await;
        let before = cancelled.load(Ordering::SeqCst);
        let sent = Instant::now();
        let outcome = oq
            .cancel(&id, "stopped by an operator", mode)
            .await
            .unwrap();
        assert_eq!(
            outcome,
            CancelOutcome::Stopped {
                retrying: mode == CancelMode::Retry
            }
        );
        let c2 = cancelled.clone();
        wait_until(
            "the processor cancelled",
            Duration::from_secs(5),
            async || c2.load(Ordering::SeqCst) == before + 1,
        )
        .await;
        let latency = at.lock().unwrap().unwrap().saturating_duration_since(sent);
        eprintln!("{mode:?}: processor cancelled {latency:?} after the cancel call began");
        // Well inside one renew window (15 s): it came by the channel.
        assert!(latency < Duration::from_secs(5), "{latency:?}");
        match mode {
            CancelMode::Fail => {
                assert_eq!(q.get_job_state(&id).await.unwrap(), JobState::Failed);
                let job = q.get_job(&id).await.unwrap().unwrap();
                assert_eq!(job.failed_reason.as_deref(), Some("stopped by an operator"));
            }
            CancelMode::Retry => {
                wait_until("the retry completed", Duration::from_secs(10), async || {
                    q.get_job_state(&id).await.unwrap() == JobState::Completed
                })
                .await;
                let job = q.get_job(&id).await.unwrap().unwrap();
                assert_eq!(job.return_value, Some(json!("second attempt")));
            }
        }
    }
    let mut cancels = 0;
    while let Ok(e) = events.try_recv() {
        if matches!(e, WorkerEvent::Cancelled { .. }) {
            cancels += 1;
        }
        assert!(!matches!(e, WorkerEvent::LockLost { .. }), "{e:?}");
    }
    assert_eq!(cancels, 2);
    host.stop().await;
}

/// A cancel of a job not running yet removes it; of a finished one, or of an
/// unknown id, changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_waiting_or_delayed_job_removes_it() {
    let (redis, _conn, q) = RedisServer::with_queue("cw").await;
    let c = redis.client().await;
    let waiting = q.add("w", &json!({}), JobOptions::new()).await.unwrap();
    let delayed = q
        .add(
            "d",
            &json!({}),
            JobOptions::new().delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let prioritized = q
        .add("p", &json!({}), JobOptions::new().priority(3))
        .await
        .unwrap();
    for id in [&waiting, &delayed, &prioritized] {
        assert_eq!(
            q.cancel(id, "not wanted", CancelMode::Fail).await.unwrap(),
            CancelOutcome::Removed
        );
        assert_eq!(q.get_job_state(id).await.unwrap(), JobState::Unknown);
    }
    let left: u64 = c
        .exists(vec!["emq:cw:wait", "emq:cw:delayed", "emq:cw:prioritized"])
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(
        q.cancel("404", "x", CancelMode::Fail).await.unwrap(),
        CancelOutcome::NotFound
    );
}

/// The holder is cut off from Redis (its connection blackholed) when the
/// cancel comes: the cancel ends the job anyway; once the holder is back it
/// finds its lock gone, stops the processor and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_takes_effect_while_the_holder_is_partitioned_away() {
    let redis = RedisServer::start();
    let direct = redis.connect().await;
    let c = redis.client().await;
    let proxy = FaultProxy::start(redis.port()).await;
    let mut config = ConnectionConfig::with_url(proxy.url());
    config.command_timeout = Duration::from_millis(500);
    let through = Connection::connect(config).await.unwrap();
    let q = Queue::new(&through, "cp").await.unwrap();
    let dq = Queue::new(&direct, "cp").await.unwrap();
    let cancelled = Arc::new(AtomicUsize::new(0));
    let at = Arc::new(std::sync::Mutex::new(None));
    let mut args = WorkerArgs::new(q.clone(), patient(cancelled.clone(), at.clone()));
    args.options = WorkerOptions::default()
        .lock_duration(Duration::from_millis(1_000))
        .watchdog_interval(Duration::from_millis(300));
    let host = start(args).await;
    let id = dq.add("long", &json!({}), JobOptions::new()).await.unwrap();
    wait_until("the job running", Duration::from_secs(10), async || {
        dq.get_job_state(&id).await.unwrap() == JobState::Active
    })
    .await;
    proxy.set_mode(FaultMode::Blackhole);
    assert_eq!(
        dq.cancel(&id, "cancelled while away", CancelMode::Fail)
            .await
            .unwrap(),
        CancelOutcome::Stopped { retrying: false }
    );
    assert_eq!(dq.get_job_state(&id).await.unwrap(), JobState::Failed);
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        0,
        "the holder has not heard yet"
    );
    proxy.set_mode(FaultMode::Pass);
    let c2 = cancelled.clone();
    wait_until(
        "the holder stopped its processor",
        Duration::from_secs(20),
        async || c2.load(Ordering::SeqCst) == 1,
    )
    .await;
    assert_eq!(dq.get_job_state(&id).await.unwrap(), JobState::Failed);
    let job = dq.get_job(&id).await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some("cancelled while away"));
    let stream = events(&c, "emq:cp:events").await;
    assert!(
        !stream.iter().any(|(e, _)| e == "completed"),
        "the holder finished nothing: {stream:?}"
    );
    host.stop().await;
}

/// A job held by a BullMQ Node worker: the cancel fails it with the holder's
/// own token, so Node's processor runs to its end but its finish is refused
/// (the lock is gone) and the job stays failed with the cancel's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_job_held_by_bullmq_node_refuses_its_finish() {
    let (redis, _conn, q) = RedisServer::with_queue("cn").await;
    let c = redis.client().await;
    let id = q
        .add(
            "n",
            &json!({ "mode": "sleep", "ms": 1500, "ret": "done" }),
            JobOptions::new(),
        )
        .await
        .unwrap();
    let mut node = NodeChild::spawn("worker.js", &redis.url(), "cn", json!({ "verbose": true }));
    node.wait_line(Duration::from_secs(20), |v| v["ev"] == "start");
    assert_eq!(
        q.cancel(&id, "cancelled under Node", CancelMode::Fail)
            .await
            .unwrap(),
        CancelOutcome::Stopped { retrying: false }
    );
    // Node's processor ends after its 1.5 s; its moveToFinished is refused.
    let refused = node.wait_line(Duration::from_secs(20), |v| {
        v["ev"] == "error" || v["ev"] == "failed" || v["ev"] == "completed"
    });
    eprintln!("Node reported: {refused}");
    node.finish();
    assert_eq!(q.get_job_state(&id).await.unwrap(), JobState::Failed);
    let job = q.get_job(&id).await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some("cancelled under Node"));
    assert!(job.return_value.is_none());
    let stream = events(&c, "emq:cn:events").await;
    assert!(!stream.iter().any(|(e, _)| e == "completed"), "{stream:?}");
}
