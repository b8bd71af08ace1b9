//! `echomq stats <queue>`: counts by state, workers, schedulers, paused,
//! the bytes it keeps against its byte budget (docs/operations.md §Memory),
//! and the autoscaling figures (docs/operations.md §Autoscaling); `--json`
//! prints the same as one JSON object.

use echomq::capacity::{Capacity, CapacityMonitor, CapacitySettings};
use echomq::{Connection, Queue};
use fred::prelude::{ClientInterface, SortedSetsInterface};
use serde_json::json;

use super::{Access, Res};
use crate::capacity::{human_ms, CapacityArgs};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    /// One JSON object instead of lines: counts, paused, schedulers,
    /// workers and `capacity` (backlog, oldest_age_ms, arrival_rate,
    /// completion_rate, service_time_ms, desired_workers, …).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    capacity: CapacityArgs,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let settings = a.capacity.settings()?;
    let json = a.json;
    super::queue(t, &a.queue)?
        .run(Access::Read, async |conn, q| match json {
            true => stats_json(conn, q, settings).await,
            false => stats(conn, q, settings).await,
        })
        .await
}

/// One reading's figures: a single reading has no history to smooth, so
/// its `desired_workers` is the instant figure (`/metrics` smooths).
async fn capacity(q: &Queue, settings: CapacitySettings) -> Res<Capacity> {
    Ok(CapacityMonitor::new(settings)?.observe(q).await?)
}

async fn stats_json(conn: &Connection, q: &Queue, settings: CapacitySettings) -> Res {
    let c = q.counts().await?;
    let schedulers: u64 = conn.pool().zcard(q.keys().repeat()).await?;
    let out = json!({
        "queue": q.name(),
        "paused": q.is_paused().await?,
        "counts": {
            "waiting": c.waiting,
            "prioritized": c.prioritized,
            "delayed": c.delayed,
            "active": c.active,
            "completed": c.completed,
            "failed": c.failed,
            "waiting-children": c.waiting_children,
        },
        "schedulers": schedulers,
        "workers": worker_names(conn, q).await,
        "capacity": capacity(q, settings).await?,
        "budget": super::budget::to_json(q.name(), &q.byte_budget().await?),
    });
    anstream::println!("{out}");
    Ok(())
}

async fn stats(conn: &Connection, q: &Queue, settings: CapacitySettings) -> Res {
    let c = q.counts().await?;
    anstream::println!(
        "{} {}{}",
        paint(style::BOLD, "queue"),
        q.name(),
        if q.is_paused().await? {
            paint(style::WARN, "  (paused)")
        } else {
            String::new()
        }
    );
    for (name, n) in [
        ("waiting", c.waiting),
        ("prioritized", c.prioritized),
        ("delayed", c.delayed),
        ("active", c.active),
        ("completed", c.completed),
        ("failed", c.failed),
        ("waiting-children", c.waiting_children),
    ] {
        anstream::println!("  {name:<17}{n}");
    }
    let schedulers: u64 = conn.pool().zcard(q.keys().repeat()).await?;
    anstream::println!("  {:<17}{schedulers}", "schedulers");
    let workers = worker_names(conn, q).await;
    anstream::println!(
        "  {:<17}{} {}",
        "workers",
        workers.len(),
        paint(style::DIM, workers.join(", "))
    );
    anstream::println!(
        "  {:<17}{}",
        "bytes kept",
        super::budget::line(&q.byte_budget().await?)
    );
    let cap = capacity(q, settings).await?;
    let r = &cap.reading;
    anstream::println!(
        "  {:<17}{} {}",
        "desired workers",
        cap.desired_workers,
        paint(
            style::DIM,
            format!(
                "backlog {}, oldest {}, in {:.1}/s, out {:.1}/s, service {} (target {}, {} per worker)",
                cap.backlog,
                human_ms(r.oldest_age_ms as f64),
                r.arrival_rate,
                r.completion_rate,
                r.service_time_ms.map_or("-".to_owned(), human_ms),
                human_ms(cap.target_age_ms as f64),
                cap.concurrency,
            )
        )
    );
    Ok(())
}

/// The names of the queue's workers, from the server's client list.
async fn worker_names(conn: &Connection, q: &Queue) -> Vec<String> {
    // On a cluster the worker connections are listed by the node that serves
    // the queue's slot (blocking reads go there).
    let client = conn.pool().next();
    let list: String = match echomq::Connection::node_for_key(client, &q.keys().marker()) {
        Some(node) => {
            client
                .with_cluster_node(&node)
                .client_list::<String, String>(None, None)
                .await
        }
        None => client.client_list::<String, String>(None, None).await,
    }
    .unwrap_or_default();
    let base = q.keys().worker_client_name(None);
    list.lines()
        .filter_map(|l| l.split(' ').find_map(|kv| kv.strip_prefix("name=")))
        .filter(|n| *n == base || n.starts_with(&format!("{base}:w:")))
        .map(|n| {
            n.strip_prefix(&format!("{base}:w:"))
                .unwrap_or("(unnamed)")
                .to_owned()
        })
        .collect()
}
