//! `echomq limiter <queue> …`: the queue-wide rate limit, and the parser of
//! `MAX/DURATION_MS` that `groups` and `work` share. Bad values are refused
//! by the argument parser, before anything connects or writes.

use std::time::Duration;

use clap::Subcommand;
use echomq::{Queue, RateLimit};

use super::{Access, Res};
use crate::style::{self, paint};
use crate::target::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    queue: String,
    #[command(subcommand)]
    action: Action,
}

/// `limiter <queue> …`
#[derive(Debug, Clone, Subcommand)]
enum Action {
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

/// `MAX/DURATION_MS`, both positive.
pub(crate) fn parse_rate_limit(s: &str) -> Result<RateLimit, String> {
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
fn parse_positive_ms(s: &str) -> Result<u64, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n as u64),
        Ok(n) => Err(format!("duration {n} ms must be at least 1 ms")),
        Err(_) => Err(format!("duration {s:?} is not a whole number of ms")),
    }
}

pub(crate) async fn run(a: Args, t: &Target) -> Res {
    let access = match a.action {
        Action::Show => Access::Read,
        _ => Access::Write,
    };
    super::queue(t, &a.queue)?
        .run(access, async |_, q| limiter(q, a.action).await)
        .await
}

async fn limiter(q: &Queue, action: Action) -> Res {
    match action {
        Action::Show => {
            match q.limits().get_global_rate_limit().await? {
                Some(l) => {
                    anstream::println!("global rate limit  {}/{} ms", l.max, l.duration_ms())
                }
                None => anstream::println!("global rate limit  {}", paint(style::DIM, "none")),
            }
            let ttl = q.limits().rate_limit_ttl(None).await?;
            anstream::println!("window left        {} ms", ttl.as_millis());
        }
        Action::Set { limit } => {
            q.limits().set_global_rate_limit(limit).await?;
            anstream::println!(
                "global rate limit set to {}/{} ms",
                limit.max,
                limit.duration_ms()
            );
        }
        Action::Remove => {
            q.limits().remove_global_rate_limit().await?;
            anstream::println!("global rate limit removed");
        }
        Action::Pause { duration_ms } => {
            q.limits()
                .rate_limit(Duration::from_millis(duration_ms))
                .await?;
            anstream::println!("limited workers held for {duration_ms} ms");
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
