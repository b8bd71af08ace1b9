//! The plain data a [`Queue`](super::Queue) takes and answers.

use echomq_protocol::{JobOptions, DEFAULT_MAX_LEN_EVENTS};

/// Settings of a [`Queue`](super::Queue) handle. Plain data with documented defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
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
    /// The dead-letter queue of every worker made on this handle that names
    /// none itself (`WorkerOptions::dead_letter` wins), docs/operations.md
    /// §Dead letters. Default none.
    pub dead_letter: Option<crate::dead_letter::DeadLetterQueue>,
    /// How payloads are stored: the codec new data (and, on a worker, return
    /// values) is encoded with, the keys envelopes are decoded with.
    /// Default: no codec, plain JSON as BullMQ stores it
    /// (docs/operations.md §Memory).
    #[cfg(feature = "codec")]
    pub codec: crate::codec::CodecOptions,
    /// Most standard adds (no delay, priority or group) that
    /// [`Queue::add`](crate::Queue::add) calls made at once on this handle
    /// send in one `addStandardJobs` call, once
    /// [`ADDS_IN_FLIGHT`](crate::queue::ADDS_IN_FLIGHT) calls are in flight;
    /// each keeps its own effects, events and answer. 0 or 1: every add its
    /// own call. Default [`ADD_BULK_GROUP`](crate::queue::ADD_BULK_GROUP) (50).
    pub add_group: usize,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            default_job_options: JobOptions::default(),
            max_len_events: DEFAULT_MAX_LEN_EVENTS,
            max_data_bytes: 16 * 1024 * 1024,
            skip_meta_update: false,
            dead_letter: None,
            #[cfg(feature = "codec")]
            codec: crate::codec::CodecOptions::default(),
            add_group: super::add::ADD_BULK_GROUP,
        }
    }
}

impl QueueOptions {
    /// Sets [`add_group`](Self::add_group).
    pub fn add_group(mut self, most: usize) -> Self {
        self.add_group = most;
        self
    }

    /// Sets [`dead_letter`](Self::dead_letter).
    pub fn dead_letter(mut self, dlq: crate::dead_letter::DeadLetterQueue) -> Self {
        self.dead_letter = Some(dlq);
        self
    }

    /// Options merged under every job's own.
    pub fn default_job_options(mut self, options: JobOptions) -> Self {
        self.default_job_options = options;
        self
    }

    /// Approximate length of the events stream.
    pub fn max_len_events(mut self, len: u64) -> Self {
        self.max_len_events = len;
        self
    }

    /// Largest serialised job data accepted, in bytes.
    pub fn max_data_bytes(mut self, bytes: usize) -> Self {
        self.max_data_bytes = bytes;
        self
    }

    /// Do not write the meta hash when opening.
    pub fn skip_meta_update(mut self, skip: bool) -> Self {
        self.skip_meta_update = skip;
        self
    }

    /// How payloads are stored (codec, keys, decoded-size cap).
    #[cfg(feature = "codec")]
    pub fn codec(mut self, codec: crate::codec::CodecOptions) -> Self {
        self.codec = codec;
        self
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

    pub(super) fn parse(s: &str) -> JobState {
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

    pub(super) fn is_list(self) -> bool {
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

/// A job to add in a batch (see [`Queue::add_bulk`](super::Queue::add_bulk)).
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Job name.
    pub name: String,
    /// Payload.
    pub data: serde_json::Value,
    /// Options.
    pub options: JobOptions,
}
