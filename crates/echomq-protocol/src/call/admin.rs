//! Calls of the producer and admin side of a queue (the `Queue` handle):
//! reads (state, counts, ranges, isFinished), queue-wide commands (pause,
//! drain, obliterate, clean, bulk moves to wait) and per-job edits.

use std::time::Duration;

use super::decode::{self, Reply};
use super::{Arg, ReplyError, ScriptCall};
use crate::job::field;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;
use crate::FinishTarget;

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

/// Order of the ids a range read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOrder {
    /// Oldest first.
    Ascending,
    /// Newest first.
    Descending,
}

/// getStateV2-8: the state of one job, as the state's name
/// (`completed`, `waiting`, `waiting-children`, … or `unknown`).
#[derive(Debug, Clone, Copy)]
pub struct GetState<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
}

impl ScriptCall for GetState<'_> {
    type Output = String;

    fn script(&self) -> ScriptId {
        ScriptId::GetStateV2
    }

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.completed(),
            k.failed(),
            k.delayed(),
            k.active(),
            k.wait(),
            k.paused(),
            k.waiting_children(),
            k.prioritized(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id)]
    }

    fn decode(&self, reply: Reply) -> Result<String, ReplyError> {
        decode::text(self.script(), &reply)
    }
}

/// getCounts-1: the size of each named state, in order. States are key
/// suffixes (`wait`, `active`, `delayed`, …): the script counts any sorted
/// set of the queue, so the names are not a closed set.
#[derive(Debug, Clone, Copy)]
pub struct GetCounts<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Key suffixes of the states.
    pub states: &'a [&'a str],
}

impl ScriptCall for GetCounts<'_> {
    type Output = Vec<u64>;

    fn script(&self) -> ScriptId {
        ScriptId::GetCounts
    }

    fn keys(&self) -> Vec<String> {
        vec![self.keys.prefix_key().to_owned()]
    }

    fn args(&self) -> Vec<Arg> {
        self.states.iter().map(|s| Arg::str(s)).collect()
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
        if counts.len() != self.states.len() {
            return Err(ReplyError::shape(script, "one count per state expected"));
        }
        Ok(counts)
    }
}

/// getRanges-1: ids of each named state in `[start, end]`, one list per
/// state. List states come back head first even when ascending (the caller
/// reverses them), as the script reads them.
#[derive(Debug, Clone, Copy)]
pub struct GetRanges<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// First index.
    pub start: i64,
    /// Last index, inclusive (negative from the end).
    pub end: i64,
    /// Order.
    pub order: RangeOrder,
    /// Key suffixes of the states.
    pub states: &'a [&'a str],
}

impl ScriptCall for GetRanges<'_> {
    type Output = Vec<Vec<String>>;

    fn script(&self) -> ScriptId {
        ScriptId::GetRanges
    }

    fn keys(&self) -> Vec<String> {
        vec![self.keys.prefix_key().to_owned()]
    }

    fn args(&self) -> Vec<Arg> {
        let mut args = vec![
            Arg::int(self.start),
            Arg::int(self.end),
            Arg::flag(self.order == RangeOrder::Ascending),
        ];
        args.extend(self.states.iter().map(|s| Arg::str(s)));
        args
    }

    fn decode(&self, reply: Reply) -> Result<Vec<Vec<String>>, ReplyError> {
        let script = self.script();
        let per_state = decode::array(script, reply)?;
        if per_state.len() != self.states.len() {
            return Err(ReplyError::shape(script, "one range per state expected"));
        }
        per_state
            .into_iter()
            .map(|ids| decode::strings(script, ids))
            .collect()
    }
}

/// What isFinished found, with the raw stored text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishedReply {
    /// Not in `completed` nor `failed`.
    No,
    /// Completed; the `returnvalue` field (JSON text).
    Completed(String),
    /// Failed; the `failedReason` field.
    Failed(String),
}

/// isFinished-3, asking for the value: whether a job completed or failed.
/// A missing job is `JobNotExist`.
#[derive(Debug, Clone, Copy)]
pub struct IsFinished<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
}

impl ScriptCall for IsFinished<'_> {
    type Output = FinishedReply;

    fn script(&self) -> ScriptId {
        ScriptId::IsFinished
    }

    fn keys(&self) -> Vec<String> {
        vec![
            self.keys.completed(),
            self.keys.failed(),
            self.keys.job(self.id),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.id), Arg::flag(true)]
    }

    fn decode(&self, reply: Reply) -> Result<FinishedReply, ReplyError> {
        let script = self.script();
        let items = decode::array(script, reply)?;
        let code = items
            .first()
            .and_then(Reply::as_i64)
            .ok_or_else(|| ReplyError::shape(script, "expected [code, value]"))?;
        let value = || items.get(1).and_then(Reply::to_text).unwrap_or_default();
        match decode::code(script, code)? {
            0 => Ok(FinishedReply::No),
            1 => Ok(FinishedReply::Completed(value())),
            2 => Ok(FinishedReply::Failed(value())),
            n => Err(ReplyError::shape(script, format!("unknown state {n}"))),
        }
    }
}

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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        let (from, to) = match self.action {
            PauseAction::Pause => (k.wait(), k.paused()),
            PauseAction::Resume => (k.paused(), k.wait()),
        };
        vec![
            from,
            to,
            k.meta(),
            k.prioritized(),
            k.events(),
            k.delayed(),
            k.marker(),
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.wait(),
            k.paused(),
            k.delayed(),
            k.prioritized(),
            k.repeat(),
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

    fn keys(&self) -> Vec<String> {
        vec![self.keys.meta(), self.keys.prefix_key().to_owned()]
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

    fn keys(&self) -> Vec<String> {
        vec![self.keys.job(self.id), self.keys.repeat()]
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.delayed(),
            k.wait(),
            k.paused(),
            k.meta(),
            k.prioritized(),
            k.active(),
            k.pc(),
            k.events(),
            k.marker(),
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.keys.prefix_key()), Arg::str(self.id)]
    }

    fn decode(&self, reply: Reply) -> Result<(), ReplyError> {
        decode::int_or_code(self.script(), &reply).map(|_| ())
    }
}

/// reprocessJob-8: moves a completed or failed job back to wait
/// (`job.retry()` in Node). Missing is `JobNotExist`, another state
/// `JobNotInState`.
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.job(self.id),
            k.events(),
            k.key(self.from.as_str()),
            k.wait(),
            k.meta(),
            k.paused(),
            k.active(),
            k.marker(),
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.prefix_key().to_owned(),
            k.events(),
            k.key(self.from.key_suffix()),
            k.wait(),
            k.paused(),
            k.meta(),
            k.active(),
            k.marker(),
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![k.key(self.state), k.events(), k.repeat()]
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![k.delayed(), k.meta(), k.marker(), k.events()]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::text(self.delay.as_millis().to_string()),
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![
            k.wait(),
            k.paused(),
            k.meta(),
            k.prioritized(),
            k.active(),
            k.pc(),
            k.marker(),
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

    fn keys(&self) -> Vec<String> {
        let k = self.keys;
        vec![k.job(self.id), k.events(), k.meta()]
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

    fn keys(&self) -> Vec<String> {
        vec![self.keys.job(self.id)]
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

    fn keys(&self) -> Vec<String> {
        vec![self.keys.job(self.id), self.keys.logs(self.id)]
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
    use crate::call::argv_text;
    use crate::reply::ScriptErrorCode;

    fn k() -> QueueKeys {
        QueueKeys::new("emq", "q").unwrap()
    }

    #[test]
    fn get_state() {
        let k = k();
        let call = GetState { keys: &k, id: "7" };
        assert_eq!(argv_text(&call), ["7"]);
        assert_eq!(call.keys()[6], "emq:q:waiting-children");
        assert_eq!(call.decode(Reply::text("active")).unwrap(), "active");
    }

    #[test]
    fn get_counts_and_ranges() {
        let k = k();
        let states = ["wait", "delayed"];
        let c = GetCounts {
            keys: &k,
            states: &states,
        };
        assert_eq!(argv_text(&c), ["wait", "delayed"]);
        assert_eq!(c.keys(), ["emq:q:"]);
        assert_eq!(
            c.decode(Reply::Array(vec![Reply::Int(2), Reply::text("3")]))
                .unwrap(),
            [2, 3]
        );
        assert!(c.decode(Reply::Array(vec![Reply::Int(2)])).is_err());

        let r = GetRanges {
            keys: &k,
            start: 0,
            end: -1,
            order: RangeOrder::Ascending,
            states: &states,
        };
        assert_eq!(argv_text(&r), ["0", "-1", "1", "wait", "delayed"]);
        let reply = Reply::Array(vec![
            Reply::Array(vec![Reply::text("1")]),
            Reply::Array(vec![]),
        ]);
        assert_eq!(
            r.decode(reply).unwrap(),
            vec![vec!["1".to_string()], vec![]]
        );
    }

    #[test]
    fn is_finished() {
        let k = k();
        let c = IsFinished { keys: &k, id: "3" };
        assert_eq!(argv_text(&c), ["3", "1"]);
        assert_eq!(c.keys()[2], "emq:q:3");
        let two = |n: i64, v: &str| Reply::Array(vec![Reply::Int(n), Reply::text(v)]);
        assert_eq!(
            c.decode(two(1, "{}")).unwrap(),
            FinishedReply::Completed("{}".into())
        );
        assert_eq!(
            c.decode(two(2, "bad")).unwrap(),
            FinishedReply::Failed("bad".into())
        );
        assert_eq!(
            c.decode(Reply::Array(vec![Reply::Int(0)])).unwrap(),
            FinishedReply::No
        );
        assert_eq!(
            c.decode(two(-1, "Missing key")).unwrap_err().code(),
            Some(ScriptErrorCode::JobNotExist)
        );
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
    fn drain_obliterate_remove() {
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
