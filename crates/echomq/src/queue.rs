//! The producer and admin side of one queue.

use std::collections::HashMap;
use std::time::Duration;

use echomq_protocol::packing::{pack_map, AddArgs};
use echomq_protocol::validate::{validate_job_id, ValidationError};
use echomq_protocol::{
    JobOptions, JobRecord, QueueKeys, ScriptId, DEFAULT_MAX_LEN_EVENTS, PROTOCOL_VERSION,
};
use fred::prelude::{
    ClientLike, HashesInterface, KeysInterface, ListInterface, SortedSetsInterface, Value,
};
use serde::Serialize;
use tracing::instrument;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::reply::{as_array, as_i64, as_string, bytes, check_code, int_or_code, strings, text};

/// Settings of a [`Queue`] handle. Plain data with documented defaults.
#[derive(Clone, Debug)]
pub struct QueueOptions {
    /// Options merged under every job's own options (the job's win). Default: none.
    pub default_job_options: JobOptions,
    /// Approximate length of the events stream, written to meta
    /// `opts.maxLenEvents` when the queue is opened. Default 10 000.
    pub max_len_events: u64,
    /// Largest serialised job data accepted, in bytes. Not a BullMQ rule: a
    /// guard so one runaway payload cannot fill Redis. Default 16 MiB.
    pub max_data_bytes: usize,
    /// Do not write the meta hash when opening (read-only tooling). Default false.
    pub skip_meta_update: bool,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            default_job_options: JobOptions::default(),
            max_len_events: DEFAULT_MAX_LEN_EVENTS,
            max_data_bytes: 16 * 1024 * 1024,
            skip_meta_update: false,
        }
    }
}

/// Where a job is (getState).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Ready to run (`wait`, or the legacy `paused` list).
    Waiting,
    /// Ready with a priority.
    Prioritized,
    /// Waiting for its time.
    Delayed,
    /// Owned by a worker.
    Active,
    /// Finished successfully.
    Completed,
    /// Finally failed.
    Failed,
    /// A parent waiting for its children.
    WaitingChildren,
    /// Not found in any state.
    Unknown,
}

impl JobState {
    /// The key suffix of the state (`wait` for waiting).
    pub fn key_suffix(self) -> &'static str {
        match self {
            JobState::Waiting => "wait",
            JobState::Prioritized => "prioritized",
            JobState::Delayed => "delayed",
            JobState::Active => "active",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::WaitingChildren => "waiting-children",
            JobState::Unknown => "unknown",
        }
    }

    fn parse(s: &str) -> JobState {
        match s {
            "waiting" | "wait" | "paused" => JobState::Waiting,
            "prioritized" => JobState::Prioritized,
            "delayed" => JobState::Delayed,
            "active" => JobState::Active,
            "completed" => JobState::Completed,
            "failed" => JobState::Failed,
            "waiting-children" => JobState::WaitingChildren,
            _ => JobState::Unknown,
        }
    }

    fn is_list(self) -> bool {
        matches!(self, JobState::Waiting | JobState::Active)
    }
}

/// Job counts by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// In `wait`.
    pub waiting: u64,
    /// In `prioritized`.
    pub prioritized: u64,
    /// In `delayed`.
    pub delayed: u64,
    /// In `active`.
    pub active: u64,
    /// In `completed`.
    pub completed: u64,
    /// In `failed`.
    pub failed: u64,
    /// In `waiting-children`.
    pub waiting_children: u64,
}

impl JobCounts {
    /// Jobs not finished yet: waiting, prioritized, delayed, active, waiting-children.
    pub fn pending(&self) -> u64 {
        self.waiting + self.prioritized + self.delayed + self.active + self.waiting_children
    }
}

/// What became of a removal request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveOutcome {
    /// The job (and its children, when asked) is gone.
    Removed,
    /// The job or one of its children is locked by a worker; nothing was removed.
    Locked,
}

/// Whether a job finished, and its result (isFinished).
#[derive(Clone, Debug, PartialEq)]
pub enum Finished {
    /// Not finished (or not finished yet).
    No,
    /// Completed with this return value.
    Completed(serde_json::Value),
    /// Failed with this reason.
    Failed(String),
}

/// A job to add in a batch (see [`Queue::add_bulk`]).
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Job name.
    pub name: String,
    /// Payload.
    pub data: serde_json::Value,
    /// Options.
    pub options: JobOptions,
}

/// The producer and admin handle of one queue. Cheap to clone; all clones share
/// the [`Connection`].
#[derive(Clone, Debug)]
pub struct Queue {
    conn: Connection,
    keys: QueueKeys,
    options: QueueOptions,
}

impl Queue {
    /// Opens queue `name` with default options, writing the meta hash
    /// (`opts.maxLenEvents`, `version`) as BullMQ does.
    pub async fn new(conn: &Connection, name: &str) -> Result<Self> {
        Self::with_options(conn, name, QueueOptions::default()).await
    }

    /// Opens queue `name` with `options`.
    pub async fn with_options(
        conn: &Connection,
        name: &str,
        options: QueueOptions,
    ) -> Result<Self> {
        let keys = QueueKeys::new(conn.prefix(), name)?;
        options.default_job_options.validate()?;
        if conn.pool().next().is_clustered() {
            check_single_slot(&keys)?;
        }
        let q = Queue {
            conn: conn.clone(),
            keys,
            options,
        };
        if !q.options.skip_meta_update {
            let max_len = q.options.max_len_events.to_string();
            q.conn
                .pool()
                .hset::<(), _, _>(
                    q.keys.meta(),
                    [
                        ("opts.maxLenEvents", max_len.as_str()),
                        ("version", PROTOCOL_VERSION),
                    ],
                )
                .await?;
        }
        Ok(q)
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// The queue's keys.
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// The shared connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    fn merged(&self, options: JobOptions) -> JobOptions {
        if self.options.default_job_options == JobOptions::default() {
            return options;
        }
        let mut stored = self.options.default_job_options.to_stored();
        for (k, v) in options.to_stored() {
            stored.insert(k, v);
        }
        JobOptions::from_stored(&stored)
    }

    /// Validates and encodes one job; nothing is written when this fails.
    fn prepare(&self, name: &str, data: &impl Serialize, options: JobOptions) -> Result<Prepared> {
        if name.is_empty() {
            return Err(ValidationError::EmptyJobName.into());
        }
        let options = self.merged(options);
        options.validate()?;
        let data = serde_json::to_string(data).map_err(|e| ValidationError::Data(e.to_string()))?;
        let limit = options
            .size_limit
            .map(|l| l as usize)
            .unwrap_or(self.options.max_data_bytes)
            .min(self.options.max_data_bytes);
        if data.len() > limit {
            return Err(ValidationError::DataTooLarge {
                size: data.len(),
                limit,
            }
            .into());
        }
        let timestamp = options.timestamp.unwrap_or_else(crate::clock::now_ms);
        let custom_id = options.job_id.clone().unwrap_or_default();
        let add_args = AddArgs {
            prefix_key: self.keys.prefix_key(),
            custom_id: &custom_id,
            name,
            timestamp,
            ..Default::default()
        }
        .pack();
        let script = if options.delay.unwrap_or(0) > 0 {
            ScriptId::AddDelayedJob
        } else if options.priority.unwrap_or(0) > 0 {
            ScriptId::AddPrioritizedJob
        } else {
            ScriptId::AddStandardJob
        };
        let k = &self.keys;
        let keys = match script {
            ScriptId::AddDelayedJob => vec![
                k.marker(),
                k.meta(),
                k.id(),
                k.delayed(),
                k.completed(),
                k.events(),
            ],
            ScriptId::AddPrioritizedJob => vec![
                k.marker(),
                k.meta(),
                k.id(),
                k.prioritized(),
                k.delayed(),
                k.completed(),
                k.active(),
                k.events(),
                k.pc(),
            ],
            _ => vec![
                k.wait(),
                k.paused(),
                k.meta(),
                k.id(),
                k.completed(),
                k.delayed(),
                k.active(),
                k.events(),
                k.marker(),
            ],
        };
        let args = vec![
            bytes(add_args),
            text(data),
            bytes(pack_map(&options.to_stored())),
        ];
        Ok(Prepared { script, keys, args })
    }

    /// Adds one job and returns its id. With a custom id that already exists the
    /// existing id is returned and nothing is stored (a `duplicated` event).
    #[instrument(level = "debug", skip(self, data, options), fields(queue = %self.name()))]
    pub async fn add(
        &self,
        name: &str,
        data: &impl Serialize,
        options: JobOptions,
    ) -> Result<String> {
        let p = self.prepare(name, data, options)?;
        let reply = self.conn.run_script(p.script, p.keys, p.args).await?;
        added_id(p.script, &reply)
    }

    /// Adds many jobs in one pipelined round trip and returns their ids in order.
    /// Every job is validated before anything is sent; a job the server refuses
    /// is reported while the others stay added.
    pub async fn add_bulk(&self, jobs: Vec<NewJob>) -> Result<Vec<String>> {
        let prepared = jobs
            .iter()
            .map(|j| self.prepare(&j.name, &j.data, j.options.clone()))
            .collect::<Result<Vec<_>>>()?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let calls: Vec<echomq_protocol::call::RawCall> = prepared
            .iter()
            .map(|p| echomq_protocol::call::RawCall {
                script: p.script,
                keys: p.keys.clone(),
                args: p
                    .args
                    .iter()
                    .map(|v| match v {
                        Value::Bytes(b) => echomq_protocol::Arg::packed(b.to_vec()),
                        other => echomq_protocol::Arg::text(other.as_string().unwrap_or_default()),
                    })
                    .collect(),
            })
            .collect();
        let results = self.conn.call_batch(&calls).await;
        results
            .into_iter()
            .zip(&prepared)
            .map(|(r, p)| added_id(p.script, &crate::connection::reply_value(r?)))
            .collect()
    }

    /// Reads a job, `None` when it does not exist.
    pub async fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        let hash: HashMap<String, String> = self.conn.pool().hgetall(self.keys.job(id)).await?;
        if hash.is_empty() {
            return Ok(None);
        }
        Ok(Some(JobRecord::from_hash(id, hash)?))
    }

    /// The state of a job.
    pub async fn get_state(&self, id: &str) -> Result<JobState> {
        let call = echomq_protocol::call::admin::GetState {
            keys: &self.keys,
            id,
        };
        Ok(JobState::parse(&self.conn.call(&call).await?))
    }

    /// Counts of every state.
    pub async fn counts(&self) -> Result<JobCounts> {
        let states = [
            JobState::Waiting,
            JobState::Prioritized,
            JobState::Delayed,
            JobState::Active,
            JobState::Completed,
            JobState::Failed,
            JobState::WaitingChildren,
        ];
        let c = self.count_states(&states).await?;
        Ok(JobCounts {
            waiting: c[0],
            prioritized: c[1],
            delayed: c[2],
            active: c[3],
            completed: c[4],
            failed: c[5],
            waiting_children: c[6],
        })
    }

    /// Counts of the given states, in order (getCounts).
    pub async fn count_states(&self, states: &[JobState]) -> Result<Vec<u64>> {
        let args = states.iter().map(|s| text(s.key_suffix())).collect();
        let v = self
            .conn
            .run_script(
                ScriptId::GetCounts,
                vec![self.keys.prefix_key().to_owned()],
                args,
            )
            .await?;
        let items = as_array(v).ok_or_else(|| Error::protocol("getCounts", "expected an array"))?;
        items
            .iter()
            .map(|i| {
                as_i64(i)
                    .map(|n| n.max(0) as u64)
                    .ok_or_else(|| Error::protocol("getCounts", format!("{i:?}")))
            })
            .collect()
    }

    fn pause_keys(&self, resume: bool) -> Vec<String> {
        let k = &self.keys;
        let (a, b) = if resume {
            (k.paused(), k.wait())
        } else {
            (k.wait(), k.paused())
        };
        vec![
            a,
            b,
            k.meta(),
            k.prioritized(),
            k.events(),
            k.delayed(),
            k.marker(),
        ]
    }

    /// Pauses the queue: workers stop taking jobs (meta `paused`), jobs stay in `wait`.
    pub async fn pause(&self) -> Result<()> {
        self.conn
            .run_script(
                ScriptId::Pause,
                self.pause_keys(false),
                vec![text("paused"), text("1")],
            )
            .await?;
        Ok(())
    }

    /// Resumes the queue (and migrates a legacy `paused` list, in chunks).
    pub async fn resume(&self) -> Result<()> {
        let mut emit = "1";
        loop {
            let v = self
                .conn
                .run_script(
                    ScriptId::Pause,
                    self.pause_keys(true),
                    vec![text("resumed"), text(emit)],
                )
                .await?;
            if int_or_code("pause", &v)? == 0 {
                return Ok(());
            }
            emit = "0";
        }
    }

    /// Whether the queue is paused.
    pub async fn is_paused(&self) -> Result<bool> {
        Ok(self.conn.pool().hexists(self.keys.meta(), "paused").await?)
    }

    /// Removes every waiting and prioritized job (and delayed ones when asked),
    /// except current scheduler iterations. Active and finished jobs stay.
    pub async fn drain(&self, include_delayed: bool) -> Result<()> {
        let k = &self.keys;
        let keys = vec![
            k.wait(),
            k.paused(),
            k.delayed(),
            k.prioritized(),
            k.repeat(),
        ];
        let args = vec![
            text(k.prefix_key()),
            text(if include_delayed { "1" } else { "0" }),
        ];
        self.conn.run_script(ScriptId::Drain, keys, args).await?;
        Ok(())
    }

    /// Deletes the whole queue: pauses it, then removes jobs in chunks of 1000
    /// until nothing is left. Refuses while jobs are active unless `force`.
    pub async fn obliterate(&self, force: bool) -> Result<()> {
        self.pause().await?;
        loop {
            let keys = vec![self.keys.meta(), self.keys.prefix_key().to_owned()];
            let args = vec![text(1000), text(if force { "force" } else { "" })];
            let v = self
                .conn
                .run_script(ScriptId::Obliterate, keys, args)
                .await?;
            match as_i64(&v) {
                Some(0) => return Ok(()),
                Some(1) => continue,
                Some(-1) => return Err(Error::protocol("obliterate", "queue is not paused")),
                Some(-2) => return Err(Error::ActiveJobs),
                _ => return Err(Error::protocol("obliterate", format!("{v:?}"))),
            }
        }
    }

    /// Removes a job (and its children unless `keep_children`). A locked job is
    /// left alone; the current iteration of a scheduler is refused.
    pub async fn remove(&self, id: &str, remove_children: bool) -> Result<RemoveOutcome> {
        let keys = vec![self.keys.job(id), self.keys.repeat()];
        let args = vec![
            text(id),
            text(if remove_children { "1" } else { "0" }),
            text(self.keys.prefix_key()),
        ];
        let v = self
            .conn
            .run_script(ScriptId::RemoveJob, keys, args)
            .await?;
        Ok(match int_or_code("removeJob", &v)? {
            0 => RemoveOutcome::Locked,
            _ => RemoveOutcome::Removed,
        })
    }

    /// Deletes jobs of `state` older than `grace` (by finishedOn, processedOn or
    /// timestamp), at most `limit` of them (0 = no limit). Returns the deleted ids.
    pub async fn clean(&self, grace: Duration, limit: u64, state: JobState) -> Result<Vec<String>> {
        if state == JobState::Unknown {
            return Err(ValidationError::Option {
                option: "state",
                reason: "cannot clean the unknown state".into(),
            }
            .into());
        }
        let cutoff = crate::clock::now_ms().saturating_sub(grace.as_millis() as u64);
        let keys = vec![
            self.keys.key(state.key_suffix()),
            self.keys.events(),
            self.keys.repeat(),
        ];
        let args = vec![
            text(self.keys.prefix_key()),
            text(cutoff),
            text(limit),
            text(state.key_suffix()),
        ];
        let v = self
            .conn
            .run_script(ScriptId::CleanJobsInSet, keys, args)
            .await?;
        strings("cleanJobsInSet", v)
    }

    /// Moves a completed or failed job back to wait (`job.retry()` in Node),
    /// optionally resetting its attempt counters.
    pub async fn retry_job(&self, id: &str, reset_attempts: bool) -> Result<()> {
        let state = self.get_state(id).await?;
        let (set, field, name) = match state {
            JobState::Failed => (self.keys.failed(), "failedReason", "failed"),
            JobState::Completed => (self.keys.completed(), "returnvalue", "completed"),
            JobState::Unknown => return Err(Error::JobNotFound(id.to_owned())),
            _ => {
                return Err(Error::Script {
                    script: "reprocessJob",
                    code: echomq_protocol::ScriptErrorCode::JobNotInState,
                })
            }
        };
        let lifo = self
            .get_job(id)
            .await?
            .map(|j| j.opts.lifo)
            .unwrap_or(false);
        let k = &self.keys;
        let keys = vec![
            k.job(id),
            k.events(),
            set,
            k.wait(),
            k.meta(),
            k.paused(),
            k.active(),
            k.marker(),
        ];
        let reset = if reset_attempts { "1" } else { "0" };
        let args = vec![
            text(id),
            text(if lifo { "RPUSH" } else { "LPUSH" }),
            text(field),
            text(name),
            text(reset),
            text(reset),
        ];
        let v = self
            .conn
            .run_script(ScriptId::ReprocessJob, keys, args)
            .await?;
        int_or_code("reprocessJob", &v)?;
        Ok(())
    }

    /// Retries up to `count` failed jobs (oldest first); returns how many moved.
    pub async fn retry_failed(&self, count: u64) -> Result<u64> {
        let mut moved = 0;
        for id in self.first_ids(self.keys.failed(), count).await? {
            match self.retry_job(&id, false).await {
                Ok(()) => moved += 1,
                // Finished, removed or retried by someone else meanwhile.
                Err(Error::Script { .. }) | Err(Error::JobNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }

    /// The first `count` members of a sorted set (lowest scores).
    async fn first_ids(&self, key: String, count: u64) -> Result<Vec<String>> {
        if count == 0 {
            // ZRANGE 0 -1 would mean "all of them".
            return Ok(Vec::new());
        }
        let stop = i64::try_from(count).unwrap_or(i64::MAX) - 1;
        Ok(self
            .conn
            .pool()
            .zrange(key, 0, stop, None, false, None, false)
            .await?)
    }

    /// Moves one delayed job to wait now.
    pub async fn promote(&self, id: &str) -> Result<()> {
        let k = &self.keys;
        let keys = vec![
            k.delayed(),
            k.wait(),
            k.paused(),
            k.meta(),
            k.prioritized(),
            k.active(),
            k.pc(),
            k.events(),
            k.marker(),
        ];
        let v = self
            .conn
            .run_script(
                ScriptId::Promote,
                keys,
                vec![text(k.prefix_key()), text(id)],
            )
            .await?;
        int_or_code("promote", &v)?;
        Ok(())
    }

    /// Promotes up to `count` delayed jobs (earliest first); returns how many moved.
    pub async fn promote_all(&self, count: u64) -> Result<u64> {
        let mut moved = 0;
        for id in self.first_ids(self.keys.delayed(), count).await? {
            match self.promote(&id).await {
                Ok(()) => moved += 1,
                Err(Error::Script { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }

    /// Sets a new delay (from now) on a delayed job.
    pub async fn change_delay(&self, id: &str, delay: Duration) -> Result<()> {
        let k = &self.keys;
        let keys = vec![k.delayed(), k.meta(), k.marker(), k.events()];
        let args = vec![
            text(delay.as_millis()),
            text(crate::clock::now_ms()),
            text(id),
            text(k.job(id)),
        ];
        let v = self
            .conn
            .run_script(ScriptId::ChangeDelay, keys, args)
            .await?;
        not_found_or(id, int_or_code("changeDelay", &v))
    }

    /// Sets a new priority; a waiting job moves to its new place.
    pub async fn change_priority(&self, id: &str, priority: i64, lifo: bool) -> Result<()> {
        JobOptions::new().priority(priority).validate()?;
        let k = &self.keys;
        let keys = vec![
            k.wait(),
            k.paused(),
            k.meta(),
            k.prioritized(),
            k.active(),
            k.pc(),
            k.marker(),
        ];
        let args = vec![
            text(priority),
            text(k.prefix_key()),
            text(id),
            text(if lifo { "1" } else { "0" }),
        ];
        let v = self
            .conn
            .run_script(ScriptId::ChangePriority, keys, args)
            .await?;
        not_found_or(id, int_or_code("changePriority", &v))
    }

    /// Stores progress (any JSON value) and emits `progress`.
    pub async fn update_progress(&self, id: &str, progress: &impl Serialize) -> Result<()> {
        let json =
            serde_json::to_string(progress).map_err(|e| ValidationError::Data(e.to_string()))?;
        let keys = vec![self.keys.job(id), self.keys.events(), self.keys.meta()];
        let v = self
            .conn
            .run_script(ScriptId::UpdateProgress, keys, vec![text(id), text(json)])
            .await?;
        not_found_or(id, int_or_code("updateProgress", &v))
    }

    /// Replaces a job's data.
    pub async fn update_data(&self, id: &str, data: &impl Serialize) -> Result<()> {
        let json = serde_json::to_string(data).map_err(|e| ValidationError::Data(e.to_string()))?;
        if json.len() > self.options.max_data_bytes {
            return Err(ValidationError::DataTooLarge {
                size: json.len(),
                limit: self.options.max_data_bytes,
            }
            .into());
        }
        let v = self
            .conn
            .run_script(
                ScriptId::UpdateData,
                vec![self.keys.job(id)],
                vec![text(json)],
            )
            .await?;
        not_found_or(id, int_or_code("updateData", &v))
    }

    /// Appends a log line, keeping only the newest `keep_logs` lines when given.
    /// Returns the number of lines kept.
    pub async fn add_log(&self, id: &str, line: &str, keep_logs: Option<u64>) -> Result<u64> {
        let keys = vec![self.keys.job(id), self.keys.logs(id)];
        let keep = keep_logs.map(|k| k.to_string()).unwrap_or_default();
        let v = self
            .conn
            .run_script(
                ScriptId::AddLog,
                keys,
                vec![text(id), text(line), text(keep)],
            )
            .await?;
        match int_or_code("addLog", &v) {
            Ok(n) => Ok(n as u64),
            Err(e) => not_found_or(id, Err(e)).map(|_| 0),
        }
    }

    /// A job's log lines in `[start, end]` (inclusive, negative from the end).
    pub async fn get_logs(&self, id: &str, start: i64, end: i64) -> Result<Vec<String>> {
        Ok(self
            .conn
            .pool()
            .lrange(self.keys.logs(id), start, end)
            .await?)
    }

    /// Whether a job finished, with its result or failure reason.
    pub async fn is_finished(&self, id: &str) -> Result<Finished> {
        let keys = vec![self.keys.completed(), self.keys.failed(), self.keys.job(id)];
        let v = self
            .conn
            .run_script(ScriptId::IsFinished, keys, vec![text(id), text("1")])
            .await?;
        let items =
            as_array(v).ok_or_else(|| Error::protocol("isFinished", "expected an array"))?;
        let code = items.first().and_then(as_i64).unwrap_or(0);
        let value = items.get(1).and_then(as_string);
        match code {
            1 => Ok(Finished::Completed(
                value
                    .and_then(|s| serde_json::from_str(&s).ok())
                    .unwrap_or(serde_json::Value::Null),
            )),
            2 => Ok(Finished::Failed(value.unwrap_or_default())),
            -1 => Err(Error::JobNotFound(id.to_owned())),
            _ => Ok(Finished::No),
        }
    }

    /// Job ids in the given states, `start..=end` of each, newest first unless
    /// `ascending` (getRanges). Ids are unique in the result.
    pub async fn get_ranges(
        &self,
        states: &[JobState],
        start: i64,
        end: i64,
        ascending: bool,
    ) -> Result<Vec<String>> {
        let mut args = vec![
            text(start),
            text(end),
            text(if ascending { "1" } else { "0" }),
        ];
        args.extend(states.iter().map(|s| text(s.key_suffix())));
        let v = self
            .conn
            .run_script(
                ScriptId::GetRanges,
                vec![self.keys.prefix_key().to_owned()],
                args,
            )
            .await?;
        let per_state =
            as_array(v).ok_or_else(|| Error::protocol("getRanges", "expected an array"))?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for (state, ids) in states.iter().zip(per_state) {
            let mut ids = strings("getRanges", ids)?;
            // Lists hold the newest at the head; the script returns an ascending
            // list range head-first, so it is reversed here, as Node does.
            if ascending && state.is_list() {
                ids.reverse();
            }
            out.extend(ids.into_iter().filter(|id| seen.insert(id.clone())));
        }
        Ok(out)
    }

    /// Jobs in the given states (see [`Queue::get_ranges`]); ids whose hash has
    /// meanwhile disappeared are skipped.
    pub async fn get_jobs(
        &self,
        states: &[JobState],
        start: i64,
        end: i64,
        ascending: bool,
    ) -> Result<Vec<JobRecord>> {
        let ids = self.get_ranges(states, start, end, ascending).await?;
        let mut jobs = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(j) = self.get_job(&id).await? {
                jobs.push(j);
            }
        }
        Ok(jobs)
    }

    /// Removes the deduplication owner key if `job_id` still owns it.
    pub async fn job_exists(&self, id: &str) -> Result<bool> {
        validate_job_id(id).ok();
        Ok(self.conn.pool().exists::<i64, _>(self.keys.job(id)).await? == 1)
    }
}

#[derive(Clone)]
struct Prepared {
    script: ScriptId,
    keys: Vec<String>,
    args: Vec<Value>,
}

/// Scripts build job keys from the prefix, so on Redis Cluster every key of a
/// queue must hash to one slot (DECISIONS.md §4). Refuse a layout that would
/// cross slots, saying how to fix it.
fn check_single_slot(keys: &QueueKeys) -> Result<()> {
    let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
    let base = slot(&keys.wait());
    let samples = [
        keys.job("1"),
        keys.lock("1"),
        keys.events(),
        keys.meta(),
        keys.dedup("d"),
        keys.scheduler("s"),
    ];
    if samples.iter().any(|k| slot(k) != base) {
        return Err(Error::Config(format!(
            "on Redis Cluster every key of queue {:?} must share one slot: name the queue with a hash tag \
             (e.g. \"{{{}}}\", giving {}:{{{}}}:wait) or use a hash-tagged prefix (\"{{{}}}\")",
            keys.name(),
            keys.name(),
            keys.prefix(),
            keys.name(),
            keys.prefix()
        )));
    }
    Ok(())
}

fn added_id(script: ScriptId, v: &Value) -> Result<String> {
    if let Value::Integer(n) = v {
        check_code(script.name(), *n)?;
        return Ok(n.to_string());
    }
    as_string(v).ok_or_else(|| Error::protocol("add", format!("expected a job id, got {v:?}")))
}

fn not_found_or(id: &str, r: Result<i64>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(Error::Script {
            code: echomq_protocol::ScriptErrorCode::JobNotExist,
            ..
        }) => Err(Error::JobNotFound(id.to_owned())),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_layout_needs_a_hash_tag() {
        assert!(check_single_slot(&QueueKeys::new("emq", "orders").unwrap()).is_err());
        assert!(check_single_slot(&QueueKeys::new("emq", "{orders}").unwrap()).is_ok());
        assert!(check_single_slot(&QueueKeys::new("{emq}", "orders").unwrap()).is_ok());
    }
}
