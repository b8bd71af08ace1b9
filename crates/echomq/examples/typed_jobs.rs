//! Typed jobs: a producer of `Email` values (`queue.typed::<Email>()`) and a
//! worker whose processor takes a `TypedJob<Email>` and returns a `Receipt`.
//! The JSON stored is what a BullMQ Node producer writes for the same object
//! (fields in declaration order), so Node workers and producers share the
//! queue. A job whose data does not fit `Email` fails at once, with serde's
//! reason, its data left as it was.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example typed_jobs`

use std::time::{Duration, Instant};

use echomq::{
    typed_processor, Connection, Host, JobOptions, ProcessError, Queue, TypedJob, WorkerArgs,
};
use serde::{Deserialize, Serialize};

/// What producers send.
#[derive(Debug, Serialize, Deserialize)]
pub struct Email {
    pub to: String,
    pub subject: String,
}

/// What the worker stores as the return value.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    pub to: String,
    pub words: usize,
}

/// Adds three emails and one job whose data is not an `Email`, processes
/// them, and answers the receipts and the misfit's failure reason.
pub async fn run(url: &str) -> Result<(Vec<Receipt>, String), Box<dyn std::error::Error>> {
    let conn = Connection::connect_url(url).await?;
    Queue::new(&conn, "typed-example")
        .await?
        .obliterate(true)
        .await?;
    let queue = Queue::new(&conn, "typed-example").await?;

    let emails = queue.typed::<Email>();
    let mut ids = Vec::new();
    for to in ["ada@example.com", "alan@example.com", "grace@example.com"] {
        let email = Email {
            to: to.into(),
            subject: "Welcome aboard".into(),
        };
        ids.push(
            emails
                .add("welcome", &email, JobOptions::new().attempts(3))
                .await?,
        );
    }
    // The untyped handle stays: this job would never fit an `Email`.
    let misfit = queue
        .add(
            "welcome",
            &serde_json::json!({"to": 42}),
            JobOptions::new().attempts(3),
        )
        .await?;

    let processor = typed_processor(|job: TypedJob<Email>| async move {
        job.log(&format!("sending to {}", job.data().to)).await?;
        job.update_progress(&100).await?;
        Ok::<_, ProcessError>(Receipt {
            to: job.data().to.clone(),
            words: job.data().subject.split_whitespace().count(),
        })
    });
    let host = Host::start().await?;
    let mut args = WorkerArgs::new(queue.clone(), processor);
    args.options.concurrency = 2;
    host.add_worker(args).await?;

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let counts = queue.counts().await?;
        if counts.completed + counts.failed == 4 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("jobs not done in time: {counts:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.close(Duration::from_secs(5)).await?;

    let mut receipts = Vec::new();
    for id in &ids {
        let job = queue.get_job(id).await?.ok_or("job gone")?;
        receipts.push(serde_json::from_value(
            job.return_value.ok_or("no return value")?,
        )?);
    }
    let reason = queue
        .get_job(&misfit)
        .await?
        .and_then(|j| j.failed_reason)
        .ok_or("the misfit did not fail")?;
    conn.close().await;
    Ok((receipts, reason))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let (receipts, reason) = run(&url).await?;
    for r in receipts {
        println!("receipt: {r:?}");
    }
    println!("the misfit failed at once: {reason}");
    Ok(())
}
