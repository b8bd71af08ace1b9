//! `echomq add-bulk` in chunks, and a write whose reply is lost reported as
//! "outcome unknown" (exit 5), never as "unreachable": a bad line is named
//! before anything is written; a run whose chunk lost its replies says which
//! line to resume from, and `--from-line` goes on from there.
//!
//! The lost replies are real: the binary talks to Redis through a small
//! proxy that, from the first `EVALSHA` on, forwards the client's bytes but
//! swallows the server's. Redis runs what it was sent; the client never
//! hears back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use echomq::{ConnectionConfig, JobOptions, Queue};
use echomq_cli::diagnose::{diagnose, FailureClass};
use echomq_integration_tests::{state, wait_until, RedisServer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::cli::run as echomq;

fn lines_file(tag: &str, n: usize, bad: Option<usize>) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "echomq-bulk-chunks-{}-{tag}.jsonl",
        std::process::id()
    ));
    let text: Vec<String> = (1..=n)
        .map(|i| {
            if Some(i) == bad {
                r#"{"name": "j", "data": {"i": 1}, "opts": {"atempts": 3}}"#.to_owned()
            } else {
                json!({"name": "j", "data": {"line": i}}).to_string()
            }
        })
        .collect();
    std::fs::write(&path, text.join("\n")).unwrap();
    path
}

/// A loopback proxy to `upstream` that stops passing the server's bytes back
/// once the client has sent an `EVALSHA` (after `mute` is armed).
struct ReplyEater {
    port: u16,
    muted: Arc<AtomicBool>,
}

impl ReplyEater {
    async fn start(upstream: u16) -> ReplyEater {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let muted = Arc::new(AtomicBool::new(false));
        let m = muted.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let m1 = m.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        // Muted before the bytes go on: set after, the
                        // server's reply could be passed back in between.
                        if buf[..n]
                            .windows(7)
                            .any(|w| w.eq_ignore_ascii_case(b"EVALSHA"))
                        {
                            m1.store(true, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                let m2 = m.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        if !m2.load(Ordering::SeqCst) && cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        ReplyEater { port, muted }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_line_is_named_and_nothing_is_written() {
    let redis = RedisServer::start();
    let file = lines_file("bad", 2500, Some(2203));
    let out = echomq(&redis.url(), &["add-bulk", "q", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("line 2203") && err.contains("atempts"),
        "{err}"
    );
    let c = redis.client().await;
    let keys: Vec<String> = state::cmd(&c, "KEYS", vec!["emq:q:*".into()]).await;
    assert!(keys.is_empty(), "nothing written: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_of_a_chunk_are_an_unknown_outcome_and_the_run_resumes() {
    let redis = RedisServer::start();
    let proxy = ReplyEater::start(redis.port()).await;
    let file = lines_file("lost", 3000, None);
    let path = file.to_str().unwrap();
    let out = echomq(
        &proxy.url(),
        &[
            "--command-timeout",
            "500",
            "add-bulk",
            "q",
            path,
            "--chunk",
            "1000",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(proxy.muted.load(Ordering::SeqCst));
    assert_eq!(
        out.status.code(),
        Some(5),
        "outcome unknown, not unreachable: {err}"
    );
    assert!(err.contains("stopped at line 1:"), "{err}");
    assert!(err.contains("--from-line 1"), "{err}");
    assert!(err.contains("may or may not have been applied"), "{err}");
    assert!(!err.contains("firewall"), "{err}");
    // Redis ran the chunk it was sent, and only that one: the first 1000
    // lines were added although no reply said so.
    let c = redis.client().await;
    wait_until(
        "the sent chunk is stored",
        Duration::from_secs(10),
        async || state::cmd::<i64>(&c, "LLEN", vec!["emq:q:wait".into()]).await == 1000,
    )
    .await;
    // Resume after the chunk that turned out stored.
    let out = echomq(
        &redis.url(),
        &["add-bulk", "q", path, "--from-line", "1001"],
    );
    let _ = std::fs::remove_file(&file);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("added 2000 jobs (lines 1001..=3000"),
        "{said}"
    );
    let n: i64 = state::cmd(&c, "LLEN", vec!["emq:q:wait".into()]).await;
    assert_eq!(n, 3000, "every line once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_its_reply_is_outcome_unknown_a_read_is_not() {
    let redis = RedisServer::start();
    let proxy = ReplyEater::start(redis.port()).await;
    let mut config = ConnectionConfig::with_url(proxy.url());
    config.command_timeout = Duration::from_millis(400);
    let conn = echomq::Connection::connect(config).await.unwrap();
    let q = Queue::new(&conn, "q").await.unwrap();
    let e = q.add("j", &json!({}), JobOptions::new()).await.unwrap_err();
    assert!(e.is_outcome_unknown(), "{e:?}");
    let d = diagnose(&e, Some(&proxy.url()));
    assert_eq!(d.class, FailureClass::OutcomeUnknown);
    assert_eq!(d.class.exit_code(), 5);
    assert!(d.message.contains("addStandardJob"), "{d}");
    // It was applied all the same.
    let c = redis.client().await;
    assert!(state::exists(&c, "emq:q:1").await);
    // A read that times out the same way is only a connection failure.
    let e = q.counts().await.unwrap_err();
    assert!(!e.is_outcome_unknown() && e.is_connection(), "{e:?}");
    assert_eq!(
        diagnose(&e, Some(&proxy.url())).class,
        FailureClass::Connection
    );
    conn.close().await;
}
