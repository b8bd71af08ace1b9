//! The readable errors of every start-up failure, against real servers: the
//! runtime's error as it comes out of a connection or a server check, and the
//! line and exit code the `echomq` command gives it ([`echomq_cli::diagnose`]).

use std::time::{Duration, Instant};

use echomq::connection::{self, ServerFacts};
use echomq::{Connection, ConnectionConfig, JobOptions, Queue, RetryPolicy};
use echomq_cli::diagnose::{diagnose, FailureClass};
use echomq_integration_tests::restartable::RestartableRedis;
use echomq_integration_tests::{state, wait_until, RedisServer};
use fred::prelude::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_bounds_the_wait_and_says_why() {
    let redis = RestartableRedis::reserve(); // never started: the port refuses
    let t0 = Instant::now();
    let e = Connection::connect_with_retry(
        ConnectionConfig::with_url(redis.url()),
        &RetryPolicy::with_deadline(Duration::from_millis(1500)),
    )
    .await
    .unwrap_err();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let d = diagnose(&e, Some(&redis.url()));
    assert_eq!(d.class, FailureClass::Connection);
    assert_eq!(d.class.exit_code(), 3);
    assert_eq!(
        d.message,
        format!(
            "cannot connect to Redis at 127.0.0.1:{}: connection refused; is redis-server running and listening there? check --url / ECHOMQ_URL",
            redis.port()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_failures_read_as_one_line() {
    let redis = RedisServer::start();
    // Set after the start: the harness checks readiness with a bare PING.
    let _: String = state::cmd(
        &redis.client().await,
        "CONFIG",
        vec!["SET".into(), "requirepass".into(), "s3cret".into()],
    )
    .await;
    let port = redis.port();
    let url = format!("redis://127.0.0.1:{port}");
    let e =
        Connection::connect_with_retry(ConnectionConfig::with_url(&url), &RetryPolicy::default())
            .await
            .unwrap_err();
    let d = diagnose(&e, Some(&url));
    assert_eq!(
        d.message,
        format!("Redis at 127.0.0.1:{port} requires a password and none was sent: put it in the URL (redis://:PASSWORD@host:port)"),
        "{e:?}"
    );
    assert_eq!(
        d.class.exit_code(),
        4,
        "not retried, not a connection failure"
    );
    let url = format!("redis://:wrong@127.0.0.1:{port}");
    let e =
        Connection::connect_with_retry(ConnectionConfig::with_url(&url), &RetryPolicy::default())
            .await
            .unwrap_err();
    let d = diagnose(&e, Some(&url));
    assert_eq!(
        d.message,
        format!("Redis at 127.0.0.1:{port} refused the user name or password: check the credentials in the URL (redis://USER:PASSWORD@host:port)"),
        "{e:?}"
    );
    assert!(!d.message.contains("wrong"), "no password in the line");
    Connection::connect(ConnectionConfig::with_url(format!(
        "redis://:s3cret@127.0.0.1:{port}"
    )))
    .await
    .expect("the right password connects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_host_reads_as_a_dns_failure() {
    let url = "redis://no-such-host.invalid:6379";
    let e = Connection::connect_with_retry(
        ConnectionConfig::with_url(url),
        &RetryPolicy::with_deadline(Duration::from_millis(300)),
    )
    .await
    .unwrap_err();
    let d = diagnose(&e, Some(url));
    assert_eq!(
        d.message,
        "cannot resolve the host of Redis at no-such-host.invalid:6379 (DNS): check the host name (check --url / ECHOMQ_URL) and this machine's DNS",
        "{e:?}"
    );
    assert_eq!(d.class, FailureClass::Connection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_or_old_server_is_refused_with_the_reason() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let conn = redis.connect().await;
    let e = connection::check_server(&conn, &["q"]).await.unwrap_err();
    let d = diagnose(&e, None);
    assert_eq!(d.class.exit_code(), 4);
    assert_eq!(
        d.message,
        format!("Redis at 127.0.0.1:{} has maxmemory-policy volatile-lru: it may delete queue keys and job locks when memory runs short; set `maxmemory-policy noeviction` (redis.conf or CONFIG SET)", redis.port())
    );
    // This server's real facts, with the version an old server reports.
    let facts = connection::server_facts(&conn).await.unwrap();
    assert!(connection::parse_version(&facts.version).unwrap() >= connection::MIN_REDIS_VERSION);
    let old = ServerFacts {
        version: "5.0.14".into(),
        maxmemory_policy: Some("noeviction".into()),
        ..facts
    };
    let problems = old.problems("127.0.0.1:6379", "emq", &["q"]);
    assert_eq!(problems.len(), 1);
    assert_eq!(
        echomq::Error::from(problems[0].clone()).to_string(),
        "Redis at 127.0.0.1:6379 is version 5.0.14; EchoMQ needs 6.0.6 or newer: upgrade the server"
    );
    let fine = RedisServer::start();
    connection::check_server(&fine.connect().await, &["q"])
        .await
        .expect("a noeviction server of this version suits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_a_hash_tag_is_refused_with_the_reason() {
    let redis = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        // Else CLUSTER SLOTS names the node with an empty host.
        "--cluster-announce-ip",
        "127.0.0.1",
    ]);
    // One node serving every slot: a real cluster, as far as keys go.
    let plain = redis.client().await;
    let _: String = state::cmd(
        &plain,
        "CLUSTER",
        vec!["ADDSLOTSRANGE".into(), "0".into(), "16383".into()],
    )
    .await;
    wait_until("cluster_state:ok", Duration::from_secs(10), async || {
        let info: String = state::cmd(&plain, "CLUSTER", vec!["INFO".into()]).await;
        info.contains("cluster_state:ok")
    })
    .await;
    let url = format!("redis-cluster://127.0.0.1:{}", redis.port());
    let conn = Connection::connect(ConnectionConfig::with_url(&url))
        .await
        .unwrap();
    let e = connection::check_server(&conn, &["q"]).await.unwrap_err();
    assert_eq!(
        diagnose(&e, Some(&url)).message,
        "the keys of queue \"q\" with prefix \"emq\" fall into different Redis Cluster slots: put a hash tag in the prefix, e.g. --prefix '{emq}'"
    );
    // Queue::new refuses such a queue itself, with a line of its own.
    let e = Queue::new(&conn, "q").await.unwrap_err();
    let d = diagnose(&e, Some(&url));
    assert_eq!(d.class.exit_code(), 2);
    assert_eq!(
        d.message,
        "invalid configuration: on Redis Cluster every key of queue \"q\" must share one slot: name the queue with a hash tag (e.g. \"{q}\", giving emq:{q}:wait) or use a hash-tagged prefix (\"{emq}\")"
    );
    // What Redis itself says to a command over two slots.
    let e: echomq::Error = conn
        .pool()
        .next()
        .mget::<Vec<Option<String>>, _>(vec!["emq:q:wait", "emq:q:active"])
        .await
        .unwrap_err()
        .into();
    let d = diagnose(&e, Some(&url));
    assert_eq!(
        d.message,
        format!("Redis Cluster at 127.0.0.1:{} refused keys of one call in different slots (CROSSSLOT): put a hash tag in the prefix, e.g. --prefix '{{emq}}'", redis.port()),
        "{e:?}"
    );
    assert_eq!(d.class.exit_code(), 4);
    // With a hash tag, the check passes and a job goes in.
    let tagged = Connection::connect(ConnectionConfig {
        prefix: "{emq}".into(),
        ..ConnectionConfig::with_url(&url)
    })
    .await
    .unwrap();
    connection::check_server(&tagged, &["q"]).await.unwrap();
    Queue::new(&tagged, "q")
        .await
        .unwrap()
        .add("j", &json!({}), JobOptions::new())
        .await
        .unwrap();
}
