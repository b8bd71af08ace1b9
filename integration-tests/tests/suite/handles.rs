//! The typed handles (`echomq::host`): a `Host` starts the shipped
//! HostSupervisor, each `add_*` answers a handle, and a handle keeps working
//! across its child's restarts because it names the child, not the actor.
//! Every kind is covered: worker sets, schedulers, QueueEvents, group feeders
//! and Relay nodes (supervised by the host since this round), one closed
//! alone with `CloseChild`, then the ordered close of the rest.

use std::time::Duration;

use echomq::groups::GroupFeederArgs;
use echomq::host::{HandleError, Host};
use echomq::relay::{RelayArgs, RelayDelivery, RelayMsg};
use echomq::worker::processor_fn;
use echomq::{
    Delivery, EventKind, JobOptions, JobSchedulerArgs, JobSchedulerMsg, ProcessError,
    QueueEventsArgs, QueueEventsMsg, SchedulerSpec, WorkerArgs, WorkerMsg,
};
use echomq_integration_tests::{wait_until, RedisServer};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_handle_controls_its_set_and_outlives_a_restart() {
    let (_redis, conn, queue) = RedisServer::with_queue("handles").await;
    let host = Host::start().await.unwrap();
    let worker = host
        .add_worker(WorkerArgs::new(
            queue.clone(),
            processor_fn(
                |job| async move { Ok::<_, ProcessError>(json!({ "n": job.data()["n"] })) },
            ),
        ))
        .await
        .unwrap();

    worker.set_concurrency(3).await.unwrap();
    worker.pause().await.unwrap();
    let status = worker.status().await.unwrap();
    assert_eq!((status.concurrency, status.paused), (3, true));
    for n in 0..10 {
        queue
            .add("h", &json!({ "n": n }), JobOptions::new())
            .await
            .unwrap();
    }
    worker.resume().await.unwrap();
    wait_until("10 completed", LIMIT, async || {
        queue.counts().await.unwrap().completed == 10
    })
    .await;
    assert_eq!(worker.counts().await.unwrap().processed, 10);
    assert_eq!(worker.lock_stats().await.unwrap().lost, 0);
    assert!(worker.check_stalled_now().await.unwrap().is_some());
    assert!(worker.stalled_stats().await.unwrap().is_some());

    // The Worker panics; the host restarts it; the same handle reaches the
    // new actor (a fresh Worker: its counters start again).
    let before = worker.refs().await.unwrap().worker;
    before.cast(WorkerMsg::Crash).unwrap();
    wait_until("one restart", LIMIT, async || {
        host.status().await.unwrap().restarts == 1
    })
    .await;
    let after = worker.refs().await.unwrap().worker;
    assert_ne!(before.get_id(), after.get_id());
    queue
        .add("h", &json!({ "n": 10 }), JobOptions::new())
        .await
        .unwrap();
    wait_until("the restarted worker takes a job", LIMIT, async || {
        worker.counts().await.unwrap().processed == 1
    })
    .await;

    // Closed alone: the host forgets it, and the handle says so.
    worker.close(Duration::from_secs(5)).await.unwrap();
    assert!(matches!(
        worker.counts().await,
        Err(HandleError::ChildGone { .. })
    ));
    assert!(matches!(
        worker.close(Duration::from_secs(1)).await,
        Err(HandleError::ChildGone { .. })
    ));
    let report = host.close(Duration::from_secs(5)).await.unwrap();
    assert!(report.worker_sets.is_empty(), "{report:?}");
    // The host is gone: a call fails as stopped, not as a timeout.
    assert!(matches!(
        host.status().await,
        Err(HandleError::Stopped { .. })
    ));
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_events_feeder_and_relay_handles_survive_restarts_and_close_in_order() {
    let (_redis, conn, queue) = RedisServer::with_queue("handles2").await;
    let host = Host::start().await.unwrap();

    // QueueEvents: a subscription through the handle outlives a restart.
    let events = host
        .add_queue_events(QueueEventsArgs::new(conn.clone(), queue.name()))
        .await
        .unwrap();
    let mut feed = events.subscribe(1024);

    // A scheduler: upsert, list, get, restart, remove through one handle.
    let sched = host
        .add_scheduler(JobSchedulerArgs::new(conn.clone(), queue.name()))
        .await
        .unwrap();
    let pending = sched
        .upsert(SchedulerSpec::every("tick", Duration::from_secs(3600)))
        .await
        .unwrap();
    assert!(pending.is_some());
    assert_eq!(sched.list().await.unwrap().len(), 1);
    let first = sched.actor().await.unwrap();
    first.cast(JobSchedulerMsg::Crash).unwrap();
    wait_until("the scheduler restarted", LIMIT, async || {
        sched
            .actor()
            .await
            .is_ok_and(|a| a.get_id() != first.get_id())
    })
    .await;
    assert!(sched.get("tick").await.unwrap().is_some());
    assert!(sched.remove("tick").await.unwrap());
    assert!(!sched.remove("tick").await.unwrap());

    let feeder = host
        .add_group_feeder(GroupFeederArgs::new(conn.clone(), queue.name()))
        .await
        .unwrap();
    assert_eq!(feeder.stats().await.unwrap().released, 0);

    // A Relay node under the host: restarted from its args, it keeps its
    // subscriptions.
    let relay = host.add_relay(RelayArgs::new(conn.clone())).await.unwrap();
    let mut sub = relay.subscribe("orders.>", 64).await.unwrap();
    let node = relay.actor().await.unwrap();
    node.cast(RelayMsg::Crash).unwrap();
    wait_until("the relay node restarted", LIMIT, async || {
        relay
            .actor()
            .await
            .is_ok_and(|a| a.get_id() != node.get_id())
    })
    .await;
    relay
        .publish("orders.42.status", &json!({ "state": "paid" }), None)
        .await
        .unwrap();
    match tokio::time::timeout(LIMIT, sub.recv()).await {
        Ok(Some(RelayDelivery::Message(m))) => {
            assert_eq!(
                (m.topic.as_str(), &m.data),
                ("orders.42.status", &json!({ "state": "paid" }))
            );
        }
        other => panic!("no relay message after the restart: {other:?}"),
    }
    assert!(relay.status().await.is_ok());

    // The QueueEvents restarts; the subscription made before goes on.
    let qe = events_actor(&host, &events).await;
    qe.cast(QueueEventsMsg::Crash).unwrap();
    wait_until("QueueEvents restarted", LIMIT, async || {
        host.status().await.unwrap().restarts == 3
    })
    .await;
    let id = queue.add("e", &json!({}), JobOptions::new()).await.unwrap();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match tokio::time::timeout_at(deadline, feed.recv()).await {
            Ok(Some(Delivery::Event(e))) => {
                if matches!(&e.kind, EventKind::Waiting { job_id, .. } if *job_id == id) {
                    break;
                }
            }
            Ok(Some(_)) => {}
            other => panic!("no waiting event after the restart: {other:?}"),
        }
    }
    assert!(!events.last_id().await.unwrap().is_empty());

    let report = host.close(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        (report.job_schedulers, report.queue_events, report.relays),
        (1, 1, 1)
    );
    // Closed: the subscriptions ended.
    let rest = tokio::time::timeout(LIMIT, async { while feed.recv().await.is_some() {} }).await;
    assert!(rest.is_ok(), "the QueueEvents subscription did not end");
    assert!(matches!(
        feeder.stats().await,
        Err(HandleError::Stopped { .. })
    ));
    conn.close().await;
}

/// The QueueEvents actor behind `events`, through the host's message.
async fn events_actor(
    host: &Host,
    events: &echomq::host::EventsHandle,
) -> ractor::ActorRef<QueueEventsMsg> {
    let id = events.id();
    host.actor()
        .call(
            |r| echomq::HostSupervisorMsg::GetQueueEvents(id, r),
            Some(Duration::from_secs(5)),
        )
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}
