//! Groups combined with flows, delays, deduplication, and the global busiest
//! groups (issue 31, docs/groups.md) against a real Redis, with BullMQ 6.7.0
//! Node workers beside EchoMQ's. Every wait is on observed state under one
//! deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::groups::{GroupFeeder, GroupFeederArgs, GroupFeederMsg, GroupOptions};
use echomq::protocol::ParentRef;
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    Error, FlowJob, FlowProducer, JobOptions, Queue, WorkerArgs, WorkerMsg, WorkerSetSpec,
};
use echomq_integration_tests::assert_consistent;
use echomq_integration_tests::keyspace::{snapshot, Mask};
use echomq_integration_tests::timeline::{stamps, Stamp};
use echomq_integration_tests::{wait_until, NodeChild, NullSupervisor, RedisServer};
use fred::prelude::{HashesInterface, SetsInterface, SortedSetsInterface};
use ractor::{call_t, Actor, ActorRef};
use serde_json::{json, Value as Json};

type Runs = Arc<Mutex<HashMap<String, u32>>>;

fn grouped(gid: &str) -> JobOptions {
    JobOptions::new().group(GroupOptions::new(gid))
}

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

async fn feeder(conn: &echomq::Connection, queue: &str) -> ActorRef<GroupFeederMsg> {
    let args = GroupFeederArgs::new(conn.clone(), queue)
        .block(Duration::from_millis(100))
        .sweep_interval(Duration::from_millis(500));
    Actor::spawn(None, GroupFeeder, args).await.unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_flow_children_run_under_their_group_and_release_the_parent() {
    const PER_GROUP: usize = 8;
    let (redis, conn, queue) = RedisServer::with_queue("gflow").await;
    let c = redis.client().await;
    let flows = FlowProducer::new(&conn);
    for gid in ["a", "b"] {
        queue.groups().set_concurrency(gid, 1).await.unwrap();
    }
    // A flow insert is not refused by a max size: a refused child would leave
    // half a flow. A plain add past it still is.
    queue.groups().set_max_size("b", 2).await.unwrap();

    // A grouped parent is refused before anything is written.
    let before = snapshot(&c, "gflow", Mask::default()).await;
    let bad = FlowJob::new("p", "gflow", json!(null))
        .options(grouped("a"))
        .child(FlowJob::new("c", "gflow", json!(null)));
    let err = flows.add(bad).await.unwrap_err();
    assert!(
        matches!(&err, Error::Validation(e) if e.to_string().contains("flow parent")),
        "{err:?}"
    );
    assert_eq!(before, snapshot(&c, "gflow", Mask::default()).await);

    let mut flow = FlowJob::new("parent", "gflow", json!(null));
    for i in 0..PER_GROUP {
        for gid in ["a", "b"] {
            flow = flow.child(
                FlowJob::new("child", "gflow", json!({"mode": "sleep", "ms": 40}))
                    .options(grouped(gid).job_id(format!("{gid}{i}"))),
            );
        }
    }
    let tree = flows.add(flow).await.unwrap();
    let parent_id = tree.id.clone();
    let group_of: HashMap<String, &str> = tree
        .children
        .iter()
        .map(|n| (n.id.clone(), if n.id.starts_with('a') { "a" } else { "b" }))
        .collect();
    assert_eq!(
        queue.groups().counts("a").await.unwrap().waiting,
        PER_GROUP as u64
    );
    assert_eq!(
        queue.groups().counts("b").await.unwrap().waiting,
        PER_GROUP as u64
    );
    let deps: u64 = c
        .scard(format!("emq:gflow:{parent_id}:dependencies"))
        .await
        .unwrap();
    assert_eq!(
        deps,
        2 * PER_GROUP as u64,
        "every grouped child is a dependency"
    );
    let child: HashMap<String, String> = c.hgetall("emq:gflow:a0").await.unwrap();
    assert_eq!(child["parentKey"], format!("emq:gflow:{parent_id}"));
    let r = queue.add("x", &json!(null), grouped("b")).await;
    assert!(matches!(r, Err(Error::GroupFull { .. })), "{r:?}");
    // A grouped child of a missing parent: BullMQ's refusal, nothing written.
    let before = snapshot(&c, "gflow", Mask::default()).await;
    let orphan = grouped("a").parent(ParentRef {
        id: "nope".into(),
        queue: "emq:gflow".into(),
    });
    let r = queue.add("x", &json!(null), orphan).await;
    assert_eq!(
        r.unwrap_err().script_code(),
        Some(echomq::protocol::ScriptErrorCode::ParentJobNotExist)
    );
    assert_eq!(before, snapshot(&c, "gflow", Mask::default()).await);

    // One worker slot on each side, so both take children.
    let node = NodeChild::spawn(
        "worker.js",
        &redis.url(),
        "gflow",
        json!({"concurrency": 1, "name": "node"}),
    );
    let runs = Runs::default();
    let set = rust_worker(&queue, 1, runs.clone()).await;
    let f = feeder(&conn, "gflow").await;
    wait_until(
        "the parent completes",
        Duration::from_secs(60),
        async || {
            let s: Option<f64> = c.zscore("emq:gflow:completed", &parent_id).await.unwrap();
            s.is_some()
        },
    )
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    let summary = node.finish().expect("node worker summary");
    f.stop(None);

    let mut running: HashMap<&str, u64> = HashMap::new();
    let mut peak: HashMap<&str, u64> = HashMap::new();
    let mut last_child_done = 0;
    let mut parent_started = None;
    for Stamp {
        at_ms: ms,
        name: event,
        job_id: id,
        ..
    } in stamps(&c, "emq:gflow:events").await
    {
        if id == parent_id && event == "active" {
            parent_started.get_or_insert(ms);
        }
        let Some(&g) = group_of.get(&id) else {
            continue;
        };
        match event.as_str() {
            "active" => {
                let r = running.entry(g).or_default();
                *r += 1;
                let p = peak.entry(g).or_default();
                *p = (*p).max(*r);
                assert!(
                    parent_started.is_none(),
                    "the parent started before child {id}"
                );
            }
            "completed" => {
                *running.entry(g).or_default() -= 1;
                last_child_done = ms;
            }
            _ => {}
        }
    }
    assert_eq!(
        peak.get("a"),
        Some(&1),
        "group a ran more than one child at once"
    );
    assert_eq!(
        peak.get("b"),
        Some(&1),
        "group b ran more than one child at once"
    );
    let started = parent_started.expect("the parent ran");
    assert!(started >= last_child_done);
    let processed: u64 = c
        .hlen(format!("emq:gflow:{parent_id}:processed"))
        .await
        .unwrap();
    assert_eq!(processed, 2 * PER_GROUP as u64);

    let rust_runs = runs.lock().unwrap().clone();
    let node_runs: HashMap<String, u32> = serde_json::from_value(summary["runs"].clone()).unwrap();
    let children_by =
        |runs: &HashMap<String, u32>| runs.keys().filter(|id| group_of.contains_key(*id)).count();
    eprintln!(
        "children: rust ran {}, node ran {}",
        children_by(&rust_runs),
        children_by(&node_runs)
    );
    assert!(children_by(&rust_runs) > 0 && children_by(&node_runs) > 0);
    assert!(rust_runs
        .values()
        .chain(node_runs.values())
        .all(|&n| n == 1));
    assert_eq!(rust_runs.len() + node_runs.len(), 2 * PER_GROUP + 1);
    // The feeder frees a slot when it reads the finish from the events stream.
    wait_until(
        "every child's slot is freed",
        Duration::from_secs(30),
        async || c.hlen::<u64, _>("emq:gflow:gr:jobs").await.unwrap() == 0,
    )
    .await;
    assert_consistent(&conn, "gflow").await;
}

/// Redis's clock, ms.
async fn redis_ms(c: &fred::prelude::Client) -> u64 {
    let t: Vec<String> = echomq_integration_tests::state::cmd(c, "TIME", vec![]).await;
    t[0].parse::<u64>().unwrap() * 1000 + t[1].parse::<u64>().unwrap() / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_group_jobs_run_when_due_under_their_budget_across_a_feeder_restart() {
    let (redis, conn, queue) = RedisServer::with_queue("gdelay").await;
    let c = redis.client().await;
    let limits = [("d", 1u64), ("e", 2)];
    let mut group_of: HashMap<String, &str> = HashMap::new();
    let mut delayed_ids = Vec::new();
    for (gid, limit) in limits {
        queue.groups().set_concurrency(gid, limit).await.unwrap();
        for i in 0..8u64 {
            let mut o = grouped(gid);
            // Half of them delayed, the latest last-added first: due 2.9 to
            // 4.7 s on, so that on a loaded machine some are still delayed
            // when the undelayed ones are done and the feeder is killed.
            if i % 2 == 1 {
                o = o.delay(Duration::from_millis(5000 - 300 * i));
            }
            let id = queue
                .add("g", &json!({"mode": "sleep", "ms": 30}), o)
                .await
                .unwrap();
            if i % 2 == 1 {
                delayed_ids.push(id.clone());
            }
            group_of.insert(id, gid);
        }
    }
    let info = queue.groups().counts("d").await.unwrap();
    assert_eq!((info.waiting, info.delayed), (4, 4));
    assert_eq!(
        queue.get_job_state(&delayed_ids[0]).await.unwrap(),
        echomq::JobState::Unknown,
        "a delayed group job is in none of BullMQ's structures"
    );
    let total = group_of.len() as u64;

    let runs = Runs::default();
    let set = rust_worker(&queue, 4, runs.clone()).await;
    let f = feeder(&conn, "gdelay").await;
    // The fault: the feeder goes while delayed group jobs wait.
    wait_until(
        "the undelayed jobs complete",
        Duration::from_secs(30),
        async || {
            let done: u64 = c.zcard("emq:gdelay:completed").await.unwrap();
            done >= 8
        },
    )
    .await;
    f.kill();
    let left: u64 = c.zcard("emq:gdelay:gr:delayed").await.unwrap();
    let d = queue.groups().counts("d").await.unwrap().delayed;
    let e = queue.groups().counts("e").await.unwrap().delayed;
    assert!(
        left > 0 && d + e > 0,
        "the feeder was killed with no delayed job left"
    );
    // Restarted once some of them fell due with no feeder running.
    let first: Vec<(String, f64)> =
        echomq_integration_tests::state::zset(&c, "emq:gdelay:gr:delayed").await;
    let first_due = first[0].1 as u64;
    wait_until(
        "a delayed job falls due",
        Duration::from_secs(10),
        async || redis_ms(&c).await > first_due,
    )
    .await;
    let f = feeder(&conn, "gdelay").await;
    wait_until("every job completes", Duration::from_secs(60), async || {
        let done: u64 = c.zcard("emq:gdelay:completed").await.unwrap();
        done == total
    })
    .await;
    // The feeder frees a slot when it reads the finish from the events
    // stream, after Redis counted the job completed.
    wait_until("every slot is freed", Duration::from_secs(30), async || {
        c.hlen::<u64, _>("emq:gdelay:gr:jobs").await.unwrap() == 0
    })
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    f.stop(None);

    let mut due: HashMap<String, u64> = HashMap::new();
    for (event, fields) in echomq_integration_tests::events(&c, "emq:gdelay:events").await {
        let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
        if event == "delayed" {
            due.insert(
                get("jobId").unwrap(),
                get("delay").unwrap().parse().unwrap(),
            );
        }
    }
    assert_eq!(
        due.len(),
        delayed_ids.len(),
        "one delayed event per delayed job"
    );
    let mut running: HashMap<&str, u64> = HashMap::new();
    let mut peak: HashMap<&str, u64> = HashMap::new();
    let mut released = 0;
    for Stamp {
        at_ms: ms,
        name: event,
        job_id: id,
        ..
    } in stamps(&c, "emq:gdelay:events").await
    {
        let Some(&g) = group_of.get(&id) else {
            continue;
        };
        match event.as_str() {
            "waiting" => {
                released += 1;
                if let Some(&t) = due.get(&id) {
                    assert!(ms >= t, "job {id} released at {ms}, due at {t}");
                }
            }
            "active" => {
                let r = running.entry(g).or_default();
                *r += 1;
                let p = peak.entry(g).or_default();
                *p = (*p).max(*r);
            }
            "completed" | "failed" => *running.entry(g).or_default() -= 1,
            _ => {}
        }
    }
    assert_eq!(released, total, "one release per job");
    for (gid, limit) in limits {
        assert_eq!(peak.get(gid), Some(&limit), "group {gid}'s peak");
    }
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len() as u64, total);
    assert!(runs.values().all(|&n| n == 1), "a job ran twice");
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        counts.completed, total,
        "added = completed + failed + pending"
    );
    assert_eq!(counts.failed + counts.pending(), 0);
    let keys = echomq_integration_tests::keys(&c, "emq:gdelay:gr:*delayed*").await;
    assert!(keys.is_empty(), "delayed group keys left: {keys:?}");
    assert_consistent(&conn, "gdelay").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduplicated_group_add_writes_nothing_and_the_finish_frees_the_id() {
    use echomq::Deduplication;
    let (redis, conn, queue) = RedisServer::with_queue("gdedup").await;
    let c = redis.client().await;
    let dedup = |id: &str| grouped("a").deduplication(Deduplication::new(id));
    let owner = queue.add("g", &json!(1), dedup("x")).await.unwrap();
    let before = snapshot(&c, "gdedup", Mask::default()).await;
    let events_before = echomq_integration_tests::events(&c, "emq:gdedup:events").await;
    let again = queue.add("g", &json!(2), dedup("x")).await.unwrap();
    // The deduplication id is the queue's: another group's add is dropped too.
    let other = queue
        .add(
            "g",
            &json!(3),
            JobOptions::new()
                .group(GroupOptions::new("b"))
                .deduplication(Deduplication::new("x")),
        )
        .await
        .unwrap();
    assert_eq!(
        (again.as_str(), other.as_str()),
        (owner.as_str(), owner.as_str())
    );
    let mut after = snapshot(&c, "gdedup", Mask::default()).await;
    let mut before = before;
    // What addStandardJob also writes for a dropped add: the id counter and
    // the `deduplicated` events; nothing else.
    let events = |m: &mut serde_json::Map<String, Json>| m.remove("events").unwrap();
    let (eb, ea) = (events(&mut before), events(&mut after));
    before.remove("id");
    after.remove("id");
    assert_eq!(before, after, "a deduplicated group add wrote something");
    assert_ne!(eb, ea);
    let events_after = echomq_integration_tests::events(&c, "emq:gdedup:events").await;
    let new = &events_after[events_before.len()..];
    assert_eq!(new.len(), 2, "{new:?}");
    for (event, fields) in new {
        assert_eq!(event, "deduplicated", "{new:?}");
        assert_eq!(fields[0], ("jobId".to_owned(), owner.clone()), "{new:?}");
    }
    assert_eq!(queue.groups().counts("b").await.unwrap().waiting, 0);
    // A ttl is kept as BullMQ keeps it.
    let ttl_owner = queue
        .add(
            "g",
            &json!(4),
            grouped("a").deduplication(Deduplication::new("y").ttl(Duration::from_millis(60_000))),
        )
        .await
        .unwrap();
    let pttl: i64 =
        echomq_integration_tests::state::cmd(&c, "PTTL", vec!["emq:gdedup:de:y".into()]).await;
    assert!(pttl > 0, "{pttl}");
    // The modes that move an owner past its group are refused.
    for bad in [
        Deduplication::new("z").replace(true),
        Deduplication::new("z").keep_last_if_active(true),
    ] {
        let r = queue
            .add("g", &json!(5), grouped("a").deduplication(bad))
            .await;
        assert!(matches!(r, Err(Error::Validation(_))), "{r:?}");
    }

    // Finished by a BullMQ 6.7.0 worker: its moveToFinished frees the id.
    let node = NodeChild::spawn(
        "worker.js",
        &redis.url(),
        "gdedup",
        json!({"concurrency": 2}),
    );
    let f = feeder(&conn, "gdedup").await;
    wait_until(
        "both owners complete",
        Duration::from_secs(30),
        async || {
            let done: u64 = c.zcard("emq:gdedup:completed").await.unwrap();
            done == 2
        },
    )
    .await;
    assert!(!echomq_integration_tests::state::exists(&c, "emq:gdedup:de:x").await);
    assert!(
        echomq_integration_tests::state::exists(&c, "emq:gdedup:de:y").await,
        "a running ttl is kept"
    );
    let fresh = queue.add("g", &json!(6), dedup("x")).await.unwrap();
    assert_ne!(fresh, owner);
    assert_eq!(
        queue.get_job(&ttl_owner).await.unwrap().map(|j| j.id),
        Some(ttl_owner.clone())
    );
    wait_until(
        "the fresh add completes",
        Duration::from_secs(30),
        async || {
            let done: u64 = c.zcard("emq:gdedup:completed").await.unwrap();
            done == 3
        },
    )
    .await;
    wait_until("every slot is freed", Duration::from_secs(30), async || {
        c.hlen::<u64, _>("emq:gdedup:gr:jobs").await.unwrap() == 0
    })
    .await;
    f.stop(None);
    let summary = node.finish().expect("node summary");
    let node_runs: HashMap<String, u32> = serde_json::from_value(summary["runs"].clone()).unwrap();
    assert_eq!(node_runs.len(), 3);
    assert_consistent(&conn, "gdedup").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_busiest_groups_are_the_true_top_across_more_than_a_page() {
    let (redis, conn, queue) = RedisServer::with_queue("gbusy").await;
    let c = redis.client().await;
    let mut expected: Vec<(String, u64)> = Vec::new();
    let mut jobs = Vec::new();
    // 240 small groups first in id order, the 10 big ones last: a top of the
    // first page of 200 would miss every one of them.
    for i in 0..240u64 {
        expected.push((format!("a{i:03}"), 1 + i % 5));
    }
    for k in 0..10u64 {
        expected.push((format!("zz{k}"), 10 + k));
    }
    for (gid, n) in &expected {
        for _ in 0..*n {
            jobs.push(echomq::NewJob {
                name: "g".into(),
                data: json!(null),
                options: grouped(gid),
            });
        }
    }
    queue.add_bulk(jobs).await.unwrap();
    // One delayed job counts too.
    queue
        .add(
            "g",
            &json!(null),
            grouped("a000").delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    expected[0].1 += 1;
    expected.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));

    let top = queue.groups().busiest(10).await.unwrap();
    assert_eq!(top.total, 250);
    let got: Vec<(String, u64)> = top
        .groups
        .iter()
        .map(|g| (g.id.clone(), g.waiting + g.delayed + g.active))
        .collect();
    assert_eq!(got, expected[..10].to_vec());
    let first_page = queue.groups().page(0, 200).await.unwrap();
    assert!(
        first_page.groups.iter().all(|g| !g.id.starts_with("zz")),
        "the big groups are past the first page: the test proves nothing otherwise"
    );

    // Released and finished, the score follows: only the delayed job is left.
    let runs = Runs::default();
    let set = rust_worker(&queue, 8, runs).await;
    let f = feeder(&conn, "gbusy").await;
    let total: u64 = expected.iter().map(|(_, n)| n).sum::<u64>() - 1;
    wait_until(
        "every due job completes",
        Duration::from_secs(90),
        async || {
            let done: u64 = c.zcard("emq:gbusy:completed").await.unwrap();
            done == total
        },
    )
    .await;
    wait_until("every slot is freed", Duration::from_secs(30), async || {
        let open: u64 = c.hlen("emq:gbusy:gr:jobs").await.unwrap();
        open == 0
    })
    .await;
    call_t!(set.worker, WorkerMsg::Close, 10_000, Duration::from_secs(5)).unwrap();
    f.stop(None);
    let busy: Vec<(String, f64)> =
        echomq_integration_tests::state::zset(&c, "emq:gbusy:gr:busy").await;
    assert_eq!(busy, vec![("a000".to_owned(), 1.0)]);
    assert_eq!(queue.groups().remove("a000").await.unwrap(), 1);
    let busy: u64 = c.zcard("emq:gbusy:gr:busy").await.unwrap();
    assert_eq!(busy, 0, "a removed group leaves gr:busy");
    assert_consistent(&conn, "gbusy").await;
}

/// A feeder on a queue that has never had a group reads none of its events
/// (it looks for a group, one EXISTS at a time), and starts following the
/// stream — releasing the group's job — once the first group job arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feeder_reads_no_events_until_its_queue_has_a_group() {
    use echomq_integration_tests::scale::Monitor;
    let (redis, conn, q) = RedisServer::with_queue("dorm").await;
    let c = redis.client().await;
    let m = Monitor::start(redis.port(), &c).await;
    let args = GroupFeederArgs::new(conn.clone(), "dorm").block(Duration::from_millis(200));
    let (feeder, _h) = Actor::spawn(None, GroupFeeder, args).await.unwrap();
    for i in 0..50 {
        q.add("plain", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap();
    }
    // Several looks for a group have been made, and no read of the stream.
    let mut calls = Vec::new();
    wait_until(
        "three looks for a group",
        Duration::from_secs(10),
        async || {
            calls.extend(m.take(&c).await);
            calls
                .iter()
                .filter(|c| {
                    c.command == "EXISTS" && c.args.iter().any(|a| a == "emq:dorm:gr:index")
                })
                .count()
                >= 3
        },
    )
    .await;
    assert!(
        !calls.iter().any(|c| c.command == "XREAD"),
        "the feeder read the events of a queue without groups"
    );
    // The first group job: released into wait, the stream followed.
    q.add("g", &json!({}), grouped("g1")).await.unwrap();
    wait_until(
        "the group job released",
        Duration::from_secs(10),
        async || q.counts().await.unwrap().waiting == 51,
    )
    .await;
    wait_until("the stream followed", Duration::from_secs(10), async || {
        m.take(&c).await.iter().any(|c| c.command == "XREAD")
    })
    .await;
    feeder.cast(GroupFeederMsg::Close).unwrap();
}
