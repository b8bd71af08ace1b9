//! Job schedulers: jobs produced on a schedule, `every` N ms or by a cron
//! pattern (seconds field first when there are six), as BullMQ's
//! `upsertJobScheduler`. The worker that takes an iteration produces the
//! next one, so the schedule lives in Redis and survives every process.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example schedulers`

use std::time::{Duration, Instant};

use echomq::scheduler::JobSchedulers;
use echomq::worker::processor_fn;
use echomq::{Connection, Host, ProcessError, Queue, SchedulerSpec, WorkerArgs};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    Queue::new(&conn, "schedules")
        .await?
        .obliterate(true)
        .await?;
    let queue = Queue::new(&conn, "schedules").await?;

    let schedulers = JobSchedulers::new(&conn, "schedules")?;
    let mut heartbeat = SchedulerSpec::every("heartbeat", Duration::from_millis(500));
    heartbeat.template.data = json!({ "kind": "heartbeat" });
    schedulers.upsert(&heartbeat).await?;
    // Every second, on the second, in UTC (give `tz` always: without it the
    // process's local zone is used, as Node does).
    let mut tick = SchedulerSpec::cron("tick", "* * * * * *", Some("UTC"));
    tick.template.data = json!({ "kind": "tick" });
    tick.limit = Some(3);
    schedulers.upsert(&tick).await?;

    let processor = processor_fn(|job| async move {
        println!("{} ran at {} ms", job.name(), job.job().timestamp);
        Ok::<_, ProcessError>(json!(null))
    });
    let host = Host::start().await?;
    let args = WorkerArgs::new(queue.clone(), processor);
    host.add_worker(args).await?;

    let deadline = Instant::now() + Duration::from_secs(30);
    while queue.counts().await?.completed < 8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Removing a scheduler removes its pending iteration too.
    for id in ["heartbeat", "tick"] {
        schedulers.remove(id).await?;
    }
    host.close(Duration::from_secs(5)).await?;
    println!("counts: {:?}", queue.counts().await?);
    conn.close().await;
    Ok(())
}
