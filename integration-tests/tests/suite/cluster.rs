//! EchoMQ on a real Redis Cluster (3 primaries + 3 replicas): the four
//! actors' lifecycle on hash-tagged queues spread over the three primaries
//! and worked by one process, BullMQ Node (ioredis Cluster) and EchoMQ on one
//! queue both ways (jobs, and the worker listed by Node's getWorkers), and a
//! SIGKILLed primary under load, without and with the durability mode: its
//! replica takes over and work carries on; with the mode no acknowledged add
//! is lost.
//! Flows: queues sharing a hash tag run a flow end to end; a flow over two
//! slots is refused with nothing written.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use echomq::connection::Durability;
use echomq::worker::processor_fn;
use echomq::{
    Connection, ConnectionConfig, FlowJob, FlowProducer, JobOptions, JobState, Queue, WorkerArgs,
    WorkerSetSpec,
};
use echomq_integration_tests::cluster::RedisCluster;
use echomq_integration_tests::{bullmq, bullmq_work_until, topology, NullSupervisor};
use ractor::Actor;
use serde_json::json;

async fn connect(cluster: &RedisCluster) -> Connection {
    Connection::connect(ConnectionConfig::with_url(cluster.url()))
        .await
        .expect("connect to the cluster")
}

/// Hash-tagged queue names whose slots are served by `n` different primaries.
fn queues_on_distinct_primaries(cluster: &RedisCluster, n: usize) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("{{q{i}}}");
        if seen.insert(cluster.primary_of(&format!("emq:{name}:wait"))) {
            names.push(name);
        }
        if names.len() == n {
            return names;
        }
    }
    unreachable!()
}

async fn wait_states(q: &Queue, ids: &[String], want: JobState, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let mut pending = Vec::new();
        for id in ids {
            if q.get_job_state(id).await.unwrap() != want {
                pending.push(id.clone());
            }
        }
        if pending.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not {want:?} after {limit:?}: {pending:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_on_three_primaries_and_bullmq_node_on_one_cluster() {
    let cluster = RedisCluster::start();
    let conn = connect(&cluster).await;

    // A name that would spread a queue over slots is refused, saying how to fix it.
    let err = Queue::new(&conn, "orders").await.unwrap_err().to_string();
    assert!(
        err.contains("hash tag") && err.contains("{orders}"),
        "{err}"
    );
    // A single seed is enough to start (the shape of the issue's command).
    let single = Connection::connect_url(&cluster.single_seed_url())
        .await
        .unwrap();
    single.close().await;

    // Three queues, each on its own primary, worked at once by this process.
    let names = queues_on_distinct_primaries(&cluster, 3);
    let started = Instant::now();
    let (a, b, c) = tokio::join!(
        topology::four_actors(&conn, &names[0]),
        topology::four_actors(&conn, &names[1]),
        topology::four_actors(&conn, &names[2]),
    );
    for run in [&a, &b, &c] {
        assert_eq!(run.completed.len(), 23, "{run:?}");
        assert_eq!(run.failed.len(), 1, "{run:?}");
        assert!(run.scheduled_completed >= 2, "{run:?}");
        assert!(run.completed.is_subset(&run.completed_events), "{run:?}");
    }
    eprintln!(
        "cluster: 3 queues x 26 jobs on 3 primaries ({names:?}) in {:?}",
        started.elapsed()
    );

    // BullMQ Node adds, EchoMQ's worker tree (the issue's `echomq work '{mix}'`) takes them.
    let url = cluster.url();
    let jobs: Vec<_> = (0..5)
        .map(|i| json!({ "name": "n", "data": { "i": i } }))
        .collect();
    let node_ids: Vec<String> =
        serde_json::from_value(bullmq("add-jobs", &url, "{mix}", json!({ "jobs": jobs }))).unwrap();
    let q = Queue::new(&conn, "{mix}").await.unwrap();
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let mut args = WorkerArgs::new(
        q.clone(),
        processor_fn(|ctx: echomq::JobContext| async move { Ok(ctx.data().clone()) }),
    );
    args.options.name = Some("rust-on-cluster".into());
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    wait_states(&q, &node_ids, JobState::Completed, Duration::from_secs(10)).await;
    let workers = bullmq("workers", &url, "{mix}", json!({}));
    assert!(
        workers.as_array().unwrap().iter().any(|w| w["rawname"]
            .as_str()
            .is_some_and(|r| r.ends_with(":w:rust-on-cluster"))),
        "Node's getWorkers lists the EchoMQ worker: {workers}"
    );
    // Closed, not merely told to stop: once `close` answers, the set's fetch
    // loop has ended and no job added from here on can be taken by it (a
    // stop() returns before the actor has even seen it, and a fetch already
    // sent may still reach Redis after the jobs below).
    set.close(Duration::from_secs(5))
        .await
        .expect("the worker set closes");

    // EchoMQ adds, BullMQ Node's worker (ioredis Cluster) takes them.
    let mut rust_ids = Vec::new();
    for i in 0..3 {
        rust_ids.push(
            q.add("r", &json!({ "i": i }), JobOptions::new())
                .await
                .unwrap(),
        );
    }
    // Node's Worker is the only one left: it runs until it has taken them.
    let run = bullmq_work_until(
        &url,
        "{mix}",
        json!({ "ids": rust_ids, "deadlineMs": 60_000 }),
    );
    let by_node: BTreeSet<String> = run.ids().into_iter().collect();
    let wanted: BTreeSet<String> = rust_ids.iter().cloned().collect();
    assert!(
        run.done && by_node == wanted,
        "Node processed exactly {wanted:?}: {run:?}"
    );
    wait_states(&q, &rust_ids, JobState::Completed, Duration::from_secs(5)).await;

    // A flow whose queues share a hash tag runs end to end on Rust workers,
    // and the parent reads its children's values.
    let flow = FlowJob::new("p", "{app}-a", json!({}))
        .options(JobOptions::new().job_id("fp"))
        .child(FlowJob::new("c", "{app}-b", json!(1)).options(JobOptions::new().job_id("fc1")))
        .child(FlowJob::new("c", "{app}-b", json!(2)).options(JobOptions::new().job_id("fc2")));
    let tree = FlowProducer::new(&conn).add(flow).await.unwrap();
    assert_eq!(tree.children.len(), 2);
    let qa = Queue::new(&conn, "{app}-a").await.unwrap();
    let qb = Queue::new(&conn, "{app}-b").await.unwrap();
    let parent_worker = WorkerSetSpec::new(WorkerArgs::new(
        qa.clone(),
        processor_fn(|ctx: echomq::JobContext| async move {
            let values = ctx.children_values().await?;
            Ok(json!(values))
        }),
    ))
    .spawn_linked(host.get_cell())
    .await
    .unwrap();
    let child_worker = WorkerSetSpec::new(WorkerArgs::new(
        qb.clone(),
        processor_fn(|ctx: echomq::JobContext| async move {
            Ok(json!(ctx.data().as_i64().unwrap_or(0) * 10))
        }),
    ))
    .spawn_linked(host.get_cell())
    .await
    .unwrap();
    wait_states(
        &qa,
        &["fp".to_owned()],
        JobState::Completed,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        qa.get_job("fp").await.unwrap().unwrap().return_value,
        Some(json!({"emq:{app}-b:fc1": 10, "emq:{app}-b:fc2": 20}))
    );
    for set in [&parent_worker, &child_worker] {
        set.worker.stop(None);
    }

    // A flow over two slots is refused before anything is written.
    let err = FlowProducer::new(&conn)
        .add(
            FlowJob::new("p", names[0].as_str(), json!({}))
                .options(JobOptions::new().job_id("xp"))
                .child(
                    FlowJob::new("c", names[1].as_str(), json!({}))
                        .options(JobOptions::new().job_id("xc")),
                ),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("hash slot") && err.contains("hash tag"),
        "{err}"
    );
    let (q0, q1) = (
        Queue::new(&conn, &names[0]).await.unwrap(),
        Queue::new(&conn, &names[1]).await.unwrap(),
    );
    assert!(!q0.job_exists("xp").await.unwrap() && !q1.job_exists("xc").await.unwrap());
    host.stop(None);
    conn.close().await;
}

/// One SIGKILL of the primary owning `queue` under a steady load on `conn`;
/// once its replica is promoted, the killed node is started again (it
/// rejoins as the new primary's replica). Returns the report, the adds
/// acknowledged before the kill and how long after it 10 more adds were
/// acknowledged.
async fn kill_under_load(
    cluster: &mut RedisCluster,
    conn: &Connection,
    queue: &str,
) -> (topology::LoadReport, usize, Duration) {
    let load = topology::Load::start(conn, queue).await;
    load.wait_for_adds(100, Duration::from_secs(10)).await;
    let key = format!("emq:{queue}:wait");
    let victim = cluster.primary_of(&key);
    let before = load.acked();
    let killed = Instant::now();
    cluster.kill(victim);
    // The replica is promoted after the node timeout. The old primary comes
    // back as its replica: with the durability mode, writes need one.
    tokio::task::block_in_place(|| cluster.wait_new_primary(&key, victim, Duration::from_secs(30)));
    cluster.restart(victim);
    load.wait_for_adds(10, Duration::from_secs(60)).await;
    let recovered = killed.elapsed();
    cluster.wait_healthy(Duration::from_secs(30));
    assert_ne!(cluster.primary_of(&key), victim);
    load.wait_for_adds(100, Duration::from_secs(20)).await;
    (load.finish().await, before, recovered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_replaced_and_work_carries_on() {
    let mut cluster = RedisCluster::start();
    let names = queues_on_distinct_primaries(&cluster, 2);

    // Without the durability mode: whatever Redis's asynchronous
    // replication lost is counted, not hidden.
    let conn = connect(&cluster).await;
    let (plain, before, recovered) = kill_under_load(&mut cluster, &conn, &names[0]).await;
    eprintln!(
        "cluster failover, durability off: {plain:?}; {before} adds before the SIGKILL, \
         adds flowing again {recovered:?} after it"
    );
    // Every acknowledged job that survived is completed.
    assert_eq!(plain.completed + plain.lost.len(), plain.acked);
    assert!(
        plain.completed > before,
        "work carried on after the failover"
    );
    conn.close().await;

    // With it (WAIT for one replica after every call), on another primary:
    // an acknowledged add was on the replica that is promoted.
    let mut config = ConnectionConfig::with_url(cluster.url());
    config.durability = Some(Durability::default());
    let durable = Connection::connect(config).await.expect("connect");
    let (safe, before, recovered) = kill_under_load(&mut cluster, &durable, &names[1]).await;
    eprintln!(
        "cluster failover, durability on: {safe:?}; {before} adds before the SIGKILL, \
         adds flowing again {recovered:?} after it"
    );
    assert!(
        safe.lost.is_empty(),
        "acknowledged adds lost with the durability mode: {:?}",
        safe.lost
    );
    assert_eq!(safe.completed, safe.acked);
    durable.close().await;
}
