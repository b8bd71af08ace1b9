//! `echomq stats <queue>`: counts by state, workers, schedulers, paused.

use echomq::{Connection, Queue};
use fred::prelude::{ClientInterface, SortedSetsInterface};

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Read, async |conn, q| stats(conn, q).await)
        .await
}

async fn stats(conn: &Connection, q: &Queue) -> Res {
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
