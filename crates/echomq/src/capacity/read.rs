//! The bounded reads a [`Reading`] is made of: Redis `TIME`, one getCounts,
//! the next job out of `wait` and `prioritized` and the earliest delayed
//! job (one element each, then one `HMGET` per job found), `XLEN` and one
//! `XREVRANGE … COUNT` of the events stream. No call walks a set.
//!
//! Rates and the service time come from the events stream: its ids are
//! Redis's own clock, every add writes `added`, every take `active` and
//! every finish `completed`/`failed` (BullMQ's events, whoever's worker
//! ran the job, Node or Rust), so the newest entries are a window of what
//! the queue did, read in one bounded call, by any process, with no state
//! kept between reads. The per-minute metrics (getMetrics) are too coarse
//! to see a step within seconds, and only recorded when workers are asked
//! to; sampled counters would need two reads apart in time.

use std::collections::HashMap;

use echomq_protocol::call::admin::GetCounts;
use echomq_protocol::call::lifecycle::EpochMs;
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

use super::plan::Reading;
use crate::error::{Error, Result};
use crate::queue::Telemetry;

/// Events read per reading, newest first: the bound of the one
/// `XREVRANGE`. At a few events per job it covers a few hundred jobs,
/// well over a second at 400 jobs/s.
pub const EVENTS_READ: u64 = 1000;

/// The longest span the rates are measured over.
pub const RATE_WINDOW_MS: u64 = 10_000;

/// A shorter span is not trusted for a rate (a burst read on its own)...
const MIN_SPAN_MS: u64 = 100;

/// ...and a young stream's span counts as at least this: three adds in
/// its first 60 ms are not 50 jobs/s.
const MIN_YOUNG_SPAN_MS: u64 = 1_000;

/// What the events window says.
#[derive(Debug, Default, PartialEq)]
struct Window {
    arrival_rate: f64,
    completion_rate: f64,
    /// Mean `active` → `completed`/`failed` time of the jobs whose both
    /// events are in the window.
    mean_pair_ms: Option<f64>,
    span_ms: u64,
}

impl Telemetry<'_> {
    /// Reads the queue's capacity figures (docs/operations.md
    /// §Autoscaling): a handful of bounded calls, all times on Redis's
    /// clock except a job's `timestamp`, which its producer wrote.
    pub async fn capacity_reading(self) -> Result<Reading> {
        let q = self.queue;
        let pool = q.conn.pool();
        let time: Vec<String> = pool
            .next()
            .custom(
                CustomCommand::new_static("TIME", ClusterHash::Random, false),
                Vec::<String>::new(),
            )
            .await?;
        let now = parse_time_ms(&time)?;
        let keys = &q.keys;
        let count_call = GetCounts {
            keys,
            states: &["wait", "paused", "prioritized", "delayed", "active"],
            // Strictly before the next millisecond: due at `now` counts.
            delayed_before: Some(EpochMs(now + 1)),
        };
        let counts = q.conn.call(&count_call);
        let tail = pool.lindex::<Option<String>, _>(keys.wait(), -1);
        let next_prioritized =
            pool.zrange::<Vec<String>, _, _, _>(keys.prioritized(), 0, 0, None, false, None, false);
        let first_delayed = pool.zrange::<Vec<(String, f64)>, _, _, _>(
            keys.delayed(),
            0,
            0,
            None,
            false,
            None,
            true,
        );
        let events_start = now.saturating_sub(RATE_WINDOW_MS).to_string();
        let events = pool.xrevrange::<Vec<(String, HashMap<String, String>)>, _, _, _>(
            keys.events(),
            "+",
            events_start.as_str(),
            Some(EVENTS_READ),
        );
        let stream_len = pool.xlen::<u64, _>(keys.events());
        let paused = pool.hexists::<bool, _, _>(keys.meta(), "paused");
        let (counts, tail, next_prioritized, first_delayed, events, stream_len, paused) = tokio::try_join!(
            counts,
            async { tail.await.map_err(Error::from) },
            async { next_prioritized.await.map_err(Error::from) },
            async { first_delayed.await.map_err(Error::from) },
            async { events.await.map_err(Error::from) },
            async { stream_len.await.map_err(Error::from) },
            async { paused.await.map_err(Error::from) },
        )?;
        let [waiting, paused_list, prioritized, delayed_due, active] = counts[..] else {
            return Err(Error::protocol(
                "getCounts",
                format!("{} counts for 5 states", counts.len()),
            ));
        };

        // The oldest of the backlog is one of the next jobs out.
        let mut ready_at: Vec<u64> = Vec::new();
        for id in tail.into_iter().chain(next_prioritized) {
            if let Some(at) = self.ready_at(&id).await? {
                ready_at.push(at);
            }
        }
        if let Some((_, score)) = first_delayed.first() {
            // Score = due × 0x1000 + a sequence number.
            let due = (*score / 4096.0).floor() as u64;
            if due <= now {
                ready_at.push(due);
            }
        }
        let oldest_age_ms = ready_at
            .iter()
            .map(|at| now.saturating_sub(*at))
            .max()
            .unwrap_or(0);

        let w = window(now, &events, stream_len);
        let service_time_ms = service_time(&w, active);
        Ok(Reading {
            at_ms: now,
            waiting: waiting + paused_list,
            prioritized,
            delayed_due,
            active,
            paused,
            oldest_age_ms,
            arrival_rate: w.arrival_rate,
            completion_rate: w.completion_rate,
            service_time_ms,
            window_ms: w.span_ms,
        })
    }

    /// When job `id` became ready: its `timestamp` plus the delay it was
    /// added with (a promoted delayed job waits from its due time).
    async fn ready_at(self, id: &str) -> Result<Option<u64>> {
        let fields: Vec<Option<String>> = self
            .queue
            .conn
            .pool()
            .hmget(self.queue.keys.job(id), vec!["timestamp", "opts"])
            .await?;
        let Some(timestamp) = fields
            .first()
            .and_then(|t| t.as_deref())
            .and_then(|t| t.parse::<f64>().ok())
        else {
            // Removed meanwhile, or a legacy marker: not a job to age.
            return Ok(None);
        };
        let delay = fields
            .get(1)
            .and_then(|o| o.as_deref())
            .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
            .and_then(|o| o.get("delay").and_then(serde_json::Value::as_f64))
            .unwrap_or(0.0);
        Ok(Some((timestamp + delay.max(0.0)) as u64))
    }
}

/// The mean time of the jobs timed in the window; with none (jobs longer
/// than it), Little's law: jobs in service = throughput × time in service.
/// Not when timed jobs are at hand: in a young stream it would read one
/// finish against the whole active list.
fn service_time(w: &Window, active: u64) -> Option<f64> {
    match w.mean_pair_ms {
        Some(ms) => Some(ms),
        None if w.completion_rate > 0.0 && active > 0 => {
            Some(active as f64 / w.completion_rate * 1000.0)
        }
        None => None,
    }
}

/// `TIME` → ms since the epoch.
fn parse_time_ms(reply: &[String]) -> Result<u64> {
    let part = |i: usize| reply.get(i).and_then(|x| x.parse::<u64>().ok());
    match (part(0), part(1)) {
        (Some(secs), Some(micros)) => Ok(secs * 1000 + micros / 1000),
        _ => Err(Error::protocol("TIME", format!("reply {reply:?}"))),
    }
}

/// The ms part of a stream id (`<ms>-<seq>`).
fn id_ms(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

/// Rates and timed finishes of `events` (newest first, as `XREVRANGE`
/// returns them, all at or after `now - RATE_WINDOW_MS`), in a stream of
/// `stream_len` entries.
fn window(now: u64, events: &[(String, HashMap<String, String>)], stream_len: u64) -> Window {
    let oldest = events.last().and_then(|(id, _)| id_ms(id));
    // The read covers the whole window unless it stopped at its bound or
    // the stream does not reach back that far (young, or trimmed short):
    // then it covers from its oldest entry.
    let whole_stream = events.len() as u64 >= stream_len;
    let truncated = events.len() as u64 >= EVENTS_READ;
    let span_ms = match oldest {
        Some(o) if truncated => now.saturating_sub(o).max(MIN_SPAN_MS),
        Some(o) if whole_stream => now.saturating_sub(o).max(MIN_YOUNG_SPAN_MS),
        _ => RATE_WINDOW_MS,
    };
    let mut added = 0u64;
    let mut finished = 0u64;
    let mut taken: HashMap<&str, u64> = HashMap::new();
    let mut pair_total = 0u64;
    let mut pairs = 0usize;
    for (id, fields) in events.iter().rev() {
        let at = id_ms(id).unwrap_or(now);
        let job = fields.get("jobId").map(String::as_str);
        match fields.get("event").map(String::as_str) {
            Some("added") => added += 1,
            Some("active") => {
                if let Some(job) = job {
                    taken.insert(job, at);
                }
            }
            Some("completed" | "failed") => {
                finished += 1;
                if let Some(t) = job.and_then(|j| taken.remove(j)) {
                    pair_total += at.saturating_sub(t);
                    pairs += 1;
                }
            }
            _ => {}
        }
    }
    let per_s = |n: u64| n as f64 * 1000.0 / span_ms as f64;
    Window {
        arrival_rate: per_s(added),
        completion_rate: per_s(finished),
        mean_pair_ms: (pairs > 0).then(|| pair_total as f64 / pairs as f64),
        span_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ms: u64, seq: u64, event: &str, job: &str) -> (String, HashMap<String, String>) {
        let fields = [("event", event), ("jobId", job)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        (format!("{ms}-{seq}"), fields)
    }

    #[test]
    fn rates_over_the_window_and_times_of_finished_pairs() {
        let now = 100_000;
        // Oldest first here, newest first as read.
        let mut e = vec![
            ev(91_000, 0, "added", "1"),
            ev(92_000, 0, "active", "1"),
            ev(92_020, 0, "completed", "1"),
            ev(93_000, 0, "added", "2"),
            ev(93_000, 1, "active", "2"),
            ev(93_040, 0, "failed", "2"),
            // Its take is before the window: counted, not timed.
            ev(95_000, 0, "completed", "0"),
            ev(99_000, 0, "added", "3"),
        ];
        e.reverse();
        // A long stream: the window is the whole 10 s.
        let w = window(now, &e, 50_000);
        assert_eq!(w.span_ms, 10_000);
        assert!((w.arrival_rate - 0.3).abs() < 1e-9, "{w:?}");
        assert!((w.completion_rate - 0.3).abs() < 1e-9, "{w:?}");
        assert_eq!(w.mean_pair_ms, Some(30.0));
        // The whole stream read: from its first entry...
        let w = window(now, &e, e.len() as u64);
        assert_eq!(w.span_ms, 9_000);
        // ...a young one counted as a second at least.
        let young = [ev(now - 60, 0, "added", "1")];
        assert_eq!(window(now, &young, 1).span_ms, 1_000);
    }

    #[test]
    fn a_read_stopped_at_its_bound_covers_from_its_oldest_entry() {
        let now = 50_000;
        let e: Vec<_> = (0..EVENTS_READ)
            .map(|i| ev(now - i, i, "added", &i.to_string()))
            .collect();
        let w = window(now, &e, 1_000_000);
        assert_eq!(w.span_ms, EVENTS_READ - 1);
        assert!((w.arrival_rate - 1000.0 * 1000.0 / 999.0).abs() < 1e-6);
        // Nothing at all: zero rates over the whole window.
        let w = window(now, &[], 0);
        assert_eq!((w.arrival_rate, w.span_ms), (0.0, RATE_WINDOW_MS));
    }

    #[test]
    fn long_jobs_are_timed_by_littles_law_only_without_timed_ones() {
        // 10 jobs running, one finishing every 3 s: 30 s each.
        let long = Window {
            completion_rate: 1.0 / 3.0,
            ..Window::default()
        };
        assert_eq!(service_time(&long, 10).map(f64::round), Some(30_000.0));
        assert_eq!(service_time(&long, 0), None);
        assert_eq!(service_time(&Window::default(), 10), None);
        let timed = Window {
            completion_rate: 1.0,
            mean_pair_ms: Some(20.0),
            ..Window::default()
        };
        assert_eq!(service_time(&timed, 50), Some(20.0));
    }

    #[test]
    fn time_replies_parse_to_ms() {
        let r = ["1733360000".to_owned(), "123456".to_owned()];
        assert_eq!(parse_time_ms(&r).unwrap(), 1_733_360_000_123);
        assert!(parse_time_ms(&["x".to_owned()]).is_err());
    }
}
