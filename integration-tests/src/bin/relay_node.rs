//! Test support: an EchoMQ relay node in its own process, so the relay
//! interop tests can SIGKILL it and watch the other nodes sweep it.
//!
//! `relay_node <redis-url> <namespace> <json-options>`, options as
//! `interop/relay.js`'s node: `nodeId`, `name`, `lease`, `heartbeat`,
//! `sweep`, `block` (ms) and `subscribe` (patterns). Prints JSON lines:
//! `{"ev":"ready","nodeId"}` once subscribed, then one `msg` line per
//! message (`pattern`, `topic`, `mid`, `data`, `retained`) and `swept`,
//! `recovered`, `lag`, `error` for the node's notices. Closes the node
//! (unregistering it) when stdin closes.

use std::io::Write;
use std::time::Duration;

use echomq::relay::{Relay, RelayArgs, RelayDelivery, RelayMsg, RelayNotice};
use echomq::Connection;
use echomq_integration_tests::NullSupervisor;
use ractor::Actor;
use serde_json::{json, Value};

fn say(v: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, namespace, opts] = &args[..] else {
        eprintln!("usage: relay_node <redis-url> <namespace> <json-options>");
        std::process::exit(2);
    };
    let opts: Value = serde_json::from_str(opts).expect("json options");
    let ms = |k: &str| opts[k].as_u64().map(Duration::from_millis);
    let conn = Connection::connect_url(url).await.expect("connect");
    let mut relay = RelayArgs::new(conn.clone()).namespace(namespace.clone());
    if let Some(id) = opts["nodeId"].as_str() {
        relay = relay.node_id(id);
    }
    if let Some(name) = opts["name"].as_str() {
        relay = relay.name(name);
    }
    if let Some(d) = ms("lease") {
        relay = relay.lease(d);
    }
    if let Some(d) = ms("heartbeat") {
        relay = relay.heartbeat_interval(d);
    }
    if let Some(d) = ms("sweep") {
        relay = relay.sweep_interval(d);
    }
    if let Some(d) = ms("block") {
        relay = relay.block(d);
    }
    let node_id = relay.node_id.clone();
    let mut notices = relay.subscribers.notices(1024);
    tokio::spawn(async move {
        while let Some(n) = notices.recv().await {
            say(match n {
                RelayNotice::Swept(ids) => json!({"ev": "swept", "ids": ids}),
                RelayNotice::Recovered => json!({"ev": "recovered"}),
                RelayNotice::Lag(b) => json!({"ev": "lag", "backlog": b}),
                RelayNotice::Error(m) => json!({"ev": "error", "message": m}),
                _ => json!({"ev": "notice"}),
            });
        }
    });
    let (sup, _) = Actor::spawn(None, NullSupervisor, ())
        .await
        .expect("supervisor");
    let (node, _) = Actor::spawn_linked(None, Relay, relay, sup.get_cell())
        .await
        .expect("relay node starts");
    let patterns: Vec<String> = opts["subscribe"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for pattern in patterns {
        let mut sub = ractor::call!(node, |reply| RelayMsg::Subscribe {
            pattern: pattern.clone(),
            capacity: 1024,
            reply,
        })
        .expect("relay actor")
        .expect("subscribed");
        tokio::spawn(async move {
            while let Some(d) = sub.recv().await {
                match d {
                    RelayDelivery::Message(m) => say(json!({
                        "ev": "msg", "pattern": pattern, "topic": m.topic, "mid": m.mid,
                        "data": m.data, "retained": m.retained,
                    })),
                    RelayDelivery::Lagged(n) => say(json!({"ev": "lagged", "n": n})),
                }
            }
        });
    }
    say(json!({"ev": "ready", "nodeId": node_id}));
    // stdin's end asks for a clean close.
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    })
    .await
    .ok();
    let _ = ractor::call!(node, RelayMsg::Close);
    conn.close().await;
}
