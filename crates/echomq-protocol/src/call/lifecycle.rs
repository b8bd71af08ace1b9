//! Calls of a job's life in a worker: taking it (moveToActive), letting it go
//! (moveToFinished, moveToDelayed, retryJob, moveJobFromActiveToWait) and
//! keeping its lock (extendLock, extendLocks, releaseLock).
//!
//! The replies are decoded here once: the next-job reply into [`NextJob`], the
//! transitions into a [`Verdict`] whose refusals are the negative codes a
//! worker acts on (docs/protocol.md, L2 — scripts).

use std::time::Duration;

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::job::{self, field, DecodeError, Job};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::packing::{pack_fields, pack_strings, FetchOpts, FinishOpts};
use crate::reply::ScriptErrorCode;
use crate::scripts::ScriptId;

/// A point in time, ms since the Unix epoch, as the scripts store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EpochMs(pub u64);

/// Which set a finishing job goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishTarget {
    /// `{P}completed`.
    Completed,
    /// `{P}failed`.
    Failed,
}

impl FinishTarget {
    /// `completed` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishTarget::Completed => "completed",
            FinishTarget::Failed => "failed",
        }
    }

    /// The job-hash field the finishing value is written to.
    pub fn value_field(self) -> &'static str {
        match self {
            FinishTarget::Completed => field::RETURN_VALUE,
            FinishTarget::Failed => field::FAILED_REASON,
        }
    }
}

/// The next-job reply `[jobData, jobId, rateLimitDelay, delayUntil]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextJob {
    /// A job was moved to `active` and locked with the caller's token.
    Job {
        /// Its id.
        id: String,
        /// Its hash, as read right after the take.
        fields: JobFields,
    },
    /// Rate limited: nothing may be taken for this long.
    RateLimited(Duration),
    /// Nothing ready; the earliest delayed job is due then.
    DelayedUntil(EpochMs),
    /// Nothing to do now (empty, paused or maxed).
    Nothing,
}

impl NextJob {
    pub(crate) fn decode(script: ScriptId, reply: Reply) -> Result<NextJob, ReplyError> {
        let mut items = decode::array(script, reply)?.into_iter();
        let (Some(data), id) = (items.next(), items.next()) else {
            return Ok(NextJob::Nothing);
        };
        let limit = items.next().and_then(|r| r.as_i64()).unwrap_or(0);
        let delay_until = items.next().and_then(|r| r.as_i64()).unwrap_or(0);
        if let Reply::Array(_) = data {
            let id = id.ok_or_else(|| ReplyError::shape(script, "job without an id"))?;
            let id = decode::text(script, &id)?;
            let fields = JobFields::decode(script, data)?;
            return Ok(NextJob::Job { id, fields });
        }
        Ok(if limit > 0 {
            NextJob::RateLimited(Duration::from_millis(limit as u64))
        } else if delay_until > 0 {
            NextJob::DelayedUntil(EpochMs(delay_until as u64))
        } else {
            NextJob::Nothing
        })
    }
}

/// A taken job's hash as the reply carried it (HGETALL's order): every
/// field name and value in one text buffer, read with one UTF-8 check each
/// and no allocation per entry. Every job a worker takes is decoded from
/// here ([`JobFields::to_job`]).
///
/// An entry whose bytes are not UTF-8 (a foreign writer's) is kept as its
/// lossy text and noted: [`JobFields::to_job`] refuses it when it is a
/// value the job is read from, so the worker can fail that job by its id
/// instead of losing the whole reply (docs/reliability.md, F31).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct JobFields {
    text: String,
    /// Where each entry ends in `text`; entries alternate name, value.
    ends: Vec<usize>,
    /// Entries that were not UTF-8 (empty for every hash a client wrote as text).
    not_text: Vec<usize>,
}

impl JobFields {
    /// Reads a flat field/value array as [`decode::pairs`] does, with the
    /// same errors (the first entry that is not a string or a number, then
    /// an odd count), except that bytes which are not UTF-8 are kept lossily
    /// and noted rather than refused.
    fn decode(script: ScriptId, reply: Reply) -> Result<JobFields, ReplyError> {
        let items = decode::array(script, reply)?;
        let size = items
            .iter()
            .map(|i| match i {
                Reply::Bulk(b) => b.len(),
                _ => 20,
            })
            .sum();
        let mut fields = JobFields {
            text: String::with_capacity(size),
            ends: Vec::with_capacity(items.len()),
            not_text: Vec::new(),
        };
        for item in &items {
            match item {
                Reply::Bulk(b) => match std::str::from_utf8(b) {
                    Ok(s) => fields.text.push_str(s),
                    Err(_) => {
                        fields.not_text.push(fields.ends.len());
                        fields.text.push_str(&String::from_utf8_lossy(b));
                    }
                },
                other => fields.text.push_str(&decode::text(script, other)?),
            }
            fields.ends.push(fields.text.len());
        }
        if items.len() % 2 != 0 {
            return Err(ReplyError::shape(script, "odd field/value list"));
        }
        Ok(fields)
    }

    /// Decodes the job (as [`crate::Job::from_fields`] over
    /// [`JobFields::iter`]). A value that was not UTF-8 is an
    /// [`DecodeError::InvalidField`] in a field read strictly or naming a
    /// key (of several, the first in the job hash's field order, whatever
    /// order HGETALL gave); elsewhere it reads as its lossy text.
    pub fn to_job(&self, id: &str) -> Result<Job, DecodeError> {
        let mut refused: Option<(usize, &'static str)> = None;
        for &at in &self.not_text {
            // Names are never refused: one that is not text is no field a
            // job is read from.
            if at % 2 == 0 {
                continue;
            }
            let name = self.entry(at - 1);
            let Some(found) = job::exact_text_field(name) else {
                continue;
            };
            // The last value given for a field is the one read.
            let later = (at + 1..self.ends.len())
                .step_by(2)
                .any(|n| self.entry(n) == name);
            if !later && refused.is_none_or(|r| found.0 < r.0) {
                refused = Some(found);
            }
        }
        if let Some((_, field)) = refused {
            return Err(DecodeError::InvalidField {
                id: id.to_owned(),
                field,
                reason: "not UTF-8 text".into(),
            });
        }
        Job::from_fields(id, self.iter())
    }

    fn entry(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..self.ends[i]).unwrap_or_default()
    }

    /// The (field, value) pairs, borrowed.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        (0..self.ends.len() / 2).map(move |p| (self.entry(2 * p), self.entry(2 * p + 1)))
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    /// True when the hash had no field.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for JobFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut fields = JobFields::default();
        for (k, v) in pairs {
            fields.text.push_str(k.as_ref());
            fields.ends.push(fields.text.len());
            fields.text.push_str(v.as_ref());
            fields.ends.push(fields.text.len());
        }
        fields
    }
}

impl IntoIterator for JobFields {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    /// Owned pairs, for code that builds its own map.
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl std::fmt::Debug for JobFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Why a transition out of `active` changed nothing (or only the lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `-1`: the job hash is gone.
    Missing,
    /// `-2` (no lock) or `-6` (another token): the caller no longer owns the job.
    LockLost(ScriptErrorCode),
    /// `-3`: the job was not in `active`; its lock was already released.
    NotActive,
    /// `-4`: completion refused, the job still has pending children.
    PendingChildren,
    /// `-9`: completion refused, the job has failed children.
    FailedChildren,
}

impl Refusal {
    /// The refusal for a script code; other codes are not refusals.
    fn from_code(code: ScriptErrorCode) -> Option<Refusal> {
        use ScriptErrorCode::*;
        Some(match code {
            JobNotExist => Refusal::Missing,
            JobLockNotExist | JobLockMismatch => Refusal::LockLost(code),
            JobNotInState => Refusal::NotActive,
            JobPendingChildren => Refusal::PendingChildren,
            JobHasFailedChildren => Refusal::FailedChildren,
            _ => return None,
        })
    }

    /// The code on the wire.
    pub fn code(self) -> ScriptErrorCode {
        match self {
            Refusal::Missing => ScriptErrorCode::JobNotExist,
            Refusal::LockLost(code) => code,
            Refusal::NotActive => ScriptErrorCode::JobNotInState,
            Refusal::PendingChildren => ScriptErrorCode::JobPendingChildren,
            Refusal::FailedChildren => ScriptErrorCode::JobHasFailedChildren,
        }
    }

    /// Whether the job is still held afterwards (refused before the lock).
    pub fn keeps_lock(self) -> bool {
        matches!(self, Refusal::PendingChildren | Refusal::FailedChildren)
    }
}

/// What a transition script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    /// The job left `active`; `T` is what the reply adds.
    Done(T),
    /// One of the refusals.
    Refused(Refusal),
}

impl<T> Verdict<T> {
    /// The same verdict with the done value mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Verdict<U> {
        match self {
            Verdict::Done(t) => Verdict::Done(f(t)),
            Verdict::Refused(r) => Verdict::Refused(r),
        }
    }
}

/// A transition reply: `0` (or nil) is done, a negative code a refusal or an
/// error, an array the next-job reply of fetch-next.
pub(crate) fn verdict(
    script: ScriptId,
    reply: Reply,
) -> Result<Verdict<Option<NextJob>>, ReplyError> {
    if let Reply::Array(_) = reply {
        return Ok(Verdict::Done(Some(NextJob::decode(script, reply)?)));
    }
    if reply.is_nil() {
        return Ok(Verdict::Done(None));
    }
    match decode::int_or_code(script, &reply) {
        Ok(_) => Ok(Verdict::Done(None)),
        Err(e) => match e.code().and_then(Refusal::from_code) {
            Some(refusal) => Ok(Verdict::Refused(refusal)),
            None => Err(e),
        },
    }
}

/// Fields written to the job hash right after the lock check
/// (FieldsToUpdate); `""` on the wire when empty.
fn fields_arg(fields: &[(&str, String)]) -> Arg {
    Arg::packed_or_empty(pack_fields(fields))
}

/// moveToActive-11: take the next job, locked with the FetchOpts token.
#[derive(Debug, Clone)]
pub struct MoveToActive<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Now: `processedOn` and the promotion cut-off.
    pub now: EpochMs,
    /// Token, lock duration, limiter, worker name.
    pub fetch: FetchOpts<'a>,
}

impl MoveToActive<'_> {
    /// The KEYS of moveToActive-11 for queue `k` (they do not depend on the
    /// arguments), for code that still sends the call by position.
    pub fn key_list(k: &QueueKeys) -> Vec<Key> {
        let f = k.fixed();
        keys![
            &f.wait,
            &f.active,
            &f.prioritized,
            &f.events,
            &f.stalled,
            &f.limiter,
            &f.delayed,
            &f.paused,
            &f.meta,
            &f.pc,
            &f.marker,
        ]
    }
}

impl ScriptCall for MoveToActive<'_> {
    type Output = NextJob;

    fn script(&self) -> ScriptId {
        ScriptId::MoveToActive
    }

    fn keys(&self) -> Vec<Key> {
        MoveToActive::key_list(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::key(&self.keys.fixed().base),
            Arg::int(self.now.0),
            Arg::packed(self.fetch.pack()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<NextJob, ReplyError> {
        NextJob::decode(self.script(), reply)
    }
}

/// moveToFinished-14: complete or finally fail an active job, optionally
/// taking the next one (`fetch_next`) under the same token.
#[derive(Debug, Clone)]
pub struct MoveToFinished<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// Now: `finishedOn` and the set score.
    pub now: EpochMs,
    /// Completed or failed.
    pub target: FinishTarget,
    /// The return value as JSON (completed) or the failure message (failed).
    pub value: &'a str,
    /// Take the next job in the same call.
    pub fetch_next: bool,
    /// Token, retention, attempts, metrics, lock duration of a next job.
    pub opts: FinishOpts<'a>,
    /// Fields to write first (`stacktrace`, …).
    pub fields: &'a [(&'a str, String)],
}

impl ScriptCall for MoveToFinished<'_> {
    type Output = Verdict<Option<NextJob>>;

    fn script(&self) -> ScriptId {
        ScriptId::MoveToFinished
    }

    fn keys(&self) -> Vec<Key> {
        let f = self.keys.fixed();
        let (set, metrics) = match self.target {
            FinishTarget::Completed => (&f.completed, &f.metrics_completed),
            FinishTarget::Failed => (&f.failed, &f.metrics_failed),
        };
        keys![
            &f.wait,
            &f.active,
            &f.prioritized,
            &f.events,
            &f.stalled,
            &f.limiter,
            &f.delayed,
            &f.paused,
            &f.meta,
            &f.pc,
            set,
            self.keys.job_key(self.id),
            metrics,
            &f.marker,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.id),
            Arg::int(self.now.0),
            Arg::from_static(self.target.value_field()),
            Arg::str(self.value),
            Arg::from_static(self.target.as_str()),
            Arg::flag(self.fetch_next),
            Arg::key(&self.keys.fixed().base),
            Arg::packed(self.opts.pack()),
            fields_arg(self.fields),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        verdict(self.script(), reply)
    }
}

/// Whether a delay counts an attempt (ARGV 6 of moveToDelayed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayKind {
    /// A retry with backoff: `attemptsMade` grows.
    Retry,
    /// Asked by the processor: no attempt is counted.
    Requested,
}

/// moveToDelayed-11: park an active job in `delayed` for `delay`.
#[derive(Debug, Clone)]
pub struct MoveToDelayed<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Now; the delay counts from it.
    pub now: EpochMs,
    /// The job.
    pub id: &'a str,
    /// Its lock token.
    pub token: &'a str,
    /// How long from `now`.
    pub delay: Duration,
    /// Retry or requested delay.
    pub kind: DelayKind,
    /// Fields to write first.
    pub fields: &'a [(&'a str, String)],
    /// FetchOpts to take the next job in the same call.
    pub fetch_next: Option<FetchOpts<'a>>,
}

impl ScriptCall for MoveToDelayed<'_> {
    type Output = Verdict<Option<NextJob>>;

    fn script(&self) -> ScriptId {
        ScriptId::MoveToDelayed
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().marker,
            &k.fixed().active,
            &k.fixed().prioritized,
            &k.fixed().delayed,
            k.job_key(self.id),
            &k.fixed().events,
            &k.fixed().meta,
            &k.fixed().stalled,
            &k.fixed().wait,
            &k.fixed().limiter,
            &k.fixed().pc,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::int(self.now.0),
            Arg::str(self.id),
            Arg::str(self.token),
            Arg::ms(self.delay),
            Arg::flag(self.kind == DelayKind::Requested),
            fields_arg(self.fields),
            Arg::flag(self.fetch_next.is_some()),
            Arg::packed_or_empty(self.fetch_next.as_ref().map(FetchOpts::pack)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        verdict(self.script(), reply)
    }
}

/// Where a retried job re-enters `wait` (ARGV 3 of retryJob).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushEnd {
    /// `LPUSH`: behind the waiting jobs (the default).
    Back,
    /// `RPUSH`: next to be taken (the job has `lifo`).
    Front,
}

/// retryJob-11: put an active job back in `wait`, counting an attempt.
#[derive(Debug, Clone)]
pub struct RetryJob<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Now.
    pub now: EpochMs,
    /// LIFO or FIFO.
    pub push: PushEnd,
    /// The job.
    pub id: &'a str,
    /// Its lock token.
    pub token: &'a str,
    /// Fields to write first.
    pub fields: &'a [(&'a str, String)],
}

impl ScriptCall for RetryJob<'_> {
    type Output = Verdict<()>;

    fn script(&self) -> ScriptId {
        ScriptId::RetryJob
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().active,
            &k.fixed().wait,
            &k.fixed().paused,
            k.job_key(self.id),
            &k.fixed().meta,
            &k.fixed().events,
            &k.fixed().delayed,
            &k.fixed().prioritized,
            &k.fixed().pc,
            &k.fixed().marker,
            &k.fixed().stalled,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        let push = match self.push {
            PushEnd::Back => "LPUSH",
            PushEnd::Front => "RPUSH",
        };
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::int(self.now.0),
            Arg::str(push),
            Arg::str(self.id),
            Arg::str(self.token),
            fields_arg(self.fields),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Verdict<()>, ReplyError> {
        Ok(match verdict(self.script(), reply)? {
            Verdict::Done(None) => Verdict::Done(()),
            Verdict::Done(Some(_)) => {
                return Err(ReplyError::shape(self.script(), "unexpected array"))
            }
            Verdict::Refused(r) => Verdict::Refused(r),
        })
    }
}

/// moveJobFromActiveToWait-9: put an active job back at the front of `wait`
/// without counting an attempt (manual rate limit, close deadline). Done
/// carries the limiter's remaining window, if any.
#[derive(Debug, Clone)]
pub struct MoveJobFromActiveToWait<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// Its lock token.
    pub token: &'a str,
}

impl ScriptCall for MoveJobFromActiveToWait<'_> {
    type Output = Verdict<Option<Duration>>;

    fn script(&self) -> ScriptId {
        ScriptId::MoveJobFromActiveToWait
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        keys![
            &k.fixed().active,
            &k.fixed().wait,
            &k.fixed().stalled,
            &k.fixed().paused,
            &k.fixed().meta,
            &k.fixed().limiter,
            &k.fixed().prioritized,
            &k.fixed().marker,
            &k.fixed().events,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.id),
            Arg::str(self.token),
            Arg::text(self.keys.job(self.id)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        if reply.is_nil() {
            return Ok(Verdict::Done(None));
        }
        match decode::int_or_code(self.script(), &reply) {
            Ok(0) => Ok(Verdict::Done(None)),
            Ok(pttl) => Ok(Verdict::Done(Some(Duration::from_millis(pttl as u64)))),
            Err(e) => match e.code().and_then(Refusal::from_code) {
                Some(refusal) => Ok(Verdict::Refused(refusal)),
                None => Err(e),
            },
        }
    }
}

/// extendLock-2: renew one lock if it still holds `token`; true when renewed.
#[derive(Debug, Clone)]
pub struct ExtendLock<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The token the lock must hold.
    pub token: &'a str,
    /// The new TTL.
    pub duration: Duration,
}

impl ScriptCall for ExtendLock<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::ExtendLock
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.lock_key(self.id), &self.keys.fixed().stalled]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.token),
            Arg::ms(self.duration),
            Arg::str(self.id),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? == 1)
    }
}

/// extendLocks-1: renew a batch of locks; answers the ids whose lock was
/// missing or held another token.
#[derive(Debug, Clone)]
pub struct ExtendLocks<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// `(job id, token)` pairs.
    pub locks: &'a [(String, String)],
    /// The new TTL of each.
    pub duration: Duration,
}

impl ScriptCall for ExtendLocks<'_> {
    type Output = Vec<String>;

    fn script(&self) -> ScriptId {
        ScriptId::ExtendLocks
    }

    fn keys(&self) -> Vec<Key> {
        keys![&self.keys.fixed().stalled]
    }

    fn args(&self) -> Vec<Arg> {
        let ids: Vec<&str> = self.locks.iter().map(|(id, _)| id.as_str()).collect();
        let tokens: Vec<&str> = self.locks.iter().map(|(_, t)| t.as_str()).collect();
        vec![
            Arg::str(self.keys.prefix_key()),
            Arg::packed(pack_strings(&tokens)),
            Arg::packed(pack_strings(&ids)),
            Arg::ms(self.duration),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Vec<String>, ReplyError> {
        decode::strings(self.script(), reply)
    }
}

/// releaseLock-1: delete a lock if it holds `token`; true when deleted.
/// BullMQ ships it without calling it (transitions release the lock).
#[derive(Debug, Clone)]
pub struct ReleaseLock<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// The job.
    pub id: &'a str,
    /// The token the lock must hold.
    pub token: &'a str,
    /// Sent for compatibility; the script ignores it.
    pub duration: Duration,
}

impl ScriptCall for ReleaseLock<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::ReleaseLock
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.lock_key(self.id)]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.token), Arg::ms(self.duration)]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(decode::int_or_code(self.script(), &reply)? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_fields_read_as_pairs_do() {
        let s = ScriptId::MoveToActive;
        let bulk = |b: &'static [u8]| Reply::Bulk(bytes::Bytes::from_static(b));
        let cases = vec![
            vec![],
            vec![bulk(b"name"), bulk(b"n"), bulk(b"atm"), Reply::Int(3)],
            vec![
                bulk(b"name"),
                bulk(b"\xc3\xa9t\xc3\xa9"),
                bulk(b"d"),
                Reply::Double(1.5),
            ],
            vec![bulk(b"name")],
            vec![bulk(b"name"), Reply::Nil, bulk(b"x")],
            vec![bulk(b"a"), Reply::Array(vec![])],
        ];
        for items in cases {
            let fields = JobFields::decode(s, Reply::Array(items.clone()));
            let pairs = decode::pairs(s, Reply::Array(items.clone()));
            match (fields, pairs) {
                (Ok(f), Ok(p)) => {
                    let borrowed: Vec<(&str, &str)> =
                        p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    assert_eq!(f.iter().collect::<Vec<_>>(), borrowed);
                    assert_eq!(f.len(), p.len());
                    assert_eq!(f.clone().into_iter().collect::<Vec<_>>(), p);
                    assert_eq!(f, p.iter().cloned().collect::<JobFields>());
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "{items:?}"),
                (a, b) => panic!("{items:?}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn bytes_that_are_not_text_fail_only_the_fields_read_exactly() {
        use serde_json::Value;
        let s = ScriptId::MoveToActive;
        let bulk = |b: &'static [u8]| Reply::Bulk(bytes::Bytes::from_static(b));
        let fields = |items: Vec<Reply>| JobFields::decode(s, Reply::Array(items)).unwrap();
        // A multibyte character split across two entries is not text.
        let split = fields(vec![
            bulk(b"name"),
            bulk(b"a\xc3"),
            bulk(b"\xa9"),
            bulk(b"{}"),
        ]);
        let e = split.to_job("7").unwrap_err();
        assert_eq!(
            e,
            DecodeError::InvalidField {
                id: "7".into(),
                field: field::NAME,
                reason: "not UTF-8 text".into()
            }
        );
        assert_eq!(split.len(), 2, "kept lossily, entry by entry");
        let data = fields(vec![
            bulk(b"name"),
            bulk(b"n"),
            bulk(b"data"),
            bulk(b"\xff"),
        ]);
        assert!(matches!(
            data.to_job("1"),
            Err(DecodeError::InvalidField { field: "data", .. })
        ));
        // A foreign field, or a foreign name, of any bytes is ignored, as
        // is a value given again as text later on; lenient fields read the
        // lossy text.
        let ignored = fields(vec![
            bulk(b"name"),
            bulk(b"\xff"),
            bulk(b"x-bin"),
            bulk(b"\xfe\xff"),
            bulk(b"\xc3"),
            bulk(b"v"),
            bulk(b"name"),
            bulk(b"n"),
            bulk(b"progress"),
            bulk(b"\xff1"),
            bulk(b"failedReason"),
            bulk(b"bad \xff"),
        ]);
        let job = ignored.to_job("2").unwrap();
        assert_eq!(job.name, "n");
        assert_eq!(job.progress, Value::from("\u{fffd}1"));
        assert_eq!(job.failed_reason.as_deref(), Some("bad \u{fffd}"));
        // Of two refused fields, the first in the hash's field order.
        let both = |order: [&'static [u8]; 4]| {
            fields(order.iter().map(|b| bulk(b)).collect())
                .to_job("4")
                .unwrap_err()
        };
        let a = both([b"rjk", b"\xff", b"data", b"\xfe"]);
        let b = both([b"data", b"\xfe", b"rjk", b"\xff"]);
        assert_eq!(a, b);
        assert!(matches!(a, DecodeError::InvalidField { field: "data", .. }));
        let text = fields(vec![bulk(b"name"), bulk(b"n"), bulk(b"data"), bulk(b"[1]")]);
        assert_eq!(
            text.to_job("3"),
            Job::from_fields("3", [("name", "n"), ("data", "[1]")])
        );
    }

    use crate::call::script::argv_text;
    use crate::packing::MetricsSize;

    fn keys() -> QueueKeys {
        QueueKeys::new("emq", "q").unwrap()
    }

    fn fetch(token: &str) -> FetchOpts<'_> {
        FetchOpts {
            token,
            lock_duration: 30_000,
            limiter: None,
            name: None,
        }
    }

    fn finish_opts() -> FinishOpts<'static> {
        FinishOpts {
            token: "t",
            name: None,
            keep_jobs: None,
            limiter: None,
            lock_duration: 30_000,
            attempts: 0,
            max_metrics_size: MetricsSize::Off,
        }
    }

    fn job_reply() -> Reply {
        Reply::Array(vec![
            Reply::Array(vec![Reply::text("name"), Reply::text("n")]),
            Reply::text("7"),
            Reply::Int(0),
            Reply::Int(0),
        ])
    }

    fn zeros(limit: i64, delay: i64) -> Reply {
        Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(0),
            Reply::Int(limit),
            Reply::Int(delay),
        ])
    }

    #[test]
    fn move_to_active() {
        let k = keys();
        let call = MoveToActive {
            keys: &k,
            now: EpochMs(5),
            fetch: fetch("tok"),
        };
        let argv = argv_text(&call);
        assert_eq!(argv[..2], ["emq:q:", "5"]);
        assert_eq!(call.keys()[10], "emq:q:marker");
        assert_eq!(
            call.decode(job_reply()).unwrap(),
            NextJob::Job {
                id: "7".into(),
                fields: [("name", "n")].into_iter().collect()
            }
        );
        assert_eq!(
            call.decode(zeros(250, 0)).unwrap(),
            NextJob::RateLimited(Duration::from_millis(250))
        );
        assert_eq!(
            call.decode(zeros(0, 99)).unwrap(),
            NextJob::DelayedUntil(EpochMs(99))
        );
        assert_eq!(call.decode(zeros(0, 0)).unwrap(), NextJob::Nothing);
        assert_eq!(call.decode(Reply::Nil).unwrap(), NextJob::Nothing);
        assert!(call.decode(Reply::Int(3)).is_err());
    }

    #[test]
    fn move_to_finished() {
        let k = keys();
        let fields = [(field::STACKTRACE, "[]".to_owned())];
        let call = MoveToFinished {
            keys: &k,
            id: "7",
            now: EpochMs(10),
            target: FinishTarget::Failed,
            value: "boom",
            fetch_next: true,
            opts: finish_opts(),
            fields: &fields,
        };
        let argv = argv_text(&call);
        assert_eq!(
            argv[..7],
            ["7", "10", "failedReason", "boom", "failed", "1", "emq:q:"]
        );
        assert!(!argv[8].is_empty());
        assert_eq!(
            call.keys()[10..13],
            ["emq:q:failed", "emq:q:7", "emq:q:metrics:failed"]
        );
        let done = MoveToFinished {
            target: FinishTarget::Completed,
            fetch_next: false,
            fields: &[],
            ..call.clone()
        };
        let argv = argv_text(&done);
        assert_eq!(argv[2], "returnvalue");
        assert_eq!(argv[5], "0");
        assert_eq!(argv[8], "");
        assert_eq!(call.decode(Reply::Int(0)).unwrap(), Verdict::Done(None));
        assert!(matches!(
            call.decode(job_reply()).unwrap(),
            Verdict::Done(Some(NextJob::Job { .. }))
        ));
        for (code, refusal) in [
            (-1, Refusal::Missing),
            (-2, Refusal::LockLost(ScriptErrorCode::JobLockNotExist)),
            (-3, Refusal::NotActive),
            (-4, Refusal::PendingChildren),
            (-6, Refusal::LockLost(ScriptErrorCode::JobLockMismatch)),
            (-9, Refusal::FailedChildren),
        ] {
            assert_eq!(
                call.decode(Reply::Int(code)).unwrap(),
                Verdict::Refused(refusal)
            );
            assert_eq!(refusal.code().code(), code);
        }
        assert!(call.decode(Reply::Int(-8)).is_err());
    }

    #[test]
    fn move_to_delayed() {
        let k = keys();
        let call = MoveToDelayed {
            keys: &k,
            now: EpochMs(10),
            id: "7",
            token: "tok",
            delay: Duration::from_millis(1500),
            kind: DelayKind::Requested,
            fields: &[],
            fetch_next: None,
        };
        assert_eq!(
            argv_text(&call),
            ["emq:q:", "10", "7", "tok", "1500", "1", "", "0", ""]
        );
        assert_eq!(call.keys()[4], "emq:q:7");
        // 6.7.0's KEYS: `paused` is gone, pc is the 11th.
        assert_eq!(call.keys()[9..], ["emq:q:limiter", "emq:q:pc"]);
        let with_fetch = MoveToDelayed {
            kind: DelayKind::Retry,
            fetch_next: Some(fetch("tok")),
            ..call.clone()
        };
        let argv = argv_text(&with_fetch);
        assert_eq!(argv[5], "0");
        assert_eq!(argv[7], "1");
        assert!(!argv[8].is_empty());
        assert_eq!(
            call.decode(Reply::Int(-6)).unwrap(),
            Verdict::Refused(Refusal::LockLost(ScriptErrorCode::JobLockMismatch))
        );
    }

    #[test]
    fn retry_job() {
        let k = keys();
        let call = RetryJob {
            keys: &k,
            now: EpochMs(3),
            push: PushEnd::Front,
            id: "7",
            token: "tok",
            fields: &[],
        };
        assert_eq!(argv_text(&call), ["emq:q:", "3", "RPUSH", "7", "tok", ""]);
        assert_eq!(call.keys()[3], "emq:q:7");
        assert_eq!(call.decode(Reply::Int(0)).unwrap(), Verdict::Done(()));
        assert_eq!(
            call.decode(Reply::Int(-3)).unwrap(),
            Verdict::Refused(Refusal::NotActive)
        );
    }

    #[test]
    fn move_job_from_active_to_wait() {
        let k = keys();
        let call = MoveJobFromActiveToWait {
            keys: &k,
            id: "7",
            token: "tok",
        };
        assert_eq!(argv_text(&call), ["7", "tok", "emq:q:7"]);
        assert_eq!(call.decode(Reply::Int(0)).unwrap(), Verdict::Done(None));
        assert_eq!(
            call.decode(Reply::Int(900)).unwrap(),
            Verdict::Done(Some(Duration::from_millis(900)))
        );
        assert_eq!(
            call.decode(Reply::Int(-1)).unwrap(),
            Verdict::Refused(Refusal::Missing)
        );
    }

    #[test]
    fn lock_calls() {
        let k = keys();
        let one = ExtendLock {
            keys: &k,
            id: "7",
            token: "tok",
            duration: Duration::from_secs(30),
        };
        assert_eq!(argv_text(&one), ["tok", "30000", "7"]);
        assert_eq!(one.keys(), ["emq:q:7:lock", "emq:q:stalled"]);
        assert!(one.decode(Reply::Int(1)).unwrap());
        assert!(!one.decode(Reply::Int(0)).unwrap());
        let locks = [("1".to_owned(), "a".to_owned())];
        let many = ExtendLocks {
            keys: &k,
            locks: &locks,
            duration: Duration::from_secs(30),
        };
        let argv = argv_text(&many);
        assert_eq!(argv[0], "emq:q:");
        assert_eq!(argv[3], "30000");
        assert_eq!(
            many.decode(Reply::Array(vec![Reply::text("1")])).unwrap(),
            ["1"]
        );
        let release = ReleaseLock {
            keys: &k,
            id: "7",
            token: "tok",
            duration: Duration::from_secs(30),
        };
        assert_eq!(argv_text(&release), ["tok", "30000"]);
        assert!(release.decode(Reply::Int(1)).unwrap());
    }
}
