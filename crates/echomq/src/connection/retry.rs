//! Connecting when Redis is not there yet.
//!
//! A service started by an orchestrator often comes up before its Redis
//! (containers of one deployment start together). [`Connection::connect`]
//! fails at once in that case; [`Connection::connect_with_retry`] keeps
//! trying with a capped exponential backoff, logs one line per failed
//! attempt, and gives up only on an error that waiting cannot fix (a refused
//! password, a bad URL) or when its optional overall deadline has passed.
//!
//! Once connected, fred reconnects by itself for the life of the pool
//! (`ConnectionConfig::reconnect_delay`): this module is about the first
//! connection only.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::config::{redacted_url, ConnectionConfig};
use super::pool::Connection;
use crate::error::{Error, Result};

/// How [`Connection::connect_with_retry`] waits between attempts.
///
/// The pause starts at `initial_delay` and doubles after each failed attempt
/// up to `max_delay`; with `deadline` set, no attempt starts after it and
/// the last error is returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Pause after the first failed attempt. Default 200 ms.
    pub initial_delay: Duration,
    /// The longest pause between two attempts. Default 5 s.
    pub max_delay: Duration,
    /// Give up once this much time has passed since the first attempt.
    /// Default `None`: retry until Redis answers.
    pub deadline: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            deadline: None,
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry: what [`Connection::connect`] does.
    pub fn once() -> Self {
        Self {
            deadline: Some(Duration::ZERO),
            ..Self::default()
        }
    }

    /// The default backoff, giving up after `deadline`.
    pub fn with_deadline(deadline: Duration) -> Self {
        Self {
            deadline: Some(deadline),
            ..Self::default()
        }
    }

    /// The pause after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(30);
        self.initial_delay
            .saturating_mul(1u32 << doublings)
            .min(self.max_delay)
    }
}

impl Connection {
    /// [`Connection::connect`], retried as `policy` says while the failure is
    /// transient ([`Error::is_connection`]: Redis not reachable yet, still
    /// loading its data set, …); a refused password, a bad URL or an
    /// unsuitable server are returned at once. Each failed attempt is logged
    /// (WARN) with the error and the pause before the next one.
    pub async fn connect_with_retry(
        config: ConnectionConfig,
        policy: &RetryPolicy,
    ) -> Result<Self> {
        Self::connect_with_retry_explained(config, policy, &|e| e.to_string()).await
    }

    /// [`Connection::connect_with_retry`], with the logged error written by
    /// `explain` (a command-line tool names its own flags there).
    pub async fn connect_with_retry_explained(
        config: ConnectionConfig,
        policy: &RetryPolicy,
        explain: &(dyn Fn(&Error) -> String + Sync),
    ) -> Result<Self> {
        let started = Instant::now();
        let shown_url = redacted_url(&config.url);
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let error = match Connection::connect(config.clone()).await {
                Ok(conn) => {
                    if attempt > 1 {
                        info!(url = %shown_url, attempt, elapsed_ms = started.elapsed().as_millis() as u64, "connected to Redis");
                    }
                    return Ok(conn);
                }
                Err(e) => e,
            };
            if !error.is_connection() {
                return Err(error);
            }
            let pause = policy.delay(attempt);
            if let Some(deadline) = policy.deadline {
                if started.elapsed() + pause > deadline {
                    warn!(
                        url = %shown_url,
                        attempt,
                        error = %explain(&error),
                        "giving up connecting to Redis: deadline of {} ms reached",
                        deadline.as_millis()
                    );
                    return Err(error);
                }
            }
            warn!(
                url = %shown_url,
                attempt,
                retry_in_ms = pause.as_millis() as u64,
                error = %explain(&error),
                "Redis not reachable yet; retrying"
            );
            tokio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = RetryPolicy::default();
        let ms: Vec<u128> = (1..=8).map(|a| p.delay(a).as_millis()).collect();
        assert_eq!(ms, [200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(p.delay(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn once_means_one_attempt() {
        assert_eq!(RetryPolicy::once().deadline, Some(Duration::ZERO));
    }
}
