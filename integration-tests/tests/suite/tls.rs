//! EchoMQ over TLS against a real TLS-only redis-server, with certificates
//! made for the run: the four actors' lifecycle, mutual TLS, and the three
//! ways a connection must refuse to go on (an untrusted server certificate,
//! `rediss://` to a plaintext server, `redis://` to a TLS-only server) —
//! each a clear error, in bounded time, with nothing written. BullMQ Node
//! (ioredis with a CA) and EchoMQ share a queue over TLS. A TLS-only Redis
//! Cluster runs the four actors' lifecycle.

use std::time::{Duration, Instant};

use echomq::connection::TlsOptions;
use echomq::{Connection, ConnectionConfig, JobOptions, JobState, Queue};
use echomq_integration_tests::cluster::RedisCluster;
use echomq_integration_tests::tls::{Certs, TlsRedisServer};
use echomq_integration_tests::{topology, NodeRun, RedisServer};
use fred::prelude::ServerInterface;
use serde_json::json;

fn config(url: String, tls: TlsOptions) -> ConnectionConfig {
    let mut c = ConnectionConfig::with_url(url);
    c.tls = tls;
    c.connect_timeout = Duration::from_secs(3);
    c
}

fn trusting(certs: &Certs) -> TlsOptions {
    TlsOptions {
        ca_file: Some(certs.ca()),
        ..TlsOptions::default()
    }
}

fn with_client_cert(certs: &Certs) -> TlsOptions {
    TlsOptions {
        cert_file: Some(certs.client_cert()),
        key_file: Some(certs.client_key()),
        ..trusting(certs)
    }
}

async fn dbsize(conn: &Connection) -> i64 {
    conn.pool().next().dbsize().await.expect("DBSIZE")
}

/// Connects with `config` and expects a failure within 10 s, whose message
/// contains every one of `needles`.
async fn refused(config: ConnectionConfig, needles: &[&str]) -> String {
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), Connection::connect(config)).await;
    let err = match result {
        Err(_) => panic!("connecting hung for 10 s instead of failing"),
        Ok(Ok(_)) => panic!("the connection was accepted"),
        Ok(Err(e)) => e.to_string(),
    };
    for n in needles {
        assert!(err.contains(n), "error {err:?} lacks {n:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_actors_over_tls() {
    let certs = Certs::generate();
    let server = TlsRedisServer::start(&certs, false);
    let conn = Connection::connect(config(server.url(), trusting(&certs)))
        .await
        .expect("rediss:// with the CA connects");
    let run = topology::four_actors(&conn, "tls-life").await;
    assert_eq!(run.completed.len(), 23, "{run:?}");
    assert_eq!(run.failed.len(), 1, "{run:?}");
    assert!(run.scheduled_completed >= 2, "{run:?}");
    assert!(run.completed.is_subset(&run.completed_events), "{run:?}");
    eprintln!(
        "TLS lifecycle: 26 jobs through the four actors in {:?}",
        run.elapsed
    );
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = Certs::generate();
    let server = TlsRedisServer::start(&certs, true);
    // Without a certificate the server ends the handshake.
    refused(
        config(server.url(), trusting(&certs)),
        &["cannot connect to rediss://"],
    )
    .await;
    let conn = Connection::connect(config(server.url(), with_client_cert(&certs)))
        .await
        .expect("mTLS with the client certificate connects");
    let q = Queue::new(&conn, "mtls").await.unwrap();
    let id = q
        .add("j", &json!({ "x": 1 }), JobOptions::new())
        .await
        .unwrap();
    assert_eq!(q.get_job_state(&id).await.unwrap(), JobState::Waiting);
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_is_refused_and_nothing_is_written() {
    let certs = Certs::generate();
    let server = TlsRedisServer::start(&certs, false);
    let wrong = TlsOptions {
        ca_file: Some(certs.other_ca()),
        ..TlsOptions::default()
    };
    let err = refused(config(server.url(), wrong), &["certificate", "CA file"]).await;
    eprintln!("untrusted server: {err}");
    let good = Connection::connect(config(server.url(), trusting(&certs)))
        .await
        .unwrap();
    assert_eq!(
        dbsize(&good).await,
        0,
        "the refused connection wrote nothing"
    );
    // The only switch that skips verification: encrypted, server unauthenticated.
    let insecure = TlsOptions {
        insecure: true,
        ..TlsOptions::default()
    };
    let conn = Connection::connect(config(server.url(), insecure))
        .await
        .expect("tls_insecure accepts any certificate");
    assert_eq!(dbsize(&conn).await, 0);
    conn.close().await;
    good.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_to_a_plaintext_server_is_refused() {
    let certs = Certs::generate();
    let plain = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}", plain.port());
    let err = refused(config(url, trusting(&certs)), &["TLS", "redis://"]).await;
    eprintln!("rediss:// to plaintext: {err}");
    let client = plain.client().await;
    let n: i64 = client.dbsize().await.unwrap();
    assert_eq!(n, 0, "nothing reached the plaintext server as a command");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_to_a_tls_only_server_is_refused() {
    let certs = Certs::generate();
    let server = TlsRedisServer::start(&certs, false);
    let url = format!("redis://127.0.0.1:{}", server.port());
    let err = refused(config(url.clone(), TlsOptions::default()), &["rediss://"]).await;
    eprintln!("redis:// to TLS-only: {err}");
    // TLS options with a plaintext URL are a configuration error, not a
    // silent plaintext connection.
    refused(config(url, trusting(&certs)), &["not a TLS URL"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_node_and_echomq_share_a_queue_over_tls() {
    let certs = Certs::generate();
    let server = TlsRedisServer::start(&certs, false);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let node = |command: &str, args: serde_json::Value| -> serde_json::Value {
        let out = std::process::Command::new("node")
            .current_dir(&dir)
            .env("INTEROP_TLS_CA", certs.ca())
            .args([
                "driver.js",
                command,
                &server.url(),
                "tls-mixed",
                &args.to_string(),
            ])
            .output()
            .expect("node is installed");
        assert!(
            out.status.success(),
            "node driver.js {command}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    // Node adds over TLS; EchoMQ's worker tree (over TLS) processes them.
    let jobs: Vec<_> = (0..5)
        .map(|i| json!({ "name": "n", "data": { "i": i } }))
        .collect();
    let node_ids = node("add-jobs", json!({ "jobs": jobs }));
    let conn = Connection::connect(config(server.url(), trusting(&certs)))
        .await
        .unwrap();
    topology::four_actors(&conn, "tls-mixed").await;
    let q = Queue::new(&conn, "tls-mixed").await.unwrap();
    for id in node_ids.as_array().unwrap() {
        let state = q.get_job_state(id.as_str().unwrap()).await.unwrap();
        assert_eq!(state, JobState::Completed, "Node's job {id} done by EchoMQ");
    }
    // EchoMQ adds over TLS; Node's worker (over TLS) processes it.
    let id = q
        .add("e", &json!({ "from": "rust" }), JobOptions::new())
        .await
        .unwrap();
    // four_actors closed its worker set: Node's Worker is the only one left.
    // It runs until it has taken the job (Node's start and TLS handshake can
    // take seconds on a loaded machine), within one deadline.
    let run = NodeRun::from_json(&node(
        "work-until",
        json!({ "ids": [id], "deadlineMs": 60_000 }),
    ));
    assert!(
        run.done && run.ids() == [id.clone()],
        "Node processed {id} (and nothing else): {run:?}"
    );
    assert_eq!(q.get_job_state(&id).await.unwrap(), JobState::Completed);
    conn.close().await;
}

/// A cluster that speaks TLS only (client port, cluster bus, replication):
/// `rediss-cluster://` with the CA reaches every primary and the four
/// actors' lifecycle runs on a hash-tagged queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_actors_on_a_tls_cluster() {
    let certs = Certs::generate();
    let cluster = RedisCluster::start_tls(&certs);
    assert!(cluster.url().starts_with("rediss-cluster://"));
    let conn = Connection::connect(config(cluster.url(), trusting(&certs)))
        .await
        .expect("connect to the TLS cluster");
    let run = topology::four_actors(&conn, "{tls}").await;
    assert_eq!(run.completed.len(), 23, "{run:?}");
    assert_eq!(run.failed.len(), 1, "{run:?}");
    assert!(run.scheduled_completed >= 2, "{run:?}");
    assert!(run.completed.is_subset(&run.completed_events), "{run:?}");
    eprintln!("tls cluster: 26 jobs in {:?}", run.elapsed);
    conn.close().await;
}
