//! Groups (issue 31, docs/groups.md) against a real Redis: fairness, per-group
//! concurrency under a mixed fleet (EchoMQ and BullMQ 6.7.0 workers), rate
//! limits on Redis's clock, pause/resume, max size, and a killed feeder.
//! Every wait is on observed state under one deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::groups::{GroupDefaults, GroupFeeder, GroupFeederArgs, GroupFeederMsg, GroupOptions};
use echomq::supervision::HostStatus;
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    Error, HostSupervisor, HostSupervisorMsg, JobOptions, NewJob, Queue, RestartIntensity,
    WorkerArgs, WorkerMsg, WorkerSetSpec,
};
use echomq_integration_tests::assert_consistent;
use echomq_integration_tests::keyspace::{snapshot, Mask};
use echomq_integration_tests::timeline::{stamps, Stamp};
use echomq_integration_tests::{events, wait_until, NodeChild, NullSupervisor, RedisServer};
use fred::prelude::{HashesInterface, KeysInterface, ListInterface, SortedSetsInterface};
use ractor::{call_t, Actor, ActorRef};
use serde_json::{json, Value as Json};

type Runs = Arc<Mutex<HashMap<String, u32>>>;

fn job(data: Json, options: JobOptions) -> NewJob {
    NewJob {
        name: "g".into(),
        data,
        options,
    }
}

fn grouped(gid: &str) -> JobOptions {
    JobOptions::new().group(GroupOptions::new(gid))
}

async fn add_group(queue: &Queue, gid: &str, n: usize, data: Json) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let chunk = left.min(1000);
        let jobs = (0..chunk)
            .map(|_| job(data.clone(), grouped(gid)))
            .collect();
        ids.extend(queue.add_bulk(jobs).await.unwrap());
        left -= chunk;
    }
    ids
}

/// A Rust worker set counting runs per job id; jobs behave as their data says.
async fn rust_worker(queue: &Queue, concurrency: usize, runs: Runs) -> echomq::WorkerSet {
    let processor = processor_fn(move |job: JobContext| {
        let runs = runs.clone();
        async move {
            *runs.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
            echomq_integration_tests::behave(&job).await
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.concurrency = concurrency;
    args.options.drain_delay = Duration::from_millis(100);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap()
}

async fn feeder(args: GroupFeederArgs) -> ActorRef<GroupFeederMsg> {
    Actor::spawn(None, GroupFeeder, args).await.unwrap().0
}

fn fast(args: GroupFeederArgs) -> GroupFeederArgs {
    args.block(Duration::from_millis(100))
        .sweep_interval(Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_group_finishes_within_its_fair_share() {
    let (redis, conn, queue) = RedisServer::with_queue("fair").await;
    let c = redis.client().await;
    // The worst order for a FIFO queue: the big tenant first, the small last.
    let mut group_of: HashMap<String, &str> = HashMap::new();
    // The others' jobs take 20 ms, the small group's none: what is measured
    // is the wait the queue imposes on the small tenant, not its own jobs'
    // run time (while one of them ran, other slots would go on starting jobs).
    for (gid, n, ms) in [("big", 20_000, 20), ("mid", 1_000, 20), ("small", 10, 0)] {
        let data = json!({"mode": "sleep", "ms": ms});
        for id in add_group(&queue, gid, n, data).await {
            group_of.insert(id, gid);
        }
    }
    assert_eq!(queue.groups().counts("big").await.unwrap().waiting, 20_000);
    let llen: u64 = c.llen("emq:fair:wait").await.unwrap();
    assert_eq!(llen, 0, "group jobs wait in their groups, not in wait");

    let f = feeder(fast(GroupFeederArgs::new(conn.clone(), "fair")).max_ready(16)).await;
    let runs = Runs::default();
    let set = rust_worker(&queue, 8, runs.clone()).await;
    wait_until(
        "the small group's 10 jobs complete",
        Duration::from_secs(60),
        async || {
            let small = queue.groups().counts("small").await.unwrap();
            small.waiting == 0 && small.active == 0
        },
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    f.stop(None);

    let entries = stamps(&c, "emq:fair:events").await;
    let last_small = entries
        .iter()
        .rposition(|s| s.name == "completed" && group_of.get(&s.job_id) == Some(&"small"))
        .expect("the small group's completions are in the stream");
    // Round robin: the small group's 10th job is released, and so started,
    // after 2 × 10 jobs of the others (workers take wait in order).
    let small_starts: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, s)| s.name == "active" && group_of.get(&s.job_id) == Some(&"small"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(small_starts.len(), 10);
    let before_last_start = entries[..small_starts[9]]
        .iter()
        .filter(|s| s.name == "active" && group_of.get(&s.job_id) != Some(&"small"))
        .count();
    assert!(
        before_last_start <= 20,
        "{before_last_start} others started before the small group's last job"
    );
    let others_started = entries[..last_small]
        .iter()
        .filter(|s| s.name == "active" && group_of.get(&s.job_id) != Some(&"small"))
        .count();
    eprintln!(
        "the small group's last job started after {before_last_start} and finished after \
         {others_started} jobs of the others started"
    );
    assert!(
        others_started < 10 * 3,
        "the small group waited behind {others_started} jobs of the others"
    );
    assert!(runs.lock().unwrap().values().all(|&n| n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_concurrency_holds_under_a_mixed_fleet() {
    const GROUPS: usize = 4;
    const PER_GROUP: usize = 30;
    let (redis, conn, queue) = RedisServer::with_queue("mixed").await;
    let c = redis.client().await;
    let limits = [1u64, 2, 3, 2];
    let mut group_of: HashMap<String, usize> = HashMap::new();
    for (g, limit) in limits.iter().enumerate() {
        let gid = format!("t{g}");
        queue.groups().set_concurrency(&gid, *limit).await.unwrap();
        for id in add_group(&queue, &gid, PER_GROUP, json!({"mode": "sleep", "ms": 50})).await {
            group_of.insert(id, g);
        }
    }
    let node = NodeChild::spawn(
        "worker.js",
        &redis.url(),
        "mixed",
        json!({"concurrency": 8, "name": "node"}),
    );
    let runs = Runs::default();
    let set = rust_worker(&queue, 8, runs.clone()).await;
    let f = feeder(fast(GroupFeederArgs::new(conn.clone(), "mixed")).max_ready(32)).await;
    let total = (GROUPS * PER_GROUP) as u64;
    wait_until(
        "every group job completes",
        Duration::from_secs(90),
        async || {
            let done: u64 = c.zcard("emq:mixed:completed").await.unwrap();
            done == total
        },
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    let summary = node.finish().expect("node worker summary");
    f.stop(None);

    // Replay the stream: a group's started-and-unfinished jobs, at every entry.
    let mut running = [0u64; GROUPS];
    let mut peak = [0u64; GROUPS];
    for Stamp {
        name: event,
        job_id: id,
        ..
    } in stamps(&c, "emq:mixed:events").await
    {
        let Some(&g) = group_of.get(&id) else {
            continue;
        };
        match event.as_str() {
            "active" => {
                running[g] += 1;
                peak[g] = peak[g].max(running[g]);
            }
            "completed" | "failed" => running[g] = running[g].saturating_sub(1),
            _ => {}
        }
    }
    eprintln!("peaks {peak:?} under limits {limits:?}");
    for g in 0..GROUPS {
        assert!(
            peak[g] <= limits[g],
            "group t{g} ran {} at once (limit {})",
            peak[g],
            limits[g]
        );
        assert_eq!(
            peak[g], limits[g],
            "group t{g} never reached its limit: the test proves nothing"
        );
    }
    let rust_runs = runs.lock().unwrap().clone();
    let node_runs: HashMap<String, u32> = serde_json::from_value(summary["runs"].clone()).unwrap();
    eprintln!("rust ran {}, node ran {}", rust_runs.len(), node_runs.len());
    assert!(
        !rust_runs.is_empty() && !node_runs.is_empty(),
        "both sides took group jobs"
    );
    assert!(
        rust_runs
            .values()
            .chain(node_runs.values())
            .all(|&n| n == 1),
        "a job ran twice"
    );
    assert!(
        rust_runs.keys().all(|id| !node_runs.contains_key(id)),
        "a job ran on both sides"
    );
    assert_eq!((rust_runs.len() + node_runs.len()) as u64, total);
    // The feeder frees a slot when it reads the finish from the events stream.
    wait_until(
        "every finish is accounted",
        Duration::from_secs(30),
        async || c.hlen::<u64, _>("emq:mixed:gr:jobs").await.unwrap() == 0,
    )
    .await;
    assert_consistent(&conn, "mixed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rate_limit_holds_in_every_window() {
    const MAX: usize = 5;
    const WINDOW: u64 = 400;
    const N: usize = 20;
    let (redis, conn, queue) = RedisServer::with_queue("rated").await;
    let c = redis.client().await;
    queue
        .groups()
        .set_rate_limit("r", MAX as u64, Duration::from_millis(WINDOW))
        .await
        .unwrap();
    let ids = add_group(&queue, "r", N, Json::Null).await;
    let free = add_group(&queue, "free", N, Json::Null).await;
    let runs = Runs::default();
    let set = rust_worker(&queue, 8, runs.clone()).await;
    let f = feeder(fast(GroupFeederArgs::new(conn.clone(), "rated"))).await;
    wait_until(
        "both groups complete",
        Duration::from_secs(30),
        async || {
            let done: u64 = c.zcard("emq:rated:completed").await.unwrap();
            done == 2 * N as u64
        },
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    f.stop(None);

    let released = |of: &[String], entries: &[Stamp]| -> Vec<u64> {
        entries
            .iter()
            .filter(|s| s.name == "waiting" && of.contains(&s.job_id))
            .map(|s| s.at_ms)
            .collect()
    };
    let entries = stamps(&c, "emq:rated:events").await;
    let times = released(&ids, &entries);
    assert_eq!(times.len(), N, "one release per job");
    // On the entries' ids: Redis's clock, the one the release log keeps.
    for (i, t) in times.iter().enumerate() {
        let within = times[i..].iter().take_while(|u| **u < t + WINDOW).count();
        assert!(
            within <= MAX,
            "{within} releases in the window from {t} (max {MAX})"
        );
    }
    let span = times[N - 1] - times[0];
    eprintln!("{N} releases of the limited group over {span} ms (window {WINDOW} ms, max {MAX})");
    assert!(
        span >= (N / MAX - 1) as u64 * WINDOW,
        "the limit held nothing back"
    );
    let free_times = released(&free, &entries);
    assert!(
        free_times[N - 1] - free_times[0] < span,
        "the unlimited group was held back with the limited one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_a_group() {
    let (_redis, conn, queue) = RedisServer::with_queue("pausing").await;
    // A group may be paused before it exists; a second pause changes nothing.
    assert!(queue.groups().pause("p").await.unwrap());
    assert!(!queue.groups().pause("p").await.unwrap());
    assert!(
        !queue.groups().resume("q").await.unwrap(),
        "q was not paused"
    );
    add_group(&queue, "p", 5, Json::Null).await;
    add_group(&queue, "q", 5, Json::Null).await;
    let f = feeder(fast(GroupFeederArgs::new(conn.clone(), "pausing"))).await;
    wait_until(
        "q's jobs are released",
        Duration::from_secs(20),
        async || queue.groups().counts("q").await.unwrap().active == 5,
    )
    .await;
    let p = queue.groups().counts("p").await.unwrap();
    assert!(p.paused);
    assert_eq!(
        (p.waiting, p.active),
        (5, 0),
        "a paused group releases nothing"
    );

    assert!(queue.groups().resume("p").await.unwrap());
    assert!(!queue.groups().resume("p").await.unwrap());
    wait_until(
        "p's jobs are released after resume",
        Duration::from_secs(20),
        async || {
            let p = queue.groups().counts("p").await.unwrap();
            p.waiting == 0 && p.active == 5
        },
    )
    .await;
    let page = queue.groups().page(0, 10).await.unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(
        page.groups
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        ["p", "q"]
    );
    f.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_past_max_size_is_refused_and_writes_nothing() {
    let (redis, _conn, queue) = RedisServer::with_queue("sized").await;
    let c = redis.client().await;
    queue.groups().set_max_size("m", 2).await.unwrap();
    add_group(&queue, "m", 2, Json::Null).await;
    let before = snapshot(&c, "sized", Mask::default()).await;
    let err = queue
        .add("g", &json!({"x": 1}), grouped("m"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::GroupFull { group, max_size: 2 } if group == "m"),
        "{err:?}"
    );
    let custom = queue
        .add("g", &json!({}), grouped("m").job_id("custom"))
        .await
        .unwrap_err();
    assert!(matches!(custom, Error::GroupFull { .. }));
    assert_eq!(
        before,
        snapshot(&c, "sized", Mask::default()).await,
        "a refused add wrote something"
    );

    // In a bulk add, the refused job is reported and the others are added.
    let r = queue
        .add_bulk(vec![
            job(json!({}), grouped("m")),
            job(json!({}), grouped("other")),
            job(json!({}), JobOptions::new()),
        ])
        .await;
    assert!(matches!(r, Err(Error::GroupFull { .. })), "{r:?}");
    assert_eq!(queue.groups().counts("other").await.unwrap().waiting, 1);
    assert_eq!(queue.groups().counts("m").await.unwrap().waiting, 2);
    // Bad input is refused before Redis.
    assert!(queue.add("g", &json!({}), grouped("a:b")).await.is_err());
    assert!(queue
        .add("g", &json!({}), grouped("ok").lifo(true))
        .await
        .is_err());
    assert!(queue.groups().set_concurrency("ok", 0).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_feeder_loses_nothing_and_runs_nothing_twice() {
    const GROUPS: usize = 20;
    const PER_GROUP: usize = 100;
    const N: u64 = (GROUPS * PER_GROUP) as u64;
    let (redis, conn, queue) = RedisServer::with_queue("killed").await;
    let c = redis.client().await;
    for g in 0..GROUPS {
        add_group(
            &queue,
            &format!("k{g}"),
            PER_GROUP,
            json!({"mode": "sleep", "ms": 2}),
        )
        .await;
    }
    let (host, _) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
        .await
        .unwrap();
    let args = fast(GroupFeederArgs::new(conn.clone(), "killed"))
        .max_ready(8)
        .batch(4)
        .defaults(GroupDefaults {
            concurrency: Some(2),
            limit: None,
        });
    let (fid, first) = call_t!(
        host,
        HostSupervisorMsg::AddGroupFeeder,
        5000,
        Box::new(args)
    )
    .unwrap()
    .unwrap();
    let runs = Runs::default();
    let set = rust_worker(&queue, 16, runs.clone()).await;
    let completed = async || -> u64 { c.zcard("emq:killed:completed").await.unwrap() };
    wait_until("some jobs complete", Duration::from_secs(30), async || {
        completed().await >= 200
    })
    .await;
    first.kill();
    let at_kill = completed().await;
    assert!(
        at_kill < N,
        "the feeder was killed before the work was done"
    );
    wait_until(
        "the host restarts the feeder",
        Duration::from_secs(10),
        async || {
            let s: HostStatus = call_t!(host, HostSupervisorMsg::GetStatus, 5000).unwrap();
            s.restarts == 1
        },
    )
    .await;
    let second = call_t!(host, HostSupervisorMsg::GetGroupFeeder, 5000, fid)
        .unwrap()
        .expect("the feeder is still a child");
    assert_ne!(second.get_id(), first.get_id(), "a new feeder runs");
    wait_until("every job completes", Duration::from_secs(90), async || {
        completed().await == N
    })
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();

    let counts = queue.counts().await.unwrap();
    let mut group_pending = 0;
    for g in 0..GROUPS {
        let info = queue.groups().counts(&format!("k{g}")).await.unwrap();
        group_pending += info.waiting + info.active;
    }
    eprintln!("killed the feeder at {at_kill} of {N} completed");
    assert_eq!(
        N,
        counts.completed + counts.failed + counts.pending() + group_pending,
        "added = completed + failed + pending"
    );
    assert_eq!(counts.completed, N);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len() as u64, N);
    assert!(runs.values().all(|&n| n == 1), "a job ran twice");
    // The feeder frees a slot when it reads the finish from the events stream.
    wait_until(
        "every finish is accounted",
        Duration::from_secs(30),
        async || c.hlen::<u64, _>("emq:killed:gr:jobs").await.unwrap() == 0,
    )
    .await;
    let _ = call_t!(
        host,
        HostSupervisorMsg::Close,
        20_000,
        Duration::from_secs(5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_jobs_read_back_with_their_group_and_can_be_removed() {
    let (redis, _conn, queue) = RedisServer::with_queue("rm").await;
    let c = redis.client().await;
    let id = queue
        .add(
            "g",
            &json!({}),
            JobOptions::new().group(GroupOptions::new("x").priority(3)),
        )
        .await
        .unwrap();
    let job = queue.get_job(&id).await.unwrap().expect("stored");
    assert_eq!(job.opts.group, Some(GroupOptions::new("x").priority(3)));
    let public =
        JobOptions::from_public(json!({"group": {"id": "x"}}).as_object().unwrap()).unwrap();
    assert_eq!(public.group, Some(GroupOptions::new("x")));
    add_group(&queue, "x", 2500, Json::Null).await;
    assert_eq!(queue.groups().remove("x").await.unwrap(), 2501);
    let left = echomq_integration_tests::keys(&c, "emq:rm:gr:*").await;
    assert!(
        left.iter().all(|k| !k.contains(":g:x")),
        "group keys left: {left:?}"
    );
    assert_eq!(queue.groups().page(0, 10).await.unwrap().total, 0);
    let removed = events(&c, "emq:rm:events")
        .await
        .into_iter()
        .filter(|(n, _)| n == "removed")
        .count();
    assert_eq!(removed, 2501);
    let hashes: u64 = c.exists(format!("emq:rm:{id}")).await.unwrap();
    assert_eq!(hashes, 0);
}

/// A worker spawned with `WorkerOptions::group`, counting runs per job id.
async fn rust_worker_with_group(
    queue: &Queue,
    concurrency: usize,
    defaults: GroupDefaults,
    runs: Runs,
) -> echomq::WorkerSet {
    let processor = processor_fn(move |job: JobContext| {
        let runs = runs.clone();
        async move {
            *runs.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
            echomq_integration_tests::behave(&job).await
        }
    });
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options = args.options.concurrency(concurrency).group(defaults);
    args.options.drain_delay = Duration::from_millis(100);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap()
}

/// BullMQ Pro's worker option `group: {concurrency, limit}`: the default of
/// every group without its own, for the whole fleet. Two workers disagree:
/// the one started last holds (and a feeder's own defaults give way too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_group_option_is_every_groups_default_and_the_last_started_holds() {
    const PER_GROUP: usize = 24;
    const MAX: usize = 6;
    const WINDOW: u64 = 300;
    let (redis, conn, queue) = RedisServer::with_queue("wdef").await;
    let c = redis.client().await;
    assert_eq!(
        queue.groups().defaults().await.unwrap(),
        GroupDefaults::default()
    );
    let bad = GroupDefaults {
        concurrency: Some(0),
        limit: None,
    };
    assert!(matches!(
        queue.groups().set_defaults(bad).await,
        Err(Error::Config(_))
    ));

    let first = GroupDefaults {
        concurrency: Some(4),
        limit: None,
    };
    let second = GroupDefaults {
        concurrency: Some(2),
        limit: Some((MAX as u64, WINDOW)),
    };
    let runs = Runs::default();
    let a = rust_worker_with_group(&queue, 8, first, runs.clone()).await;
    wait_until(
        "the first worker's defaults",
        Duration::from_secs(10),
        async || queue.groups().defaults().await.unwrap() == first,
    )
    .await;
    let b = rust_worker_with_group(&queue, 8, second, runs.clone()).await;
    wait_until(
        "the second worker's defaults replace the first's",
        Duration::from_secs(10),
        async || queue.groups().defaults().await.unwrap() == second,
    )
    .await;
    let stored: std::collections::HashMap<String, String> =
        c.hgetall("emq:wdef:gr:defaults").await.unwrap();
    assert_eq!(stored.len(), 3, "{stored:?}");

    // "own" keeps its own concurrency; "a" and "b" take the defaults.
    queue.groups().set_concurrency("own", 1).await.unwrap();
    let mut group_of: HashMap<String, usize> = HashMap::new();
    let gids = ["own", "a", "b"];
    for (g, gid) in gids.iter().enumerate() {
        for id in add_group(&queue, gid, PER_GROUP, json!({"mode": "sleep", "ms": 40})).await {
            group_of.insert(id, g);
        }
    }
    // The feeder's own defaults (a looser bound) give way to the queue's.
    let f = feeder(
        fast(GroupFeederArgs::new(conn.clone(), "wdef"))
            .max_ready(32)
            .defaults(GroupDefaults {
                concurrency: Some(8),
                limit: None,
            }),
    )
    .await;
    let total = (gids.len() * PER_GROUP) as u64;
    wait_until(
        "every group job completes",
        Duration::from_secs(60),
        async || {
            let done: u64 = c.zcard("emq:wdef:completed").await.unwrap();
            done == total
        },
    )
    .await;
    call_t!(a.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    call_t!(b.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    f.stop(None);

    let entries = stamps(&c, "emq:wdef:events").await;
    let mut running = [0u64; 3];
    let mut peak = [0u64; 3];
    let mut released: [Vec<u64>; 3] = Default::default();
    for Stamp {
        at_ms,
        name: event,
        job_id: id,
        ..
    } in &entries
    {
        let Some(&g) = group_of.get(id) else {
            continue;
        };
        match event.as_str() {
            "waiting" => released[g].push(*at_ms),
            "active" => {
                running[g] += 1;
                peak[g] = peak[g].max(running[g]);
            }
            "completed" | "failed" => running[g] = running[g].saturating_sub(1),
            _ => {}
        }
    }
    let limits = [1u64, 2, 2];
    eprintln!("peaks {peak:?} under {limits:?}");
    assert_eq!(
        peak, limits,
        "each group ran at most, and reached, its bound"
    );
    // The default rate limit holds "a" and "b" (their own windows) on
    // Redis's clock; "own" set no limit of its own, so it takes it too.
    for (g, times) in released.iter().enumerate() {
        assert_eq!(times.len(), PER_GROUP, "one release per job of {}", gids[g]);
        for (i, t) in times.iter().enumerate() {
            let within = times[i..].iter().take_while(|u| **u < t + WINDOW).count();
            assert!(
                within <= MAX,
                "{within} releases of {} in the window from {t}",
                gids[g]
            );
        }
    }
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len() as u64, total);
    assert!(runs.values().all(|&n| n == 1), "a job ran twice");
    assert_consistent(&conn, "wdef").await;

    // Cleared, the feeder's own defaults apply again.
    assert_eq!(queue.groups().clear_defaults().await.unwrap(), second);
    assert_eq!(
        queue.groups().defaults().await.unwrap(),
        GroupDefaults::default()
    );
}

/// The scrape's group gauges are bounded in cardinality: the 10 busiest
/// groups only, never one series per tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_exports_the_busiest_groups_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_redis, _conn, queue) = RedisServer::with_queue("gm").await;
    for i in 0..15 {
        add_group(&queue, &format!("m{i:02}"), i + 1, Json::Null).await;
    }
    queue.groups().pause("m14").await.unwrap();
    let server = echomq::telemetry::prometheus::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    server.watch(queue.clone());
    let mut s = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("echomq_groups{queue=\"gm\"} 15"), "{body}");
    let series: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("echomq_group_jobs{"))
        .collect();
    assert_eq!(series.len(), 20, "10 groups × 2 states: {series:?}");
    assert!(body.contains("echomq_group_jobs{queue=\"gm\", group=\"m14\", state=\"waiting\"} 15"));
    assert!(body.contains("echomq_group_paused{queue=\"gm\", group=\"m14\"} 1"));
    assert!(
        !body.contains("group=\"m04\""),
        "a quiet group has no series"
    );
}
