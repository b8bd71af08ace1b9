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
