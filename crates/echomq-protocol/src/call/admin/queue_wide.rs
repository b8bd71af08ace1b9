//! Queue-wide commands: pause and resume, drain, obliterate, clean, and the
//! bulk moves of finished or delayed jobs back to wait.

use crate::call::decode::{self, Reply, ReplyError};
use crate::call::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// Pausing or resuming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseAction {
    /// Workers stop taking jobs.
    Pause,
    /// Workers take jobs again.
    Resume,
}

/// pause-7: pauses or resumes the queue. Answers how many jobs of a legacy
/// `paused` list are left to migrate (resume is repeated until 0).
#[derive(Debug, Clone, Copy)]
pub struct Pause<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Pause or resume.
    pub action: PauseAction,
    /// Emit the `paused`/`resumed` event (only the first of repeated resumes does).
    pub emit_event: bool,
}

impl ScriptCall for Pause<'_> {
    type Output = u64;

    fn script(&self) -> ScriptId {
        ScriptId::Pause
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        let (from, to) = match self.action {
            PauseAction::Pause => (k.wait(), k.paused()),
            PauseAction::Resume => (k.paused(), k.wait()),
        };
        keys![
            from,
            to,
            &k.fixed().meta,
            &k.fixed().prioritized,
            &k.fixed().events,
            &k.fixed().delayed,
            &k.fixed().marker,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let action = match self.action {
            PauseAction::Pause => "paused",
            PauseAction::Resume => "resumed",
        };
        vec![Arg::str(action), Arg::flag(self.emit_event)]
    }

    fn decode(&self, reply: Reply) -> Result<u64, ReplyError> {
        if reply.is_nil() {
            return Ok(0);
        }
        decode::int_or_code(self.script(), &reply).map(|n| n as u64)
    }
}

/// drain-5: removes waiting and prioritized jobs (and delayed ones when
/// asked), sparing current scheduler iterations.
#[derive(Debug, Clone, Copy)]
pub struct Drain<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Also empty `delayed`.
    pub include_delayed: bool,
}

impl ScriptCall for Drain<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::Drain
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().wait,
            &k.fixed().paused,
            &k.fixed().delayed,
            &k.fixed().prioritized,
            &k.fixed().repeat,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::flag(self.include_delayed),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::unit(self.script(), &reply)
    }
}

/// How far one obliterate call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObliterateStep {
    /// Everything is gone.
    Done,
    /// The budget ran out: call again.
    Again,
    /// The queue is not paused; nothing was removed.
    NotPaused,
    /// Jobs are active and `force` was not given; nothing was removed.
    ActiveJobs,
}

/// obliterate-2: deletes a paused queue, at most `max_jobs` jobs per call.
#[derive(Debug, Clone, Copy)]
pub struct Obliterate<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Budget of this call.
    pub max_jobs: u32,
    /// Remove active jobs too.
    pub force: bool,
}

impl ScriptCall for Obliterate<'_> {
    type Output = ObliterateStep;

    fn script(&self) -> ScriptId {
        ScriptId::Obliterate
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().meta, &self.keys.fixed().base]
    }

    fn args(&self) -> Vec<Arg> {
        let force = if self.force {
            Arg::str("force")
        } else {
            Arg::empty()
        };
        vec![Arg::int(self.max_jobs), force]
    }

    fn decode(&self, reply: Reply) -> Result<ObliterateStep, ReplyError> {
        // Its -1 and -2 are not the shared codes (not paused, active jobs).
        match reply.as_i64() {
            Some(0) => Ok(ObliterateStep::Done),
            Some(1) => Ok(ObliterateStep::Again),
            Some(-1) => Ok(ObliterateStep::NotPaused),
            Some(-2) => Ok(ObliterateStep::ActiveJobs),
            _ => Err(ReplyError::shape(self.script(), format!("{reply:?}"))),
        }
    }
}

/// The set a bulk move to wait takes jobs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkSource {
    /// Retry failed jobs.
    Failed,
    /// Retry completed jobs.
    Completed,
    /// Promote delayed jobs.
    Delayed,
}

impl BulkSource {
    /// Key suffix (and state name) of the set.
    pub fn key_suffix(self) -> &'static str {
        match self {
            BulkSource::Failed => "failed",
            BulkSource::Completed => "completed",
            BulkSource::Delayed => "delayed",
        }
    }
}

/// moveJobsToWait-8: `LPUSH`es up to `count` jobs of a set whose score is at
/// most `until_ms` (all of them when `None`) onto `wait`, ignoring
/// priorities and `lifo`, as Node's `retryJobs`/`promoteJobs` do. Answers
/// true when `count` jobs moved, so more may be left (call again).
#[derive(Debug, Clone, Copy)]
pub struct MoveJobsToWait<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Where the jobs are.
    pub from: BulkSource,
    /// Batch size of this call.
    pub count: u64,
    /// Only jobs scored (finished or due) at or before this time, ms.
    pub until_ms: Option<u64>,
}

impl ScriptCall for MoveJobsToWait<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::MoveJobsToWait
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().base,
            &k.fixed().events,
            k.key(self.from.key_suffix()),
            &k.fixed().wait,
            &k.fixed().paused,
            &k.fixed().meta,
            &k.fixed().active,
            &k.fixed().marker,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let until = match self.until_ms {
            Some(ms) => Arg::int(ms),
            None => Arg::str("+inf"),
        };
        vec![
            Arg::int(self.count),
            until,
            Arg::str(self.from.key_suffix()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? == 1)
    }
}

/// cleanJobsInSet-3: deletes jobs of one state older than a cutoff; answers
/// the deleted ids.
#[derive(Debug, Clone, Copy)]
pub struct CleanJobsInSet<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Key suffix of the state (`completed`, `wait`, …).
    pub state: &'a str,
    /// Jobs whose time is at or before this, ms, go.
    pub cutoff_ms: u64,
    /// At most this many (0 = no limit).
    pub limit: u64,
}

impl ScriptCall for CleanJobsInSet<'_> {
    type Output = Vec<String>;

    fn script(&self) -> ScriptId {
        ScriptId::CleanJobsInSet
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![k.key(self.state), &k.fixed().events, &k.fixed().repeat]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::int(self.cutoff_ms),
            Arg::int(self.limit),
            Arg::str(self.state),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Vec<String>, ReplyError> {
        decode::strings(self.script(), reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    fn k() -> QueueKeys {
        QueueKeys::new("emq", "q").unwrap()
    }

    #[test]
    fn pause_and_resume_swap_the_first_two_keys() {
        let k = k();
        let p = Pause {
            keys: &k,
            action: PauseAction::Pause,
            emit_event: true,
        };
        assert_eq!(argv_text(&p), ["paused", "1"]);
        assert_eq!(p.keys()[..2], ["emq:q:wait", "emq:q:paused"]);
        let r = Pause {
            keys: &k,
            action: PauseAction::Resume,
            emit_event: false,
        };
        assert_eq!(argv_text(&r), ["resumed", "0"]);
        assert_eq!(r.keys()[..2], ["emq:q:paused", "emq:q:wait"]);
        assert_eq!(r.keys()[6], "emq:q:marker");
        assert_eq!(r.decode(Reply::Int(7000)).unwrap(), 7000);
    }

    #[test]
    fn drain_and_obliterate() {
        let k = k();
        let d = Drain {
            keys: &k,
            include_delayed: true,
        };
        assert_eq!(argv_text(&d), ["emq:q:", "1"]);
        assert_eq!(d.keys()[4], "emq:q:repeat");

        let o = Obliterate {
            keys: &k,
            max_jobs: 1000,
            force: false,
        };
        assert_eq!(argv_text(&o), ["1000", ""]);
        assert_eq!(o.keys(), ["emq:q:meta", "emq:q:"]);
        let forced = Obliterate { force: true, ..o };
        assert_eq!(argv_text(&forced), ["1000", "force"]);
        assert_eq!(o.decode(Reply::Int(1)).unwrap(), ObliterateStep::Again);
        assert_eq!(o.decode(Reply::Int(-1)).unwrap(), ObliterateStep::NotPaused);
        assert_eq!(
            o.decode(Reply::Int(-2)).unwrap(),
            ObliterateStep::ActiveJobs
        );
        assert!(o.decode(Reply::Int(-3)).is_err());
    }

    #[test]
    fn move_jobs_to_wait() {
        let k = k();
        let m = MoveJobsToWait {
            keys: &k,
            from: BulkSource::Failed,
            count: 1000,
            until_ms: Some(1_700_000_000_000),
        };
        assert_eq!(argv_text(&m), ["1000", "1700000000000", "failed"]);
        assert_eq!(
            m.keys(),
            [
                "emq:q:",
                "emq:q:events",
                "emq:q:failed",
                "emq:q:wait",
                "emq:q:paused",
                "emq:q:meta",
                "emq:q:active",
                "emq:q:marker"
            ]
        );
        let p = MoveJobsToWait {
            from: BulkSource::Delayed,
            until_ms: None,
            ..m
        };
        assert_eq!(argv_text(&p), ["1000", "+inf", "delayed"]);
        assert!(p.decode(Reply::Int(1)).unwrap());
        assert!(!p.decode(Reply::Int(0)).unwrap());
    }

    #[test]
    fn clean() {
        let k = k();
        let c = CleanJobsInSet {
            keys: &k,
            state: "completed",
            cutoff_ms: 99,
            limit: 0,
        };
        assert_eq!(argv_text(&c), ["emq:q:", "99", "0", "completed"]);
        assert_eq!(
            c.keys(),
            ["emq:q:completed", "emq:q:events", "emq:q:repeat"]
        );
        assert_eq!(
            c.decode(Reply::Array(vec![Reply::text("1")])).unwrap(),
            ["1"]
        );
    }
}
