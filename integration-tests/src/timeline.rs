//! What happened when, on Redis's clock. The ids of a queue's events stream
//! are the server's time at the script that wrote them, so starts, finishes
//! and rate-limit windows read from them depend on no client's clock and on
//! no scheduling luck of the test.

use fred::prelude::{Client, StreamsInterface, Value};

/// One entry of an events stream: the server's time of its id, the event
/// name, the job id (empty when none), the `prev` field (empty when none)
/// and every field but `event`, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The entry id (`<ms>-<seq>`).
    pub id: String,
    /// Milliseconds part of the entry id: Redis's clock.
    pub at_ms: u64,
    /// The `event` field.
    pub name: String,
    /// The `jobId` field.
    pub job_id: String,
    /// The `prev` field (a `waiting` event's previous state).
    pub prev: String,
    /// Every field but `event`, in stream order.
    pub fields: Vec<(String, String)>,
}

/// Every entry of the events stream `key`, in stream order: the one reader
/// of events streams in the tests.
pub async fn stamps(client: &Client, key: &str) -> Vec<Stamp> {
    read(client, key).await.expect("XRANGE")
}

/// [`stamps`], or the error of the read (a fault test may read while Redis
/// is away).
pub async fn read(client: &Client, key: &str) -> Result<Vec<Stamp>, fred::error::Error> {
    let raw: Value = client.xrange(key, "-", "+", None).await?;
    let Value::Array(entries) = raw else {
        return Ok(Vec::new());
    };
    Ok(entries.into_iter().filter_map(decode).collect())
}

/// One XRANGE entry, `[id, [field, value, …]]`.
fn decode(entry: Value) -> Option<Stamp> {
    let Value::Array(mut parts) = entry else {
        return None;
    };
    let Value::Array(flat) = parts.pop()? else {
        return None;
    };
    let id = parts.pop()?.as_string()?;
    let flat: Vec<String> = flat.into_iter().filter_map(|v| v.as_string()).collect();
    let pairs: Vec<(String, String)> = flat
        .chunks(2)
        .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
        .collect();
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(f, _)| f == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    Some(Stamp {
        at_ms: id.split('-').next()?.parse().ok()?,
        id,
        name: get("event"),
        job_id: get("jobId"),
        prev: get("prev"),
        fields: pairs
            .iter()
            .filter(|(k, _)| k != "event")
            .cloned()
            .collect(),
    })
}

/// `(job id, ms)` of every `active` event: each time a job was taken, on
/// Redis's clock, in stream order.
pub async fn starts(client: &Client, key: &str) -> Vec<(String, u64)> {
    stamps(client, key)
        .await
        .into_iter()
        .filter(|s| s.name == "active")
        .map(|s| (s.job_id, s.at_ms))
        .collect()
}

/// The most jobs in `active` at once, by the events stream's order (exact:
/// no two entries tie, unlike their milliseconds). Every `active` event
/// counts one in, every event that ends a stay (completed, failed,
/// delayed, waiting-children, or waiting after active) one out.
pub async fn peak_active(client: &Client, key: &str) -> usize {
    let mut open: std::collections::HashSet<String> = Default::default();
    let mut peak = 0;
    for s in stamps(client, key).await {
        if s.name == "active" {
            open.insert(s.job_id);
            peak = peak.max(open.len());
        } else if ends_a_stay(&s) {
            open.remove(&s.job_id);
        }
    }
    peak
}

fn ends_a_stay(s: &Stamp) -> bool {
    matches!(
        s.name.as_str(),
        "completed" | "failed" | "delayed" | "waiting-children"
    ) || (s.name == "waiting" && s.prev == "active")
}

/// Redis's time now, ms (`TIME`).
pub async fn now_ms(client: &Client) -> u64 {
    let t: Vec<u64> = crate::state::cmd(client, "TIME", Vec::new()).await;
    t[0] * 1000 + t[1] / 1000
}

/// Panics unless `starts` (ms on Redis's clock) keep a limit of `max` per
/// window of `duration_ms` as BullMQ's limiter counts them: a counter that
/// the first job taken increments and that expires `duration_ms` later, so a
/// window opens at a start and the next one at the first start after it
/// closed. The windows are rebuilt that way from the starts themselves and
/// none may hold more than `max`. An event id is the millisecond of its
/// XADD, which may be one later than the one the script's counter used: a
/// window is taken to close 1 ms early. Panics on an empty list too.
pub fn assert_rate_limited(starts: &[u64], max: usize, duration_ms: u64, what: &str) {
    assert!(!starts.is_empty(), "{what}: no job started");
    let mut sorted = starts.to_vec();
    sorted.sort_unstable();
    let mut open = sorted[0];
    let mut in_window = 0;
    for &t in &sorted {
        if t + 1 >= open + duration_ms {
            open = t;
            in_window = 0;
        }
        in_window += 1;
        assert!(
            in_window <= max,
            "{what}: {in_window} starts in the window opened at {open} (limit {max} per \
             {duration_ms} ms): {sorted:?}"
        );
    }
}
