//! QueueEvents against real Redis: typed, ordered, resumable, bounded.

use std::time::Duration;

use echomq::protocol::EventKind;
use echomq::{Delivery, JobOptions, QueueEvents, QueueEventsArgs, QueueEventsMsg, StartFrom};
use echomq_integration_tests::{timeline, wait_until, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::json;

async fn next_event(sub: &mut echomq::queue_events::Subscription) -> Delivery {
    tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .expect("a delivery within 5 s")
        .expect("actor alive")
}

#[tokio::test]
async fn events_arrive_typed_and_in_order_from_spawn_on() {
    let (_redis, conn, q) = RedisServer::with_queue("ev").await;
    q.add("before", &json!({}), JobOptions::new())
        .await
        .unwrap(); // not delivered: before spawn
    let mut args = QueueEventsArgs::new(conn.clone(), "ev");
    args.block = Duration::from_millis(200);
    // Subscribed in the registry before the actor starts: a Subscribe sent
    // after the add below could reach the actor after the add's events did
    // (they go to the subscribers there are at the time).
    let mut sub = args.subscribers.subscribe(100);
    let (qe, _h) = Actor::spawn(None, QueueEvents, args).await.unwrap();
    // Ready as soon as spawn returns: an add right now is not missed.
    q.add("a", &json!({}), JobOptions::new()).await.unwrap();
    q.add(
        "d",
        &json!({}),
        JobOptions::new().delay(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    q.update_progress("2", &json!({"step": 1})).await.unwrap();
    q.pause().await.unwrap();
    q.resume().await.unwrap();
    let want = [
        "added", "waiting", "added", "delayed", "progress", "paused", "resumed",
    ];
    let mut got = Vec::new();
    for _ in 0..want.len() {
        match next_event(&mut sub).await {
            Delivery::Event(e) => got.push(e.kind),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        got.iter().map(|k| k.name().to_string()).collect::<Vec<_>>(),
        want
    );
    assert_eq!(
        got[0],
        EventKind::Added {
            job_id: "2".into(),
            name: "a".into()
        }
    );
    assert!(matches!(&got[3], EventKind::Delayed { job_id, .. } if job_id == "3"));
    assert!(matches!(&got[4], EventKind::Progress { data, .. } if data["step"] == 1));
    qe.cast(QueueEventsMsg::Close).unwrap();
}

#[tokio::test]
async fn a_restart_from_the_last_id_loses_nothing() {
    let (_redis, conn, q) = RedisServer::with_queue("rs").await;
    let mut args = QueueEventsArgs::new(conn.clone(), "rs");
    args.block = Duration::from_millis(200);
    let (qe, h) = Actor::spawn(None, QueueEvents, args.clone()).await.unwrap();
    let mut sub = call_t!(qe, QueueEventsMsg::Subscribe, 2000, 1000).unwrap();
    for _ in 0..5 {
        q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    }
    for _ in 0..10 {
        next_event(&mut sub).await;
    }
    let last = call_t!(qe, QueueEventsMsg::GetLastId, 2000).unwrap();
    qe.kill();
    let _ = h.await;
    // Events while no consumer runs.
    for _ in 0..5 {
        q.add("y", &json!({}), JobOptions::new()).await.unwrap();
    }
    args.start = StartFrom::After(last);
    // Subscribed before the start: the backlog is read at once, and may be
    // delivered before a Subscribe sent after the spawn.
    let mut sub = args.subscribers.subscribe(1000);
    let (qe, _h) = Actor::spawn(None, QueueEvents, args).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..10 {
        if let Delivery::Event(e) = next_event(&mut sub).await {
            ids.push(e.kind.job_id().unwrap().to_string());
        }
    }
    assert_eq!(
        ids,
        vec!["6", "6", "7", "7", "8", "8", "9", "9", "10", "10"]
    );
    qe.cast(QueueEventsMsg::Close).unwrap();
}

#[tokio::test]
async fn a_trimmed_stream_yields_a_gap() {
    let (redis, conn, q) = RedisServer::with_queue("gap").await;
    let c = redis.client().await;
    q.add("x", &json!({}), JobOptions::new()).await.unwrap();
    let first: Value = c.xrange("emq:gap:events", "-", "+", Some(1)).await.unwrap();
    let cursor = match first {
        Value::Array(e) => match &e[0] {
            Value::Array(p) => p[0].as_string().unwrap(),
            _ => unreachable!(),
        },
        _ => unreachable!(),
    };
    for _ in 0..50 {
        q.add("y", &json!({}), JobOptions::new()).await.unwrap();
    }
    // Trim exactly, far past the cursor.
    c.xtrim::<(), _, _>("emq:gap:events", ("MAXLEN", "=", 10))
        .await
        .unwrap();
    let mut args = QueueEventsArgs::new(conn.clone(), "gap");
    args.start = StartFrom::After(cursor.clone());
    args.block = Duration::from_millis(200);
    // Subscribed before the start: the gap is found by the first read.
    let mut sub = args.subscribers.subscribe(1000);
    let (qe, _h) = Actor::spawn(None, QueueEvents, args).await.unwrap();
    match next_event(&mut sub).await {
        Delivery::Gap { after, next } => {
            assert_eq!(after, cursor);
            assert_ne!(next, cursor);
        }
        other => panic!("expected a gap, got {other:?}"),
    }
    qe.cast(QueueEventsMsg::Close).unwrap();
}

#[tokio::test]
async fn a_slow_subscriber_is_told_it_lagged() {
    let (redis, conn, q) = RedisServer::with_queue("lag").await;
    let mut args = QueueEventsArgs::new(conn.clone(), "lag");
    args.block = Duration::from_millis(200);
    let (qe, _h) = Actor::spawn(None, QueueEvents, args).await.unwrap();
    let mut sub = call_t!(qe, QueueEventsMsg::Subscribe, 2000, 4).unwrap();
    for _ in 0..50 {
        q.add("x", &json!({}), JobOptions::new()).await.unwrap(); // 100 events
    }
    // The actor has read (and offered) all 100 once its cursor is the
    // stream's last entry; the subscriber has not read one yet.
    let c = redis.client().await;
    let last = timeline::stamps(&c, &q.keys().events())
        .await
        .pop()
        .expect("events")
        .id;
    wait_until(
        "the actor read the stream",
        Duration::from_secs(10),
        async || call_t!(qe, QueueEventsMsg::GetLastId, 2000).unwrap() == last,
    )
    .await;
    let mut events = 0u64;
    let mut lagged = 0u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while events < 4 || lagged == 0 {
        let d = tokio::time::timeout_at(deadline, sub.recv())
            .await
            .unwrap_or_else(|_| panic!("{events} events, {lagged} lagged by the deadline"))
            .expect("the subscription lives");
        match d {
            Delivery::Event(_) => events += 1,
            Delivery::Lagged(n) => lagged += n,
            Delivery::Gap { .. } => panic!("no gap here"),
        }
        // The Lagged notice is delivered once there is room again and the
        // actor has something more to deliver.
        q.update_progress("1", &json!(events)).await.unwrap();
    }
    assert!(
        events >= 4 && lagged > 0,
        "a 4-slot subscriber of 100+ events must lag"
    );
    qe.cast(QueueEventsMsg::Close).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_finished_sees_completions_and_failures_before_and_after_subscribing() {
    use echomq::worker::{processor_fn, ProcessError};
    use echomq::{queue::Finished, queue_events::wait_until_finished, WorkerArgs, WorkerSetSpec};
    let (_redis, conn, q) = RedisServer::with_queue("wuf").await;
    let mut args = QueueEventsArgs::new(conn.clone(), "wuf");
    args.block = Duration::from_millis(200);
    let (qe, _h) = Actor::spawn(None, QueueEvents, args).await.unwrap();
    let processor = processor_fn(|job| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match job.data()["ok"].as_bool() {
            Some(true) => Ok(json!({"done": job.job().id})),
            _ => Err(ProcessError::failed("nope")),
        }
    });
    let mut wargs = WorkerArgs::new(q.clone(), processor);
    wargs.options.drain_delay = Duration::from_millis(100);
    let (host, _) = Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let _set = WorkerSetSpec::new(wargs)
        .spawn_linked(host.get_cell())
        .await
        .unwrap();
    let ok = q
        .add("a", &json!({"ok": true}), JobOptions::new())
        .await
        .unwrap();
    let bad = q
        .add("b", &json!({"ok": false}), JobOptions::new())
        .await
        .unwrap();
    // Subscribed while they run: the events decide.
    let r = wait_until_finished(&qe, &q, &ok, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r, Some(Finished::Completed(json!({"done": ok.clone()}))));
    let r = wait_until_finished(&qe, &q, &bad, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r, Some(Finished::Failed("nope".into())));
    // Already finished before subscribing: isFinished answers.
    let r = wait_until_finished(&qe, &q, &ok, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(matches!(r, Some(Finished::Completed(_))));
    // Never finishing within the timeout.
    let later = q
        .add(
            "c",
            &json!({"ok": true}),
            JobOptions::new().delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let r = wait_until_finished(&qe, &q, &later, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(r, None);
    host.stop(None);
    qe.cast(QueueEventsMsg::Close).unwrap();
}
