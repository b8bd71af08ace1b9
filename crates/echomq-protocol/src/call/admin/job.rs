//! Calls on one job: removal, promotion, re-queueing and edits (delay,
//! priority, progress, data, logs).

use std::time::Duration;

use crate::call::decode::{self, Reply, ReplyError};
use crate::call::lifecycle::FinishTarget;
use crate::call::script::{Arg, ScriptCall};
use crate::job::field;
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// Which end of `wait` a re-queued job goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushSide {
    /// `LPUSH`: behind every waiting job (workers take from the tail).
    Back,
    /// `RPUSH`: next to run (a `lifo` job).
    Front,
}

impl PushSide {
    /// The side a job with `lifo` set goes to.
    pub fn for_lifo(lifo: bool) -> PushSide {
        if lifo {
            PushSide::Front
        } else {
            PushSide::Back
        }
    }

    fn command(self) -> &'static str {
        match self {
            PushSide::Back => "LPUSH",
            PushSide::Front => "RPUSH",
        }
    }
}

/// removeJob-2: removes a job (with its children unless told otherwise).
/// Answers false when the job or a child is locked (nothing removed); the
/// current iteration of a scheduler is `JobBelongsToJobScheduler`.
#[derive(Debug, Clone, Copy)]
pub struct RemoveJob<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// Remove its children too.
    pub remove_children: bool,
}

impl ScriptCall for RemoveJob<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::RemoveJob
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.job_key(self.id), &self.keys.fixed().repeat]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.id),
            Arg::flag(self.remove_children),
            Arg::str(self.keys.prefix_key()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? != 0)
    }
}

/// promote-9: moves one delayed job to wait (or prioritized) now. Not
/// delayed is `JobNotInState`.
#[derive(Debug, Clone, Copy)]
pub struct Promote<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
}

impl ScriptCall for Promote<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::Promote
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().delayed,
            &k.fixed().wait,
            &k.fixed().paused,
            &k.fixed().meta,
            &k.fixed().prioritized,
            &k.fixed().active,
            &k.fixed().pc,
            &k.fixed().events,
            &k.fixed().marker,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.keys.prefix_key()), Arg::str(self.id)]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|_| ())
    }
}

/// reprocessJob-9: moves a completed or failed job back to wait, or to
/// prioritized when it has a priority (`job.retry()` in Node). Missing is
/// `JobNotExist`, another state `JobNotInState`.
#[derive(Debug, Clone, Copy)]
pub struct ReprocessJob<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The set the job is expected in.
    pub from: FinishTarget,
    /// Where it goes in `wait`.
    pub push: PushSide,
    /// Reset `atm`.
    pub reset_attempts_made: bool,
    /// Reset `ats`.
    pub reset_attempts_started: bool,
}

impl ScriptCall for ReprocessJob<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::ReprocessJob
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            k.job_key(self.id),
            &k.fixed().events,
            k.key(self.from.as_str()),
            &k.fixed().wait,
            &k.fixed().meta,
            &k.fixed().active,
            &k.fixed().marker,
            &k.fixed().prioritized,
            &k.fixed().pc,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let result_field = match self.from {
            FinishTarget::Completed => field::RETURN_VALUE,
            FinishTarget::Failed => field::FAILED_REASON,
        };
        vec![
            Arg::str(self.id),
            Arg::str(self.push.command()),
            Arg::str(result_field),
            Arg::str(self.from.as_str()),
            Arg::flag(self.reset_attempts_made),
            Arg::flag(self.reset_attempts_started),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|_| ())
    }
}

/// changeDelay-4: a new delay, counted from `now_ms`, for a delayed job.
#[derive(Debug, Clone, Copy)]
pub struct ChangeDelay<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The new delay.
    pub delay: Duration,
    /// The time the delay counts from, ms.
    pub now_ms: u64,
}

impl ScriptCall for ChangeDelay<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::ChangeDelay
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().delayed,
            &k.fixed().meta,
            &k.fixed().marker,
            &k.fixed().events
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::ms(self.delay),
            Arg::int(self.now_ms),
            Arg::str(self.id),
            Arg::text(self.keys.job(self.id)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|_| ())
    }
}

/// changePriority-7: a new priority; a waiting or prioritized job moves to
/// its new place.
#[derive(Debug, Clone, Copy)]
pub struct ChangePriority<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The new priority (0 = none).
    pub priority: i64,
    /// Front of its priority (or of `wait`).
    pub lifo: bool,
}

impl ScriptCall for ChangePriority<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::ChangePriority
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().wait,
            &k.fixed().paused,
            &k.fixed().meta,
            &k.fixed().prioritized,
            &k.fixed().active,
            &k.fixed().pc,
            &k.fixed().marker,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::int(self.priority),
            Arg::str(self.keys.prefix_key()),
            Arg::str(self.id),
            Arg::flag(self.lifo),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|_| ())
    }
}

/// updateProgress-3: stores progress (JSON text) and emits `progress`.
#[derive(Debug, Clone, Copy)]
pub struct UpdateProgress<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// Progress as JSON text, stored as is.
    pub progress: &'a str,
}

impl ScriptCall for UpdateProgress<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::UpdateProgress
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![k.job_key(self.id), &k.fixed().events, &k.fixed().meta]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id), Arg::str(self.progress)]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|_| ())
    }
}

/// updateData-1: replaces a job's data (JSON text, stored as is).
#[derive(Debug, Clone, Copy)]
pub struct UpdateData<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The new data as JSON text.
    pub data: &'a str,
}

impl ScriptCall for UpdateData<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::UpdateData
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.job_key(self.id)]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.data)]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|_| ())
    }
}

/// addLog-2: appends a log line, keeping the newest `keep_logs` when given;
/// answers the number of lines kept.
#[derive(Debug, Clone, Copy)]
pub struct AddLog<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The line.
    pub line: &'a str,
    /// How many lines to keep.
    pub keep_logs: Option<u64>,
}

impl ScriptCall for AddLog<'_> {
    type Output = u64;

    fn script(&self) -> ScriptId {
        ScriptId::AddLog
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.job_key(self.id), self.keys.logs(self.id)]
    }

    fn args(&self) -> Vec<Arg> {
        let keep = self.keep_logs.map(Arg::int).unwrap_or_else(Arg::empty);
        vec![Arg::str(self.id), Arg::str(self.line), keep]
    }

    fn decode(&self, reply: Reply) -> Result<u64, ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|n| n as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;
    use crate::reply::ScriptErrorCode;

    fn k() -> QueueKeys {
        QueueKeys::new("emq", "q").unwrap()
    }

    #[test]
    fn remove_job() {
        let k = k();
        let r = RemoveJob {
            keys: &k,
            id: "5",
            remove_children: true,
        };
        assert_eq!(argv_text(&r), ["5", "1", "emq:q:"]);
        assert_eq!(r.keys(), ["emq:q:5", "emq:q:repeat"]);
        assert!(!r.decode(Reply::Int(0)).unwrap());
        assert_eq!(
            r.decode(Reply::Int(-8)).unwrap_err().code(),
            Some(ScriptErrorCode::JobBelongsToJobScheduler)
        );
    }

    #[test]
    fn promote_and_reprocess() {
        let k = k();
        let p = Promote { keys: &k, id: "4" };
        assert_eq!(argv_text(&p), ["emq:q:", "4"]);
        assert_eq!(p.keys()[6], "emq:q:pc");
        assert_eq!(
            p.decode(Reply::Int(-3)).unwrap_err().code(),
            Some(ScriptErrorCode::JobNotInState)
        );

        let r = ReprocessJob {
            keys: &k,
            id: "2",
            from: FinishTarget::Failed,
            push: PushSide::for_lifo(true),
            reset_attempts_made: true,
            reset_attempts_started: false,
        };
        assert_eq!(
            argv_text(&r),
            ["2", "RPUSH", "failedReason", "failed", "1", "0"]
        );
        assert_eq!(r.keys()[..3], ["emq:q:2", "emq:q:events", "emq:q:failed"]);
        // 6.7.0's KEYS: no `paused`; prioritized and pc for a job with a priority.
        assert_eq!(
            r.keys()[3..],
            [
                "emq:q:wait",
                "emq:q:meta",
                "emq:q:active",
                "emq:q:marker",
                "emq:q:prioritized",
                "emq:q:pc"
            ]
        );
        let c = ReprocessJob {
            from: FinishTarget::Completed,
            push: PushSide::for_lifo(false),
            ..r
        };
        assert_eq!(
            argv_text(&c),
            ["2", "LPUSH", "returnvalue", "completed", "1", "0"]
        );
        assert_eq!(c.keys()[2], "emq:q:completed");
    }

    #[test]
    fn job_edits() {
        let k = k();
        let d = ChangeDelay {
            keys: &k,
            id: "1",
            delay: Duration::from_millis(1500),
            now_ms: 10,
        };
        assert_eq!(argv_text(&d), ["1500", "10", "1", "emq:q:1"]);
        assert_eq!(d.keys()[3], "emq:q:events");
        assert_eq!(
            d.decode(Reply::Int(-1)).unwrap_err().code(),
            Some(ScriptErrorCode::JobNotExist)
        );

        let p = ChangePriority {
            keys: &k,
            id: "1",
            priority: 4,
            lifo: true,
        };
        assert_eq!(argv_text(&p), ["4", "emq:q:", "1", "1"]);
        assert_eq!(p.keys()[5], "emq:q:pc");

        let u = UpdateProgress {
            keys: &k,
            id: "1",
            progress: r#"{"p":1}"#,
        };
        assert_eq!(argv_text(&u), ["1", r#"{"p":1}"#]);
        assert_eq!(u.keys(), ["emq:q:1", "emq:q:events", "emq:q:meta"]);

        let data = UpdateData {
            keys: &k,
            id: "1",
            data: "[]",
        };
        assert_eq!(argv_text(&data), ["[]"]);
        assert_eq!(data.keys(), ["emq:q:1"]);

        let l = AddLog {
            keys: &k,
            id: "1",
            line: "hi",
            keep_logs: Some(2),
        };
        assert_eq!(argv_text(&l), ["1", "hi", "2"]);
        assert_eq!(l.keys(), ["emq:q:1", "emq:q:1:logs"]);
        let unbounded = AddLog {
            keep_logs: None,
            ..l
        };
        assert_eq!(argv_text(&unbounded), ["1", "hi", ""]);
        assert_eq!(l.decode(Reply::Int(2)).unwrap(), 2);
    }
}
