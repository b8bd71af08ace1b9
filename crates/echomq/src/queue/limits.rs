//! Queue-wide limits kept in the meta hash and honoured by every worker of the
//! queue, Rust or Node (docs/protocol.md §Global concurrency, §Rate limiting).

use std::time::Duration;

use echomq_protocol::call::limits::{GetRateLimitTtl, IsMaxed};
use fred::prelude::{HashesInterface, KeysInterface};

use super::handles::Limits;
use crate::error::{Error, Result};

/// Meta hash fields of the limits (the names BullMQ uses).
mod field {
    /// Most jobs active at once across all workers.
    pub const CONCURRENCY: &str = "concurrency";
    /// Jobs per rate-limit window.
    pub const MAX: &str = "max";
    /// Rate-limit window, ms.
    pub const DURATION: &str = "duration";
}

/// The counter `rate_limit` writes, as Node does (`Number.MAX_SAFE_INTEGER`).
const JS_MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// A rate limit: at most `max` jobs start per `duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Jobs per window, at least 1.
    pub max: u64,
    /// Window length, at least 1 ms.
    pub duration: Duration,
}

impl RateLimit {
    /// Checks the values a worker or the meta hash can honour.
    pub fn validate(&self) -> Result<()> {
        if self.max == 0 {
            return Err(Error::Config(
                "a rate limit's max must be at least 1".into(),
            ));
        }
        if self.duration.as_millis() == 0 {
            return Err(Error::Config(
                "a rate limit's duration must be at least 1 ms".into(),
            ));
        }
        Ok(())
    }

    /// The window in whole ms, as stored.
    pub fn duration_ms(&self) -> u64 {
        u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX)
    }
}

impl Limits<'_> {
    /// Caps how many jobs of this queue run at once across every worker
    /// (meta `concurrency`). Refuses 0 without writing anything.
    pub async fn set_global_concurrency(self, concurrency: u64) -> Result<()> {
        if concurrency == 0 {
            return Err(Error::Config(
                "global concurrency must be at least 1".into(),
            ));
        }
        self.queue
            .conn
            .pool()
            .hset::<(), _, _>(
                self.queue.keys.meta(),
                (field::CONCURRENCY, concurrency.to_string()),
            )
            .await?;
        Ok(())
    }

    /// The global concurrency, `None` when unset.
    pub async fn get_global_concurrency(self) -> Result<Option<u64>> {
        let v: Option<String> = self
            .queue
            .conn
            .pool()
            .hget(self.queue.keys.meta(), field::CONCURRENCY)
            .await?;
        Ok(v.and_then(|s| echomq_protocol::call::decode::parse_int(&s))
            .and_then(|n| u64::try_from(n).ok()))
    }

    /// Removes the global concurrency.
    pub async fn remove_global_concurrency(self) -> Result<()> {
        self.queue
            .conn
            .pool()
            .hdel::<(), _, _>(self.queue.keys.meta(), field::CONCURRENCY)
            .await?;
        Ok(())
    }

    /// Limits how many jobs of this queue start per window across every
    /// worker (meta `max` and `duration`); it overrides a worker's own max.
    /// Refuses a max of 0 or an empty window without writing anything.
    pub async fn set_global_rate_limit(self, limit: RateLimit) -> Result<()> {
        limit.validate()?;
        self.queue
            .conn
            .pool()
            .hset::<(), _, _>(
                self.queue.keys.meta(),
                [
                    (field::MAX, limit.max.to_string()),
                    (field::DURATION, limit.duration_ms().to_string()),
                ],
            )
            .await?;
        Ok(())
    }

    /// The global rate limit, `None` unless both fields are set.
    pub async fn get_global_rate_limit(self) -> Result<Option<RateLimit>> {
        let (max, duration): (Option<String>, Option<String>) = self
            .queue
            .conn
            .pool()
            .hmget(self.queue.keys.meta(), vec![field::MAX, field::DURATION])
            .await?;
        let num = |s: Option<String>| {
            s.and_then(|s| echomq_protocol::call::decode::parse_int(&s))
                .and_then(|n| u64::try_from(n).ok())
        };
        Ok(match (num(max), num(duration)) {
            (Some(max), Some(ms)) if max > 0 && ms > 0 => Some(RateLimit {
                max,
                duration: Duration::from_millis(ms),
            }),
            _ => None,
        })
    }

    /// Removes the global rate limit.
    pub async fn remove_global_rate_limit(self) -> Result<()> {
        self.queue
            .conn
            .pool()
            .hdel::<(), _, _>(self.queue.keys.meta(), vec![field::MAX, field::DURATION])
            .await?;
        Ok(())
    }

    /// Whether the global concurrency is used up right now (isMaxed).
    pub async fn is_maxed(self) -> Result<bool> {
        self.queue
            .conn
            .call(&IsMaxed {
                keys: &self.queue.keys,
            })
            .await
    }

    /// How long until the rate limiter lets the next job start: zero when a
    /// job may start now. `max` tests the window against that many jobs; `None`
    /// uses the global limit, or the limiter key's expiry when there is none.
    pub async fn rate_limit_ttl(self, max: Option<u64>) -> Result<Duration> {
        let ms = self
            .queue
            .conn
            .call(&GetRateLimitTtl {
                keys: &self.queue.keys,
                max_jobs: max,
            })
            .await?;
        Ok(Duration::from_millis(ms.max(0) as u64))
    }

    /// Starts a rate-limit window of `duration` for the whole queue, as
    /// BullMQ's `worker.rateLimit(ms)`: workers of either client take no job
    /// until it expires. Refuses an empty window.
    pub async fn rate_limit(self, duration: Duration) -> Result<()> {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return Err(Error::Config(
                "a rate-limit window must be at least 1 ms".into(),
            ));
        }
        self.queue
            .conn
            .pool()
            .set::<(), _, _>(
                self.queue.keys.limiter(),
                // Node writes Number.MAX_SAFE_INTEGER: above any max.
                JS_MAX_SAFE_INTEGER.to_string(),
                Some(fred::types::Expiration::PX(ms as i64)),
                None,
                false,
            )
            .await?;
        Ok(())
    }

    /// Ends the current rate-limit window now (BullMQ's `removeRateLimitKey`).
    pub async fn remove_rate_limit_key(self) -> Result<bool> {
        let removed: i64 = self
            .queue
            .conn
            .pool()
            .del(self.queue.keys.limiter())
            .await?;
        Ok(removed > 0)
    }
}
