//! The three most important examples of `crates/echomq/examples`, run as
//! they are (their files compiled in here) against a throwaway server:
//! typed jobs, the axum service with its graceful shutdown, and a flow.

use std::time::Duration;

use echomq_integration_tests::{wait_until, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[allow(dead_code)]
#[path = "../../../crates/echomq/examples/typed_jobs.rs"]
mod typed_jobs;

#[allow(dead_code)]
#[path = "../../../crates/echomq/examples/axum_service.rs"]
mod axum_service;

#[allow(dead_code)]
#[path = "../../../crates/echomq/examples/flows.rs"]
mod flows;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_jobs_example() {
    let redis = RedisServer::start();
    let (receipts, reason) = typed_jobs::run(&redis.url()).await.unwrap();
    let to: Vec<&str> = receipts.iter().map(|r| r.to.as_str()).collect();
    assert_eq!(
        to,
        ["ada@example.com", "alan@example.com", "grace@example.com"]
    );
    assert!(receipts.iter().all(|r| r.words == 2));
    assert!(
        reason.starts_with("the data of job 4 does not fit ")
            && reason.ends_with("Email: invalid type: integer `42`, expected a string"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_example() {
    let redis = RedisServer::start();
    let report = flows::run(&redis.url()).await.unwrap();
    assert_eq!(report, serde_json::json!({"pages": 3, "words": 9}));
}

/// One HTTP/1.1 request on its own connection; the status line and body.
async fn request(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_service_example_serves_works_and_shuts_down_in_order() {
    let redis = RedisServer::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let url = redis.url();
    let service = tokio::spawn(async move {
        axum_service::run(&url, listener, async {
            let _ = stopped.await;
        })
        .await
        .map_err(|e| e.to_string())
    });
    for who in ["ada", "alan", "grace"] {
        let answer = request(
            addr,
            "POST",
            "/signups",
            &format!(r#"{{"email":"{who}@x.y"}}"#),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let refused = request(addr, "POST", "/signups", r#"{"mail":1}"#).await;
    assert!(
        refused.starts_with("HTTP/1.1 422"),
        "axum refuses a body that is not a Signup: {refused}"
    );
    wait_until(
        "the three sign-ups processed",
        Duration::from_secs(20),
        async || {
            request(addr, "GET", "/counts", "")
                .await
                .contains(r#""completed":3"#)
        },
    )
    .await;
    stop.send(()).unwrap();
    let (finished, moved) = service.await.unwrap().unwrap();
    assert_eq!(
        (finished, moved),
        (0, 0),
        "nothing was running at the close"
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the HTTP server is down"
    );
}
