//! Jobs run by handler processes in any language, embedded in a Rust host:
//! an `ExecProcessor` keeps a pool of long-lived `python3` processes running
//! `examples/handlers/handler.py` and speaks the JSON-lines protocol of
//! docs/processors.md with them (feature `exec-processor`); what
//! `echomq work --processor exec:…` runs. The worker renews locks, retries
//! and cancels as it does for Rust code.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example exec_handlers --features exec-processor`

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::external::{ExecCommand, ExecOptions, ExecProcessor};
use echomq::{Connection, Host, JobOptions, Queue, WorkerArgs};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    Queue::new(&conn, "exec").await?.obliterate(true).await?;
    let queue = Queue::new(&conn, "exec").await?;
    for n in 0..8 {
        queue
            .add("greet", &json!({ "n": n }), JobOptions::new())
            .await?;
    }
    queue
        .add(
            "greet",
            &json!({ "fail": "no such user", "unrecoverable": true }),
            JobOptions::new().attempts(3),
        )
        .await?;

    let handler = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/handlers/handler.py"
    );
    let handlers = ExecProcessor::start(
        ExecCommand::new("python3").arg(handler),
        ExecOptions::default().processes(2),
    )
    .await?;
    let host = Host::start().await?;
    let mut args = WorkerArgs::new(queue.clone(), Arc::new(handlers));
    args.options.concurrency = 2;
    host.add_worker(args).await?;
    let t0 = Instant::now();
    loop {
        let c = queue.counts().await?;
        if c.completed + c.failed == 9 || t0.elapsed() > Duration::from_secs(30) {
            println!("counts: {c:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let job = queue.get_job("1").await?.ok_or("job 1")?;
    println!(
        "job 1: progress {}, returned {:?}",
        job.progress, job.return_value
    );
    println!(
        "job 1 logs: {:?}",
        queue
            .get_job_logs("1", 0, -1, echomq::RangeOrder::Ascending)
            .await?
            .logs
    );
    host.close(Duration::from_secs(5)).await?;
    conn.close().await;
    Ok(())
}
