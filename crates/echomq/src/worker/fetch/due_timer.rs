//! The due timer's clock: Redis's time, as seen from this host.
//!
//! Delayed jobs are due on the clock of whoever added them, which the scripts
//! compare with the `now` the worker sends; Redis's own clock is the one
//! reference every client shares. The worker measures the offset of its clock
//! to Redis `TIME` and uses the corrected time both to arm its local timer for
//! the next due job and as the `now` of the calls that promote delayed jobs,
//! so a host clock running ahead cannot take a job early and one running
//! behind cannot leave it waiting (docs/worker.md §Due timer).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand};

use crate::connection::pool::Connection;
use crate::error::{Error, Result};

/// How often the offset is measured again (host clocks drift and get stepped).
const RESYNC: Duration = Duration::from_secs(30);
/// `TIME` round trips per measurement; the tightest one wins.
const SAMPLES: usize = 3;

/// This host's clock corrected to Redis's.
#[derive(Default)]
pub(crate) struct ServerClock {
    /// Redis `TIME` minus the local clock, µs. A lower bound: the server read
    /// its clock before the reply reached us, so the corrected time is never
    /// ahead of Redis's and a timer armed on it never fires early.
    offset_us: AtomicI64,
    /// Local ms of the last measurement; 0 = never measured.
    synced_at: AtomicU64,
}

impl ServerClock {
    /// Redis's time now, µs (the local clock until a measurement succeeded).
    pub fn now_us(&self) -> i64 {
        (crate::clock::now_us() as i64).saturating_add(self.offset_us.load(Ordering::Relaxed))
    }

    /// Redis's time now, ms: the `now` of the fetching and finishing calls.
    pub fn now_ms(&self) -> u64 {
        (self.now_us().max(0) / 1000) as u64
    }

    /// Whether the offset should be measured (again) before it is relied on.
    pub fn stale(&self) -> bool {
        let at = self.synced_at.load(Ordering::Relaxed);
        at == 0 || crate::clock::now_ms().saturating_sub(at) >= RESYNC.as_millis() as u64
    }

    /// Measures the offset with a few `TIME` round trips on the pool. A
    /// failed measurement is not retried before the next period.
    pub async fn sync(&self, conn: &Connection) -> Result<()> {
        self.synced_at
            .store(crate::clock::now_ms().max(1), Ordering::Relaxed);
        let mut best: Option<i64> = None;
        for _ in 0..SAMPLES {
            let reply: Vec<String> = conn
                .pool()
                .next()
                .custom(time_command(), Vec::<String>::new())
                .await?;
            let received = crate::clock::now_us() as i64;
            let server = parse_time(&reply)?;
            let lower = server - received;
            best = Some(best.map_or(lower, |b| b.max(lower)));
        }
        if let Some(offset) = best {
            self.set_offset_us(offset);
        }
        Ok(())
    }

    fn set_offset_us(&self, offset: i64) {
        self.offset_us.store(offset, Ordering::Relaxed);
        self.synced_at
            .store(crate::clock::now_ms().max(1), Ordering::Relaxed);
    }

    /// How long until `due_ms` (a due time from the scripts) on Redis's
    /// clock; `None` when it is due already.
    pub fn until(&self, due_ms: i64) -> Option<Duration> {
        until(due_ms, self.now_us())
    }
}

/// The wait from `now_us` to the start of millisecond `due_ms`: the scripts
/// promote a job due at `d` once their `now` (whole ms) reaches `d`.
fn until(due_ms: i64, now_us: i64) -> Option<Duration> {
    let left = due_ms.saturating_mul(1000).saturating_sub(now_us);
    (left > 0).then(|| Duration::from_micros(left as u64))
}

fn time_command() -> CustomCommand {
    CustomCommand::new_static("TIME", ClusterHash::Random, false)
}

/// `TIME` → µs since the epoch.
fn parse_time(reply: &[String]) -> Result<i64> {
    let part = |i: usize| reply.get(i).and_then(|x| x.parse::<i64>().ok());
    match (part(0), part(1)) {
        (Some(secs), Some(micros)) => Ok(secs * 1_000_000 + micros),
        _ => Err(Error::protocol("TIME", format!("reply {reply:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_to_the_start_of_the_due_millisecond() {
        assert_eq!(until(1000, 999_000), Some(Duration::from_millis(1)));
        assert_eq!(until(1000, 999_750), Some(Duration::from_micros(250)));
        assert_eq!(until(1000, 1_000_000), None);
        assert_eq!(until(1000, 1_000_400), None);
        assert_eq!(until(0, 5), None);
    }

    #[test]
    fn time_replies() {
        let ok = vec!["1700000000".to_owned(), "250".to_owned()];
        assert_eq!(parse_time(&ok).unwrap(), 1_700_000_000_000_250);
        assert!(parse_time(&["x".to_owned()]).is_err());
    }

    #[test]
    fn corrected_by_the_offset() {
        let c = ServerClock::default();
        assert!(c.stale());
        c.set_offset_us(-5_000_000);
        assert!(!c.stale());
        let local = crate::clock::now_ms();
        let server = c.now_ms();
        assert!(local >= server + 4_990 && local <= server + 5_010);
    }
}
