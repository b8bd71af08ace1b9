//! The fast part of the chaos catalogue (the scenarios that take seconds),
//! through the same functions as `just chaos`, and the fault proxy itself.

use std::time::{Duration, Instant};

use echomq_integration_tests::chaos::{self, Ctx, Tier};
use echomq_integration_tests::fault_proxy::{FaultMode, FaultProxy};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;

fn ctx() -> Ctx {
    Ctx {
        worker_bin: env!("CARGO_BIN_EXE_worker_process").into(),
        node: false,
        python: None,
    }
}

/// Runs the catalogue's scenarios of `tier`, two at a time; every one must
/// pass, and at least `min_ran` must have run (not skipped).
async fn tier_passes(tier: Tier, min_ran: usize) {
    let scenarios: Vec<_> = chaos::catalogue()
        .into_iter()
        .filter(|s| s.tier == tier)
        .collect();
    let ids: Vec<&str> = scenarios.iter().map(|s| s.id).collect();
    let rows = chaos::run_all(&ctx(), scenarios, 2).await;
    let table = chaos::table(&rows);
    eprintln!("{table}");
    assert_eq!(rows.len(), ids.len());
    assert!(rows.iter().all(|r| r.ok()), "{table}");
    let ran = rows
        .iter()
        .filter(|r| !matches!(r.verdict, chaos::Verdict::NotRun(_)))
        .count();
    assert!(ran >= min_ran, "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fast_scenarios_pass() {
    tier_passes(Tier::Fast, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ci_scenarios_pass() {
    tier_passes(Tier::Ci, 16).await;
}

/// A plain client through the proxy, with a short command timeout.
async fn client(url: &str, timeout: Duration) -> Client {
    let c = Builder::from_config(Config::from_url(url).unwrap())
        .with_performance_config(|p| p.default_command_timeout = timeout)
        .with_connection_config(|c| c.connection_timeout = Duration::from_secs(2))
        .set_policy(ReconnectPolicy::new_constant(0, 50))
        .build()
        .unwrap();
    c.init().await.unwrap();
    c
}

#[tokio::test]
async fn the_proxy_forwards_delays_and_blackholes() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port()).await;
    let c = client(&proxy.url(), Duration::from_millis(800)).await;
    let _: () = c.set("k", "v", None, None, false).await.unwrap();
    let v: String = c.get("k").await.unwrap();
    assert_eq!(v, "v");

    // Latency holds each chunk at least the base minus the jitter.
    proxy.set_mode(FaultMode::Latency {
        base: Duration::from_millis(150),
        jitter: Duration::from_millis(50),
    });
    let t0 = Instant::now();
    let _: String = c.get("k").await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(200),
        "two directions × ≥ 100 ms"
    );

    // A blackhole: the command times out, the socket stays open, and that
    // connection stays dead after the blackhole; a new one works.
    proxy.set_mode(FaultMode::Blackhole);
    let r: Result<String, _> = c.get("k").await;
    assert!(r.is_err(), "a blackholed command must time out: {r:?}");
    proxy.set_mode(FaultMode::Pass);
    let r: Result<String, _> = c.get("k").await;
    assert!(
        r.is_err(),
        "a connection of the blackhole stays dead: {r:?}"
    );
    let after = client(&proxy.url(), Duration::from_millis(800)).await;
    let v: String = after.get("k").await.unwrap();
    assert_eq!(v, "v");

    // A bandwidth limit still delivers.
    proxy.set_mode(FaultMode::Bandwidth {
        bytes_per_sec: 100_000,
    });
    let fresh = client(&proxy.url(), Duration::from_secs(5)).await;
    let _: () = fresh
        .set("big", "x".repeat(20_000), None, None, false)
        .await
        .unwrap();
    let big: String = fresh.get("big").await.unwrap();
    assert_eq!(big.len(), 20_000);
    proxy.set_mode(FaultMode::Pass);
}

#[tokio::test]
async fn a_reset_and_a_slow_close_make_clients_reconnect() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port()).await;
    let c = client(&proxy.url(), Duration::from_secs(2)).await;
    let _: String = c.ping(None).await.unwrap();
    let before = proxy.accepted();
    proxy.reset_all();
    let mut ok = false;
    for _ in 0..100 {
        if c.ping::<String>(None).await.is_ok() && proxy.accepted() > before {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "no reconnect after a reset");

    let before = proxy.accepted();
    proxy.close_all_slowly(Duration::from_millis(300));
    let mut ok = false;
    for _ in 0..100 {
        if c.ping::<String>(None).await.is_ok() && proxy.accepted() > before {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "no reconnect after a slow close");
}

/// F40's core: a worker whose pool went half-open (sockets open, packets
/// vanish) must rebuild it and take jobs again once the network is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_takes_jobs_again_after_a_blackhole() {
    use echomq_integration_tests::chaos::fleet::{InProc, SetOptions};
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port()).await;
    let mut cfg = echomq::ConnectionConfig::with_url(proxy.url());
    cfg.command_timeout = Duration::from_secs(1);
    let conn = echomq::Connection::connect(cfg).await.unwrap();
    let q = echomq::Queue::new(&conn, "bh").await.unwrap();
    let w = InProc::start(&q, SetOptions::default()).await;
    let direct = redis.connect().await;
    let dq = echomq::Queue::new(&direct, "bh").await.unwrap();
    dq.add("a", &serde_json::json!({}), echomq::JobOptions::new())
        .await
        .unwrap();
    proxy.set_mode(FaultMode::Blackhole);
    // The fault's length: past the 1 s command timeout, so every pooled
    // connection is found dead.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.set_mode(FaultMode::Pass);
    for _ in 0..5 {
        dq.add("b", &serde_json::json!({}), echomq::JobOptions::new())
            .await
            .unwrap();
    }
    let mut done = false;
    for _ in 0..600 {
        if dq.counts().await.unwrap().completed == 6 {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.close().await;
    assert!(
        done,
        "the worker stayed deaf: {:?}",
        dq.counts().await.unwrap()
    );
}
