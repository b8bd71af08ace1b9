//! `echomq work --metrics MAX_DATA_POINTS` records BullMQ's per-minute
//! metrics as it finishes jobs; without it nothing is recorded, and 0 is a
//! configuration error.

use echomq::protocol::call::metrics::MetricsKind;
use echomq::{JobOptions, Queue};
use echomq_integration_tests::RedisServer;
use serde_json::json;

fn work(url: &str, queue: &str, extra: &[&str]) -> std::process::Output {
    let mut c = crate::cli::command();
    c.args(["--url", url, "work", queue, "--quiet"])
        .args(extra)
        .output()
        .expect("the echomq binary runs")
}

#[tokio::test]
async fn work_records_metrics_only_when_asked() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    for name in ["with", "without"] {
        let q = Queue::new(&conn, name).await.unwrap();
        for i in 0..3 {
            q.add("j", &json!({ "i": i }), JobOptions::new())
                .await
                .unwrap();
        }
    }

    let out = work(&url, "with", &["--max-jobs", "3", "--metrics", "10"]);
    assert!(out.status.success(), "{out:?}");
    let q = Queue::new(&conn, "with").await.unwrap();
    let completed = q
        .telemetry()
        .get_metrics(MetricsKind::Completed, 0, -1)
        .await
        .unwrap();
    assert_eq!(completed.count, 3, "{completed:?}");
    assert!(completed.prev_ts.is_some());

    let out = work(&url, "without", &["--max-jobs", "3"]);
    assert!(out.status.success(), "{out:?}");
    let q = Queue::new(&conn, "without").await.unwrap();
    assert_eq!(q.counts().await.unwrap().completed, 3);
    let completed = q
        .telemetry()
        .get_metrics(MetricsKind::Completed, 0, -1)
        .await
        .unwrap();
    assert_eq!(completed.count, 0, "{completed:?}");

    let out = work(&url, "with", &["--metrics", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metrics"));
}
