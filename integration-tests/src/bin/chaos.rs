//! `chaos`: runs the fault catalogue (every scenario runnable on one
//! machine, each against a fresh redis-server) and prints one Markdown
//! table, a row per scenario. Exits non-zero when an assertion failed.
//!
//! `chaos [--parallel N] [--only F01,F02,…]`; `chaos soak <minutes>` runs the
//! soak instead (a mixed workload under a random fault every few seconds).

use std::time::Instant;

use echomq_integration_tests::chaos::{self, soak, Ctx};

fn main() {
    // One line per panic: the poison-job scenarios panic on purpose, and a
    // panicking scenario is reported in its row anyway.
    std::panic::set_hook(Box::new(|info| eprintln!("chaos: panic: {info}")));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(6)
        .enable_all()
        .build()
        .expect("runtime");
    let code = runtime.block_on(run(args));
    std::process::exit(code);
}

async fn run(args: Vec<String>) -> i32 {
    let ctx = Ctx::discover();
    if args.first().map(String::as_str) == Some("soak") {
        let minutes: f64 = args.get(1).and_then(|m| m.parse().ok()).unwrap_or(5.0);
        let report = soak::run(&ctx, std::time::Duration::from_secs_f64(minutes * 60.0)).await;
        println!("{}", report.markdown());
        return if report.ok() { 0 } else { 1 };
    }
    let mut parallel = 3;
    let mut only: Option<Vec<String>> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--parallel" => parallel = it.next().and_then(|n| n.parse().ok()).unwrap_or(parallel),
            "--only" => {
                only = it
                    .next()
                    .map(|l| l.split(',').map(|s| s.trim().to_uppercase()).collect())
            }
            other => {
                eprintln!("unknown argument {other}; usage: chaos [--parallel N] [--only F01,F02] | chaos soak <minutes>");
                return 2;
            }
        }
    }
    let scenarios: Vec<_> = chaos::catalogue()
        .into_iter()
        .filter(|s| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|i| i == &s.id.to_uppercase()))
        })
        .collect();
    let t0 = Instant::now();
    let rows = chaos::run_all(&ctx, scenarios, parallel).await;
    println!("{}", chaos::table(&rows));
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.id.as_str())
        .collect();
    let ran = rows
        .iter()
        .filter(|r| !matches!(r.verdict, chaos::Verdict::NotRun(_)))
        .count();
    println!(
        "{} scenarios, {ran} run, {} failed{}; {:.0} s",
        rows.len(),
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed.join(", "))
        },
        t0.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        0
    } else {
        1
    }
}
