//! Live resharding on a real Redis Cluster (3 primaries + 3 replicas): while
//! a producer adds about 100 jobs/s to `{reshard}` and a worker tree, a job
//! scheduler and a QueueEvents reader work it, the queue's slot is migrated to
//! another primary (its keys in one `MIGRATE`) and back (10 keys per
//! `MIGRATE`, `redis-cli --cluster reshard`'s default). Every acknowledged
//! job ends completed or failed as asked, none is completed twice, the
//! events reader and the scheduler follow the slot, and the audit is clean.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::protocol::EventKind;
use echomq::{
    Connection, ConnectionConfig, Delivery, JobScheduler, JobSchedulerArgs, JobSchedulerMsg,
    QueueEvents, QueueEventsArgs, QueueEventsMsg, SchedulerSpec,
};
use echomq_integration_tests::cluster::{RedisCluster, SlotMove};
use echomq_integration_tests::topology::{Load, LoadOptions};
use echomq_integration_tests::NullSupervisor;
use fred::prelude::{StreamsInterface, Value};
use ractor::{call_t, Actor};

const QUEUE: &str = "{reshard}";

/// Waits until the scheduler's iterations processed reach `more` past now.
async fn wait_for_iterations(load: &Load, more: usize, limit: Duration) {
    let target = load.processed_with_prefix("repeat:") + more;
    let started = Instant::now();
    while load.processed_with_prefix("repeat:") < target {
        assert!(
            started.elapsed() < limit,
            "the scheduler made fewer than {more} iterations in {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Moves the queue's slot to `to` while the load runs, then waits until adds,
/// processing and the scheduler flow again on the new owner.
async fn move_under_load(
    cluster: &RedisCluster,
    load: &Load,
    to: u16,
    batch: usize,
) -> (SlotMove, Duration) {
    let key = format!("emq:{QUEUE}:wait");
    let moved = {
        // redis-cli blocks: off the runtime's threads.
        let key = key.clone();
        let cluster: &RedisCluster = cluster;
        tokio::task::block_in_place(|| cluster.move_slot_of(&key, to, batch))
    };
    assert_eq!(cluster.primary_of(&key), to);
    let resumed = load.wait_for_adds(50, Duration::from_secs(60)).await;
    wait_for_iterations(load, 2, Duration::from_secs(60)).await;
    (moved, resumed)
}

/// `completed` entries per job id in the queue's event stream.
async fn completed_in_stream(conn: &Connection) -> BTreeMap<String, u32> {
    let stream = format!("emq:{QUEUE}:events");
    let entries: Value = conn
        .pool()
        .xrange(stream.as_str(), "-", "+", None)
        .await
        .expect("XRANGE of the events stream");
    let mut counts = BTreeMap::new();
    let Value::Array(entries) = entries else {
        return counts;
    };
    for entry in entries {
        let Value::Array(mut parts) = entry else {
            continue;
        };
        let Some(Value::Array(fields)) = parts.pop() else {
            continue;
        };
        let fields: Vec<String> = fields.iter().filter_map(Value::as_string).collect();
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|kv| kv[0] == name)
                .and_then(|kv| kv.get(1).cloned())
        };
        if field("event").as_deref() == Some("completed") {
            if let Some(id) = field("jobId") {
                *counts.entry(id).or_default() += 1;
            }
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_queue_follows_its_slot_to_another_primary_and_back() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    let cluster = RedisCluster::start();
    let conn = Connection::connect(ConnectionConfig::with_url(cluster.url()))
        .await
        .expect("connect to the cluster");
    let key = format!("emq:{QUEUE}:wait");
    let home = cluster.primary_of(&key);
    let away = cluster
        .primaries()
        .into_iter()
        .find(|p| *p != home)
        .expect("another primary");

    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    // QueueEvents: its XREAD BLOCK runs on a dedicated client that must
    // follow the stream to the new owner.
    let mut qe_args = QueueEventsArgs::new(conn.clone(), QUEUE);
    qe_args.block = Duration::from_millis(500);
    let (qe, _) = Actor::spawn_linked(None, QueueEvents, qe_args, host.get_cell())
        .await
        .expect("queue events");
    let seen: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let sink = seen.clone();
    let subscriber = Box::new(move |d: Delivery| {
        if let Delivery::Event(e) = d {
            if let EventKind::Completed { job_id, .. } = e.kind {
                *sink.lock().unwrap().entry(job_id).or_default() += 1;
            }
        }
        true
    });
    call_t!(qe, QueueEventsMsg::SubscribeActor, 5000, subscriber).expect("subscribe");

    // Jobs of 10 ms, every 200th runs 2.5 s (its 2 s lock is renewed across
    // a move), every 40th fails; the scheduler adds an iteration every 200 ms.
    let load = Load::start_with(
        &conn,
        QUEUE,
        LoadOptions {
            fail_every: Some(40),
            slow_every: Some((200, Duration::from_millis(2500))),
            lock_duration: Duration::from_secs(2),
            concurrency: 8,
        },
    )
    .await;
    let (sched, _) = Actor::spawn_linked(
        None,
        JobScheduler,
        JobSchedulerArgs::new(conn.clone(), QUEUE),
        host.get_cell(),
    )
    .await
    .expect("job scheduler");
    call_t!(
        sched,
        JobSchedulerMsg::Upsert,
        5000,
        Box::new(SchedulerSpec::every("tick", Duration::from_millis(200)))
    )
    .expect("upsert")
    .expect("upsert accepted");
    load.wait_for_adds(200, Duration::from_secs(30)).await;
    wait_for_iterations(&load, 2, Duration::from_secs(30)).await;

    // Away in one MIGRATE, then back 10 keys at a time.
    let (there, resumed_there) = move_under_load(&cluster, &load, away, 100_000).await;
    load.wait_for_adds(100, Duration::from_secs(30)).await;
    let (back, resumed_back) = move_under_load(&cluster, &load, home, 10).await;
    load.wait_for_adds(100, Duration::from_secs(30)).await;

    sched.stop(None);
    let report = load.finish().await;
    eprintln!(
        "reshard: {there:?} (adds flowing {resumed_there:?} after), {back:?} \
         (adds flowing {resumed_back:?} after); {report:?}"
    );
    // Nothing lost, everything finished as asked.
    assert!(report.lost.is_empty(), "{report:?}");
    assert_eq!(report.completed + report.failed, report.acked, "{report:?}");
    assert_eq!(report.failed, report.acked / 40, "{report:?}");

    // Nothing completed twice, and the reader saw every completion.
    let in_stream = completed_in_stream(&conn).await;
    let twice: Vec<_> = in_stream.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "completed twice: {twice:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: BTreeSet<String> = seen.lock().unwrap().keys().cloned().collect();
        let missing: Vec<&String> = in_stream.keys().filter(|id| !got.contains(*id)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "QueueEvents missed {} completions, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen.lock().unwrap().values().all(|n| *n == 1),
        "QueueEvents delivered a completion twice"
    );

    let audit = echomq::audit::Audit::new(&conn, QUEUE)
        .run()
        .await
        .expect("audit");
    assert!(audit.is_consistent(), "{:?}", audit.violations);
    qe.stop(None);
    host.stop(None);
    conn.close().await;
}
