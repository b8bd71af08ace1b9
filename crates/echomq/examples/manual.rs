//! Manual processing: take jobs one by one without the Worker actor (BullMQ's
//! `worker.getNextJob(token)` + `job.moveToCompleted/Failed`), for hosts that
//! run jobs in their own loop. The caller owns the lock: it extends it while
//! it works, or the stalled checker takes the job back.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example manual`

use std::time::Duration;

use echomq::worker::{Fetched, ManualWorker};
use echomq::{Connection, JobOptions, Queue, WorkerOptions};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    Queue::new(&conn, "manual").await?.obliterate(true).await?;
    let queue = Queue::new(&conn, "manual").await?;
    for n in 1..=5 {
        queue
            .add("resize", &json!({ "n": n }), JobOptions::new())
            .await?;
    }

    let worker = ManualWorker::new(queue.clone(), WorkerOptions::default())?;
    // One token per taker; a job taken with it is locked by it.
    let token = uuid_like();
    let mut next = worker.get_next_job(&token).await?;
    loop {
        let job = match next {
            Fetched::Job(job) => job,
            Fetched::RateLimited(wait) => {
                tokio::time::sleep(wait).await;
                next = worker.get_next_job(&token).await?;
                continue;
            }
            Fetched::Empty => break,
        };
        let n = job.job().data["n"].as_u64().unwrap_or(0);
        // Long work extends the lock before it runs out (30 s by default).
        job.extend_lock(Duration::from_secs(30)).await?;
        // Finishing takes the next job in the same call (fetch_next).
        next = if n == 4 {
            job.move_to_failed("n = 4 is not allowed", true).await?
        } else {
            job.move_to_completed(&json!({ "resized": n }), true)
                .await?
        }
        .unwrap_or(Fetched::Empty);
        if matches!(next, Fetched::Empty) {
            // The fetch-next found nothing: ask once more before stopping.
            next = worker.get_next_job(&token).await?;
        }
    }
    println!("counts: {:?}", queue.counts().await?);
    conn.close().await;
    Ok(())
}

/// A token unique to this process and run.
fn uuid_like() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("manual-{}-{}", std::process::id(), t.as_nanos())
}
