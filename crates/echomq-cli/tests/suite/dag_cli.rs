//! `echomq add-flow FILE` with a DAG (`{"dag": [...]}`, docs/flows.md §DAGs),
//! the binary run against a real Redis: a diamond is written with its extra
//! edge, and a cycle is refused with nothing written.

use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::json;

use crate::cli::run as echomq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_flow_takes_a_dag_file() {
    let redis = RedisServer::start();
    let url = redis.url();
    let c = redis.client().await;
    let dir = tempfile::tempdir().unwrap();
    let node = |id: &str, deps: &[&str]| json!({"id": id, "name": id, "queueName": "d", "data": {"n": id}, "dependsOn": deps});
    let cycle = dir.path().join("cycle.json");
    std::fs::write(
        &cycle,
        json!({"dag": [node("a", &["b"]), node("b", &["a"])]}).to_string(),
    )
    .unwrap();
    let out = echomq(&url, &["add-flow", cycle.to_str().unwrap()]);
    assert!(!out.status.success(), "a cycle was accepted");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cycle"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.dbsize::<u64>().await.unwrap(), 0, "a refusal wrote keys");

    let diamond = dir.path().join("diamond.json");
    std::fs::write(
        &diamond,
        json!({"dag": [node("a", &[]), node("b", &["a"]), node("c", &["a"]), node("e", &["b", "c"])]})
            .to_string(),
    )
    .unwrap();
    let out = echomq(&url, &["add-flow", diamond.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("4 nodes") && said.contains("1 extra edges"),
        "{said}"
    );
    // c waits for a too, though a's BullMQ parent is b.
    let deps: Vec<String> = c.smembers("emq:d:c:dependencies").await.unwrap();
    assert_eq!(deps, ["emq:d:a"]);
    let parent: String = c.hget("emq:d:a", "parentKey").await.unwrap();
    assert_eq!(parent, "emq:d:b");
    let extra: Vec<String> = c.hkeys("emq:d:a:dag:parents").await.unwrap();
    assert_eq!(extra, ["emq:d:c"]);
}

/// A fleet of BullMQ 6.7.6 Node workers alone runs a diamond whose A has
/// two dependents: `echomq dag-release` hands A to its extra parent, and
/// stops cleanly on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dag_release_lets_a_node_fleet_run_a_diamond() {
    use std::io::BufRead;
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let node = |id: &str, deps: &[&str]| json!({"id": id, "name": id, "queueName": "n", "data": {}, "dependsOn": deps});
    let file = dir.path().join("diamond.json");
    std::fs::write(
        &file,
        json!({"dag": [node("a", &[]), node("b", &["a"]), node("c", &["a"]), node("e", &["b", "c"])]})
            .to_string(),
    )
    .unwrap();
    let out = echomq(&url, &["add-flow", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut releaser = crate::cli::command()
        .args(["--url", &url, "dag-release", "n", "--sweep-ms", "200"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(releaser.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("releasing DAG nodes of n"), "{first}");

    let u = url.clone();
    let run = tokio::task::spawn_blocking(move || {
        echomq_integration_tests::NodeBullmq::V6_7.work_until(
            &u,
            "n",
            json!({"ids": ["a", "b", "c", "e"], "deadlineMs": 30000}),
        )
    })
    .await
    .unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &releaser.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = releaser.wait().unwrap();
    assert!(
        run.done,
        "the Node fleet did not run the diamond: {:?}",
        run.ids()
    );
    let mut ran = run.ids();
    ran.sort();
    assert_eq!(ran, ["a", "b", "c", "e"]);
    assert!(exit.success(), "dag-release did not stop cleanly: {exit:?}");

    // `echomq flow` prints the DAG below e, unrolled: a below b and below c.
    let out = echomq(&url, &["flow", "n", "e"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let under_a = lines.iter().filter(|l| l.starts_with("    a ")).count();
    assert_eq!(under_a, 2, "a below both b and c:\n{text}");
    assert!(lines.iter().all(|l| l.contains("completed")), "{text}");
}

/// `echomq work` alone runs a diamond whose A has two dependents: the
/// worker process starts a DAG releaser under its host, so no `dag-release`
/// runs beside it. `--max-jobs 4` ends the worker once e, the last node,
/// has run — which only its releaser can make happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echomq_work_releases_a_dag_without_dag_release() {
    use std::time::Duration;
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let (redis, conn, q) = RedisServer::with_queue("w").await;
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let node = |id: &str, deps: &[&str]| json!({"id": id, "name": id, "queueName": "w", "data": {}, "dependsOn": deps});
    let file = dir.path().join("diamond.json");
    std::fs::write(
        &file,
        json!({"dag": [node("a", &[]), node("b", &["a"]), node("c", &["a"]), node("e", &["b", "c"])]})
            .to_string(),
    )
    .unwrap();
    let out = echomq(&url, &["add-flow", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut work = Reap(
        crate::cli::command()
            .args(["--url", &url, "work", "w", "--quiet", "--max-jobs", "4"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut exit = None;
    echomq_integration_tests::wait_until(
        "echomq work ran the whole diamond and exited",
        Duration::from_secs(30),
        async || {
            exit = work.0.try_wait().unwrap();
            exit.is_some()
        },
    )
    .await;
    assert!(exit.unwrap().success(), "{exit:?}");
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.completed, 4, "{counts:?}");
    let c = redis.client().await;
    assert_eq!(
        c.exists::<u64, _>("emq:w:dag:pending").await.unwrap(),
        0,
        "a was not handed over"
    );
    let values = q.flows().get_children_values("e").await.unwrap();
    assert_eq!(values.len(), 2, "{values:?}");
    conn.close().await;
}
