//! Rate limits and global concurrency, both shared by every worker of the
//! queue (Node's included): a worker limiter of 5 jobs per second (BullMQ's
//! `limiter`), and a global concurrency of 2 (`queue.setGlobalConcurrency`)
//! that caps the jobs running at once across all workers, whatever each
//! worker's own concurrency.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example rate_limits`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::worker::processor_fn;
use echomq::{
    Connection, Host, JobOptions, ProcessError, Queue, RateLimit, WorkerArgs, WorkerOptions,
};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    Queue::new(&conn, "limited").await?.obliterate(true).await?;
    let queue = Queue::new(&conn, "limited").await?;
    queue.limits().set_global_concurrency(2).await?;
    for i in 0..15 {
        queue
            .add("call-api", &json!({ "i": i }), JobOptions::new())
            .await?;
    }

    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    let processor = processor_fn(move |_job| {
        let (r, m) = (r.clone(), m.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            r.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, ProcessError>(json!(null))
        }
    });
    let limit = RateLimit {
        max: 5,
        duration: Duration::from_secs(1),
    };
    let host = Host::start().await?;
    // Two workers of concurrency 8 each: the global concurrency still holds
    // them to 2 jobs at once, and the limiter to 5 starts per second.
    for _ in 0..2 {
        let mut args = WorkerArgs::new(queue.clone(), processor.clone());
        args.options = WorkerOptions::default().concurrency(8).limiter(limit);
        host.add_worker(args).await?;
    }
    let t0 = Instant::now();
    while queue.counts().await?.completed < 15 && t0.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "15 jobs in {:.1} s (5 per second: about 2 s after the first window), at most {} at once",
        t0.elapsed().as_secs_f64(),
        most.load(Ordering::SeqCst)
    );
    host.close(Duration::from_secs(5)).await?;
    queue.limits().remove_global_concurrency().await?;
    conn.close().await;
    Ok(())
}
