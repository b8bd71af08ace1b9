//! The relay against BullMQ 6.7.0's `Relay` on one Redis (docs/relay.md,
//! docs/compat.md §Relay): the same script effects (a whole-keyspace
//! comparison of one sequence of calls made by BullMQ's backend and by our
//! call types on two servers), messages both ways, retained messages seen by
//! late subscribers of either kind, killed nodes of either kind swept, the
//! actor's restart semantics and typed refusals. Every wait is on an
//! observable line, delivery or key, under one deadline.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use echomq::protocol::call::relay::{
    Registration, RelayAckInbox, RelayDeleteRetained, RelayGetCounts, RelayGetNamespaces,
    RelayGetNodes, RelayGetPatterns, RelayGetRetained, RelayGetSubscriptions, RelayHeartbeat,
    RelayPublish, RelayReadInbox, RelayRegisterNode, RelayRemoveEndpoint, RelaySubscribe,
    RelaySweep, RelayTouchNamespace, RelayTrimInbox, RelayUnregisterNode, SubscriptionFilter,
};
use echomq::protocol::relay::{RelayCode, RelayKeys, LAYOUT_VERSION};
use echomq::relay::{
    Relay, RelayArgs, RelayClient, RelayDelivery, RelayError, RelayMessage, RelayMsg, RelayNotice,
    RelayNotices, RelaySubscription,
};
use echomq::Connection;
use echomq_integration_tests::{keys, NodeChild, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::{Actor, ActorRef};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(20);

/// `node interop/relay.js <command> <url> <namespace> <args>`'s JSON.
fn node_relay(command: &str, url: &str, namespace: &str, args: Value) -> Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    assert!(
        dir.join("node_modules/bullmq").is_dir(),
        "BullMQ Node packages missing: run `npm ci` in {}",
        dir.display()
    );
    let out = Command::new("node")
        .current_dir(&dir)
        .args(["relay.js", command, url, namespace, &args.to_string()])
        .output()
        .expect("node is installed");
    assert!(
        out.status.success(),
        "node relay.js {command} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("relay.js prints JSON")
}

async fn spawn_relay(args: RelayArgs) -> ActorRef<RelayMsg> {
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (relay, _) = Actor::spawn_linked(None, Relay, args, sup.get_cell())
        .await
        .expect("relay node starts");
    relay
}

async fn subscribe(relay: &ActorRef<RelayMsg>, pattern: &str) -> RelaySubscription {
    ractor::call!(relay, |reply| RelayMsg::Subscribe {
        pattern: pattern.into(),
        capacity: 256,
        reply,
    })
    .unwrap()
    .unwrap_or_else(|e| panic!("subscribe {pattern}: {e}"))
}

/// The next message of `sub`, within the deadline.
async fn next(sub: &mut RelaySubscription) -> RelayMessage {
    match tokio::time::timeout(LIMIT, sub.recv()).await {
        Ok(Some(RelayDelivery::Message(m))) => m,
        other => panic!("{}: expected a message, got {other:?}", sub.pattern),
    }
}

async fn next_notice(
    n: &mut RelayNotices,
    mut want: impl FnMut(&RelayNotice) -> bool,
) -> RelayNotice {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match tokio::time::timeout_at(deadline, n.recv()).await {
            Ok(Some(x)) if want(&x) => return x,
            Ok(Some(_)) => {}
            other => panic!("no matching notice: {other:?}"),
        }
    }
}

fn node_child(url: &str, ns: &str, opts: Value) -> NodeChild {
    NodeChild::spawn("relay.js", url, ns, opts)
}

fn rust_child(url: &str, ns: &str, opts: Value) -> NodeChild {
    NodeChild::spawn_rust_worker(env!("CARGO_BIN_EXE_relay_node"), url, ns, opts)
}

fn is_msg(topic: &str, retained: bool) -> impl FnMut(&Value) -> bool + '_ {
    move |v| v["ev"] == "msg" && v["topic"] == topic && v["retained"] == retained
}

// ---------------------------------------------------------------------------
// The same calls, by BullMQ's backend and by our call types, on two servers.

/// One op of the sequence, through our call types, answered in the shape
/// `relay.js ops` prints (BullMQ's backend's return values).
async fn rust_op(conn: &Connection, k: &RelayKeys, op: &Value, results: &[Value]) -> Value {
    let s = |f: &str| op[f].as_str().unwrap_or_default().to_owned();
    let n = |f: &str| op[f].as_u64().unwrap_or(0);
    let cursor = match op["cursorFrom"].as_u64() {
        Some(i) => results[i as usize]["cursor"].as_str().unwrap().to_owned(),
        None => s("cursor"),
    };
    let code = |c: RelayCode| json!({"error": c.code()});
    let touch = |ms: u64| async move {
        conn.call(&RelayTouchNamespace {
            keys: k,
            for_ms: ms,
        })
        .await
        .unwrap();
    };
    let (node, endpoint) = (s("node"), s("endpoint"));
    match op["op"].as_str().unwrap() {
        "register" => {
            let info = op["info"].to_string();
            let call = RelayRegisterNode {
                keys: k,
                node: &node,
                lease_ms: n("lease"),
                info: &info,
                layout: LAYOUT_VERSION,
                inbox_max: n("max"),
            };
            loop {
                match conn.call(&call).await.unwrap() {
                    Ok(Registration::Registered) => break,
                    Ok(Registration::StillPruning) => continue,
                    Err(c) => return code(c),
                }
            }
            touch(n("lease")).await;
            json!("ok")
        }
        "heartbeat" => {
            let alive = conn
                .call(&RelayHeartbeat {
                    keys: k,
                    node: &node,
                    lease_ms: n("lease"),
                })
                .await
                .unwrap();
            if alive {
                touch(n("lease")).await;
            }
            json!(alive)
        }
        "unregister" => json!(conn
            .call(&RelayUnregisterNode {
                keys: k,
                node: &node
            })
            .await
            .unwrap()),
        "sweep" => json!(conn
            .call(&RelaySweep {
                keys: k,
                limit: n("limit")
            })
            .await
            .unwrap()),
        "subscribe" => {
            let pattern = s("pattern");
            match conn
                .call(&RelaySubscribe {
                    keys: k,
                    node: &node,
                    endpoint: &endpoint,
                    pattern: &pattern,
                })
                .await
                .unwrap()
            {
                Ok(sub) => match sub.retained {
                    Some(r) => {
                        json!({"added": sub.added, "retained": {"mid": r.mid, "ts": r.ts, "data": r.data}})
                    }
                    None => json!({"added": sub.added}),
                },
                Err(c) => code(c),
            }
        }
        "removeEndpoint" => json!(conn
            .call(&RelayRemoveEndpoint {
                keys: k,
                node: &node,
                endpoint: &endpoint
            })
            .await
            .unwrap()),
        "publish" => {
            let (topic, data) = (s("topic"), s("data"));
            let r = conn
                .call(&RelayPublish {
                    keys: k,
                    topic: &topic,
                    data: &data,
                    ts_ms: op["ts"].as_i64().unwrap(),
                    retain_ms: n("retain"),
                    max_bytes: n("maxSize"),
                    inbox_max: 10_000,
                })
                .await
                .unwrap();
            match r {
                Ok(p) => {
                    if n("retain") > 0 {
                        touch(n("retain")).await;
                    }
                    json!({"mid": p.mid, "nodes": p.nodes, "endpoints": p.endpoints})
                }
                Err(c) => code(c),
            }
        }
        "deleteRetained" => {
            let topic = s("topic");
            match conn
                .call(&RelayDeleteRetained {
                    keys: k,
                    topic: &topic,
                })
                .await
                .unwrap()
            {
                Ok(d) => json!(d),
                Err(c) => code(c),
            }
        }
        "read" => {
            let entries = conn
                .call(&RelayReadInbox {
                    keys: k,
                    node: &node,
                    cursor: &cursor,
                    count: n("count"),
                })
                .await
                .unwrap();
            let next = entries.last().map_or(cursor.clone(), |e| e.id.clone());
            let entries: Vec<Value> = entries
                .into_iter()
                .map(|e| {
                    json!({"kind": e.kind, "topic": e.topic, "mid": e.mid, "ts": e.ts,
                           "data": e.data, "endpoints": e.endpoints})
                })
                .collect();
            json!({"entries": entries, "cursor": next})
        }
        "trim" => json!(conn
            .call(&RelayTrimInbox {
                keys: k,
                node: &node,
                cursor: &cursor,
                max_len: n("max")
            })
            .await
            .unwrap()),
        "ack" => {
            conn.call(&RelayAckInbox {
                keys: k,
                node: &node,
                cursor: &cursor,
            })
            .await
            .unwrap();
            json!(1)
        }
        "counts" => {
            let c = conn.call(&RelayGetCounts { keys: k }).await.unwrap();
            json!({"nodes": c.nodes, "subscriptions": c.subscriptions, "patterns": c.patterns, "retained": c.retained})
        }
        "nodes" => {
            let end = op["end"].as_i64().filter(|e| *e >= 0).map(|e| e as u64);
            let rows = conn
                .call(&RelayGetNodes {
                    keys: k,
                    start: n("start"),
                    end,
                })
                .await
                .unwrap();
            Value::Array(
                rows.into_iter()
                    .map(|r| {
                        let mut v = json!({"id": r.id, "info": r.info, "registeredAt": r.registered_at,
                            "leaseUntil": r.lease_until.unwrap_or(0), "backlog": r.backlog,
                            "dropped": r.dropped, "subscriptions": r.subscriptions});
                        if let Some(hb) = r.last_heartbeat {
                            v["lastHeartbeat"] = json!(hb);
                        }
                        v
                    })
                    .collect(),
            )
        }
        "subscriptions" => {
            let end = op["end"].as_i64().filter(|e| *e >= 0).map(|e| e as u64);
            let (node_f, pattern_f) = (
                op["filter"]["nodeId"].as_str().map(str::to_owned),
                op["filter"]["pattern"].as_str().map(str::to_owned),
            );
            let filter = match (&node_f, &pattern_f) {
                (Some(n), _) => SubscriptionFilter::Node(n),
                (_, Some(p)) => SubscriptionFilter::Pattern(p),
                _ => SubscriptionFilter::All,
            };
            let rows = conn
                .call(&RelayGetSubscriptions {
                    keys: k,
                    filter,
                    start: n("start"),
                    end,
                })
                .await
                .unwrap();
            Value::Array(
                rows.into_iter()
                    .map(|r| json!({"nodeId": r.node, "endpointId": r.endpoint, "pattern": r.pattern}))
                    .collect(),
            )
        }
        "patterns" => {
            let end = op["end"].as_i64().filter(|e| *e >= 0).map(|e| e as u64);
            let rows = conn
                .call(&RelayGetPatterns {
                    keys: k,
                    start: n("start"),
                    end,
                })
                .await
                .unwrap();
            Value::Array(
                rows.into_iter()
                    .map(|r| json!({"pattern": r.pattern, "subscriptions": r.subscriptions}))
                    .collect(),
            )
        }
        "retained" => {
            let end = op["end"].as_i64().filter(|e| *e >= 0).map(|e| e as u64);
            let rows = conn
                .call(&RelayGetRetained {
                    keys: k,
                    start: n("start"),
                    end,
                })
                .await
                .unwrap();
            Value::Array(
                rows.into_iter()
                    .map(|r| json!({"topic": r.topic, "expiresAt": r.expires_at, "mid": r.mid, "ts": r.ts, "data": r.data}))
                    .collect(),
            )
        }
        "namespaces" => {
            let registry = k.registry();
            let candidates = conn
                .call(&RelayGetNamespaces {
                    registry: &registry,
                })
                .await
                .unwrap();
            json!(candidates)
        }
        "waitGone" => {
            let record = k.node_record(&node);
            let c = conn.pool().next();
            echomq_integration_tests::wait_until("the node record expired", LIMIT, async || {
                c.exists::<i64, _>(record.as_str()).await.unwrap() == 0
            })
            .await;
            json!("gone")
        }
        other => panic!("unknown op {other}"),
    }
}

/// Every call of the protocol at least once, errors included; with an
/// inbox overflow, a page of 210 subscriptions pruned over several calls,
/// and a node whose lease runs out and is swept.
fn op_sequence() -> Vec<Value> {
    let mut ops = vec![
        json!({"op": "register", "node": "n1", "lease": 60000, "info": {"name": "one"}, "max": 5}),
        json!({"op": "register", "node": "n2", "lease": 60000, "info": {"name": "two"}, "max": 10000}),
        json!({"op": "subscribe", "node": "n1", "endpoint": "e1", "pattern": "a.b"}),
        json!({"op": "subscribe", "node": "n1", "endpoint": "e2", "pattern": "a.*"}),
        json!({"op": "subscribe", "node": "n2", "endpoint": "e3", "pattern": "a.>"}),
        json!({"op": "subscribe", "node": "n2", "endpoint": "e4", "pattern": "*.b"}),
        json!({"op": "subscribe", "node": "n1", "endpoint": "e1", "pattern": "a.b"}),
        json!({"op": "subscribe", "node": "n1", "endpoint": "e1", "pattern": "a.>.c"}),
        json!({"op": "subscribe", "node": "n9", "endpoint": "e1", "pattern": "a.b"}),
        json!({"op": "subscribe", "node": "n1", "endpoint": "bad id", "pattern": "a.b"}),
        json!({"op": "publish", "topic": "a.b", "data": "{\"x\":1}", "ts": 1000, "retain": 0, "maxSize": 1024}),
        json!({"op": "publish", "topic": "a.b", "data": "\"kept\"", "ts": 1001, "retain": 30000, "maxSize": 1024}),
        json!({"op": "publish", "topic": "a.c.d", "data": "2", "ts": 1002, "retain": 0, "maxSize": 1024}),
        json!({"op": "publish", "topic": "a.*", "data": "1", "ts": 1002, "retain": 0, "maxSize": 1024}),
        json!({"op": "publish", "topic": "a.b", "data": "\"abcd\"", "ts": 1002, "retain": 0, "maxSize": 3}),
        json!({"op": "subscribe", "node": "n2", "endpoint": "e5", "pattern": "a.b"}),
    ];
    for i in 0..6 {
        ops.push(json!({"op": "publish", "topic": "a.q", "data": i.to_string(), "ts": 2000 + i, "retain": 0, "maxSize": 1024}));
    }
    let read = ops.len();
    ops.push(json!({"op": "read", "node": "n1", "cursor": "0-0", "count": 3}));
    ops.push(json!({"op": "trim", "node": "n1", "cursorFrom": read, "max": 5}));
    let read2 = ops.len();
    ops.push(json!({"op": "read", "node": "n1", "cursorFrom": read, "count": 100}));
    ops.push(json!({"op": "ack", "node": "n1", "cursorFrom": read2}));
    ops.push(json!({"op": "trim", "node": "n1", "cursorFrom": read2, "max": 5}));
    ops.extend([
        json!({"op": "heartbeat", "node": "n1", "lease": 60000}),
        json!({"op": "heartbeat", "node": "n9", "lease": 60000}),
        json!({"op": "counts"}),
        json!({"op": "nodes", "start": 0, "end": -1}),
        json!({"op": "subscriptions", "start": 0, "end": -1}),
        json!({"op": "subscriptions", "filter": {"nodeId": "n1"}, "start": 0, "end": 1}),
        json!({"op": "subscriptions", "filter": {"pattern": "a.b"}, "start": 0, "end": -1}),
        json!({"op": "patterns", "start": 1, "end": 2}),
        json!({"op": "retained", "start": 0, "end": -1}),
        json!({"op": "namespaces"}),
        json!({"op": "removeEndpoint", "node": "n2", "endpoint": "e4"}),
        json!({"op": "deleteRetained", "topic": "a.b"}),
        json!({"op": "deleteRetained", "topic": "a.b"}),
        json!({"op": "deleteRetained", "topic": "a.*"}),
        json!({"op": "register", "node": "n3", "lease": 60000, "info": {}, "max": 10000}),
    ]);
    for i in 0..210 {
        ops.push(json!({"op": "subscribe", "node": "n3", "endpoint": format!("s{i}"), "pattern": format!("n3.t{i}")}));
    }
    ops.extend([
        // A 1 ms lease: the record expires by itself, then a sweep drops the
        // node and prunes 100 of its subscriptions; the register of the same
        // id prunes the rest over two calls.
        json!({"op": "heartbeat", "node": "n3", "lease": 1}),
        json!({"op": "waitGone", "node": "n3"}),
        json!({"op": "sweep", "limit": 100}),
        json!({"op": "counts"}),
        json!({"op": "register", "node": "n3", "lease": 60000, "info": {}, "max": 10000}),
        json!({"op": "counts"}),
        json!({"op": "unregister", "node": "n3"}),
        json!({"op": "unregister", "node": "n2"}),
        json!({"op": "unregister", "node": "n2"}),
        json!({"op": "publish", "topic": "q.r", "data": "\"last\"", "ts": 3000, "retain": 30000, "maxSize": 1024}),
        json!({"op": "counts"}),
        json!({"op": "nodes", "start": 0, "end": -1}),
    ]);
    ops
}

/// Values that differ between two servers by time alone, made comparable:
/// stream ids by rank, message ids relative to the first, times as "t".
struct Normal {
    ids: BTreeMap<(u64, u64), usize>,
    mid_base: i64,
}

fn stream_id(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn collect_ids(v: &Value, out: &mut Vec<(u64, u64)>) {
    match v {
        Value::String(s) => out.extend(stream_id(s)),
        Value::Array(a) => a.iter().for_each(|x| collect_ids(x, out)),
        Value::Object(o) => o.values().for_each(|x| collect_ids(x, out)),
        _ => {}
    }
}

impl Normal {
    fn new(results: &[Value], dump: &[(String, String, Value)]) -> Self {
        let mut all = Vec::new();
        results.iter().for_each(|r| collect_ids(r, &mut all));
        dump.iter().for_each(|(_, _, v)| collect_ids(v, &mut all));
        all.sort();
        all.dedup();
        let mid_base = results
            .iter()
            .find_map(|r| r["mid"].as_str().and_then(|m| m.parse().ok()))
            .expect("a publish answered a mid");
        Normal {
            ids: all.into_iter().enumerate().map(|(i, id)| (id, i)).collect(),
            mid_base,
        }
    }

    fn mid(&self, v: &Value) -> Value {
        match v.as_str().and_then(|m| m.parse::<i64>().ok()) {
            Some(m) => json!(format!("mid+{}", m - self.mid_base)),
            None => v.clone(),
        }
    }

    fn value(&self, key: Option<&str>, v: &Value) -> Value {
        const TIMES: [&str; 5] = [
            "registeredAt",
            "leaseUntil",
            "lastHeartbeat",
            "expiresAt",
            "hb",
        ];
        match (key, v) {
            (Some(k), _) if TIMES.contains(&k) => json!("t"),
            (Some("mid" | "m"), _) => self.mid(v),
            (_, Value::String(s)) => match stream_id(s) {
                Some(id) => json!(format!("id#{}", self.ids[&id])),
                None => v.clone(),
            },
            (_, Value::Array(a)) => Value::Array(a.iter().map(|x| self.value(None, x)).collect()),
            (_, Value::Object(o)) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), self.value(Some(k), x)))
                    .collect(),
            ),
            _ => v.clone(),
        }
    }
}

/// (key, type+ttl, content) of every relay key of the server; a score that
/// is a time reads as whether it is still ahead.
async fn dump(c: &Client) -> Vec<(String, String, Value)> {
    use echomq_integration_tests::state::cmd;
    let t: Vec<String> = cmd(c, "TIME", vec![]).await;
    let now = t[0].parse::<f64>().unwrap() * 1000.0 + t[1].parse::<f64>().unwrap() / 1000.0;
    let mut out = Vec::new();
    for key in keys(c, "emq::*").await {
        let kind: String = cmd(c, "TYPE", vec![key.clone()]).await;
        let pttl: i64 = cmd(c, "PTTL", vec![key.clone()]).await;
        let ttl = if pttl > 0 { "ttl" } else { "no-ttl" };
        let content = match kind.as_str() {
            "string" => json!(c.get::<String, _>(key.as_str()).await.unwrap()),
            "hash" => {
                let h: BTreeMap<String, String> = c.hgetall(key.as_str()).await.unwrap();
                json!(h)
            }
            "zset" => {
                let z: Vec<(String, f64)> = c
                    .zrange(key.as_str(), 0, -1, None, false, None, true)
                    .await
                    .unwrap();
                let mut z: Vec<Value> = z
                    .into_iter()
                    .map(|(m, s)| {
                        if key.ends_with(":subs") {
                            json!([m, s])
                        } else {
                            json!([m, if s > now { "future" } else { "past" }])
                        }
                    })
                    .collect();
                if !key.ends_with(":subs") {
                    // Registrations in one millisecond tie; the order
                    // between ties is not the protocol's.
                    z.sort_by_key(|v| v.to_string());
                }
                Value::Array(z)
            }
            "stream" => {
                let entries: Vec<(String, Vec<(String, String)>)> =
                    c.xrange(key.as_str(), "-", "+", None).await.unwrap();
                Value::Array(
                    entries
                        .into_iter()
                        .map(|(id, fields)| {
                            let f: serde_json::Map<String, Value> =
                                fields.into_iter().map(|(k, v)| (k, json!(v))).collect();
                            json!([id, f])
                        })
                        .collect(),
                )
            }
            other => json!(other),
        };
        out.push((key, format!("{kind} {ttl}"), content));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_scripts_write_what_bullmqs_write() {
    let (node_redis, rust_redis) = (RedisServer::start(), RedisServer::start());
    let ops = op_sequence();
    let node_results: Vec<Value> = serde_json::from_value(node_relay(
        "ops",
        &node_redis.url(),
        "cmp",
        json!({"ops": ops, "inboxMaxLength": 10000}),
    ))
    .unwrap();
    let conn = rust_redis.connect().await;
    let k = RelayKeys::new("emq", "cmp").unwrap();
    let mut rust_results = Vec::new();
    for op in &ops {
        let r = rust_op(&conn, &k, op, &rust_results).await;
        rust_results.push(r);
    }
    let node_dump = dump(&node_redis.client().await).await;
    let rust_dump = dump(&rust_redis.client().await).await;
    let nn = Normal::new(&node_results, &node_dump);
    let rn = Normal::new(&rust_results, &rust_dump);

    assert_eq!(node_results.len(), rust_results.len());
    for (i, (a, b)) in node_results.iter().zip(&rust_results).enumerate() {
        assert_eq!(
            nn.value(None, a),
            rn.value(None, b),
            "op {i} {} answered differently (BullMQ left, EchoMQ right)",
            ops[i]
        );
    }
    let norm = |n: &Normal, d: &[(String, String, Value)]| -> Vec<Value> {
        d.iter()
            .map(|(k, t, v)| {
                // The counter is a message id; so are a hash's and an
                // entry's `m`.
                let v = if k.ends_with(":mid") {
                    n.mid(v)
                } else {
                    n.value(None, v)
                };
                json!([k, t, v])
            })
            .collect()
    };
    let (a, b) = (norm(&nn, &node_dump), norm(&rn, &rust_dump));
    let keys_a: Vec<&str> = node_dump.iter().map(|(k, _, _)| k.as_str()).collect();
    let keys_b: Vec<&str> = rust_dump.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(keys_a, keys_b, "the same keys");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "key {} differs (BullMQ left, EchoMQ right)", x[0]);
    }
    // The sequence did what it meant to: the overflow dropped entries, the
    // sweep left work for the register, every code came back.
    let codes: Vec<i64> = rust_results
        .iter()
        .filter_map(|r| r["error"].as_i64())
        .collect();
    assert_eq!(codes, [-2, -3, -5, -1, -4, -1]);
    assert!(
        rust_results
            .iter()
            .any(|r| r["dropped"].as_u64().unwrap_or(0) > 0
                || r.as_array()
                    .is_some_and(|a| a.iter().any(|n| n["dropped"].as_u64().unwrap_or(0) > 0))),
        "n1's inbox overflowed"
    );
    let swept_at = ops.iter().position(|o| o["op"] == "sweep").unwrap();
    assert_eq!(rust_results[swept_at], json!(["n3"]));
    // n1: a.b, a.*; n2: a.>, a.b; n3: the 110 left after pruning 100.
    assert_eq!(rust_results[swept_at + 1]["subscriptions"], json!(114));
}

// ---------------------------------------------------------------------------
// Both clients on one Redis.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_publisher_reaches_a_rust_subscriber() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let relay = spawn_relay(RelayArgs::new(conn.clone())).await;
    let mut exact = subscribe(&relay, "orders.42.status").await;
    let mut one = subscribe(&relay, "orders.*.status").await;
    let mut tail = subscribe(&relay, "orders.>").await;
    let mut other = subscribe(&relay, "invoices.>").await;

    let published = node_relay(
        "publish",
        &redis.url(),
        "default",
        json!({"topic": "orders.42.status", "data": {"status": "shipped", "n": [1, 2]}}),
    );
    assert_eq!(
        published["nodes"], 1,
        "only the Rust node subscribes: {published}"
    );
    assert_eq!(published["endpoints"], 3);
    for sub in [&mut exact, &mut one, &mut tail] {
        let m = next(sub).await;
        assert_eq!(m.topic, "orders.42.status");
        assert_eq!(m.data, json!({"status": "shipped", "n": [1, 2]}));
        assert!(!m.retained);
        assert_eq!(m.mid, published["mid"].as_str().unwrap());
    }
    node_relay(
        "publish",
        &redis.url(),
        "default",
        json!({"topic": "orders.7", "data": 7}),
    );
    assert_eq!(next(&mut tail).await.data, json!(7));
    // Nothing for the other pattern, nor twice for one endpoint: the next
    // message of each is the one published last.
    node_relay(
        "publish",
        &redis.url(),
        "default",
        json!({"topic": "invoices.1", "data": null}),
    );
    assert_eq!(next(&mut other).await.topic, "invoices.1");
    assert!(exact.try_recv().is_none() && one.try_recv().is_none() && tail.try_recv().is_none());

    // A callback (or host actor, through `actor_sink`) endpoint; an
    // unsubscribed channel ends and is routed to no more.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cb = ractor::call!(relay, |reply| RelayMsg::SubscribeActor {
        pattern: "orders.42.*".into(),
        sink: Box::new(move |d| tx.send(d).is_ok()),
        reply,
    })
    .unwrap()
    .unwrap();
    assert_eq!(cb.len(), 32);
    let gone = one.endpoint.clone();
    assert!(ractor::call!(relay, RelayMsg::Unsubscribe, gone)
        .unwrap()
        .unwrap());
    assert!(tokio::time::timeout(LIMIT, one.recv())
        .await
        .unwrap()
        .is_none());
    let again = node_relay(
        "publish",
        &redis.url(),
        "default",
        json!({"topic": "orders.42.status", "data": 2}),
    );
    assert_eq!(
        again["endpoints"], 3,
        "exact, tail and the callback: {again}"
    );
    match tokio::time::timeout(LIMIT, rx.recv()).await.unwrap() {
        Some(RelayDelivery::Message(m)) => assert_eq!(m.data, json!(2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(next(&mut exact).await.data, json!(2));
    assert_eq!(next(&mut tail).await.data, json!(2));
    let _ = ractor::call!(relay, RelayMsg::Close);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_publisher_reaches_a_node_subscriber() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let mut node = node_child(
        &redis.url(),
        "fleet",
        json!({"subscribe": ["jobs.*.progress", "jobs.>"]}),
    );
    let client = RelayClient::new(&conn, "fleet").unwrap();
    let p = client
        .publish("jobs.9.progress", &json!({"pct": 70}), None)
        .await
        .unwrap();
    assert_eq!((p.nodes, p.endpoints), (1, 2));
    for pattern in ["jobs.*.progress", "jobs.>"] {
        let line = node.wait_line(LIMIT, |v| v["ev"] == "msg" && v["pattern"] == pattern);
        assert_eq!(line["topic"], "jobs.9.progress");
        assert_eq!(line["data"], json!({"pct": 70}));
        assert_eq!(line["mid"], p.mid.as_str());
    }
    // Through the actor too.
    let relay = spawn_relay(RelayArgs::new(conn.clone()).namespace("fleet")).await;
    ractor::call!(relay, |reply| RelayMsg::Publish {
        topic: "jobs.done".into(),
        data: json!("all"),
        retain: None,
        reply
    })
    .unwrap()
    .unwrap();
    let line = node.wait_line(LIMIT, is_msg("jobs.done", false));
    assert_eq!(line["data"], "all");
    let _ = ractor::call!(relay, RelayMsg::Close);
    node.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_subscribers_of_either_kind_get_the_retained_message() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let client = RelayClient::default_namespace(&conn).unwrap();
    // Rust retains, a Node subscriber comes later.
    client
        .publish(
            "config.flags",
            &json!({"dark": true}),
            Some(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    // Node retains, a Rust subscriber comes later.
    node_relay(
        "publish",
        &redis.url(),
        "default",
        json!({"topic": "svc.api.status", "data": "up", "retain": 60000}),
    );
    let mut node = node_child(
        &redis.url(),
        "default",
        json!({"subscribe": ["config.flags", "svc.api.status", "svc.*.status"]}),
    );
    let flags = node.wait_line(LIMIT, is_msg("config.flags", true));
    assert_eq!(flags["data"], json!({"dark": true}));
    let status = node.wait_line(LIMIT, is_msg("svc.api.status", true));
    assert_eq!(status["pattern"], "svc.api.status");

    let relay = spawn_relay(RelayArgs::new(conn.clone())).await;
    let mut s = subscribe(&relay, "svc.api.status").await;
    let m = next(&mut s).await;
    assert!(m.retained);
    assert_eq!(m.data, json!("up"));
    let mut f = subscribe(&relay, "config.flags").await;
    assert_eq!(next(&mut f).await.data, json!({"dark": true}));
    // A wildcard subscription gets no retained message, only live ones.
    let mut w = subscribe(&relay, "svc.*.status").await;
    client
        .publish("svc.api.status", &json!("down"), None)
        .await
        .unwrap();
    let live = next(&mut w).await;
    assert!(!live.retained && live.data == json!("down"));
    assert_eq!(next(&mut s).await.data, json!("down"));
    // The Node node saw the live message once per pattern, never the
    // retained one on its wildcard.
    node.wait_line(LIMIT, |v| {
        v["ev"] == "msg" && v["pattern"] == "svc.*.status" && v["data"] == "down"
    });
    assert!(!node
        .drain()
        .iter()
        .any(|v| v["pattern"] == "svc.*.status" && v["retained"] == true));

    // The getters agree with BullMQ's.
    let shown = node_relay("show", &redis.url(), "default", json!({}));
    let retained = client.retained(0, None).await.unwrap();
    let topics: Vec<&str> = retained.iter().map(|r| r.topic.as_str()).collect();
    let node_topics: Vec<&str> = shown["retained"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics, node_topics);
    let counts = client.counts().await.unwrap();
    assert_eq!(counts.retained, 2);
    assert_eq!(
        counts.subscriptions,
        shown["counts"]["subscriptions"].as_u64().unwrap()
    );
    assert_eq!(
        counts.nodes,
        shown["counts"]["nodes"].as_u64().unwrap() - 1,
        "show's own node left since"
    );
    assert_eq!(shown["namespaces"], json!(["default"]));
    assert_eq!(echomq::relay::namespaces(&conn).await.unwrap(), ["default"]);

    // Deleted, it reaches no later subscriber of either kind.
    assert!(client.delete_retained("config.flags").await.unwrap());
    assert!(!client.delete_retained("config.flags").await.unwrap());
    let mut late = subscribe(&relay, "config.flags").await;
    client
        .publish("config.flags", &json!(1), None)
        .await
        .unwrap();
    let m = next(&mut late).await;
    assert!(!m.retained && m.data == json!(1), "{m:?}");
    let mut node2 = node_child(
        &redis.url(),
        "default",
        json!({"subscribe": ["config.flags"]}),
    );
    client
        .publish("config.flags", &json!(2), None)
        .await
        .unwrap();
    let line = node2.wait_line(LIMIT, |v| v["ev"] == "msg");
    assert_eq!(
        (line["data"].clone(), line["retained"].clone()),
        (json!(2), json!(false))
    );
    let _ = ractor::call!(relay, RelayMsg::Close);
    node.finish();
    node2.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_nodes_of_either_kind_are_swept() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let client = RelayClient::new(&conn, "k").unwrap();
    // Short leases, each heartbeat well inside them even on a loaded machine.
    let short = json!({"lease": 2000, "heartbeat": 300, "sweep": 200, "block": 500});

    // A Rust node process, SIGKILLed: a Node node sweeps it.
    let mut watcher = node_child(&url, "k", short.clone());
    let mut opts = short.clone();
    opts["nodeId"] = json!("rustnode");
    opts["subscribe"] = json!(["a.>", "b.c"]);
    let mut rust = rust_child(&url, "k", opts);
    let subs = client
        .subscriptions(SubscriptionFilter::Node("rustnode"), 0, None)
        .await
        .unwrap();
    assert_eq!(subs.len(), 2);
    rust.kill();
    let swept = watcher.wait_line(LIMIT, |v| {
        v["ev"] == "swept" && v["ids"].as_array().unwrap().iter().any(|i| i == "rustnode")
    });
    assert_eq!(swept["ids"], json!(["rustnode"]));
    assert!(client
        .subscriptions(SubscriptionFilter::Node("rustnode"), 0, None)
        .await
        .unwrap()
        .is_empty());
    // Closed cleanly, it is gone at once (and sweeps nothing more).
    watcher.finish();

    // A Node node process, SIGKILLed: a Rust node sweeps it.
    let mut node_opts = short.clone();
    node_opts["nodeId"] = json!("nodenode");
    node_opts["subscribe"] = json!(["x.*"]);
    let mut node = node_child(&url, "k", node_opts);
    let mut args = RelayArgs::new(conn.clone())
        .namespace("k")
        .lease(Duration::from_millis(2000))
        .heartbeat_interval(Duration::from_millis(300))
        .sweep_interval(Duration::from_millis(200))
        .block(Duration::from_millis(500));
    args.node_id = "sweeper".into();
    let mut notices = args.subscribers.notices(64);
    let relay = spawn_relay(args).await;
    let nodes = client.nodes(0, None).await.unwrap();
    assert!(nodes
        .iter()
        .any(|n| n.id == "nodenode" && n.subscriptions == 1));
    node.kill();
    let n = next_notice(
        &mut notices,
        |n| matches!(n, RelayNotice::Swept(ids) if ids.iter().any(|i| i == "nodenode")),
    )
    .await;
    assert_eq!(n, RelayNotice::Swept(vec!["nodenode".into()]));
    let left: Vec<String> = client
        .nodes(0, None)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert!(!left.contains(&"nodenode".to_string()) && !left.contains(&"rustnode".to_string()));
    assert_eq!(
        client.patterns(0, None).await.unwrap().len(),
        0,
        "no pattern of a dead node stays"
    );

    let _ = ractor::call!(relay, RelayMsg::Close);
    assert_eq!(client.counts().await.unwrap().nodes, 0);
}

// ---------------------------------------------------------------------------
// The actor.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_keeps_its_subscriptions_and_cursor() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let args = RelayArgs::new(conn.clone()).namespace("r");
    let client = RelayClient::new(&conn, "r").unwrap();
    let relay = spawn_relay(args.clone()).await;
    let mut sub = subscribe(&relay, "t.>").await;
    client.publish("t.1", &json!(1), None).await.unwrap();
    assert_eq!(next(&mut sub).await.data, json!(1));

    // Crashed, then killed: each time a new actor from the same args goes on
    // with the same subscription, nothing lost or repeated, including what
    // was published while no actor ran.
    relay.cast(RelayMsg::Crash).unwrap();
    wait_stopped(&relay).await;
    client.publish("t.2", &json!(2), None).await.unwrap();
    let relay = spawn_relay(args.clone()).await;
    assert_eq!(next(&mut sub).await.data, json!(2));
    relay.kill();
    wait_stopped(&relay).await;
    client.publish("t.3", &json!(3), None).await.unwrap();
    let relay = spawn_relay(args.clone()).await;
    assert_eq!(next(&mut sub).await.data, json!(3));
    client.publish("t.4", &json!(4), None).await.unwrap();
    assert_eq!(next(&mut sub).await.data, json!(4));
    assert!(sub.try_recv().is_none());
    let status = ractor::call!(relay, RelayMsg::GetStatus).unwrap();
    assert_eq!((status.endpoints, status.recoveries), (1, 0));
    assert_eq!(client.counts().await.unwrap().subscriptions, 1);

    // Closed: the node and its subscriptions leave, the subscription ends.
    ractor::call!(relay, RelayMsg::Close).unwrap();
    assert!(tokio::time::timeout(LIMIT, sub.recv())
        .await
        .unwrap()
        .is_none());
    assert_eq!(client.counts().await.unwrap(), Default::default());
}

async fn wait_stopped<M: ractor::Message>(a: &ActorRef<M>) {
    let a = a.clone();
    echomq_integration_tests::wait_until("the actor stopped", LIMIT, async || {
        a.get_status() == ractor::ActorStatus::Stopped
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_swept_while_alive_recovers_its_subscriptions() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let args = RelayArgs::new(conn.clone())
        .namespace("rec")
        .heartbeat_interval(Duration::from_millis(100));
    let mut notices = args.subscribers.notices(64);
    let keys = args.keys().unwrap();
    let node_id = args.node_id.clone();
    let relay = spawn_relay(args).await;
    let mut sub = subscribe(&relay, "x.y").await;
    // Its routes are dropped under it, as another node's sweep drops a node
    // that was paused past its lease.
    let gone = conn
        .call(&RelayUnregisterNode {
            keys: &keys,
            node: &node_id,
        })
        .await
        .unwrap();
    assert!(gone);
    next_notice(&mut notices, |n| *n == RelayNotice::Recovered).await;
    let client = RelayClient::new(&conn, "rec").unwrap();
    let p = client.publish("x.y", &json!("after"), None).await.unwrap();
    assert_eq!(p.endpoints, 1);
    assert_eq!(next(&mut sub).await.data, json!("after"));
    let status = ractor::call!(relay, RelayMsg::GetStatus).unwrap();
    assert_eq!(status.recoveries, 1);
    let _ = ractor::call!(relay, RelayMsg::Close);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_is_told_what_it_missed() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let relay = spawn_relay(RelayArgs::new(conn.clone()).namespace("lag")).await;
    let mut sub = ractor::call!(relay, |reply| RelayMsg::Subscribe {
        pattern: "m".into(),
        capacity: 2,
        reply
    })
    .unwrap()
    .unwrap();
    let client = RelayClient::new(&conn, "lag").unwrap();
    for i in 0..10 {
        client.publish("m", &json!(i), None).await.unwrap();
    }
    // Every message is delivered or counted as missed, once.
    let status = relay.clone();
    echomq_integration_tests::wait_until("all 10 read from the inbox", LIMIT, async || {
        ractor::call!(status, RelayMsg::GetStatus)
            .unwrap()
            .delivered
            >= 10
    })
    .await;
    // The buffer holds 2; the other 8 are counted, and told before the
    // next delivery.
    let mut seen = 0;
    while let Some(d) = sub.try_recv() {
        assert!(matches!(d, RelayDelivery::Message(_)), "{d:?}");
        seen += 1;
    }
    assert_eq!(seen, 2);
    client.publish("m", &json!("last"), None).await.unwrap();
    let told = tokio::time::timeout(LIMIT, sub.recv()).await.unwrap();
    assert_eq!(told, Some(RelayDelivery::Lagged(8)));
    assert_eq!(next(&mut sub).await.data, json!("last"));
    let _ = ractor::call!(relay, RelayMsg::Close);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_typed_error() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let client = RelayClient::default_namespace(&conn).unwrap();
    for topic in ["", "a..b", "a.*", "a.>", "a b", &"x.".repeat(16)] {
        let e = client.publish(topic, &1, None).await.unwrap_err();
        assert!(matches!(e, RelayError::Input(_)), "{topic:?}: {e}");
    }
    let small = client.clone().with_max_message_size(4);
    assert!(matches!(
        small.publish("a", &"abcdef", None).await.unwrap_err(),
        RelayError::DataTooLarge { size: 8, limit: 4 }
    ));
    assert!(matches!(
        client.delete_retained("a.*").await.unwrap_err(),
        RelayError::Input(_)
    ));
    assert!(RelayClient::new(&conn, "not a namespace").is_err());
    for bad in [
        RelayArgs::new(conn.clone()).node_id("a.b"),
        RelayArgs::new(conn.clone()).lease(Duration::ZERO),
        RelayArgs::new(conn.clone())
            .inbox_max_length(10)
            .lag_threshold(11),
        RelayArgs::new(conn.clone()).name("n".repeat(257)),
    ] {
        assert!(bad.validate().is_err());
        let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
        assert!(Actor::spawn_linked(None, Relay, bad, sup.get_cell())
            .await
            .is_err());
    }
    let relay = spawn_relay(RelayArgs::new(conn.clone())).await;
    for pattern in ["a.>.b", "a.b*", ""] {
        let r = ractor::call!(relay, |reply| RelayMsg::Subscribe {
            pattern: pattern.into(),
            capacity: 1,
            reply
        })
        .unwrap();
        assert!(matches!(r, Err(RelayError::Input(_))), "{pattern:?}");
    }
    assert_eq!(
        client.counts().await.unwrap().subscriptions,
        0,
        "nothing half-written"
    );
    let _ = ractor::call!(relay, RelayMsg::Close);

    // A namespace in use by another layout version is refused, typed.
    let c = redis.client().await;
    let keys = RelayKeys::new("emq", "v2").unwrap();
    let _: i64 = c.hset(keys.key("layout"), ("layout", "2")).await.unwrap();
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let e = Actor::spawn_linked(
        None,
        Relay,
        RelayArgs::new(conn.clone()).namespace("v2"),
        sup.get_cell(),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("incompatible"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_scans_and_the_audit_ignore_relay_keys() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let queue = echomq::Queue::new(&conn, "mail").await.unwrap();
    queue
        .add("welcome", &json!({}), echomq::JobOptions::new())
        .await
        .unwrap();
    // A relay namespace with every kind of key, including one whose name
    // ends like queue keys would.
    let relay = spawn_relay(RelayArgs::new(conn.clone()).namespace("meta")).await;
    let _s = subscribe(&relay, "mail.id").await;
    let client = RelayClient::new(&conn, "meta").unwrap();
    client
        .publish("mail.id", &json!(1), Some(Duration::from_secs(60)))
        .await
        .unwrap();
    client
        .publish("x.meta", &json!(1), Some(Duration::from_secs(60)))
        .await
        .unwrap();
    let c = redis.client().await;
    let relay_keys = keys(&c, "emq::*").await;
    assert!(relay_keys.len() >= 8, "{relay_keys:?}");
    let report = echomq::audit::Audit::new(&conn, "mail")
        .run()
        .await
        .unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    // What a queue scan sees under the prefix, as the dashboard scans it:
    // every `emq:*:meta` / `emq:*:id` key that is not a relay key is a queue's.
    let queue_keys: Vec<String> = keys(&c, "emq:*")
        .await
        .into_iter()
        .filter(|k| !echomq::protocol::relay::is_relay_key("emq", k))
        .collect();
    assert!(
        queue_keys.iter().all(|k| k.starts_with("emq:mail:")),
        "{queue_keys:?}"
    );
    let _ = ractor::call!(relay, RelayMsg::Close);
}
