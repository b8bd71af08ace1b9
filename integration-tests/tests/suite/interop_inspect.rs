//! Inspection across clients: Node's `getWorkers` lists EchoMQ workers, and
//! getRanges / getJobs / counts / getState agree on both sides for a queue
//! holding jobs in every state.

use std::time::{Duration, Instant};

use echomq::worker::{processor_fn, JobContext};
use echomq::{JobOptions, JobState, WorkerArgs, WorkerMsg};
use echomq_integration_tests::{bullmq, NodeChild, RedisServer};
use echomq_integration_tests::{wait_until, NullSupervisor};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

fn base64(s: &str) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &x)| acc | (x as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_get_workers_lists_echomq_workers() {
    let (redis, _conn, queue) = RedisServer::with_queue("wq").await;
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let mut workers = Vec::new();
    for name in ["r1", "r2"] {
        let p = processor_fn(|_job: JobContext| async move { Ok(Json::Null) });
        let mut args = WorkerArgs::new(queue.clone(), p);
        args.options.name = Some(name.into());
        args.options.drain_delay = Duration::from_millis(200);
        let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
            .await
            .unwrap();
        workers.push(w);
    }
    let node = NodeChild::spawn("worker.js", &redis.url(), "wq", json!({"name": "n1"}));
    // The blocking connections are named when first opened.
    let want = |n: &str| format!("emq:{}:w:{n}", base64("wq"));
    let mut raw: Vec<String> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let listed = bullmq("workers", &redis.url(), "wq", json!({}));
        raw = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                assert_eq!(w["name"], "wq");
                w["rawname"].as_str().unwrap().to_owned()
            })
            .collect();
        raw.sort();
        if raw.len() == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(raw, [want("n1"), want("r1"), want("r2")]);
    node.finish();
    for w in workers {
        call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(1)).unwrap();
    }
    // A closed Rust worker drops out of the list.
    let listed = bullmq("workers", &redis.url(), "wq", json!({}));
    assert_eq!(listed, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_jobs_counts_and_states_agree_on_both_sides() {
    let (redis, _conn, queue) = RedisServer::with_queue("rg").await;
    let c = redis.client().await;
    let url = redis.url();

    // 6 completed and 4 failed, finished by a Rust worker.
    for i in 0..10 {
        let data = if i % 5 < 3 {
            json!({"mode": "ok", "ret": i})
        } else {
            json!({"mode": "fail", "reason": format!("no {i}")})
        };
        queue.add("done", &data, JobOptions::new()).await.unwrap();
    }
    let p =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(queue.clone(), p);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    wait_until("10 finished", Duration::from_secs(10), async || {
        let n: u64 = c.zcard("emq:rg:completed").await.unwrap();
        let f: u64 = c.zcard("emq:rg:failed").await.unwrap();
        n + f == 10
    })
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(1)).unwrap();

    // 2 active: held by a hanging Node worker.
    bullmq(
        "add-jobs",
        &url,
        "rg",
        json!({"jobs": [{"name": "act", "data": {}}, {"name": "act", "data": {}}]}),
    );
    let hang = NodeChild::spawn(
        "worker.js",
        &url,
        "rg",
        json!({"hang": true, "concurrency": 2, "skipStalledCheck": true}),
    );
    wait_until("2 active", Duration::from_secs(10), async || {
        c.llen::<u64, _>("emq:rg:active").await.unwrap() == 2
    })
    .await;
    // 5 waiting (one lifo), 3 prioritized, 4 delayed; half from each side.
    for i in 0..3 {
        queue
            .add("w", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap();
    }
    bullmq(
        "add-jobs",
        &url,
        "rg",
        json!({"jobs": [
            {"name": "w", "data": {}},
            {"name": "w", "data": {}, "opts": {"lifo": true}},
            {"name": "p", "data": {}, "opts": {"priority": 3}},
            {"name": "d", "data": {}, "opts": {"delay": 3600000}},
            {"name": "d", "data": {}, "opts": {"delay": 1800000}},
        ]}),
    );
    for prio in [1, 7] {
        queue
            .add("p", &json!({}), JobOptions::new().priority(prio))
            .await
            .unwrap();
    }
    for secs in [600, 7200] {
        queue
            .add(
                "d",
                &json!({}),
                JobOptions::new().delay(Duration::from_secs(secs)),
            )
            .await
            .unwrap();
    }

    let rc = queue.counts().await.unwrap();
    let nc = bullmq("counts", &url, "rg", json!({}));
    assert_eq!(
        (
            rc.waiting,
            rc.active,
            rc.prioritized,
            rc.delayed,
            rc.completed,
            rc.failed
        ),
        (5, 2, 3, 4, 6, 4)
    );
    for (k, v) in [
        ("waiting", rc.waiting),
        ("active", rc.active),
        ("prioritized", rc.prioritized),
        ("delayed", rc.delayed),
        ("completed", rc.completed),
        ("failed", rc.failed),
        ("waiting-children", rc.waiting_children),
    ] {
        assert_eq!(nc[k], json!(v), "{k}");
    }

    let states = [
        (JobState::Waiting, "waiting"),
        (JobState::Active, "active"),
        (JobState::Prioritized, "prioritized"),
        (JobState::Delayed, "delayed"),
        (JobState::Completed, "completed"),
        (JobState::Failed, "failed"),
    ];
    let combos: Vec<Vec<usize>> = vec![
        vec![0],
        vec![1],
        vec![2],
        vec![3],
        vec![4],
        vec![5],
        vec![0, 1],
        vec![4, 5],
        vec![3, 2, 0],
        vec![0, 1, 2, 3, 4, 5],
    ];
    let mut queries = Vec::new();
    let mut rust_answers = Vec::new();
    for combo in &combos {
        let rs: Vec<JobState> = combo.iter().map(|&i| states[i].0).collect();
        let ns: Vec<&str> = combo.iter().map(|&i| states[i].1).collect();
        for (start, end) in [(0, -1), (0, 1), (1, 3), (2, 100)] {
            for asc in [false, true] {
                rust_answers.push(
                    queue
                        .get_ranges(
                            &rs,
                            start,
                            end,
                            if asc {
                                echomq::RangeOrder::Ascending
                            } else {
                                echomq::RangeOrder::Descending
                            },
                        )
                        .await
                        .unwrap(),
                );
                queries.push(json!({"types": ns, "start": start, "end": end, "asc": asc}));
            }
        }
        let rust: Vec<String> = queue
            .get_jobs(&rs, 0, -1, echomq::RangeOrder::Ascending)
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect();
        let node = bullmq(
            "get-jobs",
            &url,
            "rg",
            json!({"types": ns, "start": 0, "end": -1, "asc": true}),
        );
        assert_eq!(json!(rust), node, "getJobs {ns:?}");
    }
    let node_answers = bullmq("get-ranges-many", &url, "rg", json!({ "queries": queries }));
    assert_eq!(rust_answers.len(), 80);
    for (i, rust) in rust_answers.iter().enumerate() {
        assert_eq!(json!(rust), node_answers[i], "getRanges {}", queries[i]);
    }

    // getState agrees for every job (item 47).
    let all = queue
        .get_ranges(&states.map(|s| s.0), 0, -1, echomq::RangeOrder::Ascending)
        .await
        .unwrap();
    assert_eq!(all.len(), 24);
    let node = bullmq("read-jobs", &url, "rg", json!({ "ids": all }));
    for id in &all {
        let rust = queue.get_job_state(id).await.unwrap();
        let name = states.iter().find(|s| s.0 == rust).unwrap().1;
        assert_eq!(node[id]["state"], json!(name), "state of {id}");
    }
    // A job a live Node worker holds is refused removal (item 71).
    let active = queue
        .get_ranges(&[JobState::Active], 0, -1, echomq::RangeOrder::Ascending)
        .await
        .unwrap();
    assert_eq!(
        queue.remove(&active[0], false).await.unwrap(),
        echomq::queue::RemoveOutcome::Locked
    );
    assert!(queue.get_job(&active[0]).await.unwrap().is_some());
    drop(hang);
}
