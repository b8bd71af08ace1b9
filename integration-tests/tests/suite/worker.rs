//! The Worker actor against a real Redis: throughput at several concurrencies
//! (every job exactly once), failures and backoff, control messages, ordered
//! close, panics, marker wake-up and a killed blocking connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::worker::{processor_fn, CloseReport, JobContext, ProcessError, WorkerStatus};
use echomq::{
    Backoff, Connection, JobOptions, LockManagerMsg, NewJob, Queue, WorkerArgs, WorkerEvent,
    WorkerMsg, WorkerOptions,
};
use echomq_integration_tests::NullSupervisor;
use echomq_integration_tests::{events, timeline, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor, ActorRef};
use serde_json::{json, Value as Json};

/// A host supervisor that keeps its children as they are (no restarts).
struct Running {
    worker: ActorRef<WorkerMsg>,
    _lm: ActorRef<LockManagerMsg>,
    events: tokio::sync::mpsc::Receiver<WorkerEvent>,
    _host: ActorRef<()>,
}

async fn start(
    queue: &Queue,
    processor: Arc<dyn echomq::Processor>,
    options: WorkerOptions,
) -> Running {
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(10_000);
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options = options;
    args.events = Some(tx);
    let (worker, lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    Running {
        worker,
        _lm: lm,
        events: rx,
        _host: host,
    }
}

async fn status(w: &ActorRef<WorkerMsg>) -> WorkerStatus {
    call_t!(w, WorkerMsg::GetStatus, 2000).unwrap()
}

async fn close(w: &ActorRef<WorkerMsg>, timeout: Duration) -> CloseReport {
    call_t!(
        w,
        WorkerMsg::Close,
        timeout.as_millis() as u64 + 10_000,
        timeout
    )
    .unwrap()
}

async fn zcard(c: &Client, key: &str) -> u64 {
    c.zcard(key).await.unwrap()
}

use echomq_integration_tests::wait_until as wait_for;

async fn add_many(q: &Queue, n: usize, opts: JobOptions) -> Vec<String> {
    let mut ids = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let jobs = chunk
            .iter()
            .map(|i| NewJob {
                name: "n".into(),
                data: json!({ "i": i }),
                options: opts.clone(),
            })
            .collect();
        ids.extend(q.add_bulk(jobs).await.unwrap());
    }
    ids
}

fn opts(concurrency: usize) -> WorkerOptions {
    WorkerOptions::default()
        .concurrency(concurrency)
        .drain_delay(Duration::from_millis(500))
}

async fn exactly_once(concurrency: usize) {
    const N: usize = 2000;
    let (redis, _conn, q) = RedisServer::with_queue("thr").await;
    let c = redis.client().await;
    add_many(&q, N, JobOptions::new()).await;

    let seen: Arc<Mutex<HashMap<String, u32>>> = Default::default();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (s, f, p) = (seen.clone(), in_flight.clone(), peak.clone());
    let processor = processor_fn(move |job: JobContext| {
        let (s, f, p) = (s.clone(), f.clone(), p.clone());
        async move {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            *s.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
            // A yield lets other slots overlap, as real work would.
            tokio::task::yield_now().await;
            f.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, ProcessError>(json!({ "i": job.data()["i"] }))
        }
    });
    let t0 = Instant::now();
    let w = start(&q, processor, opts(concurrency)).await;
    wait_for("all jobs completed", Duration::from_secs(60), async || {
        zcard(&c, "emq:thr:completed").await == N as u64
    })
    .await;
    let elapsed = t0.elapsed();
    // The counter moves right after the finishing call returns.
    wait_for("processed counter", Duration::from_secs(2), async || {
        status(&w.worker).await.processed == N as u64
    })
    .await;
    let st = status(&w.worker).await;
    eprintln!(
        "concurrency {concurrency}: {N} jobs in {elapsed:?} = {:.0} jobs/s, peak in flight {}",
        N as f64 / elapsed.as_secs_f64(),
        peak.load(Ordering::SeqCst)
    );
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), N);
        assert!(seen.values().all(|&n| n == 1), "a job ran twice");
    }
    assert!(peak.load(Ordering::SeqCst) <= concurrency);
    assert_eq!(zcard(&c, "emq:thr:failed").await, 0);
    let active: u64 = c.llen("emq:thr:active").await.unwrap();
    assert_eq!(active, 0);
    assert_eq!(st.processed, N as u64);
    assert!(st.last_fetch_ms.is_some());
    let rv: String = c.hget("emq:thr:7", "returnvalue").await.unwrap();
    assert_eq!(serde_json::from_str::<Json>(&rv).unwrap(), json!({"i": 6}));
    let report = close(&w.worker, Duration::from_secs(5)).await;
    assert!(report.moved_back.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_1_processes_2000_jobs_exactly_once() {
    exactly_once(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_16_processes_2000_jobs_exactly_once() {
    exactly_once(16).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_100_processes_2000_jobs_exactly_once() {
    exactly_once(100).await;
}

fn always_fail() -> Arc<dyn echomq::Processor> {
    processor_fn(|_job: JobContext| async move { Err::<Json, _>(ProcessError::failed("boom")) })
}

#[tokio::test]
async fn retry_with_fixed_backoff_lands_in_delayed_with_bullmq_score() {
    let (redis, _conn, q) = RedisServer::with_queue("rt").await;
    let c = redis.client().await;
    let id = q
        .add(
            "x",
            &json!({}),
            JobOptions::new().attempts(3).backoff(Backoff::Fixed {
                delay: 60_000,
                jitter: None,
            }),
        )
        .await
        .unwrap();
    let w = start(&q, always_fail(), opts(1)).await;
    wait_for("job delayed", Duration::from_secs(5), async || {
        zcard(&c, "emq:rt:delayed").await == 1
    })
    .await;
    let score: f64 = c.zscore("emq:rt:delayed", &id).await.unwrap();
    let h: HashMap<String, String> = c.hgetall(format!("emq:rt:{id}")).await.unwrap();
    assert_eq!(h["atm"], "1");
    assert_eq!(h["failedReason"], "boom");
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&h["stacktrace"]).unwrap(),
        vec!["Error: boom".to_string()]
    );
    assert_eq!(h["delay"], "60000");
    // The score is due×4096 (+ a sequence inside that millisecond); due is
    // the failure time + 60 s, which the `delayed` event carries.
    let ev = events(&c, "emq:rt:events").await;
    let delayed = ev.iter().find(|(n, _)| n == "delayed").unwrap();
    let due: u64 = delayed
        .1
        .iter()
        .find(|(k, _)| k == "delay")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let processed_on: u64 = h["processedOn"].parse().unwrap();
    assert!(
        due >= processed_on + 60_000 && due < processed_on + 61_000,
        "due {due} processedOn {processed_on}"
    );
    let score = score as u64;
    assert_eq!(score >> 12, due);
    assert!(score - due * 4096 < 4096);
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn exponential_backoff_doubles_then_fails_for_good() {
    let (redis, _conn, q) = RedisServer::with_queue("ex").await;
    let c = redis.client().await;
    let id = q
        .add(
            "x",
            &json!({}),
            JobOptions::new().attempts(3).backoff(Backoff::Exponential {
                delay: 200,
                jitter: None,
            }),
        )
        .await
        .unwrap();
    let w = start(&q, always_fail(), opts(1)).await;
    wait_for("final failure", Duration::from_secs(10), async || {
        zcard(&c, "emq:ex:failed").await == 1
    })
    .await;
    // Each `delayed` entry carries the due time; its stream id, the time of
    // the failure: attempt 1 waits 200 ms, attempt 2 waits 400 ms.
    let waits: Vec<i64> = echomq_integration_tests::timeline::stamps(&c, "emq:ex:events")
        .await
        .into_iter()
        .filter(|s| s.name == "delayed")
        .map(|s| {
            let due: i64 = s
                .fields
                .iter()
                .find(|(k, _)| k == "delay")
                .unwrap()
                .1
                .parse()
                .unwrap();
            due - s.at_ms as i64
        })
        .collect();
    assert_eq!(waits.len(), 2);
    assert!((195..=205).contains(&waits[0]), "{waits:?}");
    assert!((395..=405).contains(&waits[1]), "{waits:?}");
    let h: HashMap<String, String> = c.hgetall(format!("emq:ex:{id}")).await.unwrap();
    assert_eq!(h["atm"], "3");
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&h["stacktrace"])
            .unwrap()
            .len(),
        3
    );
    let names: Vec<String> = events(&c, "emq:ex:events")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"retries-exhausted".to_string()));
    let mut w = w;
    let mut fails = Vec::new();
    while let Ok(e) = w.events.try_recv() {
        if let WorkerEvent::Failed { retrying, .. } = e {
            fails.push(retrying);
        }
    }
    assert_eq!(fails, vec![true, true, false]);
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn retry_without_backoff_goes_straight_back_to_wait() {
    let (redis, _conn, q) = RedisServer::with_queue("nb").await;
    let c = redis.client().await;
    let id = q
        .add("x", &json!({}), JobOptions::new().attempts(2))
        .await
        .unwrap();
    let w = start(&q, always_fail(), opts(1)).await;
    wait_for("final failure", Duration::from_secs(5), async || {
        zcard(&c, "emq:nb:failed").await == 1
    })
    .await;
    let names: Vec<String> = events(&c, "emq:nb:events")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(!names.contains(&"delayed".to_string()));
    let h: HashMap<String, String> = c.hgetall(format!("emq:nb:{id}")).await.unwrap();
    assert_eq!(h["atm"], "2");
    assert_eq!(h["ats"], "2");
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn unrecoverable_error_fails_at_once() {
    let (redis, _conn, q) = RedisServer::with_queue("un").await;
    let c = redis.client().await;
    let id = q
        .add("x", &json!({}), JobOptions::new().attempts(5))
        .await
        .unwrap();
    let p = processor_fn(|_job: JobContext| async move {
        Err::<Json, _>(ProcessError::unrecoverable("fatal"))
    });
    let w = start(&q, p, opts(1)).await;
    wait_for("failure", Duration::from_secs(5), async || {
        zcard(&c, "emq:un:failed").await == 1
    })
    .await;
    let h: HashMap<String, String> = c.hgetall(format!("emq:un:{id}")).await.unwrap();
    assert_eq!(h["atm"], "1");
    assert_eq!(h["failedReason"], "fatal");
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn deferred_failure_fails_without_running_the_processor() {
    let (redis, _conn, q) = RedisServer::with_queue("df").await;
    let c = redis.client().await;
    let id = q
        .add("x", &json!({}), JobOptions::new().attempts(5))
        .await
        .unwrap();
    let _: () = c
        .hset(
            format!("emq:df:{id}"),
            ("defa", "job stalled more than allowable limit"),
        )
        .await
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let p = processor_fn(move |_job: JobContext| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let w = start(&q, p, opts(1)).await;
    wait_for("failure", Duration::from_secs(5), async || {
        zcard(&c, "emq:df:failed").await == 1
    })
    .await;
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let h: HashMap<String, String> = c.hgetall(format!("emq:df:{id}")).await.unwrap();
    assert_eq!(h["failedReason"], "job stalled more than allowable limit");
    assert!(!h.contains_key("defa"));
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn max_started_attempts_fails_on_pick_up() {
    let (redis, _conn, q) = RedisServer::with_queue("ms").await;
    let c = redis.client().await;
    let id = q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    let _: () = c.hset(format!("emq:ms:{id}"), ("ats", "2")).await.unwrap();
    let mut o = opts(1);
    o.max_started_attempts = Some(2);
    let w = start(&q, always_fail(), o).await;
    wait_for("failure", Duration::from_secs(5), async || {
        zcard(&c, "emq:ms:failed").await == 1
    })
    .await;
    let h: HashMap<String, String> = c.hgetall(format!("emq:ms:{id}")).await.unwrap();
    assert_eq!(h["failedReason"], "job started more than allowable limit");
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn panicking_processor_fails_its_job_and_the_worker_goes_on() {
    let (redis, _conn, q) = RedisServer::with_queue("pn").await;
    let c = redis.client().await;
    let bad = q.add("bad", &json!({}), JobOptions::new()).await.unwrap();
    let good = q.add("good", &json!({}), JobOptions::new()).await.unwrap();
    let p = processor_fn(|job: JobContext| async move {
        if job.name() == "bad" {
            panic!("kaboom");
        }
        Ok::<_, ProcessError>(json!("fine"))
    });
    let w = start(&q, p, opts(1)).await;
    wait_for("both finished", Duration::from_secs(5), async || {
        zcard(&c, "emq:pn:failed").await == 1 && zcard(&c, "emq:pn:completed").await == 1
    })
    .await;
    let reason: String = c
        .hget(format!("emq:pn:{bad}"), "failedReason")
        .await
        .unwrap();
    assert_eq!(reason, "processor panicked: kaboom");
    let rv: String = c
        .hget(format!("emq:pn:{good}"), "returnvalue")
        .await
        .unwrap();
    assert_eq!(rv, "\"fine\"");
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn progress_logs_and_data_from_the_processor() {
    let (redis, _conn, q) = RedisServer::with_queue("pl").await;
    let c = redis.client().await;
    let id = q
        .add("x", &json!({"v": 1}), JobOptions::new())
        .await
        .unwrap();
    let p = processor_fn(|job: JobContext| async move {
        job.update_progress(&json!(50)).await.unwrap();
        job.log("half way").await.unwrap();
        job.update_data(&json!({"v": 2})).await.unwrap();
        Ok::<_, ProcessError>(json!(job.attempt()))
    });
    let w = start(&q, p, opts(1)).await;
    wait_for("completed", Duration::from_secs(5), async || {
        zcard(&c, "emq:pl:completed").await == 1
    })
    .await;
    let h: HashMap<String, String> = c.hgetall(format!("emq:pl:{id}")).await.unwrap();
    assert_eq!(h["progress"], "50");
    assert_eq!(h["data"], r#"{"v":2}"#);
    assert_eq!(h["returnvalue"], "1");
    let logs: Vec<String> = c.lrange(format!("emq:pl:{id}:logs"), 0, -1).await.unwrap();
    assert_eq!(logs, vec!["half way"]);
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn pause_and_resume() {
    let (redis, _conn, q) = RedisServer::with_queue("pr").await;
    let c = redis.client().await;
    let p = processor_fn(|_job: JobContext| async move { Ok::<_, ProcessError>(Json::Null) });
    let mut o = opts(4);
    // Resume must not wait for a drain-delay timeout.
    o.drain_delay = Duration::from_secs(10);
    let w = start(&q, p, o).await;
    w.worker.cast(WorkerMsg::Pause).unwrap();
    assert!(status(&w.worker).await.paused);
    add_many(&q, 20, JobOptions::new()).await;
    // The observation window is the claim: for 1.2 s a paused worker takes
    // nothing (with 20 jobs waiting, one take would show at once).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(zcard(&c, "emq:pr:completed").await, 0);
    let active: u64 = c.llen("emq:pr:active").await.unwrap();
    assert_eq!(active, 0, "a paused worker took a job");
    w.worker.cast(WorkerMsg::Resume).unwrap();
    wait_for("all completed", Duration::from_secs(5), async || {
        zcard(&c, "emq:pr:completed").await == 20
    })
    .await;
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_concurrency_up_and_down_under_load() {
    let (redis, _conn, q) = RedisServer::with_queue("sc").await;
    let c = redis.client().await;
    add_many(&q, 400, JobOptions::new()).await;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (f, pk) = (in_flight.clone(), peak.clone());
    let p = processor_fn(move |_job: JobContext| {
        let (f, pk) = (f.clone(), pk.clone());
        async move {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            pk.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            f.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let w = start(&q, p, opts(2)).await;
    wait_for(
        "10 done at concurrency 2",
        Duration::from_secs(10),
        async || zcard(&c, "emq:sc:completed").await >= 10,
    )
    .await;
    assert!(peak.load(Ordering::SeqCst) <= 2);
    w.worker.cast(WorkerMsg::SetConcurrency(12)).unwrap();
    wait_for("12 in flight", Duration::from_secs(3), async || {
        in_flight.load(Ordering::SeqCst) == 12
    })
    .await;
    assert!(peak.load(Ordering::SeqCst) <= 12);
    w.worker.cast(WorkerMsg::SetConcurrency(1)).unwrap();
    // Extra slots end with their current job (30 ms), then one stays: from
    // then on, 10 more jobs run one at a time.
    wait_for("one in flight", Duration::from_secs(3), async || {
        in_flight.load(Ordering::SeqCst) <= 1
    })
    .await;
    peak.store(0, Ordering::SeqCst);
    let done = zcard(&c, "emq:sc:completed").await;
    wait_for(
        "10 more at concurrency 1",
        Duration::from_secs(10),
        async || zcard(&c, "emq:sc:completed").await >= done + 10,
    )
    .await;
    assert_eq!(peak.load(Ordering::SeqCst), 1);
    assert_eq!(status(&w.worker).await.concurrency, 1);
    assert!(zcard(&c, "emq:sc:completed").await < 400);
    close(&w.worker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_waits_for_running_jobs_then_moves_the_rest_back_none_lost() {
    let (redis, _conn, q) = RedisServer::with_queue("cl").await;
    let c = redis.client().await;
    // Two quick jobs finish within the deadline; two slow ones are cancelled.
    let quick = add_many(&q, 2, JobOptions::new()).await;
    let p = processor_fn(|job: JobContext| async move {
        // Quick jobs are slow enough to be still running when Close
        // arrives, even on a loaded machine.
        let ms = if job.data()["slow"] == json!(true) {
            60_000
        } else {
            1500
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = job.cancelled() => {}
        }
        Ok::<_, ProcessError>(Json::Null)
    });
    let slow1 = q
        .add("s", &json!({"slow": true}), JobOptions::new())
        .await
        .unwrap();
    let slow2 = q
        .add("s", &json!({"slow": true}), JobOptions::new())
        .await
        .unwrap();
    add_many(&q, 10, JobOptions::new()).await;
    let w = start(&q, p, opts(4)).await;
    wait_for("4 running", Duration::from_secs(3), async || {
        status(&w.worker).await.active_jobs.len() == 4
    })
    .await;
    let before = status(&w.worker).await.active_jobs;
    let report = close(&w.worker, Duration::from_millis(2500)).await;
    eprintln!("held before close {before:?}; report {report:?}");
    assert_eq!(report.finished_in_time, 2);
    let mut moved = report.moved_back.clone();
    moved.sort();
    let mut slow = vec![slow1.clone(), slow2.clone()];
    slow.sort();
    assert_eq!(moved, slow);
    for id in &quick {
        assert_eq!(
            q.get_job_state(id).await.unwrap(),
            echomq::JobState::Completed
        );
    }
    // Nothing lost: 2 completed, 12 waiting (the 10 never taken + the 2 moved
    // back, which run next), nothing active, no lock left.
    let completed: Vec<String> = c
        .zrange("emq:cl:completed", 0, -1, None, false, None, false)
        .await
        .unwrap();
    assert_eq!(
        completed.len(),
        2,
        "completed {completed:?}, events {:?}",
        events(&c, "emq:cl:events").await
    );
    let wait: Vec<String> = c.lrange("emq:cl:wait", 0, -1).await.unwrap();
    assert_eq!(wait.len(), 12);
    assert!(wait[10..].contains(&slow1) && wait[10..].contains(&slow2));
    let active: u64 = c.llen("emq:cl:active").await.unwrap();
    assert_eq!(active, 0);
    assert!(echomq_integration_tests::keys(&c, "emq:cl:*:lock")
        .await
        .is_empty());
    // The worker stops itself after answering.
    w.worker
        .wait(Some(Duration::from_secs(5)))
        .await
        .expect("the closed worker stops itself");
}

#[tokio::test]
async fn job_added_while_the_worker_blocks_is_taken_at_once() {
    let (redis, _conn, q) = RedisServer::with_queue("wk").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let p = processor_fn(move |_job: JobContext| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut o = opts(1);
    o.drain_delay = Duration::from_secs(10);
    o.name = Some("blk".into());
    let w = start(&q, p, o).await;
    // Until it found the queue empty and blocks on the marker.
    let c = redis.client().await;
    wait_for(
        "blocked on the marker",
        Duration::from_secs(5),
        async || {
            client_list(&c).await.lines().any(|l| {
                l.contains(":w:blk ") && l.contains("cmd=bzpopmin") && l.contains(" flags=b ")
            })
        },
    )
    .await;
    let added = Instant::now();
    let id = q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    let ran = tokio::time::timeout(Duration::from_secs(8), rx.recv())
        .await
        .unwrap()
        .unwrap();
    eprintln!("marker wake-up latency: {:?}", ran - added);
    // At once means by the marker, not at the end of the 10 s read: on
    // Redis's clock, from the add to the take, under half of it (a loaded
    // machine may take a while to wake; only the read's timeout would take 10 s).
    let stamps = timeline::stamps(&c, "emq:wk:events").await;
    let at = |name: &str| {
        stamps
            .iter()
            .find(|s| s.name == name && s.job_id == id)
            .unwrap_or_else(|| panic!("no {name} event: {stamps:?}"))
            .at_ms
    };
    let latency = at("active") - at("added");
    assert!(latency < 5000, "taken {latency} ms after its add");
    close(&w.worker, Duration::from_secs(1)).await;
}

/// A stop does not wait for the fetch loop, so a moveToActive already on its
/// way can reach Redis after the Worker stopped: here a `CLIENT PAUSE WRITE`
/// (what a failover does) holds it at the server while the Worker stops. The
/// job that call takes must not run under the stopped worker: it goes back
/// to `wait`, for another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_taken_after_the_worker_stopped_goes_back_to_wait() {
    let (redis, _conn, q) = RedisServer::with_queue("late").await;
    let c = redis.client().await;
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let r = ran.clone();
    let p = processor_fn(move |job: JobContext| {
        let r = r.clone();
        async move {
            r.lock().unwrap().push(job.id().to_owned());
            Ok::<_, ProcessError>(Json::Null)
        }
    });
    let mut o = opts(1);
    o.drain_delay = Duration::from_secs(10);
    let w = start(&q, p, o).await;
    let blocked_on = |cmd: &'static str| {
        let c = c.clone();
        async move {
            client_list(&c)
                .await
                .lines()
                .any(|l| l.contains(&format!(" cmd={cmd} ")) && l.contains(" flags=b "))
        }
    };
    wait_for(
        "blocked on the marker",
        Duration::from_secs(5),
        async || blocked_on("bzpopmin").await,
    )
    .await;
    // The job falls due in 300 ms; the worker's due timer then calls
    // moveToActive, which the pause holds at the server.
    let id = q
        .add(
            "late",
            &json!({}),
            JobOptions::new().delay(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let pause = |args: Vec<&'static str>| {
        let c = c.clone();
        async move {
            let _: Value = c
                .custom(
                    fred::types::CustomCommand::new_static(
                        "CLIENT",
                        fred::types::ClusterHash::FirstKey,
                        false,
                    ),
                    args,
                )
                .await
                .unwrap();
        }
    };
    pause(vec!["PAUSE", "30000", "WRITE"]).await;
    wait_for(
        "the due fetch held by the pause",
        Duration::from_secs(10),
        async || blocked_on("evalsha").await,
    )
    .await;
    w.worker.stop(None);
    w.worker.wait(Some(Duration::from_secs(5))).await.unwrap();
    pause(vec!["UNPAUSE"]).await;
    // The late call took the job; it is handed back (moveJobFromActiveToWait:
    // `waiting` after `active`, no attempt counted, no lock left).
    wait_for(
        "the job handed back or run",
        Duration::from_secs(10),
        async || {
            let stamps = timeline::stamps(&c, "emq:late:events").await;
            let back = stamps
                .iter()
                .any(|s| s.name == "waiting" && s.job_id == id && s.prev == "active");
            let run = !ran.lock().unwrap().is_empty();
            run || (back && q.get_job_state(&id).await.unwrap() == echomq::JobState::Waiting)
        },
    )
    .await;
    let ran_by_stopped = ran.lock().unwrap().clone();
    let evs = events(&c, "emq:late:events").await;
    assert!(
        ran_by_stopped.is_empty(),
        "the stopped worker ran {ran_by_stopped:?}: {evs:?}"
    );
    let lock: Option<String> = c.get(format!("emq:late:{id}:lock")).await.unwrap();
    assert_eq!(lock, None);
    let atm: Option<String> = c.hget(format!("emq:late:{id}"), "atm").await.unwrap();
    assert_eq!(atm, None, "no attempt counted");
}

async fn client_list(c: &Client) -> String {
    c.custom(
        fred::types::CustomCommand::new_static("CLIENT", fred::types::ClusterHash::FirstKey, false),
        vec!["LIST"],
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn killed_blocking_connection_does_not_leave_a_deaf_worker() {
    let redis = RedisServer::start();
    let conn: Connection = redis.connect().await;
    let c = redis.client().await;
    let q = Queue::new(&conn, "kill").await.unwrap();
    let p = processor_fn(|_job: JobContext| async move { Ok::<_, ProcessError>(Json::Null) });
    let mut o = opts(1);
    o.name = Some("w1".into());
    o.drain_delay = Duration::from_secs(10);
    let w = start(&q, p, o).await;
    // BullMQ's name: emq:<base64("kill")>:w:w1 — what Queue.getWorkers lists.
    let name = "emq:a2lsbA==:w:w1";
    let mut id = String::new();
    wait_for(
        "named blocking connection",
        Duration::from_secs(3),
        async || {
            let list = client_list(&c).await;
            match list.lines().find(|l| l.contains(&format!("name={name} "))) {
                Some(line) => {
                    id = line
                        .split_whitespace()
                        .find_map(|f| f.strip_prefix("id="))
                        .unwrap()
                        .to_owned();
                    line.contains("cmd=bzpopmin")
                }
                None => false,
            }
        },
    )
    .await;
    let _: Value = c
        .custom(
            fred::types::CustomCommand::new_static(
                "CLIENT",
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            vec!["KILL", "ID", &id],
        )
        .await
        .unwrap();
    // It blocks again on a fresh, named connection, and a job added then is
    // taken.
    wait_for("renamed connection", Duration::from_secs(5), async || {
        client_list(&c).await.lines().any(|l| {
            l.contains(&format!("name={name} "))
                && !l.contains(&format!("id={id} "))
                && l.contains("cmd=bzpopmin")
        })
    })
    .await;
    q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    let c2 = c.clone();
    wait_for(
        "job processed after the kill",
        Duration::from_secs(5),
        async || zcard(&c2, "emq:kill:completed").await == 1,
    )
    .await;
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn rate_limited_and_self_delayed_jobs_count_no_attempt() {
    let (redis, _conn, q) = RedisServer::with_queue("rl").await;
    let c = redis.client().await;
    let limited = q
        .add("limited", &json!({}), JobOptions::new())
        .await
        .unwrap();
    let delayed = q
        .add("delayed", &json!({}), JobOptions::new())
        .await
        .unwrap();
    let p = processor_fn(|job: JobContext| async move {
        match (job.name(), job.job().attempts_started) {
            ("limited", 1) => Err(ProcessError::RateLimited),
            ("delayed", 1) => Err(ProcessError::Delay {
                delay: Duration::from_millis(300),
            }),
            _ => Ok(json!("done")),
        }
    });
    let w = start(&q, p, opts(1)).await;
    wait_for("both completed", Duration::from_secs(5), async || {
        zcard(&c, "emq:rl:completed").await == 2
    })
    .await;
    for id in [&limited, &delayed] {
        let h: HashMap<String, String> = c.hgetall(format!("emq:rl:{id}")).await.unwrap();
        // Two starts, one attempt made (the completion).
        assert_eq!(
            (h["ats"].as_str(), h["atm"].as_str()),
            ("2", "1"),
            "job {id}"
        );
    }
    let names: Vec<String> = events(&c, "emq:rl:events")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"delayed".to_string()));
    close(&w.worker, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn killed_worker_leaves_no_blocking_connection_behind() {
    let (redis, _conn, q) = RedisServer::with_queue("gone").await;
    let c = redis.client().await;
    let p = processor_fn(|_job: JobContext| async move { Ok::<_, ProcessError>(Json::Null) });
    let mut o = opts(1);
    o.name = Some("w2".into());
    let w = start(&q, p, o).await;
    let name = "name=emq:Z29uZQ==:w:w2 ";
    wait_for("named connection", Duration::from_secs(3), async || {
        client_list(&c).await.contains(name)
    })
    .await;
    // Kill skips post_stop: the fetch task must notice on its own.
    w.worker.kill();
    wait_for("connection closed", Duration::from_secs(3), async || {
        !client_list(&c).await.contains(name)
    })
    .await;
}

fn always_complete(runs: Arc<AtomicUsize>) -> Arc<dyn echomq::Processor> {
    processor_fn(move |_job: JobContext| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(json!("done"))
        }
    })
}

#[tokio::test]
async fn max_started_attempts_zero_means_no_limit() {
    // BullMQ's `maxStartedAttempts: 0` (like undefined) sets no limit.
    let (redis, _conn, q) = RedisServer::with_queue("ms0").await;
    let c = redis.client().await;
    let id = q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    let _: () = c.hset(format!("emq:ms0:{id}"), ("ats", "5")).await.unwrap();
    let mut o = opts(1);
    o.max_started_attempts = Some(0);
    let runs = Arc::new(AtomicUsize::new(0));
    let w = start(&q, always_complete(runs.clone()), o).await;
    wait_for("completion", Duration::from_secs(5), async || {
        zcard(&c, "emq:ms0:completed").await == 1
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(zcard(&c, "emq:ms0:failed").await, 0);
    close(&w.worker, Duration::from_secs(1)).await;
}

/// A job whose completion the script refuses (children pending or failed)
/// is failed with Node's own `failedReason`.
async fn refused_completion_reason(queue: &str, children_key: &str) -> String {
    let (redis, _conn, q) = RedisServer::with_queue(queue).await;
    let c = redis.client().await;
    let id = q
        .add("parent", &json!({}), JobOptions::new())
        .await
        .unwrap();
    let key = format!("emq:{queue}:{id}:{children_key}");
    if children_key == "dependencies" {
        let _: () = c.sadd(&key, format!("emq:{queue}:child")).await.unwrap();
    } else {
        let _: () = c
            .zadd(
                &key,
                None,
                None,
                false,
                false,
                (1.0, format!("emq:{queue}:child")),
            )
            .await
            .unwrap();
    }
    let w = start(&q, always_complete(Arc::default()), opts(1)).await;
    wait_for("failure", Duration::from_secs(5), async || {
        zcard(&c, &format!("emq:{queue}:failed")).await == 1
    })
    .await;
    let h: HashMap<String, String> = c.hgetall(format!("emq:{queue}:{id}")).await.unwrap();
    close(&w.worker, Duration::from_secs(1)).await;
    h["failedReason"].clone()
}

#[tokio::test]
async fn pending_children_refusal_has_nodes_failed_reason() {
    assert_eq!(
        refused_completion_reason("pc4", "dependencies").await,
        "Job 1 has pending dependencies. moveToFinished"
    );
}

#[tokio::test]
async fn failed_children_refusal_has_nodes_failed_reason() {
    assert_eq!(
        refused_completion_reason("fc9", "unsuccessful").await,
        "Cannot complete job 1 because it has at least one failed child. moveToFinished"
    );
}
