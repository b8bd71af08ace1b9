//! Batches against a real Redis: up to `size` jobs handed to one batch
//! processor and answered per job (a failure fails only its job), each job a
//! normal BullMQ job (its own lock renewed by the LockManager, its events,
//! read back by BullMQ Node as any completed job), taken and finished in one
//! round trip each, with the keyspace N single jobs leave.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::{batch_processor_fn, BatchOptions, BatchResults};
use echomq::{
    JobContext, JobOptions, NewJob, ProcessError, WorkerArgs, WorkerEvent, WorkerSetSpec,
};
use echomq_integration_tests::keyspace::{self, Mask};
use echomq_integration_tests::timeline::now_ms;
use echomq_integration_tests::{bullmq, events, wait_until, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::Actor;
use serde_json::{json, Value as Json};

fn jobs(n: usize, opts: JobOptions) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob {
            name: "b".into(),
            data: json!({ "i": i }),
            options: opts.clone(),
        })
        .collect()
}

use echomq_integration_tests::evalsha_calls;

/// A batch of 50 where jobs 7, 21 and 40 fail: 47 complete in the batch, the
/// 3 failures are retried (attempts 2) and complete on their second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_50_with_3_failures_completes_47_and_retries_3() {
    let (redis, _conn, q) = RedisServer::with_queue("batch").await;
    let c = redis.client().await;
    q.add_bulk(jobs(50, JobOptions::new().attempts(2)))
        .await
        .unwrap();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = sizes.clone();
    let processor = batch_processor_fn(move |batch: Vec<JobContext>| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(batch.len());
            batch
                .iter()
                .map(|job| {
                    let i = job.data()["i"].as_u64().unwrap();
                    if [7, 21, 40].contains(&i) && job.attempt() == 1 {
                        Err(ProcessError::failed(format!("job {i} fails once")))
                    } else {
                        Ok(json!({ "doubled": i * 2 }))
                    }
                })
                .collect::<BatchResults>()
        }
    });
    let (tx, mut events) = tokio::sync::mpsc::channel(1000);
    let mut args = WorkerArgs::batched(q.clone(), processor, BatchOptions::new(50));
    args.events = Some(tx);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    wait_until("50 completed", Duration::from_secs(20), async || {
        c.zcard::<u64, _>("emq:batch:completed").await.unwrap() == 50
    })
    .await;
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes[0], 50, "the first batch takes all 50: {sizes:?}");
    let mut failed = Vec::new();
    let mut completed = 0;
    // Redis may count the last finish before the worker has emitted its
    // event: read events until all 50 completions are in, under a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while completed < 50 {
        let e = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("50 Completed events")
            .expect("the worker's event channel");
        match e {
            WorkerEvent::Failed {
                job_id, retrying, ..
            } => {
                assert!(retrying);
                failed.push(job_id);
            }
            WorkerEvent::Completed { .. } => completed += 1,
            _ => {}
        }
    }
    failed.sort();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert_eq!(completed, 50);
    // Every job is a normal completed job for BullMQ Node: its return value,
    // its finish time, 2 attempts for the three that failed once.
    let ids: Vec<String> = (1..=50).map(|i| i.to_string()).collect();
    let read = bullmq("read-jobs", &redis.url(), "batch", json!({ "ids": ids }));
    let mut retried = 0;
    for id in &ids {
        let j = &read[id];
        assert_eq!(j["state"], "completed", "{id}: {j}");
        let i = j["data"]["i"].as_u64().unwrap();
        assert_eq!(j["returnvalue"], json!({ "doubled": i * 2 }));
        assert!(j["finishedOn"].as_u64().is_some());
        if j["attemptsMade"] == 2 {
            retried += 1;
            assert_eq!(j["stacktrace"].as_array().unwrap().len(), 1, "{j}");
        }
    }
    assert_eq!(retried, 3);
    set.close(Duration::from_secs(5)).await.unwrap();
    host.stop(None);
}

/// Taking and finishing a batch are one round trip each: 20 jobs, one batch
/// of 20 — 20 moveToActive in one pipeline, 20 moveToFinished in another,
/// and the locks renewed meanwhile in one extendLocks per tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_taken_and_finished_in_one_round_trip_each_and_its_locks_renewed() {
    let (redis, _conn, q) = RedisServer::with_queue("rt").await;
    let c = redis.client().await;
    q.add_bulk(jobs(20, JobOptions::new())).await.unwrap();
    let (release, released) = tokio::sync::watch::channel(false);
    let started = Arc::new(AtomicUsize::new(0));
    let seen = started.clone();
    let processor = batch_processor_fn(move |batch: Vec<JobContext>| {
        let mut released = released.clone();
        let seen = seen.clone();
        async move {
            seen.fetch_add(batch.len(), Ordering::SeqCst);
            let _ = released.wait_for(|go| *go).await;
            batch
                .iter()
                .map(|_| Ok(Json::Null))
                .collect::<BatchResults>()
        }
    });
    let mut args = WorkerArgs::batched(q.clone(), processor, BatchOptions::new(20));
    args.options.lock_duration = Duration::from_millis(600);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    let n = started.clone();
    wait_until(
        "a batch of 20 running",
        Duration::from_secs(10),
        async || n.load(Ordering::SeqCst) == 20,
    )
    .await;
    // Three lock lifetimes with the batch held: every lock renewed by the
    // LockManager's one call per tick.
    let lm = set.lock_manager.clone();
    let ticks0 = ractor::call_t!(lm, echomq::LockManagerMsg::GetStats, 2000)
        .unwrap()
        .ticks;
    wait_until("6 renew ticks", Duration::from_secs(10), async || {
        ractor::call_t!(lm, echomq::LockManagerMsg::GetStats, 2000)
            .unwrap()
            .ticks
            >= ticks0 + 6
    })
    .await;
    let stats = ractor::call_t!(lm, echomq::LockManagerMsg::GetStats, 2000).unwrap();
    assert_eq!(stats.last_batch, 20);
    assert_eq!(stats.lost, 0);
    let before = evalsha_calls(&c).await;
    release.send_replace(true);
    wait_until("20 completed", Duration::from_secs(10), async || {
        c.zcard::<u64, _>("emq:rt:completed").await.unwrap() == 20
    })
    .await;
    set.close(Duration::from_secs(5)).await.unwrap();
    let after = evalsha_calls(&c).await;
    // The 20 finishes, and the fetch after them (an empty pipeline of
    // moveToActive: the queue is drained), plus renewals meanwhile.
    let finishes = after - before;
    assert!(
        (20..=20 + 20 + 4).contains(&finishes),
        "{finishes} script calls for 20 finishes"
    );
    let stream: Vec<(String, Vec<(String, String)>)> =
        echomq_integration_tests::events(&c, "emq:rt:events").await;
    let completed = stream.iter().filter(|(e, _)| e == "completed").count();
    let active = stream.iter().filter(|(e, _)| e == "active").count();
    assert_eq!((completed, active), (20, 20), "an event per job");
    host.stop(None);
}

/// A batch leaves the keyspace N single jobs leave: the same 10 jobs
/// processed by a batched worker on one server and by a single-job worker
/// (concurrency 1) on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_leaves_the_keyspace_of_single_jobs() {
    let mut snapshots = Vec::new();
    for batched in [false, true] {
        let (redis, _conn, q) = RedisServer::with_queue("ks").await;
        let c = redis.client().await;
        // One creation time on both servers: the keyspaces differ by nothing
        // but the worker.
        let mut opts = JobOptions::new().attempts(3);
        opts.timestamp = Some(1_700_000_000_000);
        q.add_bulk(jobs(10, opts)).await.unwrap();
        let args = if batched {
            WorkerArgs::batched(
                q.clone(),
                batch_processor_fn(|batch: Vec<JobContext>| async move {
                    batch
                        .iter()
                        .map(|j| Ok(json!(j.data()["i"])))
                        .collect::<BatchResults>()
                }),
                BatchOptions::new(10),
            )
        } else {
            WorkerArgs::new(
                q.clone(),
                echomq::processor_fn(|j: JobContext| async move { Ok(json!(j.data()["i"])) }),
            )
        };
        let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
        let set = WorkerSetSpec::new(args)
            .spawn_linked(host.get_cell())
            .await
            .unwrap();
        wait_until("10 completed", Duration::from_secs(10), async || {
            c.zcard::<u64, _>("emq:ks:completed").await.unwrap() == 10
        })
        .await;
        set.close(Duration::from_secs(5)).await.unwrap();
        host.stop(None);
        let mut snapshot = keyspace::snapshot(
            &c,
            "ks",
            Mask {
                worked: true,
                ..Mask::default()
            },
        )
        .await;
        // Each job's events in the order they came; how the jobs' events
        // interleave is what a batch changes (all take, then all finish).
        if let Some(Json::Array(entry)) = snapshot.get_mut("events") {
            if let Some(Json::Array(stream)) = entry.get_mut(1) {
                stream.sort_by_key(|e| {
                    e["jobId"]
                        .as_str()
                        .unwrap_or_default()
                        .parse::<u64>()
                        .unwrap_or(0)
                });
            }
        }
        snapshots.push(snapshot);
    }
    keyspace::assert_same("batch vs single jobs", &snapshots[0], &snapshots[1]);
}

/// A batch short of `min_size` waits for it, up to its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waits_for_its_min_size_until_its_timeout() {
    let (redis, _conn, q) = RedisServer::with_queue("min").await;
    let c = redis.client().await;
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = sizes.clone();
    let processor = batch_processor_fn(move |batch: Vec<JobContext>| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(batch.len());
            batch
                .iter()
                .map(|_| Ok(Json::Null))
                .collect::<BatchResults>()
        }
    });
    let args = WorkerArgs::batched(
        q.clone(),
        processor,
        BatchOptions::new(10).min_size(5, Duration::from_secs(30)),
    );
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    // Added one by one: the batch starts only once 5 are there.
    for i in 0..5 {
        q.add("m", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap();
    }
    wait_until("5 completed", Duration::from_secs(10), async || {
        c.zcard::<u64, _>("emq:min:completed").await.unwrap() == 5
    })
    .await;
    assert_eq!(*sizes.lock().unwrap(), vec![5], "one batch of the 5");
    set.close(Duration::from_secs(5)).await.unwrap();
    host.stop(None);
}

/// The two ends of `min_size`'s wait, on Redis's clock: one job alone waits
/// the whole timeout and then goes as a batch of one, never before it; a
/// batch that reaches `min_size` while it waits goes at once, long before
/// its timeout. Every job completes once (one `completed` event per id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_short_of_min_size_goes_at_its_timeout_and_at_once_when_min_size_is_reached() {
    let (redis, _conn, q) = RedisServer::with_queue("mint").await;
    let c = redis.client().await;
    let timeout = Duration::from_secs(8);
    let timeout_ms = timeout.as_millis() as u64;
    // Each batch: Redis's time when the processor got it, and its job ids.
    let batches = Arc::new(Mutex::new(Vec::<(u64, Vec<String>)>::new()));
    let (seen, clock) = (batches.clone(), c.clone());
    let processor = batch_processor_fn(move |batch: Vec<JobContext>| {
        let (seen, clock) = (seen.clone(), clock.clone());
        async move {
            let at = now_ms(&clock).await;
            let ids = batch.iter().map(|j| j.id().to_owned()).collect();
            seen.lock().unwrap().push((at, ids));
            batch
                .iter()
                .map(|_| Ok(Json::Null))
                .collect::<BatchResults>()
        }
    });
    let args = WorkerArgs::batched(
        q.clone(),
        processor,
        BatchOptions::new(10).min_size(3, timeout),
    );
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    let limit = Duration::from_secs(120);

    // One job, and no other comes: the batch goes short once the timeout
    // passed. Its wait starts when the job is taken, after `before`.
    let before = now_ms(&c).await;
    let alone = q.add("m", &json!({}), JobOptions::new()).await.unwrap();
    wait_until("the first batch ran", limit, async || {
        !batches.lock().unwrap().is_empty()
    })
    .await;
    let (at, ids) = batches.lock().unwrap()[0].clone();
    assert_eq!(
        ids,
        std::slice::from_ref(&alone),
        "a batch of one, short of min_size"
    );
    assert!(
        at >= before + timeout_ms,
        "the batch went {} ms after the job was added, before its {timeout_ms} ms timeout",
        at - before
    );

    // One job taken and waiting for company, then two more: the third makes
    // min_size and the batch goes without waiting out the timeout (which
    // could not end before `start` + timeout).
    let start = now_ms(&c).await;
    let first = q.add("m", &json!({}), JobOptions::new()).await.unwrap();
    wait_until("the job is taken and waits", limit, async || {
        q.counts().await.unwrap().active == 1
    })
    .await;
    let rest = q.add_bulk(jobs(2, JobOptions::new())).await.unwrap();
    wait_until("the second batch ran", limit, async || {
        batches.lock().unwrap().len() == 2
    })
    .await;
    let (at, mut ids) = batches.lock().unwrap()[1].clone();
    ids.sort();
    let mut want = vec![first.clone()];
    want.extend(rest);
    want.sort();
    assert_eq!(ids, want, "one batch of min_size");
    assert!(
        at < start + timeout_ms,
        "the batch went {} ms after its first job was added: it waited for its timeout",
        at - start
    );
    wait_until("4 completed", limit, async || {
        c.zcard::<u64, _>("emq:mint:completed").await.unwrap() == 4
    })
    .await;
    set.close(Duration::from_secs(5)).await.unwrap();
    host.stop(None);
    let mut completed: Vec<String> = Vec::new();
    for (name, fields) in events(&c, "emq:mint:events").await {
        assert_ne!(name, "failed");
        if name == "completed" {
            completed.push(fields.iter().find(|(k, _)| k == "jobId").unwrap().1.clone());
        }
    }
    completed.sort();
    let mut all = want;
    all.push(alone);
    all.sort();
    assert_eq!(completed, all, "each job completed once");
    assert_eq!(batches.lock().unwrap().len(), 2, "no other batch");
}

/// A worker process SIGKILLed while it holds a whole batch loses nothing:
/// every job of the batch had its own lock, the survivor's stalled checker
/// returns each to wait once its lock expires, and each completes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sigkilled_mid_batch_loses_no_job_of_the_batch() {
    let (redis, _conn, q) = RedisServer::with_queue("kb").await;
    let c = redis.client().await;
    let ids = q
        .add_bulk(
            (0..12)
                .map(|i| NewJob {
                    name: "j".into(),
                    data: json!({"mode": "ok", "ret": i}),
                    options: JobOptions::new(),
                })
                .collect(),
        )
        .await
        .unwrap();
    let opts = json!({
        "batch": 8, "hang": true, "verbose": true,
        "lockDuration": 1000, "stalledChecker": false
    });
    let mut victim = echomq_integration_tests::NodeChild::spawn_rust_worker(
        env!("CARGO_BIN_EXE_worker_process"),
        &redis.url(),
        "kb",
        opts,
    );
    let mut started = 0;
    victim.wait_line(Duration::from_secs(20), |v| {
        if v["ev"] == "start" {
            started += 1;
        }
        started == 8
    });
    victim.kill();
    // The fault happened: the killed process held the batch.
    assert_eq!(q.counts().await.unwrap().active, 8);

    let processor = echomq::processor_fn(|job: JobContext| async move {
        echomq_integration_tests::behave(&job).await
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options.stalled_interval = Duration::from_millis(300);
    args.options.drain_delay = Duration::from_millis(100);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    wait_until(
        "the batch recovered and completed",
        Duration::from_secs(30),
        async || q.counts().await.unwrap().completed == 12,
    )
    .await;
    set.close(Duration::from_secs(5)).await.unwrap();
    host.stop(None);
    let counts = q.counts().await.unwrap();
    assert_eq!(
        (counts.completed, counts.failed, counts.pending()),
        (12, 0, 0),
        "added = completed + failed + pending"
    );
    // Each finished once: one `completed` event per id.
    let events = echomq_integration_tests::events(&c, "emq:kb:events").await;
    let of = |name: &str, id: &str| {
        events
            .iter()
            .filter(|(event, f)| event == name && f.contains(&("jobId".into(), id.into())))
            .count()
    };
    for id in &ids {
        assert_eq!(
            of("completed", id),
            1,
            "job {id} did not complete exactly once"
        );
    }
    let stalled = ids.iter().filter(|id| of("stalled", id) == 1).count();
    assert_eq!(stalled, 8, "the batch was recovered as stalled jobs");
}
