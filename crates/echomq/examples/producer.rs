//! The producer side alone: a mix of jobs added to a fresh queue,
//! and what landed where in Redis. (`just demo` is the full tour: `echomq demo`.)
//!
//! `REDIS_URL=redis://… cargo run -p echomq --example producer`.

use std::time::Duration;

use echomq::{Backoff, Connection, JobOptions, JobState, KeepJobs, NewJob, Queue};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    let queue = Queue::new(&conn, "demo").await?;
    queue.obliterate(true).await?; // a clean slate when pointed at a reused server
    let queue = Queue::new(&conn, "demo").await?;

    println!("EchoMQ demo — queue `demo` on {url}\n");
    let plain = queue
        .add(
            "email",
            &json!({"to": "ada@example.com"}),
            JobOptions::new(),
        )
        .await?;
    let delayed = queue
        .add(
            "reminder",
            &json!({"in": "5s"}),
            JobOptions::new().delay(Duration::from_secs(5)),
        )
        .await?;
    let urgent = queue
        .add("invoice", &json!({"n": 7}), JobOptions::new().priority(1))
        .await?;
    let next = queue
        .add("hotfix", &json!({}), JobOptions::new().lifo(true))
        .await?;
    let custom = queue
        .add(
            "report",
            &json!({"month": "2026-11"}),
            JobOptions::new()
                .job_id("report-2026-11")
                .attempts(3)
                .backoff(Backoff::Exponential {
                    delay: 1000,
                    jitter: Some(0.5),
                })
                .remove_on_complete(KeepJobs::Count(100)),
        )
        .await?;
    let again = queue
        .add(
            "report",
            &json!({}),
            JobOptions::new().job_id("report-2026-11"),
        )
        .await?;
    println!("  added plain job        {plain}");
    println!("  added delayed job      {delayed}   (runs in 5 s)");
    println!("  added priority-1 job   {urgent}");
    println!("  added lifo job         {next}   (runs before the other waiting jobs)");
    println!("  added custom-id job    {custom}");
    println!("  same custom id again → {again}   (a duplicate: nothing stored)");

    let bulk: Vec<NewJob> = (0..100)
        .map(|i| NewJob {
            name: "thumbnail".into(),
            data: json!({"image": i}),
            options: JobOptions::new(),
        })
        .collect();
    let ids = queue.add_bulk(bulk).await?;
    println!(
        "  added {} jobs in one round trip ({}..{})",
        ids.len(),
        ids[0],
        ids[ids.len() - 1]
    );

    let counts = queue.counts().await?;
    println!("\ncounts: {counts:#?}");
    println!(
        "state of {delayed}: {:?}",
        queue.get_job_state(&delayed).await?
    );
    println!(
        "state of {urgent}: {:?}",
        queue.get_job_state(&urgent).await?
    );
    let first = queue
        .get_ranges(&[JobState::Waiting], 0, 2, echomq::RangeOrder::Ascending)
        .await?;
    println!("next jobs to run: {first:?}");
    let job = queue.get_job(&custom).await?.expect("just added");
    println!(
        "job {custom}: name={} attempts={:?} opts={}",
        job.name,
        job.opts.attempts,
        serde_json::Value::Object(job.opts.to_stored())
    );
    conn.close().await;
    Ok(())
}
