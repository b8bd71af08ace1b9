//! What happened when, on Redis's clock. The ids of a queue's events stream
//! are the server's time at the `XADD` that wrote them, so starts, finishes
//! and rate-limit windows read from them depend on no client's clock and on
//! no scheduling luck of the test. The clock runs on inside a script: an
//! event is stamped later than the script's earlier commands by as long as
//! the script ran until then (longer when the OS descheduled Redis meanwhile),
//! which [`longest_script_us`] bounds.

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

/// Sends every command from now on to the slow log (`SLOWLOG`), each with its
/// duration by the wall clock, and empties it.
pub async fn log_every_command(client: &Client) {
    for (option, value) in [
        ("slowlog-max-len", "1000000"),
        ("slowlog-log-slower-than", "0"),
    ] {
        let _: String = crate::state::cmd(
            client,
            "CONFIG",
            vec!["SET".into(), option.into(), value.into()],
        )
        .await;
    }
    let _: String = crate::state::cmd(client, "SLOWLOG", vec!["RESET".into()]).await;
}

/// One entry of the slow log.
#[derive(Clone, Debug)]
pub struct Logged {
    /// How long the command ran, µs, by the wall clock.
    pub micros: u64,
    /// The command and its first arguments, as the log keeps them.
    pub words: Vec<String>,
}

/// Every entry of the slow log, newest first.
pub async fn slow_log(client: &Client) -> Vec<Logged> {
    let log: Value = crate::state::cmd(client, "SLOWLOG", vec!["GET".into(), "-1".into()]).await;
    let Value::Array(entries) = log else {
        panic!("SLOWLOG GET: {log:?}")
    };
    entries
        .into_iter()
        .filter_map(|e| {
            let Value::Array(parts) = e else { return None };
            let Some(Value::Array(words)) = parts.get(3) else {
                return None;
            };
            Some(Logged {
                micros: parts.get(2)?.as_u64()?,
                words: words.iter().filter_map(Value::as_string).collect(),
            })
        })
        .collect()
}

/// The longest script call (`EVAL`, `EVALSHA`) in the slow log, µs: how much
/// later than a script's first command its last event can be stamped. Needs
/// [`log_every_command`] first.
pub async fn longest_script_us(client: &Client) -> u64 {
    slow_log(client)
        .await
        .into_iter()
        .filter(|l| {
            l.words.first().is_some_and(|w| {
                w.eq_ignore_ascii_case("EVAL") || w.eq_ignore_ascii_case("EVALSHA")
            })
        })
        .map(|l| l.micros)
        .max()
        .unwrap_or(0)
}

/// Panics unless `starts` (ms on Redis's clock) keep a limit of `max` per
/// window of `duration_ms` as BullMQ's limiter counts them: a counter that
/// the first job taken increments and that expires `duration_ms` later, so a
/// window opens at a start and the next one at the first start after it
/// closed. The windows are rebuilt that way from the starts themselves and
/// none may hold more than `max`.
///
/// A start's event id is the millisecond of its `XADD`, later than the
/// counter's `PEXPIRE` in the same script by up to that script's run time,
/// so a window opened by an event is taken to close early by
/// `late_us` (the longest script call, [`longest_script_us`]) rounded up to
/// a millisecond, and 1 ms more for the ids' rounding. Panics on an empty
/// list too.
pub fn assert_rate_limited(starts: &[u64], max: usize, duration_ms: u64, late_us: u64, what: &str) {
    assert!(!starts.is_empty(), "{what}: no job started");
    let early = 1 + late_us.div_ceil(1000);
    let mut sorted = starts.to_vec();
    sorted.sort_unstable();
    let mut open = sorted[0];
    let mut in_window = 0;
    for &t in &sorted {
        if t + early >= open + duration_ms {
            open = t;
            in_window = 0;
        }
        in_window += 1;
        assert!(
            in_window <= max,
            "{what}: {in_window} starts in the window opened at {open} (limit {max} per \
             {duration_ms} ms, closed {early} ms early: the longest script ran {late_us} µs): \
             {sorted:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::assert_rate_limited;

    /// 2 per 500 ms: windows opened at 1000 (counter set at 997, its event
    /// stamped 3 ms later) and at 1497, the first start after the counter
    /// expired.
    const LATE_OPENER: [u64; 4] = [1000, 1200, 1497, 1600];

    #[test]
    fn an_event_stamped_late_by_its_script_is_allowed_for() {
        assert_rate_limited(&LATE_OPENER, 2, 500, 3_000, "late opener");
    }

    #[test]
    #[should_panic(expected = "3 starts in the window opened at 1000")]
    fn without_the_script_time_the_late_opener_reads_as_a_third_start() {
        assert_rate_limited(&LATE_OPENER, 2, 500, 0, "late opener");
    }

    #[test]
    #[should_panic(expected = "3 starts in the window opened at 1000")]
    fn a_third_start_well_inside_a_window_fails() {
        assert_rate_limited(&[1000, 1100, 1300], 2, 500, 3_000, "burst");
    }
}
