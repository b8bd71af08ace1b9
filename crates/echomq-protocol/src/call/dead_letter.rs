//! Dead letters, an EchoMQ extension (docs/operations.md §Dead letters): one
//! call type per script of `lua/moveToDeadLetter-18.lua`,
//! `lua/deadLetterFailed-5.lua` and `lua/replayDeadLetter-9.lua`.

use super::decode::{self, Reply, ReplyError};
use super::lifecycle::{verdict, FinishTarget, MoveToFinished, NextJob, Verdict};
use super::script::{Arg, ScriptCall};
use crate::keys::{Key, QueueKeys};
use crate::scripts::ScriptId;

/// Where dead letters of a queue go: the dead-letter queue's keys and its
/// bound.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetterTarget<'a> {
    /// The dead-letter queue.
    pub dlq: &'a QueueKeys,
    /// Keep at most this many dead letters, the oldest dropped first (0: no
    /// bound).
    pub max_len: u64,
}

impl DeadLetterTarget<'_> {
    fn keys(&self) -> [Key; 4] {
        let f = self.dlq.fixed();
        [
            Key::from(&f.failed),
            Key::from(&f.id),
            Key::from(&f.events),
            Key::from(&f.meta),
        ]
    }
}

/// moveToDeadLetter-18: a final failure (a moveToFinished to `failed`) that
/// moves the job to the dead-letter queue in the same call.
#[derive(Debug, Clone)]
pub struct MoveToDeadLetter<'a> {
    /// The failure, as moveToFinished would send it (`target` must be
    /// `Failed`; its retention is ignored: the job leaves the queue).
    pub finish: MoveToFinished<'a>,
    /// Where it goes.
    pub target: DeadLetterTarget<'a>,
}

impl ScriptCall for MoveToDeadLetter<'_> {
    type Output = Verdict<Option<NextJob>>;

    fn script(&self) -> ScriptId {
        ScriptId::MoveToDeadLetter
    }

    fn keys(&self) -> Vec<Key> {
        let mut keys = self.finish.keys();
        keys.extend(self.target.keys());
        keys
    }

    fn args(&self) -> Vec<Arg> {
        debug_assert!(matches!(self.finish.target, FinishTarget::Failed));
        let mut args = self.finish.args();
        args.push(Arg::key(&self.target.dlq.fixed().base));
        args.push(Arg::str(&self.finish.keys.queue_key()));
        args.push(Arg::int(self.target.max_len));
        args
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        verdict(self.script(), reply)
    }
}

/// deadLetterFailed-5: moves a job already in its queue's `failed` set to
/// the dead-letter queue. Answers the dead letter's id, `None` when nothing
/// was moved (not in `failed`, or a flow's job).
#[derive(Debug, Clone)]
pub struct DeadLetterFailed<'a> {
    /// The source queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// Where it goes.
    pub target: DeadLetterTarget<'a>,
}

impl ScriptCall for DeadLetterFailed<'_> {
    type Output = Option<String>;

    fn script(&self) -> ScriptId {
        ScriptId::DeadLetterFailed
    }

    fn keys(&self) -> Vec<Key> {
        let mut keys = keys![&self.keys.fixed().failed];
        keys.extend(self.target.keys());
        keys
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.id),
            Arg::key(&self.keys.fixed().base),
            Arg::str(&self.keys.queue_key()),
            Arg::key(&self.target.dlq.fixed().base),
            Arg::int(self.target.max_len),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        match reply {
            Reply::Int(0) => Ok(None),
            r => decode::text(self.script(), &r).map(Some),
        }
    }
}

/// What one replay answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// Back in the source queue under this id; gone from the dead-letter queue.
    Done(String),
    /// Not a dead letter (any more): replayed already, or removed.
    NotFound,
    /// The dead letter came from another queue than the one named.
    OtherSource,
    /// The source queue does not exist (no meta hash): nothing moved.
    NoSource,
    /// The source queue holds a job with the dead letter's id: nothing moved.
    IdTaken,
}

/// replayDeadLetter-9: one dead letter back to its source queue as a fresh
/// job, and out of the dead-letter queue, in one call.
#[derive(Debug, Clone)]
pub struct ReplayDeadLetter<'a> {
    /// The dead-letter queue.
    pub dlq: &'a QueueKeys,
    /// The dead letter's id there.
    pub id: &'a str,
    /// The queue it came from.
    pub source: &'a QueueKeys,
}

impl ScriptCall for ReplayDeadLetter<'_> {
    type Output = Replayed;

    fn script(&self) -> ScriptId {
        ScriptId::ReplayDeadLetter
    }

    fn keys(&self) -> Vec<Key> {
        let d = self.dlq.fixed();
        let s = self.source.fixed();
        keys![
            &d.failed,
            &d.events,
            &s.wait,
            &s.meta,
            &s.active,
            &s.prioritized,
            &s.pc,
            &s.events,
            &s.marker,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.id),
            Arg::key(&self.dlq.fixed().base),
            Arg::key(&self.source.fixed().base),
            Arg::str(&self.source.queue_key()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        match reply.as_i64() {
            Some(0) if matches!(reply, Reply::Int(_)) => Ok(Replayed::NotFound),
            Some(-1) => Ok(Replayed::OtherSource),
            Some(-2) => Ok(Replayed::NoSource),
            Some(-3) => Ok(Replayed::IdTaken),
            _ => decode::text(self.script(), &reply).map(Replayed::Done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_counts_match_the_script_names() {
        let src = QueueKeys::new("emq", "q").unwrap();
        let dlq = QueueKeys::new("emq", "q-dead").unwrap();
        let target = DeadLetterTarget {
            dlq: &dlq,
            max_len: 0,
        };
        let failed = DeadLetterFailed {
            keys: &src,
            id: "1",
            target,
        };
        assert_eq!(failed.keys().len(), ScriptId::DeadLetterFailed.num_keys());
        let replay = ReplayDeadLetter {
            dlq: &dlq,
            id: "1",
            source: &src,
        };
        assert_eq!(replay.keys().len(), ScriptId::ReplayDeadLetter.num_keys());
        assert_eq!(
            replay.decode(Reply::text("7")),
            Ok(Replayed::Done("7".into()))
        );
        assert_eq!(replay.decode(Reply::Int(0)), Ok(Replayed::NotFound));
        assert_eq!(replay.decode(Reply::Int(-2)), Ok(Replayed::NoSource));
    }
}
