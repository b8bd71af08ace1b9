//! Groups (issue 31, docs/groups.md) under faults, with group jobs in
//! flight: a SIGKILLed worker process, a Redis restart from its fsynced AOF,
//! and a Redis Cluster. After each: added = completed + failed + pending
//! (group sets included), no job finished twice (the events stream), every
//! group slot freed and the paged audit's group checks clean. Every wait is
//! on observed state under one deadline; each test fails when its fault did
//! not meet jobs in flight.

use std::collections::HashMap;
use std::time::Duration;

use echomq::groups::{GroupDefaults, GroupFeeder, GroupFeederArgs, GroupFeederMsg, GroupOptions};
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    Connection, ConnectionConfig, JobOptions, NewJob, Queue, RetryPolicy, WorkerArgs, WorkerMsg,
    WorkerOptions, WorkerSetSpec,
};
use echomq_integration_tests::assert_consistent;
use echomq_integration_tests::cluster::RedisCluster;
use echomq_integration_tests::restartable::{wait_until_closed, RestartableRedis};
use echomq_integration_tests::{wait_until, NodeChild, NullSupervisor, RedisServer};
use fred::prelude::{Client, HashesInterface, ListInterface, SortedSetsInterface};
use ractor::{call_t, Actor, ActorRef};
use serde_json::{json, Value as Json};

const WORKER_PROCESS: &str = env!("CARGO_BIN_EXE_worker_process");

/// `per_group` jobs in each of `groups` groups `{tag}0…`, as `data` says.
async fn add_groups(queue: &Queue, tag: &str, groups: usize, per_group: usize, data: Json) {
    for g in 0..groups {
        let jobs = (0..per_group)
            .map(|_| NewJob {
                name: "g".into(),
                data: data.clone(),
                options: JobOptions::new().group(GroupOptions::new(format!("{tag}{g}"))),
            })
            .collect();
        queue.add_bulk(jobs).await.unwrap();
    }
}

async fn feeder(conn: &Connection, queue: &str, concurrency: u64) -> ActorRef<GroupFeederMsg> {
    let args = GroupFeederArgs::new(conn.clone(), queue)
        .max_ready(16)
        .block(Duration::from_millis(100))
        .sweep_interval(Duration::from_millis(500))
        .defaults(GroupDefaults {
            concurrency: Some(concurrency),
            limit: None,
        });
    Actor::spawn(None, GroupFeeder, args).await.unwrap().0
}

/// An in-process worker set (Worker, LockManager, StalledChecker) with fast
/// stalled checks.
async fn rust_worker(queue: &Queue, concurrency: usize, lock: Duration) -> echomq::WorkerSet {
    let processor =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(concurrency)
        .lock_duration(lock)
        .stalled_interval(Duration::from_millis(300))
        .drain_delay(Duration::from_millis(200))
        .run_retry_delay(Duration::from_millis(200));
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap()
}

/// `(event, jobId)` of every entry of the queue's events stream, in order.
async fn stream(c: &Client, queue: &str) -> Vec<(String, String)> {
    echomq_integration_tests::events(c, &format!("emq:{queue}:events"))
        .await
        .into_iter()
        .map(|(event, fields)| {
            let id = fields
                .into_iter()
                .find(|(f, _)| f == "jobId")
                .map(|(_, v)| v)
                .unwrap_or_default();
            (event, id)
        })
        .collect()
}

/// The accounting every test ends with: `n` added = completed + failed +
/// pending, each job finished once (its `completed`/`failed` entries),
/// every group empty and its slots freed, the audit clean.
async fn assert_accounted(
    conn: &Connection,
    c: &Client,
    queue: &Queue,
    tag: &str,
    groups: usize,
    n: u64,
) {
    let name = queue.name().to_owned();
    let counts = queue.counts().await.unwrap();
    let mut group_pending = 0;
    for g in 0..groups {
        let info = queue.groups().counts(&format!("{tag}{g}")).await.unwrap();
        assert_eq!(info.active, 0, "group {tag}{g} still holds slots");
        group_pending += info.waiting + info.active;
    }
    assert_eq!(
        n,
        counts.completed + counts.failed + counts.pending() + group_pending,
        "added = completed + failed + pending ({counts:?}, {group_pending} in groups)"
    );
    assert_eq!(counts.completed + counts.failed, n, "every job finished");
    let mut finishes: HashMap<String, u32> = HashMap::new();
    for (event, id) in stream(c, &name).await {
        if event == "completed" || event == "failed" {
            *finishes.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = finishes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "finished twice: {twice:?}");
    assert_eq!(finishes.len() as u64, n, "one finish per job in the stream");
    let open: u64 = c.hlen(format!("emq:{name}:gr:jobs")).await.unwrap();
    assert_eq!(open, 0, "every released job's slot was freed");
    assert_consistent(conn, &name).await;
}

/// A worker process SIGKILLed while it runs group jobs: their locks run
/// out, the stalled check moves them back to wait (they keep their group
/// slots), another worker finishes them; nothing lost, nothing finished twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_process_holding_group_jobs_loses_nothing() {
    const GROUPS: usize = 6;
    const PER_GROUP: usize = 30;
    const N: u64 = (GROUPS * PER_GROUP) as u64;
    const CONCURRENCY: u64 = 2;
    let (redis, conn, queue) = RedisServer::with_queue("gkill").await;
    let c = redis.client().await;
    add_groups(
        &queue,
        "k",
        GROUPS,
        PER_GROUP,
        json!({"mode": "sleep", "ms": 150}),
    )
    .await;
    let f = feeder(&conn, "gkill", CONCURRENCY).await;
    let mut child = NodeChild::spawn_rust_worker(
        WORKER_PROCESS,
        &redis.url(),
        "gkill",
        json!({"concurrency": 8, "verbose": true, "lockDuration": 1000,
               "stalledInterval": 300, "drainDelay": 200}),
    );
    // Kill it once it has started a few jobs and holds some.
    for _ in 0..12 {
        child.wait_line(Duration::from_secs(30), |v| v["ev"] == "start");
    }
    child.kill();
    // The dead process cannot move a job: what is active now is what it held.
    let held: Vec<String> = c.lrange("emq:gkill:active", 0, -1).await.unwrap();
    assert!(
        !held.is_empty(),
        "the kill met no active job: the test proves nothing"
    );
    for id in &held {
        let gid: Option<String> = c.hget("emq:gkill:gr:jobs", id).await.unwrap();
        assert!(gid.is_some(), "held job {id} holds a group slot");
    }
    let done_at_kill: u64 = c.zcard("emq:gkill:completed").await.unwrap();
    assert!(done_at_kill < N, "killed before the work was done");

    let set = rust_worker(&queue, 8, Duration::from_secs(5)).await;
    wait_until(
        "every group job finishes",
        Duration::from_secs(90),
        async || {
            let done: u64 = c.zcard("emq:gkill:completed").await.unwrap();
            let failed: u64 = c.zcard("emq:gkill:failed").await.unwrap();
            done + failed == N
        },
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    // The last finishes are accounted from the stream or the sweep page.
    wait_until("every slot freed", Duration::from_secs(10), async || {
        c.hlen::<u64, _>("emq:gkill:gr:jobs").await.unwrap() == 0
    })
    .await;
    f.stop(None);

    // The held jobs were recovered by the stalled check, not re-released.
    let entries = stream(&c, "gkill").await;
    for id in &held {
        assert!(
            entries.iter().any(|(e, j)| e == "stalled" && j == id),
            "held job {id} was recovered as stalled"
        );
        let released = entries
            .iter()
            .filter(|(e, j)| e == "waiting" && j == id)
            .count();
        assert!(released >= 1);
    }
    // The group bound held across the kill: a job counts from its start to
    // its finish or its recovery.
    let group_of = group_of(&c, "gkill", "k", GROUPS).await;
    assert_eq!(
        group_of.len() as u64,
        N,
        "every finished job names its group"
    );
    let mut running: HashMap<&str, u64> = HashMap::new();
    let mut peak: HashMap<&str, u64> = HashMap::new();
    for (event, id) in &entries {
        let Some(g) = group_of.get(id) else { continue };
        let r = running.entry(g.as_str()).or_default();
        match event.as_str() {
            "active" => {
                *r += 1;
                let p = peak.entry(g.as_str()).or_default();
                *p = (*p).max(*r);
            }
            "completed" | "failed" | "stalled" => *r = r.saturating_sub(1),
            _ => {}
        }
    }
    eprintln!(
        "killed holding {} group jobs at {done_at_kill} of {N} completed; peaks {peak:?}",
        held.len()
    );
    assert!(peak.values().all(|p| *p <= CONCURRENCY), "{peak:?}");
    assert_accounted(&conn, &c, &queue, "k", GROUPS, N).await;
}

/// Group id (`{tag}0…`) of every finished job, read from its stored `opts.group`.
async fn group_of(c: &Client, queue: &str, tag: &str, groups: usize) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for kind in ["completed", "failed"] {
        let ids: Vec<String> = c
            .zrange(
                format!("emq:{queue}:{kind}"),
                0,
                -1,
                None,
                false,
                None,
                false,
            )
            .await
            .unwrap();
        for id in ids {
            let opts: Option<String> = c.hget(format!("emq:{queue}:{id}"), "opts").await.unwrap();
            let gid = opts
                .and_then(|o| serde_json::from_str::<Json>(&o).ok())
                .and_then(|o| o["group"]["id"].as_str().map(str::to_owned));
            if let Some(gid) = gid.filter(|g| {
                g.strip_prefix(tag)
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|n| n < groups)
            }) {
                out.insert(id, gid);
            }
        }
    }
    out
}

/// Redis killed and restarted from its fsynced AOF on the same port while
/// group jobs are released and running: the feeder and the worker ride the
/// outage out; the slots come back consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_redis_with_group_jobs_in_flight_loses_nothing() {
    const GROUPS: usize = 5;
    const PER_GROUP: usize = 40;
    const N: u64 = (GROUPS * PER_GROUP) as u64;
    let mut redis = RestartableRedis::start_now();
    let conn = Connection::connect_with_retry(
        ConnectionConfig::with_url(redis.url()),
        &RetryPolicy::default(),
    )
    .await
    .unwrap();
    let c = conn.pool().next().clone();
    let queue = Queue::new(&conn, "gout").await.unwrap();
    add_groups(
        &queue,
        "o",
        GROUPS,
        PER_GROUP,
        json!({"mode": "sleep", "ms": 100}),
    )
    .await;
    let f = feeder(&conn, "gout", 2).await;
    let set = rust_worker(&queue, 8, Duration::from_secs(2)).await;
    wait_until(
        "some jobs done and group jobs in flight",
        Duration::from_secs(30),
        async || {
            let done: u64 = c.zcard("emq:gout:completed").await.unwrap();
            let active: u64 = c.llen("emq:gout:active").await.unwrap();
            done >= 20 && active >= 2
        },
    )
    .await;
    let in_flight: u64 = c.hlen("emq:gout:gr:jobs").await.unwrap();
    let done_before: u64 = c.zcard("emq:gout:completed").await.unwrap();
    redis.stop();
    wait_until_closed(redis.port(), Duration::from_secs(5));
    assert!(in_flight > 0, "no group job was in flight at the outage");
    assert!(done_before < N, "the outage came before the work was done");
    redis.start();
    wait_until(
        "every group job finishes",
        Duration::from_secs(120),
        async || {
            let done: u64 = c.zcard("emq:gout:completed").await.unwrap_or(0);
            let failed: u64 = c.zcard("emq:gout:failed").await.unwrap_or(0);
            done + failed == N
        },
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    wait_until("every slot freed", Duration::from_secs(10), async || {
        c.hlen::<u64, _>("emq:gout:gr:jobs").await.unwrap() == 0
    })
    .await;
    f.stop(None);
    eprintln!("outage with {in_flight} group jobs in flight at {done_before} of {N} completed");
    assert_accounted(&conn, &c, &queue, "o", GROUPS, N).await;
}

/// Groups on a Redis Cluster: one queue's group keys share its hash tag, so
/// every group script runs on the queue's primary; each group holds its own
/// concurrency and a small group added last is served within its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_on_a_cluster_hold_their_concurrency_and_round_robin() {
    const PER_GROUP: usize = 20;
    const SMALL: usize = 5;
    let cluster = RedisCluster::start();
    let conn = Connection::connect(ConnectionConfig::with_url(cluster.url()))
        .await
        .expect("connect to the cluster");
    let c = conn.pool().next().clone();
    let name = "{gc}";
    let queue = Queue::new(&conn, name).await.unwrap();
    let limits = [1u64, 2, 3];
    for (g, limit) in limits.iter().enumerate() {
        queue
            .groups()
            .set_concurrency(&format!("c{g}"), *limit)
            .await
            .unwrap();
    }
    add_groups(
        &queue,
        "c",
        limits.len(),
        PER_GROUP,
        json!({"mode": "sleep", "ms": 30}),
    )
    .await;
    // The small tenant arrives last, after the others' backlog.
    let small: Vec<NewJob> = (0..SMALL)
        .map(|_| NewJob {
            name: "g".into(),
            data: json!({"mode": "sleep", "ms": 0}),
            options: JobOptions::new().group(GroupOptions::new("s")),
        })
        .collect();
    let small_ids = queue.add_bulk(small).await.unwrap();
    let total = (limits.len() * PER_GROUP + SMALL) as u64;
    let wait_key = format!("emq:{name}:wait");
    let llen: u64 = c.llen(&wait_key).await.unwrap();
    assert_eq!(llen, 0, "group jobs wait in their groups");
    let f = feeder(&conn, name, 8).await;
    let set = rust_worker(&queue, 8, Duration::from_secs(5)).await;
    let completed = format!("emq:{name}:completed");
    wait_until(
        "every group job completes",
        Duration::from_secs(60),
        async || {
            let done: u64 = c.zcard(&completed).await.unwrap();
            done == total
        },
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    wait_until("every slot freed", Duration::from_secs(10), async || {
        c.hlen::<u64, _>(format!("emq:{name}:gr:jobs"))
            .await
            .unwrap()
            == 0
    })
    .await;
    f.stop(None);

    let group_of = group_of(&c, name, "c", limits.len()).await;
    let entries = stream(&c, name).await;
    let mut running = [0u64; 3];
    let mut peak = [0u64; 3];
    let mut others_before_small_last = 0;
    let mut small_started = 0;
    for (event, id) in &entries {
        if small_ids.contains(id) {
            if event == "active" {
                small_started += 1;
            }
            continue;
        }
        let Some(g) = group_of.get(id) else { continue };
        let g: usize = g[1..].parse().unwrap();
        match event.as_str() {
            "active" => {
                running[g] += 1;
                peak[g] = peak[g].max(running[g]);
                if small_started < SMALL {
                    others_before_small_last += 1;
                }
            }
            "completed" | "failed" => running[g] = running[g].saturating_sub(1),
            _ => {}
        }
    }
    eprintln!(
        "cluster: peaks {peak:?} under {limits:?}; {others_before_small_last} jobs of the \
         others started before the small group's last"
    );
    assert_eq!(
        peak, limits,
        "each group ran at most, and reached, its concurrency"
    );
    assert!(
        others_before_small_last <= 4 * SMALL,
        "the small group waited behind {others_before_small_last} jobs"
    );
    assert_accounted(&conn, &c, &queue, "c", limits.len(), total).await;
}
