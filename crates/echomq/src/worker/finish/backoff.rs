//! Retry decision and backoff delay, computed as BullMQ 6.7.0 does
//! (docs/worker.md, Backoff).

use echomq_protocol::Backoff;

/// What the failure of one attempt leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// No attempt left (or the error is unrecoverable): fail the job for good.
    Fail,
    /// Retry at once: back to `wait` (retryJob).
    Now,
    /// Retry after this many milliseconds: to `delayed` (moveToDelayed).
    After(u64),
    /// The job names a backoff strategy this worker does not know. BullMQ Node
    /// throws in that case; EchoMQ fails the job for good instead, so that it
    /// does not sit in `active` until the stalled checker finds it.
    UnknownStrategy,
}

/// Decides the fate of a failed attempt.
///
/// `attempts_made` is the job's `atm` as read at pick-up, `attempts` its
/// `opts.attempts` (0 when unset), `rand` a uniform sample of `[0, 1)` used
/// only by jitter.
pub fn decide(
    attempts_made: u64,
    attempts: i64,
    backoff: Option<&Backoff>,
    unrecoverable: bool,
    rand: f64,
) -> RetryDecision {
    // `attempts` counts the first run, so 3 attempts allow two retries.
    if unrecoverable || (attempts_made as i64).saturating_add(1) >= attempts {
        return RetryDecision::Fail;
    }
    match delay(backoff, attempts_made + 1, rand) {
        Some(Some(0)) | None => RetryDecision::Now,
        Some(Some(ms)) => RetryDecision::After(ms),
        Some(None) => RetryDecision::UnknownStrategy,
    }
}

/// Whether a failed attempt may not be retried because the job was started
/// as often as `max_started_attempts` allows (BullMQ 6.7: it then fails with
/// its own error, rather than being retried and refused at the next pick-up).
pub fn started_too_often(max_started_attempts: Option<u64>, attempts_started: u64) -> bool {
    matches!(max_started_attempts, Some(max) if max > 0 && max <= attempts_started)
}

/// The backoff delay before retry number `n` (= attemptsMade + 1).
///
/// `None`: no backoff configured (retry at once). `Some(None)`: a custom
/// strategy this crate does not compute. `Some(Some(ms))`: the delay.
pub fn delay(backoff: Option<&Backoff>, n: u64, rand: f64) -> Option<Option<u64>> {
    let backoff = backoff?;
    Some(match backoff {
        Backoff::Fixed { delay, jitter } => Some(jittered(*delay as f64, *jitter, rand)),
        Backoff::Exponential { delay, jitter } => {
            let exp = i32::try_from(n.saturating_sub(1)).unwrap_or(i32::MAX);
            let base = (2f64.powi(exp) * *delay as f64).round();
            Some(jittered(base, *jitter, rand))
        }
        Backoff::Custom(_) => None,
    })
}

fn jittered(base: f64, jitter: Option<f64>, rand: f64) -> u64 {
    let ms = match jitter {
        // Node: floor(rand·d·j + d·(1−j)); a zero jitter leaves d unchanged.
        Some(j) if j > 0.0 => (rand * base * j + base * (1.0 - j)).floor(),
        _ => base,
    };
    if ms.is_finite() && ms > 0.0 {
        ms.min(u64::MAX as f64) as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(d: u64, j: Option<f64>) -> Backoff {
        Backoff::Fixed {
            delay: d,
            jitter: j,
        }
    }

    fn exp(d: u64, j: Option<f64>) -> Backoff {
        Backoff::Exponential {
            delay: d,
            jitter: j,
        }
    }

    #[test]
    fn attempts_zero_or_one_never_retry() {
        assert_eq!(decide(0, 0, None, false, 0.5), RetryDecision::Fail);
        assert_eq!(decide(0, 1, None, false, 0.5), RetryDecision::Fail);
        assert_eq!(decide(0, 3, None, false, 0.5), RetryDecision::Now);
        assert_eq!(decide(1, 3, None, false, 0.5), RetryDecision::Now);
        assert_eq!(decide(2, 3, None, false, 0.5), RetryDecision::Fail);
        assert_eq!(decide(0, 3, None, true, 0.5), RetryDecision::Fail);
    }

    #[test]
    fn max_started_attempts_stops_retries_at_the_limit() {
        assert!(!started_too_often(None, 9));
        assert!(!started_too_often(Some(0), 9), "0 means no limit");
        assert!(!started_too_often(Some(3), 2));
        assert!(started_too_often(Some(3), 3));
        assert!(started_too_often(Some(3), 4));
    }

    #[test]
    fn fixed_and_exponential() {
        assert_eq!(
            decide(0, 5, Some(&fixed(1000, None)), false, 0.3),
            RetryDecision::After(1000)
        );
        assert_eq!(
            decide(0, 5, Some(&fixed(0, None)), false, 0.3),
            RetryDecision::Now
        );
        assert_eq!(delay(Some(&exp(1000, None)), 1, 0.0), Some(Some(1000)));
        assert_eq!(delay(Some(&exp(1000, None)), 2, 0.0), Some(Some(2000)));
        assert_eq!(delay(Some(&exp(1000, None)), 4, 0.0), Some(Some(8000)));
        assert_eq!(delay(Some(&exp(3, None)), 1, 0.0), Some(Some(3)));
    }

    #[test]
    fn jitter_is_floor_of_the_node_formula() {
        // floor(0.5·1000·0.5 + 1000·0.5) = 750
        assert_eq!(
            delay(Some(&fixed(1000, Some(0.5))), 1, 0.5),
            Some(Some(750))
        );
        assert_eq!(delay(Some(&fixed(1000, Some(1.0))), 1, 0.0), Some(Some(0)));
        // m = 4000; floor(0.25·4000·0.2 + 4000·0.8) = 3400
        assert_eq!(
            delay(Some(&exp(1000, Some(0.2))), 3, 0.25),
            Some(Some(3400))
        );
    }

    #[test]
    fn custom_strategy_is_unknown() {
        let b = Backoff::Custom(serde_json::json!({"type": "mine"}));
        assert_eq!(
            decide(0, 3, Some(&b), false, 0.1),
            RetryDecision::UnknownStrategy
        );
    }
}
