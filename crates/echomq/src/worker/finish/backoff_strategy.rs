//! Custom backoff strategies: a worker-registered function that computes the
//! retry delay of jobs whose backoff type is not `fixed` or `exponential`, as
//! BullMQ's `settings.backoffStrategy` (docs/worker.md §Backoff).
//!
//! BullMQ registers one function that receives the type name; so does EchoMQ,
//! and a strategy dispatches on [`BackoffInput::kind`]. A type it does not
//! know should answer [`CustomBackoff::Fail`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::Backoff;

use super::backoff::RetryDecision;
use echomq_protocol::Job;

/// What a strategy is asked about one failed attempt.
#[derive(Debug, Clone, Copy)]
pub struct BackoffInput<'a> {
    /// The number of the retry being decided (attempts made so far + 1), as
    /// BullMQ passes `attemptsMade`.
    pub attempts_made: u64,
    /// The backoff `type` the job names.
    pub kind: &'a str,
    /// The job's whole stored `backoff` object (custom settings included).
    pub backoff: &'a serde_json::Value,
    /// The failure message.
    pub error: &'a str,
    /// The job as it was taken.
    pub job: &'a Job,
}

/// A strategy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomBackoff {
    /// Retry at once (BullMQ: a delay of 0).
    Now,
    /// Retry after this delay.
    After(Duration),
    /// Do not retry: fail the job for good (BullMQ: a delay of -1).
    Fail,
}

type StrategyFn = dyn Fn(&BackoffInput<'_>) -> CustomBackoff + Send + Sync;

/// A worker's custom backoff strategy. Cheap to clone.
#[derive(Clone)]
pub struct BackoffStrategy(Arc<StrategyFn>);

impl BackoffStrategy {
    /// Wraps a strategy function.
    pub fn new(f: impl Fn(&BackoffInput<'_>) -> CustomBackoff + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl fmt::Debug for BackoffStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BackoffStrategy(..)")
    }
}

/// Replaces an "unknown strategy" decision with the worker's strategy when
/// it has one; any other decision stands (built-in types win, as in BullMQ).
pub(crate) fn apply(
    decision: RetryDecision,
    strategy: Option<&BackoffStrategy>,
    job: &Job,
    error: &str,
) -> RetryDecision {
    let (RetryDecision::UnknownStrategy, Some(strategy), Some(Backoff::Custom(value))) =
        (decision, strategy, job.opts.backoff.as_ref())
    else {
        return decision;
    };
    let input = BackoffInput {
        attempts_made: job.attempts_made + 1,
        kind: value.get("type").and_then(|t| t.as_str()).unwrap_or(""),
        backoff: value,
        error,
        job,
    };
    match (strategy.0)(&input) {
        CustomBackoff::Now => RetryDecision::Now,
        CustomBackoff::After(d) if d.is_zero() => RetryDecision::Now,
        CustomBackoff::After(d) => {
            RetryDecision::After(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }
        CustomBackoff::Fail => RetryDecision::Fail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(backoff: serde_json::Value) -> Job {
        let mut h = std::collections::HashMap::new();
        h.insert("name".to_string(), "n".to_string());
        h.insert("data".to_string(), "{}".to_string());
        h.insert(
            "opts".to_string(),
            json!({"attempts": 5, "backoff": backoff}).to_string(),
        );
        h.insert("atm".to_string(), "2".to_string());
        Job::from_hash("1", h).unwrap()
    }

    #[test]
    fn the_strategy_decides_only_custom_types() {
        let s = BackoffStrategy::new(|i| match i.kind {
            "linear" => CustomBackoff::After(Duration::from_millis(
                100 * i.attempts_made * i.backoff["step"].as_u64().unwrap_or(1),
            )),
            "now" => CustomBackoff::Now,
            _ => CustomBackoff::Fail,
        });
        let linear = job(json!({"type": "linear", "step": 2}));
        assert_eq!(
            apply(RetryDecision::UnknownStrategy, Some(&s), &linear, "e"),
            RetryDecision::After(600)
        );
        let now = job(json!({"type": "now"}));
        assert_eq!(
            apply(RetryDecision::UnknownStrategy, Some(&s), &now, "e"),
            RetryDecision::Now
        );
        let other = job(json!({"type": "mystery"}));
        assert_eq!(
            apply(RetryDecision::UnknownStrategy, Some(&s), &other, "e"),
            RetryDecision::Fail
        );
        assert_eq!(
            apply(RetryDecision::UnknownStrategy, None, &linear, "e"),
            RetryDecision::UnknownStrategy
        );
        assert_eq!(
            apply(RetryDecision::After(5), Some(&s), &linear, "e"),
            RetryDecision::After(5)
        );
    }
}
