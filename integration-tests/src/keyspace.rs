//! Whole-keyspace snapshots of one queue, for comparing what BullMQ and EchoMQ
//! leave after the same operations on two servers: every `emq:<queue>:*` key
//! with its type and value (hash fields and JSON values parsed, sets sorted,
//! stream entries without their ids, strings with whether they expire), and
//! the values that differ by clock or by chance masked.

use fred::prelude::{Client, LuaInterface};
use serde_json::{json, Map, Value as Json};

/// `{suffix: [type, value]}` of every key under `ARGV[1]`.
const DUMP: &str = r#"
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do
  local t = redis.call('TYPE', k).ok
  local v
  if t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'set' then v = redis.call('SMEMBERS', k); table.sort(v)
  elseif t == 'string' then v = {redis.call('GET', k), redis.call('PTTL', k) > 0}
  elseif t == 'stream' then
    v = {}
    for _, e in ipairs(redis.call('XRANGE', k, '-', '+')) do table.insert(v, e[2]) end
  end
  out[string.sub(k, #ARGV[1] + 1)] = {t, v}
end
return cjson.encode(out)
"#;

/// What differs by clock or by chance between two runs, masked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mask {
    /// Scores of `delayed` and of the marker, and the `delay` of events
    /// (set from the caller's clock).
    pub delayed_scores: bool,
    /// A worker ran: finish and start times, finished-set scores, `drained`
    /// events (their number depends on fetch timing), the marker, the
    /// `stalled` set and the stalled-check throttle.
    pub worked: bool,
}

/// Hash fields written from a clock.
const VOLATILE_FIELDS: [&str; 2] = ["processedOn", "finishedOn"];

fn parse_maybe(v: &str) -> Json {
    match serde_json::from_str::<Json>(v) {
        Ok(j @ (Json::Object(_) | Json::Array(_))) => j,
        _ => Json::String(v.to_owned()),
    }
}

fn flat(v: &Json) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map(str::to_owned).unwrap_or(x.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The keyspace of queue `queue` (prefix `emq`), keyed by the part after
/// `emq:<queue>:`.
pub async fn snapshot(c: &Client, queue: &str, mask: Mask) -> Map<String, Json> {
    let raw: String = c
        .eval(DUMP, Vec::<String>::new(), vec![format!("emq:{queue}:")])
        .await
        .expect("the keyspace dump runs");
    let dump: Map<String, Json> = serde_json::from_str(&raw).expect("the dump is JSON");
    let mut out = Map::new();
    for (key, tv) in dump {
        let t = tv[0].as_str().unwrap_or_default().to_owned();
        let v = tv.get(1).cloned().unwrap_or(Json::Null);
        if mask.worked && (key == "stalled-check" || key == "stalled" || key == "marker") {
            continue;
        }
        let value = match t.as_str() {
            "hash" => {
                let mut m = Map::new();
                for pair in flat(&v).chunks(2) {
                    let val = if VOLATILE_FIELDS.contains(&pair[0].as_str()) {
                        json!("<masked>")
                    } else if pair[0] == "stacktrace" {
                        // Each language writes its own frames: only the
                        // number of traces and their first line must agree.
                        let traces: Vec<String> =
                            serde_json::from_str(&pair[1]).unwrap_or_default();
                        json!(traces
                            .iter()
                            .map(|t| t.lines().next().unwrap_or_default().to_owned())
                            .collect::<Vec<_>>())
                    } else {
                        parse_maybe(&pair[1])
                    };
                    m.insert(pair[0].clone(), val);
                }
                Json::Object(m)
            }
            "zset" => {
                let clocked = (mask.worked && (key == "completed" || key == "failed"))
                    || (mask.delayed_scores && (key == "delayed" || key == "marker"));
                let mut pairs: Vec<Json> = flat(&v)
                    .chunks(2)
                    .map(|p| {
                        json!([
                            p[0],
                            if clocked {
                                "<masked>".into()
                            } else {
                                p[1].clone()
                            }
                        ])
                    })
                    .collect();
                // Without scores, order by member: the finishing order is timing.
                if clocked {
                    pairs.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
                }
                Json::Array(pairs)
            }
            "stream" => Json::Array(
                v.as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|e| {
                        let mut m = Map::new();
                        for pair in flat(e).chunks(2) {
                            let val = if mask.delayed_scores && pair[0] == "delay" {
                                json!("<masked>")
                            } else {
                                parse_maybe(&pair[1])
                            };
                            m.insert(pair[0].clone(), val);
                        }
                        Json::Object(m)
                    })
                    .filter(|e| !(mask.worked && e["event"] == "drained"))
                    .collect(),
            ),
            _ => v,
        };
        out.insert(key, json!([t, value]));
    }
    out.sort_keys();
    out
}

/// Panics, naming `what` and the first key that differs, unless the two
/// keyspaces hold the same keys with the same values.
pub fn assert_same(what: &str, node: &Map<String, Json>, rust: &Map<String, Json>) {
    let keys = |m: &Map<String, Json>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(rust),
        keys(node),
        "{what}: key sets differ (left EchoMQ, right BullMQ)"
    );
    for (k, v) in node {
        assert_eq!(
            &rust[k], v,
            "{what}: key {k} differs (left EchoMQ, right BullMQ)"
        );
    }
}
