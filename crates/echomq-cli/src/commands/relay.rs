//! `echomq relay …`: the relay (BullMQ 6.7.0's `Relay`, docs/relay.md) by
//! hand — publish, subscribe and look at a namespace.
//!
//! `subscribe` prints one JSON line `{"topic":…,"data":…}` per message on
//! stdout (a retained message first, for an exact topic) and says on stderr
//! once it is subscribed, so a script can wait for that line before
//! publishing. Exit codes follow the other commands: 2 for a refused argument
//! (checked before connecting), 3/4 for Redis, 1 otherwise.

use std::time::Duration;

use echomq::relay::{
    RelayArgs, RelayClient, RelayDelivery, RelayError, SubscriptionFilter, DEFAULT_NAMESPACE,
};
use echomq::{Connection, HandleError, Host};
use serde_json::json;

use crate::style::{self, paint};
use crate::target::Target;

/// `echomq relay [--namespace NS] <action>`
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The relay namespace (as BullMQ's `namespace` option).
    #[arg(long, default_value = DEFAULT_NAMESPACE, global = true)]
    namespace: String,
    #[command(subcommand)]
    action: RelayAction,
}

/// What `echomq relay` does.
#[derive(Debug, clap::Subcommand)]
enum RelayAction {
    /// Publish JSON data on a topic; prints the message id and how many
    /// nodes and subscriptions it reached.
    Publish {
        /// The topic (dot-separated; no wildcard).
        topic: String,
        /// The data, as JSON.
        json: String,
        /// Also keep it as the topic's retained message for this many ms.
        #[arg(long, value_name = "MS")]
        retain: Option<u64>,
    },
    /// Subscribe to a topic or pattern (`*` one segment, trailing `>` the
    /// rest) and print one JSON line per message.
    Subscribe {
        /// The pattern.
        pattern: String,
        /// Exit after this many messages (default: run until interrupted).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// The namespace's nodes, subscriptions and retained messages.
    Show,
}

/// Runs `echomq relay …`; answers the exit code.
pub(crate) async fn run(cmd: Args, cli: &Target) -> i32 {
    match relay(cli, &cmd).await {
        Ok(()) => 0,
        Err(RelayError::Runtime(e)) => {
            let d = echomq_cli::diagnose::diagnose(&e, Some(&cli.url));
            crate::style::print_error(&d.message);
            d.class.exit_code()
        }
        Err(e) => {
            crate::style::print_error(&e.to_string());
            match e {
                RelayError::Input(_)
                | RelayError::Option { .. }
                | RelayError::Data(_)
                | RelayError::DataTooLarge { .. } => 2,
                _ => 1,
            }
        }
    }
}

async fn relay(cli: &Target, cmd: &Args) -> Result<(), RelayError> {
    // Everything that can be refused is refused before connecting.
    echomq::protocol::relay::RelayKeys::new(&cli.prefix, &cmd.namespace)?;
    let data = match &cmd.action {
        RelayAction::Publish { topic, json, .. } => {
            echomq::protocol::relay::check_topic(topic)?;
            Some(
                serde_json::from_str::<serde_json::Value>(json)
                    .map_err(|e| RelayError::Data(format!("not JSON: {e}")))?,
            )
        }
        RelayAction::Subscribe { pattern, .. } => {
            echomq::protocol::relay::check_pattern(pattern)?;
            None
        }
        RelayAction::Show => None,
    };
    let conn = Connection::connect(cli.config.clone()).await?;
    let r = match &cmd.action {
        RelayAction::Publish { topic, retain, .. } => {
            publish(
                &conn,
                &cmd.namespace,
                topic,
                data.unwrap_or_default(),
                *retain,
            )
            .await
        }
        RelayAction::Subscribe { pattern, count } => {
            subscribe(&conn, &cmd.namespace, pattern, *count).await
        }
        RelayAction::Show => show(&conn, &cmd.namespace).await,
    };
    conn.close().await;
    r
}

async fn publish(
    conn: &Connection,
    namespace: &str,
    topic: &str,
    data: serde_json::Value,
    retain: Option<u64>,
) -> Result<(), RelayError> {
    let client = RelayClient::new(conn, namespace)?;
    let p = client
        .publish(
            topic,
            &data,
            retain.filter(|ms| *ms > 0).map(Duration::from_millis),
        )
        .await?;
    anstream::println!(
        "published {} on {topic}: {} node(s), {} subscription(s){}",
        p.mid,
        p.nodes,
        p.endpoints,
        match retain {
            Some(ms) if ms > 0 => format!(", retained for {ms} ms"),
            _ => String::new(),
        }
    );
    Ok(())
}

async fn subscribe(
    conn: &Connection,
    namespace: &str,
    pattern: &str,
    count: Option<u64>,
) -> Result<(), RelayError> {
    let args = RelayArgs::new(conn.clone())
        .namespace(namespace)
        .name("echomq relay subscribe");
    let spawn_failed =
        |e: &dyn std::fmt::Display| RelayError::Runtime(echomq::Error::Config(e.to_string()));
    let host = Host::start().await.map_err(|e| spawn_failed(&e))?;
    let sub = match host.add_relay(args).await {
        Ok(relay) => relay.subscribe(pattern, 1024).await.map_err(|e| match e {
            HandleError::Relay(e) => e,
            _ => RelayError::Closed,
        }),
        Err(HandleError::Spawn(e)) => Err(spawn_failed(&e)),
        Err(e) => Err(spawn_failed(&e)),
    };
    let result = match sub {
        Ok(mut sub) => {
            eprintln!("subscribed to {pattern} in namespace {namespace}");
            let mut printed = 0;
            let interrupted = tokio::signal::ctrl_c();
            tokio::pin!(interrupted);
            while count.is_none_or(|n| printed < n) {
                let d = tokio::select! {
                    _ = &mut interrupted => break,
                    d = sub.recv() => d,
                };
                match d {
                    Some(RelayDelivery::Message(m)) => {
                        anstream::println!("{}", json!({"topic": m.topic, "data": m.data}));
                        printed += 1;
                    }
                    Some(RelayDelivery::Lagged(n)) => {
                        crate::style::print_warning(&format!(
                            "{n} message(s) missed: output too slow"
                        ));
                    }
                    None => break,
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    };
    // Leaves cleanly: the node and its subscription go at once.
    let _ = host.close(Duration::ZERO).await;
    result
}

async fn show(conn: &Connection, namespace: &str) -> Result<(), RelayError> {
    let client = RelayClient::new(conn, namespace)?;
    let counts = client.counts().await?;
    anstream::println!(
        "{} {namespace}: {} node(s), {} subscription(s) on {} pattern(s), {} retained",
        paint(style::BOLD, "relay namespace"),
        counts.nodes,
        counts.subscriptions,
        counts.patterns,
        counts.retained
    );
    let more = |shown: usize, total: u64| {
        if total > shown as u64 {
            anstream::println!(
                "  {}",
                paint(style::DIM, format!("… {} more", total - shown as u64))
            );
        }
    };
    let nodes = client.nodes(0, None).await?;
    anstream::println!("{}", paint(style::BOLD, "nodes"));
    for n in &nodes {
        let info = |k: &str| n.info.get(k).map(|v| v.to_string()).unwrap_or_default();
        let lease = match n.lease_until {
            Some(t) => format!("lease until {}", time(t)),
            None => paint(style::WARN, "lease gone (not swept yet)"),
        };
        anstream::println!(
            "  {}  name {} host {} pid {} {}  registered {}  {lease}  backlog {} dropped {}  {} subscription(s)",
            n.id,
            info("name"),
            info("host"),
            info("pid"),
            info("version"),
            time(n.registered_at),
            n.backlog,
            n.dropped,
            n.subscriptions
        );
    }
    more(nodes.len(), counts.nodes);
    let subs = client
        .subscriptions(SubscriptionFilter::All, 0, None)
        .await?;
    anstream::println!("{}", paint(style::BOLD, "subscriptions"));
    for s in &subs {
        anstream::println!("  {}  {}  {}", s.node, s.endpoint, s.pattern);
    }
    more(subs.len(), counts.subscriptions);
    let retained = client.retained(0, None).await?;
    anstream::println!("{}", paint(style::BOLD, "retained"));
    for r in &retained {
        let mut data = r.data.clone();
        if data.len() > 120 {
            let mut cut = 117;
            while !data.is_char_boundary(cut) {
                cut -= 1;
            }
            data.truncate(cut);
            data.push_str("...");
        }
        anstream::println!("  {}  until {}  {data}", r.topic, time(r.expires_at));
    }
    more(retained.len(), counts.retained);
    Ok(())
}

/// Milliseconds since the epoch as UTC.
fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}
