//! `echomq events <queue> [--follow] [--from ID]`: the events stream, one
//! line per event.

use std::time::Duration;

use echomq::protocol::Event;
use echomq::{Connection, Delivery, Host, Queue, QueueEventsArgs, StartFrom};
use fred::prelude::{StreamsInterface, Value};

use super::{truncate, Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    /// Keep reading new events.
    #[arg(long)]
    follow: bool,
    /// Start after this stream id (default: the last 20 entries, or now with --follow).
    #[arg(long)]
    from: Option<String>,
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    super::queue(t, &a.queue)?
        .run(Access::Read, async |conn, q| {
            if a.follow {
                follow(conn, q, a.from).await
            } else {
                recent(conn, q, a.from.as_deref()).await
            }
        })
        .await
}

/// The entries after `from`, or the last 20.
async fn recent(conn: &Connection, q: &Queue, from: Option<&str>) -> Res {
    let entries: Value = match from {
        Some(id) => {
            conn.pool()
                .xrange(q.keys().events(), format!("({id}"), "+", Some(1000))
                .await?
        }
        None => {
            let mut v: Value = conn
                .pool()
                .xrevrange(q.keys().events(), "+", "-", Some(20))
                .await?;
            if let Value::Array(a) = &mut v {
                a.reverse();
            }
            v
        }
    };
    for e in parse_entries(entries) {
        print_event(&e);
    }
    Ok(())
}

/// New events as they come, until Ctrl-C.
async fn follow(conn: &Connection, q: &Queue, from: Option<String>) -> Res {
    let mut args = QueueEventsArgs::new(conn.clone(), q.name());
    args.start = from.map(StartFrom::After).unwrap_or(StartFrom::Now);
    let host = Host::start().await?;
    let mut sub = host.add_queue_events(args).await?.subscribe(10_000);
    loop {
        tokio::select! {
            d = sub.recv() => match d {
                Some(Delivery::Event(e)) => print_event(&e),
                Some(Delivery::Lagged(n)) => anstream::println!("{}", paint(style::WARN, format!("… {n} events skipped (output too slow)"))),
                Some(Delivery::Gap { after, next }) => anstream::println!("{}", paint(style::WARN, format!("… gap: stream trimmed between {after} and {next}"))),
                None => return Err("the events reader stopped".into()),
            },
            // The reader's restart budget spent.
            _ = host.wait() => return Err("the events reader stopped".into()),
            _ = tokio::signal::ctrl_c() => {
                // Ctrl-C stays prompt: the reader may be in a blocking read.
                let _ = tokio::time::timeout(Duration::from_secs(1), host.close(Duration::ZERO)).await;
                return Ok(());
            }
        }
    }
}

fn parse_entries(v: Value) -> Vec<Event> {
    let Value::Array(entries) = v else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|e| {
            let Value::Array(mut parts) = e else {
                return None;
            };
            let Value::Array(flat) = parts.pop()? else {
                return None;
            };
            let id = parts.first()?.as_string()?;
            let flat: Vec<String> = flat.into_iter().filter_map(|v| v.as_string()).collect();
            Some(Event::parse(
                id,
                flat.chunks(2)
                    .filter(|c| c.len() == 2)
                    .map(|c| (c[0].clone(), c[1].clone()))
                    .collect(),
            ))
        })
        .collect()
}

fn print_event(e: &Event) {
    let name = e.kind.name();
    let detail = match &e.kind {
        echomq::EventKind::Completed { return_value, .. } => {
            format!("→ {}", truncate(&return_value.to_string(), 60))
        }
        echomq::EventKind::Failed { failed_reason, .. } => {
            format!("✗ {}", truncate(failed_reason, 60))
        }
        echomq::EventKind::Progress { data, .. } => data.to_string(),
        echomq::EventKind::Delayed { delay, .. } => format!("due {delay}"),
        echomq::EventKind::Waiting { prev: Some(p), .. }
        | echomq::EventKind::Removed { prev: p, .. } => format!("from {p}"),
        echomq::EventKind::RetriesExhausted { attempts_made, .. } => {
            format!("after {attempts_made} attempts")
        }
        echomq::EventKind::Cleaned { count } => format!("{count} jobs"),
        echomq::EventKind::Unknown { fields, .. } => format!("{fields:?}"),
        _ => String::new(),
    };
    anstream::println!(
        "{} {:<17} {:<10} {}",
        paint(style::DIM, &e.id),
        paint(style::for_event(name), name),
        e.kind.job_id().unwrap_or(""),
        detail
    );
}
