//! Flows both ways with the BullMQ Node client: the same flow built by Node's
//! FlowProducer and by EchoMQ's leaves the same keyspace; flows added on one
//! side are run by the other side's workers, every job exactly once, and each
//! parent sees its children's values.

use std::process::Command;
use std::time::Duration;

use echomq::{FlowJob, FlowProducer, JobOptions, Queue};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use serde_json::{json, Map, Value as Json};

/// Runs a command of `interop/flows.js` and returns its JSON output.
pub fn node_flows(command: &str, url: &str, queue: &str, args: Json) -> Json {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let out = Command::new("node")
        .current_dir(&dir)
        .args(["flows.js", command, url, queue, &args.to_string()])
        .output()
        .expect("node is installed");
    assert!(
        out.status.success(),
        "node flows.js {command} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("flows.js prints JSON")
}

/// Every `emq:*` key as `{key: [type, value]}`; stream entries without ids,
/// JSON values parsed, sets sorted.
const DUMP: &str = r#"
local out = {}
for _, k in ipairs(redis.call('KEYS', 'emq:*')) do
  local t = redis.call('TYPE', k).ok
  local v
  if t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'set' then v = redis.call('SMEMBERS', k); table.sort(v)
  elseif t == 'string' then v = {redis.call('GET', k)}
  elseif t == 'stream' then
    v = {}
    for _, e in ipairs(redis.call('XRANGE', k, '-', '+')) do table.insert(v, e[2]) end
  end
  out[k] = {t, v}
end
return cjson.encode(out)
"#;

fn parse_maybe(v: &str) -> Json {
    match serde_json::from_str::<Json>(v) {
        Ok(j @ (Json::Object(_) | Json::Array(_))) => j,
        _ => Json::String(v.to_owned()),
    }
}

async fn snapshot(c: &Client) -> Map<String, Json> {
    let raw: String = c
        .eval(DUMP, Vec::<String>::new(), Vec::<String>::new())
        .await
        .unwrap();
    let dump: Map<String, Json> = serde_json::from_str(&raw).unwrap();
    let flat = |v: &Json| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x.as_str().map(str::to_owned).unwrap_or(x.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let pairs = |f: Vec<String>| -> Json {
        let mut m = Map::new();
        for p in f.chunks(2) {
            m.insert(p[0].clone(), parse_maybe(&p[1]));
        }
        Json::Object(m)
    };
    dump.into_iter()
        .map(|(k, tv)| {
            let t = tv[0].as_str().unwrap().to_owned();
            let v = tv.get(1).cloned().unwrap_or(Json::Null);
            let value = match t.as_str() {
                "hash" => pairs(flat(&v)),
                "stream" => Json::Array(
                    v.as_array()
                        .unwrap()
                        .iter()
                        .map(|e| pairs(flat(e)))
                        .collect(),
                ),
                _ => json!(flat(&v)),
            };
            (k, json!([t, value]))
        })
        .collect()
}

/// A two-level flow over two queues, in BullMQ's FlowJob shape, with fixed
/// ids and timestamps so that two runs are comparable.
fn sample_flow(t: u64) -> Json {
    let o = |id: &str, extra: Json| {
        let mut m = json!({"jobId": id, "timestamp": t});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    };
    json!({
        "name": "root", "queueName": "q", "data": {"r": 1}, "opts": o("root", json!({})),
        "children": [
            {"name": "mid", "queueName": "q2", "data": {"m": 1}, "opts": o("mid", json!({"failParentOnFailure": true})),
             "children": [
                {"name": "leaf1", "queueName": "q", "data": {"l": 1}, "opts": o("leaf1", json!({"attempts": 2}))},
                {"name": "leaf2", "queueName": "q2", "data": {"l": 2}, "opts": o("leaf2", json!({"priority": 3, "ignoreDependencyOnFailure": true}))},
             ]},
            {"name": "late", "queueName": "q", "data": {}, "opts": o("late", json!({"delay": 5000, "removeDependencyOnFailure": true}))},
            {"name": "cont", "queueName": "q2", "data": {}, "opts": o("cont", json!({"continueParentOnFailure": true}))},
        ]
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn assert_same(node: &Map<String, Json>, rust: &Map<String, Json>) {
    let keys = |m: &Map<String, Json>| {
        let mut k = m.keys().cloned().collect::<Vec<_>>();
        k.sort();
        k
    };
    assert_eq!(keys(rust), keys(node), "key sets differ (left Rust, right Node)");
    for (k, v) in node {
        assert_eq!(&rust[k], v, "key {k} differs (left Rust, right Node)");
    }
}

/// The same flow, built by Node's FlowProducer and by EchoMQ's on two
/// servers: identical keyspaces (job hashes with parent descriptors and
/// options, dependencies sets, waiting-children, delayed, prioritized, wait,
/// id counters, event streams).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_flow_leaves_the_same_keyspace() {
    let t = now_ms();
    let flow = sample_flow(t);

    let node_redis = RedisServer::start();
    let node_tree = node_flows("add-flow", &node_redis.url(), "q", json!({ "flow": flow }));
    let node_state = snapshot(&node_redis.client().await).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    // Node's Queue handle writes the meta hash of the queues it opens; the
    // FlowProducer does not, and neither does EchoMQ's.
    let tree = FlowProducer::new(&conn)
        .add(FlowJob::from_json(&flow).unwrap())
        .await
        .unwrap();
    let rust_state = snapshot(&rust_redis.client().await).await;

    assert_eq!(serde_json::to_value(&tree).unwrap(), node_tree);
    assert_same(&node_state, &rust_state).await;
}

/// A child added under an existing parent (opts.parent), both ways, and the
/// missing-parent refusal, which writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_under_an_existing_parent_matches_node() {
    let t = now_ms();
    let parent = json!({"name": "p", "queueName": "q", "data": {}, "opts": {"jobId": "p", "timestamp": t},
        "children": [{"name": "c1", "queueName": "q", "data": {}, "opts": {"jobId": "c1", "timestamp": t}}]});
    let extra = json!({"name": "c2", "queueName": "q2", "data": {"x": 1},
        "opts": {"jobId": "c2", "timestamp": t, "parent": {"id": "p", "queue": "emq:q"}}});

    let node_redis = RedisServer::start();
    node_flows("add-flow", &node_redis.url(), "q", json!({ "flow": parent }));
    node_flows("add-flow", &node_redis.url(), "q", json!({ "flow": extra }));
    let node_state = snapshot(&node_redis.client().await).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    let fp = FlowProducer::new(&conn);
    fp.add(FlowJob::from_json(&parent).unwrap()).await.unwrap();
    fp.add(FlowJob::from_json(&extra).unwrap()).await.unwrap();
    let rust_state = snapshot(&rust_redis.client().await).await;
    assert_same(&node_state, &rust_state).await;

    let orphan = FlowJob::new("o", "q", json!({}))
        .options(JobOptions::new().job_id("o"))
        .parent(echomq::ParentRef {
            id: "nope".into(),
            queue: "emq:q".into(),
        });
    let err = fp.add(orphan).await.unwrap_err();
    assert_eq!(
        err.script_code(),
        Some(echomq::protocol::ScriptErrorCode::ParentJobNotExist)
    );
    let q = Queue::new(&conn, "q").await.unwrap();
    assert!(!q.job_exists("o").await.unwrap());
    let _ = Duration::ZERO;
}
