//! The stalled-job check's call.

use std::time::Duration;

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// moveStalledJobsToWait-8: recovers the jobs the previous check marked and
/// whose lock is still missing, then marks every active job. Replies with the
/// recovered ids (none when another client checked less than `interval` ago).
#[derive(Debug, Clone, Copy)]
pub struct MoveStalledJobsToWait<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Recoveries allowed before a job is marked to fail.
    pub max_stalled_count: u64,
    /// Client time, ms.
    pub now: u64,
    /// Time between checks: the TTL of the fleet-wide throttle key.
    pub interval: Duration,
}

impl ScriptCall for MoveStalledJobsToWait<'_> {
    type Output = Vec<String>;

    fn script(&self) -> ScriptId {
        ScriptId::MoveStalledJobsToWait
    }

    fn keys(&self) -> Vec<Key> {
        // Eight KEYS: the unused `paused` of BullMQ's nine is not sent
        // (docs/protocol.md §L2).
        let k = self.keys;
        keys![
            &k.fixed().stalled,
            &k.fixed().wait,
            &k.fixed().active,
            &k.fixed().stalled_check,
            &k.fixed().meta,
            &k.fixed().marker,
            &k.fixed().events,
            &k.fixed().repeat,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::int(self.max_stalled_count),
            Arg::str(self.keys.prefix_key()),
            Arg::int(self.now),
            Arg::ms(self.interval),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Vec<String>, ReplyError> {
        if let Some(n) = reply.as_i64() {
            decode::code(self.script(), n)?;
        }
        decode::strings(self.script(), reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn move_stalled_jobs_to_wait() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call = MoveStalledJobsToWait {
            keys: &k,
            max_stalled_count: 1,
            now: 1_000,
            interval: Duration::from_secs(30),
        };
        assert_eq!(argv_text(&call), ["1", "emq:q:", "1000", "30000"]);
        let keys = call.keys();
        assert_eq!(keys[0], "emq:q:stalled");
        assert_eq!(keys[3], "emq:q:stalled-check");
        assert_eq!(keys[7], "emq:q:repeat");
        assert_eq!(
            call.decode(Reply::Array(vec![Reply::text("7")])).unwrap(),
            ["7"]
        );
        assert!(call.decode(Reply::Int(-1)).is_err());
    }
}
