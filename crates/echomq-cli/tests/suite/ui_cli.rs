//! `echomq ui` as the binary: a public bind without a token is refused
//! before anything starts; with a token it serves the API to the bearer,
//! stops on SIGTERM, and never prints the token.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use echomq_integration_tests::RedisServer;

const TOKEN: &str = "cli-test-token-0123456789";

use crate::cli::command as echomq;

/// One HTTP/1.1 GET; the status line and body.
fn get(addr: &str, path: &str, bearer: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.lines().next().unwrap_or_default().to_owned();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

#[test]
fn a_public_bind_needs_a_token() {
    let out = echomq()
        .args(["--url", "redis://127.0.0.1:1", "ui", "--bind", "0.0.0.0:0"])
        .env_remove("ECHOMQ_UI_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--auth-token"), "{err}");
    let weak = echomq()
        .args(["ui", "--auth-token", "short"])
        .output()
        .unwrap();
    assert!(!weak.status.success());
    assert!(String::from_utf8_lossy(&weak.stderr).contains("at least 16"));
}

#[test]
fn serves_the_bearer_and_stops_on_sigterm() {
    let redis = RedisServer::start();
    let mut child = echomq()
        .args(["--url", &redis.url(), "ui", "--bind", "127.0.0.1:0"])
        .env("ECHOMQ_UI_TOKEN", TOKEN)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();

    let (status, _) = get(&addr, "/api/queues", None);
    assert!(status.contains("401"), "{status}");
    let (status, body) = get(&addr, "/api/queues", Some(TOKEN));
    assert!(status.contains("200"), "{status}");
    assert!(body.contains(r#""prefix":"emq""#), "{body}");

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("dashboard listening"), "{err}");
    for text in [&first, &rest, &err] {
        assert!(!text.contains(TOKEN), "the token was printed: {text}");
    }
}
