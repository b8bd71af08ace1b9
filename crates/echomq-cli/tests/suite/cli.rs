//! The one way these tests run the `echomq` binary: the settings of the
//! caller's environment (`ECHOMQ_*`, `OTEL_*`, `REDIS_URL`, `RUST_LOG`) do
//! not reach it, so a developer's shell cannot change what a test sees.

use std::process::{Command, Output};

/// The `echomq` binary, without the caller's settings.
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_echomq"));
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        if k.starts_with("ECHOMQ_") || k.starts_with("OTEL_") || k == "REDIS_URL" || k == "RUST_LOG"
        {
            c.env_remove(k);
        }
    }
    c
}

/// `echomq --url <url> <args…>`, run to its end.
pub fn run(url: &str, args: &[&str]) -> Output {
    command()
        .args(["--url", url])
        .args(args)
        .output()
        .expect("the echomq binary runs")
}

/// `echomq --url <url> <args…>`, which must succeed: its stdout.
pub fn ok(url: &str, args: &[&str]) -> String {
    let out = run(url, args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `echomq --url <url> <args…>`, which must fail saying `says`.
pub fn refused(url: &str, args: &[&str], says: &str) {
    let out = run(url, args);
    assert!(!out.status.success(), "{args:?} was accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(says), "{args:?}: {err}");
}

/// A child process killed (and reaped) when the test lets it go.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free now, for a server the test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The body of `GET /metrics` on `port`, or `None` while nothing answers.
pub fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    Some(reply.split_once("\r\n\r\n")?.1.to_owned())
}

/// The value of the series `series` (name and labels) in a scrape.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
