//! `echomq limiter` and `echomq concurrency`: the queue-wide rate limit and
//! concurrency. Bad values are refused by the argument parser, before
//! anything connects or writes.

use std::time::Duration;

use clap::Subcommand;
use echomq::{Queue, RateLimit};

use crate::style::{self, paint};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// `limiter <queue> …`
#[derive(Debug, Clone, Subcommand)]
pub enum LimiterAction {
    /// The global rate limit and the time left in the current window.
    Show,
    /// Set the global rate limit: `MAX/DURATION_MS` (e.g. `10/1000`).
    Set {
        #[arg(value_parser = parse_rate_limit)]
        limit: RateLimit,
    },
    /// Remove the global rate limit.
    Remove,
    /// Hold every limited worker for DURATION_MS (BullMQ's `rateLimit`).
    Pause {
        #[arg(value_parser = parse_positive_ms)]
        duration_ms: u64,
    },
}

/// `concurrency <queue> …`
#[derive(Debug, Clone, Subcommand)]
pub enum ConcurrencyAction {
    /// The global concurrency and whether it is used up.
    Show,
    /// Set the global concurrency (at least 1).
    Set {
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        concurrency: u64,
    },
    /// Remove the global concurrency.
    Remove,
}

/// `MAX/DURATION_MS`, both positive.
pub fn parse_rate_limit(s: &str) -> Result<RateLimit, String> {
    let (max, ms) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected MAX/DURATION_MS, e.g. 10/1000"))?;
    let max: u64 = max
        .trim()
        .parse()
        .map_err(|_| format!("max {max:?} is not a whole number"))?;
    let ms = parse_positive_ms(ms.trim())?;
    let limit = RateLimit {
        max,
        duration: Duration::from_millis(ms),
    };
    limit.validate().map_err(|e| e.to_string())?;
    Ok(limit)
}

/// A duration in ms, at least 1.
pub fn parse_positive_ms(s: &str) -> Result<u64, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n as u64),
        Ok(n) => Err(format!("duration {n} ms must be at least 1 ms")),
        Err(_) => Err(format!("duration {s:?} is not a whole number of ms")),
    }
}

/// Whether the action only reads (the queue's meta hash is then left alone).
pub fn limiter_reads_only(a: &LimiterAction) -> bool {
    matches!(a, LimiterAction::Show)
}

/// Whether the action only reads.
pub fn concurrency_reads_only(a: &ConcurrencyAction) -> bool {
    matches!(a, ConcurrencyAction::Show)
}

pub async fn limiter(q: &Queue, action: LimiterAction) -> Res {
    match action {
        LimiterAction::Show => {
            match q.get_global_rate_limit().await? {
                Some(l) => {
                    anstream::println!("global rate limit  {}/{} ms", l.max, l.duration_ms())
                }
                None => anstream::println!("global rate limit  {}", paint(style::DIM, "none")),
            }
            let ttl = q.rate_limit_ttl(None).await?;
            anstream::println!("window left        {} ms", ttl.as_millis());
        }
        LimiterAction::Set { limit } => {
            q.set_global_rate_limit(limit).await?;
            anstream::println!(
                "global rate limit set to {}/{} ms",
                limit.max,
                limit.duration_ms()
            );
        }
        LimiterAction::Remove => {
            q.remove_global_rate_limit().await?;
            anstream::println!("global rate limit removed");
        }
        LimiterAction::Pause { duration_ms } => {
            q.rate_limit(Duration::from_millis(duration_ms)).await?;
            anstream::println!("limited workers held for {duration_ms} ms");
        }
    }
    Ok(())
}

pub async fn concurrency(q: &Queue, action: ConcurrencyAction) -> Res {
    match action {
        ConcurrencyAction::Show => {
            match q.get_global_concurrency().await? {
                Some(n) => anstream::println!("global concurrency  {n}"),
                None => anstream::println!("global concurrency  {}", paint(style::DIM, "none")),
            }
            anstream::println!("maxed               {}", q.is_maxed().await?);
        }
        ConcurrencyAction::Set { concurrency } => {
            q.set_global_concurrency(concurrency).await?;
            anstream::println!("global concurrency set to {concurrency}");
        }
        ConcurrencyAction::Remove => {
            q.remove_global_concurrency().await?;
            anstream::println!("global concurrency removed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_are_checked_before_anything_runs() {
        let l = parse_rate_limit("10/1000").unwrap();
        assert_eq!((l.max, l.duration_ms()), (10, 1000));
        assert!(parse_rate_limit("0/1000")
            .unwrap_err()
            .contains("at least 1"));
        assert!(parse_rate_limit("5/-3")
            .unwrap_err()
            .contains("at least 1 ms"));
        assert!(parse_rate_limit("5").is_err());
        assert!(parse_rate_limit("x/10").is_err());
        assert!(parse_positive_ms("0").is_err());
    }
}
