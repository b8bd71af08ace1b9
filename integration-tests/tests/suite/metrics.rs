//! Queue metrics both ways: a Node worker with `metrics.maxDataPoints`
//! records, `Telemetry::get_metrics` reads the same series Node's `getMetrics`
//! reads; and a Rust worker with `max_metrics_size` records what Node reads.

use std::time::Duration;

use echomq::protocol::call::metrics::{Metrics, MetricsKind};
use echomq::worker::{processor_fn, JobContext};
use echomq::{JobOptions, Queue, WorkerArgs, WorkerMsg};
use echomq_integration_tests::{node_flows, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

/// Node's `getMetrics` shape built from ours: absent fields read as 0 there.
fn as_node(m: &Metrics) -> Json {
    json!({
        "meta": {"count": m.count, "prevTS": m.prev_ts.unwrap_or(0), "prevCount": m.prev_count},
        "data": m.data,
        "count": m.total_points,
    })
}

async fn add_jobs(q: &Queue, ok: usize, failing: usize) {
    for i in 0..ok {
        q.add("ok", &json!({"mode": "ok", "ret": i}), JobOptions::new())
            .await
            .unwrap();
    }
    for _ in 0..failing {
        q.add(
            "bad",
            &json!({"mode": "fail", "reason": "no"}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    }
}

/// Pretends the last data point was taken `minutes` ago, so that the next
/// finish pushes that many points (the minutes in between as zeros).
async fn age_metrics(c: &Client, kind: &str, minutes: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let _: () = c
        .hset(
            format!("emq:q:metrics:{kind}"),
            ("prevTS", (now - minutes * 60_000).to_string()),
        )
        .await
        .unwrap();
}

async fn rust_work(q: &Queue, points: u64) {
    let p =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), p);
    args.options.drain_delay = Duration::from_millis(200);
    args.options.max_metrics_size = Some(points);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    echomq_integration_tests::wait_until("queue drained", Duration::from_secs(10), async || {
        let c = q.counts().await.unwrap();
        c.waiting + c.active == 0
    })
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_records_rust_reads_and_the_reverse() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let client = redis.client().await;
    let q = Queue::new(&conn, "q").await.unwrap();

    // Node writes: the first finish of each kind only starts the series.
    add_jobs(&q, 3, 2).await;
    node_flows(
        "work",
        &redis.url(),
        "q",
        json!({"queues": ["q"], "metrics": 5}),
    );
    let completed = q
        .telemetry()
        .get_metrics(MetricsKind::Completed, 0, -1)
        .await
        .unwrap();
    let failed = q
        .telemetry()
        .get_metrics(MetricsKind::Failed, 0, -1)
        .await
        .unwrap();
    assert_eq!(completed.count, 3);
    assert_eq!(failed.count, 2);
    assert!(completed.prev_ts.is_some() && completed.data.is_empty());
    for (kind, ours) in [("completed", &completed), ("failed", &failed)] {
        assert_eq!(
            node_flows("metrics", &redis.url(), "q", json!({"type": kind})),
            as_node(ours)
        );
    }

    // Three minutes later (aged), Node pushes three points: the 3 jobs counted
    // since the last point, then two zeros, LPUSHed in that order (so the
    // head is a zero), exactly as BullMQ stores them.
    age_metrics(&client, "completed", 3).await;
    add_jobs(&q, 1, 0).await;
    node_flows(
        "work",
        &redis.url(),
        "q",
        json!({"queues": ["q"], "metrics": 5}),
    );
    let completed = q
        .telemetry()
        .get_metrics(MetricsKind::Completed, 0, -1)
        .await
        .unwrap();
    assert_eq!(completed.data, [0, 0, 3]);
    assert_eq!(completed.total_points, 3);
    assert_eq!(
        node_flows("metrics", &redis.url(), "q", json!({"type": "completed"})),
        as_node(&completed)
    );

    // Rust writes, capped at 4 points; Node reads the same series, and a range.
    age_metrics(&client, "completed", 2).await;
    age_metrics(&client, "failed", 1).await;
    add_jobs(&q, 2, 1).await;
    rust_work(&q, 4).await;
    let completed = q
        .telemetry()
        .get_metrics(MetricsKind::Completed, 0, -1)
        .await
        .unwrap();
    let failed = q
        .telemetry()
        .get_metrics(MetricsKind::Failed, 0, -1)
        .await
        .unwrap();
    assert_eq!(completed.count, 6);
    assert_eq!(completed.data, [0, 1, 0, 0], "trimmed to 4");
    assert_eq!(failed.count, 3);
    assert_eq!(failed.data, [2]);
    for (kind, ours) in [("completed", &completed), ("failed", &failed)] {
        assert_eq!(
            node_flows("metrics", &redis.url(), "q", json!({"type": kind})),
            as_node(ours)
        );
    }
    let slice = q
        .telemetry()
        .get_metrics(MetricsKind::Completed, 1, 2)
        .await
        .unwrap();
    assert_eq!(slice.data, [1, 0]);
    assert_eq!(
        node_flows(
            "metrics",
            &redis.url(),
            "q",
            json!({"type": "completed", "start": 1, "end": 2})
        ),
        as_node(&slice)
    );
}
