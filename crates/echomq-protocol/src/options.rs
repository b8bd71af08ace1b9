//! Job options: the typed public form and BullMQ's stored form (docs/protocol.md §Job options).
//!
//! The stored form is what the add scripts receive as msgpack and keep as the
//! job's `opts` field (`cjson.encode` of it). A few options travel under short
//! names (`kl`, `de`, `fpof`, …); everything else keeps its public name, and
//! options this crate does not know are carried through unchanged, so a job
//! written by a newer BullMQ keeps its options when EchoMQ touches it.

use serde_json::{Map, Value};

use crate::group::GroupOptions;
use crate::validate::{validate_job_id, ValidationError, MAX_PRIORITY};

/// How long to wait before a failed job is retried (docs/protocol.md §Failures and backoff).
#[derive(Clone, Debug, PartialEq)]
pub enum Backoff {
    /// The same delay before every retry.
    Fixed {
        /// Delay in milliseconds.
        delay: u64,
        /// Fraction of the delay (0..=1) that is randomised.
        jitter: Option<f64>,
    },
    /// `round(2^(n−1) × delay)` before retry `n`.
    Exponential {
        /// Base delay in milliseconds.
        delay: u64,
        /// Fraction of the delay (0..=1) that is randomised.
        jitter: Option<f64>,
    },
    /// A strategy name EchoMQ does not compute (a BullMQ custom strategy); kept
    /// as stored so that a worker that knows it can apply it.
    Custom(Value),
}

/// Retention of finished jobs (`removeOnComplete` / `removeOnFail`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeepJobs {
    /// `true`: delete the job when it finishes; `false`: keep it.
    Remove(bool),
    /// Keep the newest `n` jobs of the state.
    Count(u64),
    /// Age (seconds) and/or count limits, with `limit` deletions per finish at most.
    Policy {
        /// Delete jobs finished more than this many seconds ago.
        age: Option<u64>,
        /// Keep at most this many.
        count: Option<u64>,
        /// Most deletions per finishing call (BullMQ default 1000).
        limit: Option<u64>,
    },
}

impl KeepJobs {
    /// The stored option value.
    fn to_value(&self) -> Value {
        match self {
            KeepJobs::Remove(b) => Value::Bool(*b),
            KeepJobs::Count(n) => Value::from(*n),
            KeepJobs::Policy { age, count, limit } => {
                let mut m = Map::new();
                if let Some(a) = age {
                    m.insert("age".into(), Value::from(*a));
                }
                if let Some(c) = count {
                    m.insert("count".into(), Value::from(*c));
                }
                if let Some(l) = limit {
                    m.insert("limit".into(), Value::from(*l));
                }
                Value::Object(m)
            }
        }
    }

    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(KeepJobs::Remove(*b)),
            Value::Number(n) => n
                .as_u64()
                .map(KeepJobs::Count)
                .or(Some(KeepJobs::Remove(false))),
            Value::Object(m) => Some(KeepJobs::Policy {
                age: m.get("age").and_then(Value::as_u64),
                count: m.get("count").and_then(Value::as_u64),
                limit: m.get("limit").and_then(Value::as_u64),
            }),
            _ => None,
        }
    }

    /// The `keepJobs` map a finishing call sends (docs/protocol.md §Retention): `true` →
    /// `{count: 0}`, `false` → `{count: -1}`, `n` → `{count: n}`, policies as given.
    pub fn to_keep_jobs(option: Option<&KeepJobs>) -> Map<String, Value> {
        let mut m = Map::new();
        match option {
            None | Some(KeepJobs::Remove(false)) => {
                m.insert("count".into(), Value::from(-1));
            }
            Some(KeepJobs::Remove(true)) => {
                m.insert("count".into(), Value::from(0));
            }
            Some(KeepJobs::Count(n)) => {
                m.insert("count".into(), Value::from(*n));
            }
            Some(policy @ KeepJobs::Policy { .. }) => {
                if let Value::Object(o) = policy.to_value() {
                    m = o;
                }
            }
        }
        m
    }

    /// The `keepJobs` of a finishing call, `None` when every job is kept:
    /// FinishOpts then leaves the entry out, and nothing is built per job.
    pub fn to_finish_keep_jobs(option: Option<&KeepJobs>) -> Option<Map<String, Value>> {
        match option {
            None | Some(KeepJobs::Remove(false)) => None,
            other => Some(Self::to_keep_jobs(other)),
        }
    }
}

/// Deduplication of adds (`deduplication`, stored as `de`; docs/protocol.md §Job options).
///
/// While the key `{P}de:<id>` holds an owner job, an add with the same id is
/// dropped in favour of the owner (a `deduplicated` event). The modes are
/// BullMQ's: *simple* (no `ttl`: until the owner finishes or is removed),
/// *throttle* (`ttl`), *debounce* (`ttl` + `extend`: every dropped add restarts
/// the window), *replace* (a delayed owner is replaced by the new add), and
/// *keep last if active* (the latest add while the owner runs is kept and
/// enqueued when the owner finishes). With *reschedule* (BullMQ 6.7), a
/// dropped add moves an owner that is still delayed to the dropped add's own
/// due time.
///
/// ```
/// use echomq_protocol::{Deduplication, JobOptions};
/// use std::time::Duration;
/// let opts = JobOptions::new().deduplication(Deduplication::new("user-7").ttl(Duration::from_secs(5)).extend(true));
/// assert!(opts.validate().is_ok());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deduplication {
    /// The deduplication id; required and non-empty.
    pub id: String,
    /// Milliseconds the key lives; `None` keeps it until the owner finishes.
    pub ttl: Option<u64>,
    /// Restart the window on every dropped add (debounce).
    pub extend: bool,
    /// Replace an owner that is still delayed.
    pub replace: bool,
    /// Keep the latest add made while the owner is active, and enqueue it
    /// when the owner finishes (`keepLastIfActive`; `ttl` is then ignored).
    pub keep_last_if_active: bool,
    /// A dropped add re-times an owner that is still delayed: its `delay`
    /// becomes the add's, counted from the add's timestamp (`reschedule`).
    /// Not with `replace`, which removes such an owner instead.
    pub reschedule: bool,
}

impl Deduplication {
    /// Simple deduplication on `id`.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            ..Self::default()
        }
    }

    /// Sets `ttl` (stored in whole ms, as BullMQ).
    pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
        self.ttl = Some(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Sets `extend`.
    pub fn extend(mut self, extend: bool) -> Self {
        self.extend = extend;
        self
    }

    /// Sets `replace`.
    pub fn replace(mut self, replace: bool) -> Self {
        self.replace = replace;
        self
    }

    /// Sets `keepLastIfActive`.
    pub fn keep_last_if_active(mut self, keep: bool) -> Self {
        self.keep_last_if_active = keep;
        self
    }

    /// Sets `reschedule`.
    pub fn reschedule(mut self, reschedule: bool) -> Self {
        self.reschedule = reschedule;
        self
    }

    /// The stored `de` object: `id` first, then only the settings that are on,
    /// as a Node producer writes them.
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), Value::from(self.id.clone()));
        if let Some(t) = self.ttl {
            m.insert("ttl".into(), Value::from(t));
        }
        if self.extend {
            m.insert("extend".into(), Value::Bool(true));
        }
        if self.replace {
            m.insert("replace".into(), Value::Bool(true));
        }
        if self.keep_last_if_active {
            m.insert("keepLastIfActive".into(), Value::Bool(true));
        }
        if self.reschedule {
            m.insert("reschedule".into(), Value::Bool(true));
        }
        Value::Object(m)
    }

    /// Reads a stored `de`; `None` for anything this type cannot hold
    /// exactly (no string id, a non-numeric ttl, unknown keys, non-boolean
    /// flags), which then travels on unchanged in `extra`.
    fn from_value(v: &Value) -> Option<Self> {
        let m = v.as_object()?;
        let mut d = Deduplication::new(m.get("id")?.as_str()?);
        for (k, v) in m {
            match k.as_str() {
                "id" => {}
                "ttl" => d.ttl = Some(v.as_u64()?),
                "extend" => d.extend = v.as_bool()?,
                "replace" => d.replace = v.as_bool()?,
                "keepLastIfActive" => d.keep_last_if_active = v.as_bool()?,
                "reschedule" => d.reschedule = v.as_bool()?,
                _ => return None,
            }
        }
        // `false` flags are not written back and keys keep their order: only a
        // `de` this type writes back byte for byte is taken over.
        let back = d.to_value();
        let same_order = back.as_object().is_some_and(|b| b.keys().eq(m.keys()));
        if !same_order || back != *v {
            return None;
        }
        Some(d)
    }
}

/// The parent a job reports to: an existing job, given as its id and its
/// queue's qualified name (`<prefix>:<queue>`, e.g. `emq:orders`). Stored as
/// BullMQ stores `opts.parent`: `{"id", "queue"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentRef {
    /// The parent's id.
    pub id: String,
    /// `<prefix>:<queue>` of the parent.
    pub queue: String,
}

impl ParentRef {
    /// The parent's full job key.
    pub fn key(&self) -> String {
        format!("{}:{}", self.queue, self.id)
    }

    fn to_value(&self) -> Value {
        let mut o = Map::new();
        o.insert("id".into(), Value::from(self.id.clone()));
        o.insert("queue".into(), Value::from(self.queue.clone()));
        Value::Object(o)
    }

    fn from_value(v: &Value) -> Option<Self> {
        Some(ParentRef {
            id: v.get("id")?.as_str()?.to_owned(),
            queue: v.get("queue")?.as_str()?.to_owned(),
        })
    }
}

/// Options of one job. Every field is optional; the defaults are BullMQ's.
///
/// Build with the chained setters:
/// ```
/// use echomq_protocol::{JobOptions, Backoff};
/// let opts = JobOptions::new().attempts(3).backoff(Backoff::Exponential { delay: 1000, jitter: None });
/// assert!(opts.validate().is_ok());
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobOptions {
    /// Milliseconds before the job becomes ready (`delay`).
    pub delay: Option<i64>,
    /// 0 (none) to 2 097 151; lower runs first (`priority`).
    pub priority: Option<i64>,
    /// Run this job before the other waiting jobs (`lifo`).
    pub lifo: bool,
    /// A custom job id (`jobId`); duplicates of an existing id are not added.
    pub job_id: Option<String>,
    /// Total attempts allowed; 0 or 1 means no retry (`attempts`).
    pub attempts: Option<i64>,
    /// Delay policy between attempts (`backoff`).
    pub backoff: Option<Backoff>,
    /// Retention once completed (`removeOnComplete`).
    pub remove_on_complete: Option<KeepJobs>,
    /// Retention once finally failed (`removeOnFail`).
    pub remove_on_fail: Option<KeepJobs>,
    /// Keep only the newest `n` log lines (`keepLogs`, stored as `kl`).
    pub keep_logs: Option<u64>,
    /// Creation time override in ms (`timestamp`).
    pub timestamp: Option<u64>,
    /// Stack traces kept across attempts (`stackTraceLimit`).
    pub stack_trace_limit: Option<u64>,
    /// Producer-side limit on the serialised data, in bytes (`sizeLimit`).
    pub size_limit: Option<u64>,
    /// Deduplication of adds (`deduplication`, stored as `de`).
    pub deduplication: Option<Deduplication>,
    /// An existing job this one becomes a child of (`parent`): the parent
    /// waits for it before it runs.
    pub parent: Option<ParentRef>,
    /// What this job's final failure does to its parent (one of BullMQ's
    /// four `*OnFailure` flags, stored as `fpof`, `cpof`, `idof` or `rdof`);
    /// `None`: the parent waits on (BullMQ's default).
    pub on_failure: Option<OnChildFailure>,
    /// EchoMQ's job timeout, ms (public `timeout`, stored as `emqTimeout`):
    /// an EchoMQ worker cancels the processor past it and fails the attempt.
    /// BullMQ Node carries the key through untouched and ignores it.
    pub timeout: Option<u64>,
    /// EchoMQ's groups (public and stored `group: {id, priority}`, BullMQ
    /// Pro's name): the job runs under its group's budget (docs/groups.md).
    pub group: Option<GroupOptions>,
    /// Stored options this crate does not interpret, carried through unchanged
    /// (flows, deduplication, repeat settings, newer BullMQ options).
    pub extra: Map<String, Value>,
}

impl JobOptions {
    /// Options with every field at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `delay` from a duration.
    pub fn delay(mut self, delay: std::time::Duration) -> Self {
        self.delay = Some(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        self
    }

    /// Puts the job in a group (docs/groups.md).
    pub fn group(mut self, group: GroupOptions) -> Self {
        self.group = Some(group);
        self
    }

    /// Sets the job timeout (EchoMQ's `timeout`, stored as `emqTimeout`):
    /// an EchoMQ worker cancels the processor past it and fails the attempt
    /// with a timeout reason, retried per `attempts` and `backoff`.
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Sets `priority`.
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets `lifo`.
    pub fn lifo(mut self, lifo: bool) -> Self {
        self.lifo = lifo;
        self
    }

    /// Sets a custom job id.
    pub fn job_id(mut self, id: impl Into<String>) -> Self {
        self.job_id = Some(id.into());
        self
    }

    /// Sets `attempts`.
    pub fn attempts(mut self, attempts: i64) -> Self {
        self.attempts = Some(attempts);
        self
    }

    /// Sets `backoff`.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Sets `removeOnComplete`.
    pub fn remove_on_complete(mut self, keep: KeepJobs) -> Self {
        self.remove_on_complete = Some(keep);
        self
    }

    /// Sets `removeOnFail`.
    pub fn remove_on_fail(mut self, keep: KeepJobs) -> Self {
        self.remove_on_fail = Some(keep);
        self
    }

    /// Sets `keepLogs`.
    pub fn keep_logs(mut self, n: u64) -> Self {
        self.keep_logs = Some(n);
        self
    }

    /// Sets `timestamp`.
    pub fn timestamp(mut self, ms: u64) -> Self {
        self.timestamp = Some(ms);
        self
    }

    /// Sets `deduplication`.
    pub fn deduplication(mut self, dedup: Deduplication) -> Self {
        self.deduplication = Some(dedup);
        self
    }

    /// Sets `parent`: the job is added as a child of that existing job.
    pub fn parent(mut self, parent: ParentRef) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Sets what this job's final failure does to its parent.
    pub fn on_failure(mut self, rule: OnChildFailure) -> Self {
        self.on_failure = Some(rule);
        self
    }

    /// The parent descriptor the add scripts receive (`{id, queueKey}` and
    /// the failure flags), when the job has a parent.
    pub fn parent_descriptor(&self) -> Option<Value> {
        let p = self.parent.as_ref()?;
        let mut d = Map::new();
        d.insert("id".into(), Value::from(p.id.clone()));
        d.insert("queueKey".into(), Value::from(p.queue.clone()));
        if let Some(rule) = self.on_failure {
            d.insert(rule.short_name().into(), Value::Bool(true));
        }
        Some(Value::Object(d))
    }

    /// Checks every option's range; called by the producer before any write.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let opt = |option, reason: String| Err(ValidationError::Option { option, reason });
        if let Some(d) = self.delay {
            if d < 0 {
                return opt("delay", format!("must not be negative (got {d})"));
            }
        }
        if self.timeout == Some(0) {
            return opt("timeout", "must be at least 1 ms".into());
        }
        if let Some(g) = &self.group {
            g.validate()?;
            // Not yet combined with the paths that bypass the group's set.
            let other = if self.priority.unwrap_or(0) > 0 {
                Some("priority (use group.priority)")
            } else if self
                .deduplication
                .as_ref()
                .is_some_and(|d| d.replace || d.keep_last_if_active || d.reschedule)
            {
                // They move or re-add the owner through BullMQ's delayed set
                // and wait list, past the group.
                Some("deduplication replace, keepLastIfActive or reschedule")
            } else if self.lifo {
                Some("lifo")
            } else {
                None
            };
            if let Some(other) = other {
                return opt("group", format!("cannot be combined with {other} yet"));
            }
        }
        if let Some(p) = self.priority {
            if !(0..=MAX_PRIORITY).contains(&p) {
                return opt(
                    "priority",
                    format!("must be within 0..={MAX_PRIORITY} (got {p})"),
                );
            }
        }
        if let Some(a) = self.attempts {
            if a < 0 {
                return opt("attempts", format!("must not be negative (got {a})"));
            }
        }
        if let Some(id) = &self.job_id {
            validate_job_id(id)?;
        }
        if let Some(d) = &self.deduplication {
            if d.id.is_empty() {
                return opt("deduplication", "the id must not be empty".into());
            }
        }
        if self.extra.contains_key("debounce") {
            // BullMQ 6 refuses the option it replaced with `deduplication`.
            return opt("debounce", "removed; use deduplication instead".into());
        }
        match &self.backoff {
            Some(Backoff::Fixed { jitter, .. }) | Some(Backoff::Exponential { jitter, .. }) => {
                if let Some(j) = jitter {
                    if !(0.0..=1.0).contains(j) || j.is_nan() {
                        return opt("backoff", format!("jitter must be within 0..=1 (got {j})"));
                    }
                }
            }
            Some(Backoff::Custom(v)) if !v.is_object() => {
                return opt("backoff", "a custom backoff must be an object".into());
            }
            Some(Backoff::Custom(_)) | None => {}
        }
        Ok(())
    }

    /// The stored form (docs/protocol.md §Job options), as the add scripts receive it: `attempts`
    /// always present (0 by default), `backoff` as an object, `keepLogs` as `kl`.
    pub fn to_stored(&self) -> Map<String, Value> {
        let mut m = self.extra.clone();
        if let Some(d) = self.delay {
            m.insert("delay".into(), Value::from(d));
        }
        if let Some(p) = self.priority {
            m.insert("priority".into(), Value::from(p));
        }
        if self.lifo {
            m.insert("lifo".into(), Value::Bool(true));
        }
        if let Some(id) = &self.job_id {
            m.insert("jobId".into(), Value::from(id.clone()));
        }
        m.insert("attempts".into(), Value::from(self.attempts.unwrap_or(0)));
        if let Some(b) = &self.backoff {
            m.insert("backoff".into(), backoff_to_value(b));
        }
        if let Some(k) = &self.remove_on_complete {
            m.insert("removeOnComplete".into(), k.to_value());
        }
        if let Some(k) = &self.remove_on_fail {
            m.insert("removeOnFail".into(), k.to_value());
        }
        if let Some(k) = self.keep_logs {
            m.insert("kl".into(), Value::from(k));
        }
        if let Some(t) = self.timestamp {
            m.insert("timestamp".into(), Value::from(t));
        }
        if let Some(s) = self.stack_trace_limit {
            m.insert("stackTraceLimit".into(), Value::from(s));
        }
        if let Some(s) = self.size_limit {
            m.insert("sizeLimit".into(), Value::from(s));
        }
        if let Some(d) = &self.deduplication {
            m.insert("de".into(), d.to_value());
        }
        if let Some(t) = self.timeout {
            m.insert(TIMEOUT_KEY.into(), Value::from(t));
        }
        if let Some(g) = &self.group {
            m.insert("group".into(), g.to_value());
        }
        // After the others, in the order BullMQ's flow producer leaves them.
        if let Some(rule) = self.on_failure {
            m.insert(rule.short_name().into(), Value::Bool(true));
        }
        if let Some(p) = &self.parent {
            m.insert("parent".into(), p.to_value());
        }
        m
    }

    /// Reads the stored form back, tolerating what other clients write: a
    /// numeric `backoff`, missing `attempts`, unknown keys (kept in `extra`).
    pub fn from_stored(stored: &Map<String, Value>) -> Self {
        let mut o = JobOptions::default();
        for (k, v) in stored {
            match k.as_str() {
                "delay" => o.delay = v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)),
                "priority" => o.priority = v.as_i64(),
                "lifo" => o.lifo = v.as_bool().unwrap_or(false),
                "jobId" => {
                    o.job_id = v
                        .as_str()
                        .map(str::to_owned)
                        .or_else(|| Some(v.to_string()))
                }
                "attempts" => o.attempts = v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)),
                "backoff" => o.backoff = backoff_from_value(v),
                "removeOnComplete" => o.remove_on_complete = KeepJobs::from_value(v),
                "removeOnFail" => o.remove_on_fail = KeepJobs::from_value(v),
                "kl" | "keepLogs" => o.keep_logs = v.as_u64(),
                "timestamp" => o.timestamp = v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)),
                "stackTraceLimit" => o.stack_trace_limit = v.as_u64(),
                "sizeLimit" => o.size_limit = v.as_u64(),
                TIMEOUT_KEY if v.as_u64().is_some() => o.timeout = v.as_u64(),
                "group" if GroupOptions::from_value(v).is_some() => {
                    o.group = GroupOptions::from_value(v)
                }
                "fpof"
                | "failParentOnFailure"
                | "cpof"
                | "continueParentOnFailure"
                | "idof"
                | "ignoreDependencyOnFailure"
                | "rdof"
                | "removeDependencyOnFailure" => {
                    // A foreign writer may set two: the first in BullMQ's
                    // order is the one its scripts obey.
                    if let (Some(rule), true) =
                        (OnChildFailure::from_name(k), v == &Value::Bool(true))
                    {
                        o.on_failure = Some(o.on_failure.map_or(rule, |r| r.min(rule)));
                    }
                }
                "parent" if ParentRef::from_value(v).is_some() => {
                    o.parent = ParentRef::from_value(v)
                }
                // The public name too, as Node reads it back.
                "de" | "deduplication" if Deduplication::from_value(v).is_some() => {
                    o.deduplication = Deduplication::from_value(v)
                }
                _ => {
                    o.extra.insert(k.clone(), v.clone());
                }
            }
        }
        o
    }

    /// Options given as a BullMQ user writes them (`queue.add(name, data,
    /// opts)`): every name of BullMQ 6.7.0's `JobsOptions` ([`PUBLIC_NAMES`],
    /// `telemetry` as `{metadata, omitContext}`), and the stored short names
    /// (`de`, `kl`, …) as well. Any other name is refused: stored as it
    /// was, it would be ignored by every client, so a misspelt
    /// `deduplication` would silently add duplicates.
    pub fn from_public(public: &Map<String, Value>) -> Result<Self, ValidationError> {
        let mut stored = Map::new();
        for (k, v) in public {
            let name = k.as_str();
            if name == "telemetry" {
                let t = v.as_object().ok_or_else(|| ValidationError::Option {
                    option: "telemetry",
                    reason: "must be an object {metadata?, omitContext?}".into(),
                })?;
                for (field, value) in t {
                    let short = match field.as_str() {
                        "metadata" => "tm",
                        "omitContext" => "omc",
                        other => {
                            return Err(ValidationError::Option {
                                option: "telemetry",
                                reason: format!("unknown field `{other}` (metadata, omitContext)"),
                            })
                        }
                    };
                    stored.insert(short.into(), value.clone());
                }
            } else if name == "debounce" {
                // BullMQ 6 refuses the option it replaced with `deduplication`.
                return Err(ValidationError::Option {
                    option: "debounce",
                    reason: "removed; use deduplication instead".into(),
                });
            } else if name == "repeat" {
                // Not a `JobsOptions` name since BullMQ 6: a job added with it
                // would run once and never repeat.
                return Err(ValidationError::Option {
                    option: "repeat",
                    reason: "not an option of an added job; use a job scheduler".into(),
                });
            } else if name == "group" {
                // EchoMQ's groups, under BullMQ Pro's public name.
                stored.insert("group".into(), v.clone());
            } else if name == "timeout" {
                // EchoMQ's own option, under a key of its own when stored.
                stored.insert(TIMEOUT_KEY.into(), v.clone());
            } else if let Some((short, _)) = SHORT_NAMES
                .iter()
                .find(|(_, long)| *long == name && PUBLIC_NAMES.contains(long))
            {
                stored.insert((*short).into(), v.clone());
            } else if PUBLIC_NAMES.contains(&name) || SHORT_NAMES.iter().any(|(s, _)| *s == name) {
                stored.insert(k.clone(), v.clone());
            } else {
                return Err(ValidationError::UnknownOption {
                    option: k.clone(),
                    known: PUBLIC_NAMES.join(", "),
                });
            }
        }
        Ok(Self::from_stored(&stored))
    }

    /// The public (long-name) form, as BullMQ Node presents `job.opts`.
    pub fn to_public(&self) -> Map<String, Value> {
        let mut m = self.to_stored();
        for (short, long) in SHORT_NAMES {
            if let Some(v) = m.remove(*short) {
                m.insert((*long).into(), v);
            }
        }
        if let Some(t) = m.remove(TIMEOUT_KEY) {
            m.insert("timeout".into(), t);
        }
        m
    }
}

/// Where the job timeout (EchoMQ's `timeout` option) is stored in `opts`: a
/// key of EchoMQ's own, which BullMQ Node keeps and ignores.
pub const TIMEOUT_KEY: &str = "emqTimeout";

/// The option names of BullMQ 6.7.0's `JobsOptions`, as
/// [`JobOptions::from_public`] accepts them.
pub const PUBLIC_NAMES: &[&str] = &[
    "timestamp",
    "priority",
    "delay",
    "attempts",
    "backoff",
    "lifo",
    "removeOnComplete",
    "removeOnFail",
    "keepLogs",
    "stackTraceLimit",
    "sizeLimit",
    "repeatJobKey",
    "jobId",
    "parent",
    "prevMillis",
    "deduplication",
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
    "removeDependencyOnFailure",
    "telemetry",
];

/// What a child's final failure does to its parent: BullMQ's four
/// `*OnFailure` options, of which a job carries at most one. Declared in
/// BullMQ's order of precedence (the first wins where a foreign writer set
/// two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OnChildFailure {
    /// `failParentOnFailure`: the parent fails too.
    FailParent,
    /// `continueParentOnFailure`: the parent runs now, the failure recorded.
    ContinueParent,
    /// `ignoreDependencyOnFailure`: the failure is recorded and ignored.
    IgnoreDependency,
    /// `removeDependencyOnFailure`: the child is dropped from the parent.
    RemoveDependency,
}

impl OnChildFailure {
    /// Every rule, in BullMQ's order.
    pub const ALL: [OnChildFailure; 4] = [
        OnChildFailure::FailParent,
        OnChildFailure::ContinueParent,
        OnChildFailure::IgnoreDependency,
        OnChildFailure::RemoveDependency,
    ];

    /// The stored option name (and parent descriptor flag): `fpof`, `cpof`,
    /// `idof` or `rdof`.
    pub fn short_name(self) -> &'static str {
        match self {
            OnChildFailure::FailParent => "fpof",
            OnChildFailure::ContinueParent => "cpof",
            OnChildFailure::IgnoreDependency => "idof",
            OnChildFailure::RemoveDependency => "rdof",
        }
    }

    /// The public option name (`failParentOnFailure`, …).
    pub fn long_name(self) -> &'static str {
        match self {
            OnChildFailure::FailParent => "failParentOnFailure",
            OnChildFailure::ContinueParent => "continueParentOnFailure",
            OnChildFailure::IgnoreDependency => "ignoreDependencyOnFailure",
            OnChildFailure::RemoveDependency => "removeDependencyOnFailure",
        }
    }

    /// The rule an option name (short or public) stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|r| r.short_name() == name || r.long_name() == name)
    }
}

/// Options stored under a short name, and their public names (docs/protocol.md §Job options).
pub const SHORT_NAMES: &[(&str, &str)] = &[
    ("de", "deduplication"),
    ("fpof", "failParentOnFailure"),
    ("cpof", "continueParentOnFailure"),
    ("idof", "ignoreDependencyOnFailure"),
    ("rdof", "removeDependencyOnFailure"),
    ("kl", "keepLogs"),
    ("tm", "telemetryMetadata"),
    ("omc", "telemetryOmitContext"),
];

fn backoff_to_value(b: &Backoff) -> Value {
    let (kind, delay, jitter) = match b {
        Backoff::Fixed { delay, jitter } => ("fixed", *delay, *jitter),
        Backoff::Exponential { delay, jitter } => ("exponential", *delay, *jitter),
        Backoff::Custom(v) => return v.clone(),
    };
    let mut m = Map::new();
    m.insert("type".into(), Value::from(kind));
    m.insert("delay".into(), Value::from(delay));
    if let Some(j) = jitter {
        m.insert("jitter".into(), Value::from(j));
    }
    Value::Object(m)
}

fn backoff_from_value(v: &Value) -> Option<Backoff> {
    if let Some(n) = v.as_u64() {
        return Some(Backoff::Fixed {
            delay: n,
            jitter: None,
        });
    }
    let m = v.as_object()?;
    let delay = m.get("delay").and_then(Value::as_u64).unwrap_or(0);
    let jitter = m.get("jitter").and_then(Value::as_f64);
    match m.get("type").and_then(Value::as_str) {
        Some("fixed") => Some(Backoff::Fixed { delay, jitter }),
        Some("exponential") => Some(Backoff::Exponential { delay, jitter }),
        _ => Some(Backoff::Custom(v.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_add_stores_attempts_zero() {
        assert_eq!(
            Value::Object(JobOptions::new().to_stored()),
            json!({"attempts": 0})
        );
    }

    #[test]
    fn documented_stored_options_example() {
        let o = JobOptions::new()
            .job_id("abc")
            .attempts(3)
            .backoff(Backoff::Fixed {
                delay: 1000,
                jitter: None,
            })
            .remove_on_complete(KeepJobs::Remove(true))
            .keep_logs(5);
        assert_eq!(
            Value::Object(o.to_stored()),
            json!({"jobId":"abc","attempts":3,"backoff":{"type":"fixed","delay":1000},"removeOnComplete":true,"kl":5})
        );
        assert_eq!(JobOptions::from_stored(&o.to_stored()), o);
    }

    #[test]
    fn numeric_backoff_and_unknown_keys_are_tolerated() {
        let stored = json!({"backoff": 500, "de": {"id": "D"}, "attempts": 2});
        let o = JobOptions::from_stored(stored.as_object().unwrap());
        assert_eq!(
            o.backoff,
            Some(Backoff::Fixed {
                delay: 500,
                jitter: None
            })
        );
        assert_eq!(o.deduplication, Some(Deduplication::new("D")));
        assert!(o.extra.is_empty());
    }

    #[test]
    fn deduplication_is_stored_as_de_with_the_settings_given() {
        let d = Deduplication::new("u7")
            .ttl(std::time::Duration::from_secs(5))
            .extend(true);
        let o = JobOptions::new().deduplication(d.clone());
        assert_eq!(
            Value::Object(o.to_stored()),
            json!({"attempts": 0, "de": {"id": "u7", "ttl": 5000, "extend": true}})
        );
        assert_eq!(
            JobOptions::from_stored(&o.to_stored()).deduplication,
            Some(d)
        );
        assert_eq!(
            o.to_public()["deduplication"],
            json!({"id": "u7", "ttl": 5000, "extend": true})
        );
        let all = Deduplication::new("x")
            .replace(true)
            .keep_last_if_active(true);
        assert_eq!(
            all.to_value(),
            json!({"id": "x", "replace": true, "keepLastIfActive": true})
        );
    }

    #[test]
    fn a_foreign_de_is_carried_unchanged() {
        for de in [
            json!({"id": 5}),
            json!({"id": "a", "ttl": "soon"}),
            json!({"id": "a", "extend": false}),
            json!({"id": "a", "future": 1}),
            json!({"ttl": 5, "id": "a"}),
        ] {
            let stored = json!({"de": de.clone()});
            let o = JobOptions::from_stored(stored.as_object().unwrap());
            assert_eq!(o.deduplication, None);
            assert_eq!(o.to_stored()["de"], de);
        }
    }

    #[test]
    fn public_names_are_read_as_bullmq_stores_them() {
        let public = json!({
            "deduplication": {"id": "p", "reschedule": true},
            "keepLogs": 3,
            "failParentOnFailure": true,
            "telemetry": {"metadata": "tp", "omitContext": true},
            "removeOnComplete": 5,
            "delay": 100,
            "prevMillis": 7,
        });
        let o = JobOptions::from_public(public.as_object().unwrap()).unwrap();
        assert_eq!(
            o.deduplication,
            Some(Deduplication::new("p").reschedule(true))
        );
        assert_eq!(o.keep_logs, Some(3));
        assert_eq!(o.on_failure, Some(OnChildFailure::FailParent));
        assert_eq!(o.remove_on_complete, Some(KeepJobs::Count(5)));
        let stored = o.to_stored();
        assert_eq!(stored["de"], json!({"id": "p", "reschedule": true}));
        assert_eq!(stored["tm"], json!("tp"));
        assert_eq!(stored["omc"], json!(true));
        assert_eq!(stored["prevMillis"], json!(7));
        for junk in [
            "deduplication",
            "keepLogs",
            "telemetry",
            "failParentOnFailure",
        ] {
            assert!(
                !stored.contains_key(junk),
                "{junk} stored under its public name"
            );
        }
        // The stored spelling is accepted as well.
        let short = JobOptions::from_public(json!({"de": {"id": "p"}}).as_object().unwrap());
        assert_eq!(short.unwrap().deduplication, Some(Deduplication::new("p")));
        // A name BullMQ does not have is refused, with the list.
        let err = JobOptions::from_public(json!({"dedup": {"id": "p"}}).as_object().unwrap())
            .unwrap_err();
        assert!(matches!(&err, ValidationError::UnknownOption { option, .. } if option == "dedup"));
        assert!(err.to_string().contains("deduplication"), "{err}");
        assert!(
            JobOptions::from_public(json!({"debounce": {"id": "p"}}).as_object().unwrap()).is_err()
        );
        assert!(
            JobOptions::from_public(json!({"telemetry": {"x": 1}}).as_object().unwrap()).is_err()
        );
        assert!(
            JobOptions::from_public(json!({"repeat": {"every": 9}}).as_object().unwrap()).is_err()
        );
        // from_stored reads the public `deduplication` too (as Node reads it back).
        let read =
            JobOptions::from_stored(json!({"deduplication": {"id": "p"}}).as_object().unwrap());
        assert_eq!(read.deduplication, Some(Deduplication::new("p")));
        assert!(read.extra.is_empty());
    }

    #[test]
    fn reschedule_round_trips() {
        let d = Deduplication::new("r")
            .ttl(std::time::Duration::from_millis(10))
            .reschedule(true);
        assert_eq!(
            d.to_value(),
            json!({"id": "r", "ttl": 10, "reschedule": true})
        );
        assert_eq!(Deduplication::from_value(&d.to_value()), Some(d));
    }

    #[test]
    fn deduplication_validation() {
        let empty = JobOptions::new().deduplication(Deduplication::new(""));
        assert!(empty.validate().is_err());
        let mut debounce = JobOptions::new();
        debounce.extra.insert("debounce".into(), json!({"id": "a"}));
        assert!(debounce.validate().is_err());
    }

    #[test]
    fn validation() {
        assert!(JobOptions {
            delay: Some(-1),
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(JobOptions::new()
            .priority(MAX_PRIORITY + 1)
            .validate()
            .is_err());
        assert!(JobOptions::new().attempts(-1).validate().is_err());
        assert!(JobOptions::new().job_id("12").validate().is_err());
        assert!(JobOptions::new().priority(MAX_PRIORITY).validate().is_ok());
    }

    #[test]
    fn keep_jobs_mapping() {
        assert_eq!(
            Value::Object(KeepJobs::to_keep_jobs(None)),
            json!({"count": -1})
        );
        assert_eq!(
            Value::Object(KeepJobs::to_keep_jobs(Some(&KeepJobs::Remove(true)))),
            json!({"count": 0})
        );
        assert_eq!(
            Value::Object(KeepJobs::to_keep_jobs(Some(&KeepJobs::Count(5)))),
            json!({"count": 5})
        );
    }
}

#[cfg(test)]
mod parent_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parent_and_failure_options_are_stored_as_bullmq_stores_them() {
        let o = JobOptions::new()
            .parent(ParentRef {
                id: "p".into(),
                queue: "emq:q".into(),
            })
            .on_failure(OnChildFailure::FailParent);
        let stored = o.to_stored();
        assert_eq!(stored["fpof"], json!(true));
        assert!(
            !stored.contains_key("idof")
                && !stored.contains_key("cpof")
                && !stored.contains_key("rdof")
        );
        assert_eq!(stored["parent"], json!({"id": "p", "queue": "emq:q"}));
        // The failure flag precedes `parent`, last of all.
        let keys: Vec<&str> = stored.keys().map(String::as_str).collect();
        assert_eq!(&keys[keys.len() - 2..], ["fpof", "parent"]);
        // `attempts` is always stored (0 by default).
        assert_eq!(JobOptions::from_stored(&stored), o.clone().attempts(0));
        assert_eq!(
            o.parent_descriptor(),
            Some(json!({"id": "p", "queueKey": "emq:q", "fpof": true}))
        );
        let public = o.to_public();
        assert_eq!(public["failParentOnFailure"], json!(true));
        // Long names written by other clients are read too.
        let long = JobOptions::from_stored(
            json!({"removeDependencyOnFailure": true})
                .as_object()
                .unwrap(),
        );
        assert_eq!(long.on_failure, Some(OnChildFailure::RemoveDependency));
        // Two flags from a foreign writer read as the first in BullMQ's order.
        let two = JobOptions::from_stored(json!({"idof": true, "fpof": true}).as_object().unwrap());
        assert_eq!(two.on_failure, Some(OnChildFailure::FailParent));
        assert_eq!(JobOptions::new().parent_descriptor(), None);
    }
}
