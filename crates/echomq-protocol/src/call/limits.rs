//! Queue-wide limits: the rate limiter's remaining window, global concurrency,
//! and the ready jobs per priority a limited queue holds back
//! (docs/protocol.md §Rate limiting, §Global concurrency).

use crate::call::decode::{self, Reply, ReplyError};
use crate::call::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// getRateLimitTtl-2: ms until the limiter lets a job start.
///
/// With `max_jobs` the window counts as used up at that many jobs; without,
/// the global limit of the meta hash applies, and when there is none the
/// answer is the limiter key's plain PTTL (so `-2`: no key, `-1`: no expiry).
/// Negative answers are PTTL's, never error codes.
#[derive(Debug, Clone, Copy)]
pub struct GetRateLimitTtl<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Jobs per window to test against, `None` for the queue's own limit.
    pub max_jobs: Option<u64>,
}

impl ScriptCall for GetRateLimitTtl<'_> {
    type Output = i64;

    fn script(&self) -> ScriptId {
        ScriptId::GetRateLimitTtl
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().limiter, &self.keys.fixed().meta]
    }

    fn args(&self) -> Vec<Arg> {
        // "0" is the wire's "no max given"; a max of 0 means the same to Node.
        vec![Arg::int(self.max_jobs.unwrap_or(0) as i64)]
    }

    fn decode(&self, reply: Reply) -> Result<i64, ReplyError> {
        reply
            .as_i64()
            .ok_or_else(|| ReplyError::shape(self.script(), format!("expected ms, got {reply:?}")))
    }
}

/// isMaxed-2: whether `active` holds at least the global concurrency.
#[derive(Debug, Clone, Copy)]
pub struct IsMaxed<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
}

impl ScriptCall for IsMaxed<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::IsMaxed
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().meta, &self.keys.fixed().active]
    }

    fn args(&self) -> Vec<Arg> {
        Vec::new()
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        // BullMQ's own script answers nil for "no"; both spellings read the same.
        match reply {
            Reply::Nil => Ok(false),
            r => Ok(decode::int_or_code(self.script(), &r)? == 1),
        }
    }
}

/// getCountsPerPriority-2: ready jobs per priority, in the given order
/// (priority 0 counts the wait list).
#[derive(Debug, Clone, Copy)]
pub struct GetCountsPerPriority<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Priorities to count.
    pub priorities: &'a [u32],
}

impl ScriptCall for GetCountsPerPriority<'_> {
    type Output = Vec<u64>;

    fn script(&self) -> ScriptId {
        ScriptId::GetCountsPerPriority
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().wait, &self.keys.fixed().prioritized]
    }

    fn args(&self) -> Vec<Arg> {
        self.priorities
            .iter()
            .map(|p| Arg::int(i64::from(*p)))
            .collect()
    }

    fn decode(&self, reply: Reply) -> Result<Vec<u64>, ReplyError> {
        let script = self.script();
        let counts = decode::array(script, reply)?
            .iter()
            .map(|r| {
                r.as_i64()
                    .map(|n| n.max(0) as u64)
                    .ok_or_else(|| ReplyError::shape(script, format!("count {r:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if counts.len() != self.priorities.len() {
            return Err(ReplyError::shape(script, "one count per priority expected"));
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn rate_limit_ttl_sends_zero_for_the_queue_limit() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let own = GetRateLimitTtl {
            keys: &k,
            max_jobs: None,
        };
        assert_eq!(argv_text(&own), vec!["0"]);
        assert_eq!(own.keys(), vec!["emq:q:limiter", "emq:q:meta"]);
        let given = GetRateLimitTtl {
            keys: &k,
            max_jobs: Some(7),
        };
        assert_eq!(argv_text(&given), vec!["7"]);
        assert_eq!(own.decode(Reply::Int(-2)).unwrap(), -2, "PTTL, not a code");
        assert_eq!(own.decode(Reply::Int(350)).unwrap(), 350);
    }

    #[test]
    fn is_maxed_reads_nil_as_no() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let c = IsMaxed { keys: &k };
        assert!(argv_text(&c).is_empty());
        assert_eq!(c.keys(), vec!["emq:q:meta", "emq:q:active"]);
        assert!(!c.decode(Reply::Nil).unwrap());
        assert!(!c.decode(Reply::Int(0)).unwrap());
        assert!(c.decode(Reply::Int(1)).unwrap());
    }

    #[test]
    fn counts_per_priority_in_order() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let c = GetCountsPerPriority {
            keys: &k,
            priorities: &[0, 5, 2_097_151],
        };
        assert_eq!(argv_text(&c), vec!["0", "5", "2097151"]);
        assert_eq!(c.keys(), vec!["emq:q:wait", "emq:q:prioritized"]);
        let r = Reply::Array(vec![Reply::Int(3), Reply::Int(0), Reply::Int(1)]);
        assert_eq!(c.decode(r).unwrap(), vec![3, 0, 1]);
        assert!(c.decode(Reply::Array(vec![Reply::Int(1)])).is_err());
    }
}
