//! A real EchoMQ Worker drives job schedulers: taking an iteration produces the
//! next one (as BullMQ workers do), so an `every` scheduler keeps producing on
//! time, without duplicates, and two racing workers create no extra iteration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::worker::processor_fn;
use echomq::{JobSchedulers, SchedulerSpec, WorkerArgs, WorkerMsg, WorkerOptions, WorkerSetSpec};
use echomq_integration_tests::{timeline, wait_until, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_produce_every_iteration_exactly_once() {
    let (redis, conn, q) = RedisServer::with_queue("sched").await;
    let c = redis.client().await;
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let (host, _) = Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let mut sets = Vec::new();
    for w in 0..2 {
        let r = runs.clone();
        let processor = processor_fn(move |ctx| {
            let r = r.clone();
            async move {
                *r.lock().unwrap().entry(ctx.job().id.clone()).or_default() += 1;
                Ok(serde_json::Value::Null)
            }
        });
        let mut args = WorkerArgs::new(q.clone(), processor);
        args.options = WorkerOptions::default()
            .concurrency(4)
            .name(format!("w{w}"))
            .drain_delay(Duration::from_millis(100));
        sets.push(
            WorkerSetSpec::new(args)
                .spawn_linked(host.get_cell())
                .await
                .unwrap(),
        );
    }
    let schedulers = JobSchedulers::new(&conn, "sched").unwrap();
    schedulers
        .upsert(&SchedulerSpec::every("tick", Duration::from_millis(200)))
        .await
        .unwrap();
    // Until 11 iterations ran (2 s of the schedule), then the scheduler goes
    // and both sets close: everything taken has finished.
    wait_until("11 iterations", Duration::from_secs(30), async || {
        runs.lock().unwrap().len() >= 11
    })
    .await;
    schedulers.remove("tick").await.unwrap();
    for set in sets {
        set.close(Duration::from_secs(5)).await.unwrap();
    }
    host.stop(None);

    let runs = runs.lock().unwrap().clone();
    assert!(runs.len() >= 11, "{} iterations: {runs:?}", runs.len());
    assert!(runs.values().all(|&n| n == 1), "an iteration ran twice");
    let mut slots: Vec<u64> = runs
        .keys()
        .map(|id| id.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    slots.sort_unstable();
    assert!(
        slots.windows(2).all(|w| w[1] - w[0] == 200),
        "a gap or a duplicate slot: {slots:?}"
    );
    assert!(runs.keys().all(|id| id.starts_with("repeat:tick:")));
    let completed: u64 = c.zcard(q.keys().completed()).await.unwrap();
    assert_eq!(completed as usize, runs.len());
    // On time, on Redis's clock: no iteration was taken before its slot.
    for (id, at) in timeline::starts(&c, &q.keys().events()).await {
        let slot: u64 = id.rsplit(':').next().unwrap().parse().unwrap();
        assert!(at >= slot, "{id} taken at {at}, before its slot");
    }
}

#[tokio::test]
async fn an_iteration_whose_successor_cannot_be_made_is_not_run() {
    // BullMQ never runs a scheduler iteration without producing the next one:
    // an error that is not a connection error leaves the job unprocessed in
    // `active`, for the stalled checker.
    let (redis, _conn, q) = RedisServer::with_queue("bad").await;
    let c = redis.client().await;
    let job = "emq:bad:repeat:broken:1";
    let _: () = c
        .hset(
            job,
            vec![
                ("name", "tick"),
                ("data", "{}"),
                // `every` and `pattern` together: no next time can be computed.
                ("opts", r#"{"repeat":{"every":1000,"pattern":"* * * * *"}}"#),
                ("timestamp", "1"),
                ("delay", "0"),
                ("priority", "0"),
                ("rjk", "broken"),
            ],
        )
        .await
        .unwrap();
    let _: () = c.lpush("emq:bad:wait", "repeat:broken:1").await.unwrap();
    let _: () = c
        .zadd("emq:bad:marker", None, None, false, false, (0.0, "0"))
        .await
        .unwrap();
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let r = runs.clone();
    let processor = processor_fn(move |ctx| {
        let r = r.clone();
        async move {
            *r.lock().unwrap().entry(ctx.job().id.clone()).or_default() += 1;
            Ok(serde_json::Value::Null)
        }
    });
    let (host, _) = Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default().drain_delay(Duration::from_millis(100));
    let set = WorkerSetSpec::new(args)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    // Taken (in `active`), then let go by the worker without running it.
    wait_until(
        "the iteration taken and given up",
        Duration::from_secs(10),
        async || {
            let active: Vec<String> = c.lrange("emq:bad:active", 0, -1).await.unwrap();
            let status = call_t!(set.worker, WorkerMsg::GetStatus, 2000).unwrap();
            active == ["repeat:broken:1"]
                && status.last_fetch_ms.is_some()
                && status.active_jobs.is_empty()
        },
    )
    .await;
    assert!(runs.lock().unwrap().is_empty(), "the iteration ran");
    let active: Vec<String> = c.lrange("emq:bad:active", 0, -1).await.unwrap();
    assert_eq!(active, ["repeat:broken:1"]);
    let completed: u64 = c.zcard("emq:bad:completed").await.unwrap();
    assert_eq!(completed, 0);
    let _ = call_t!(set.worker, WorkerMsg::Close, 5000, Duration::from_secs(1));
}
