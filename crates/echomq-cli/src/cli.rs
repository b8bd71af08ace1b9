//! Command-line arguments.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Inspect, feed and operate EchoMQ queues (BullMQ-compatible, prefix `emq`).
#[derive(Debug, Parser)]
#[command(name = "echomq", version, about)]
pub struct Cli {
    /// Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://).
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    pub url: String,
    /// Key prefix of the queues.
    #[arg(long, default_value = "emq", global = true)]
    pub prefix: String,
    #[command(subcommand)]
    pub command: Command,
}

/// A job state as named on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StateArg {
    /// `wait`
    Waiting,
    /// `prioritized`
    Prioritized,
    /// `delayed`
    Delayed,
    /// `active`
    Active,
    /// `completed`
    Completed,
    /// `failed`
    Failed,
    /// `waiting-children`
    WaitingChildren,
}

impl From<StateArg> for echomq::JobState {
    fn from(s: StateArg) -> Self {
        use echomq::JobState::*;
        match s {
            StateArg::Waiting => Waiting,
            StateArg::Prioritized => Prioritized,
            StateArg::Delayed => Delayed,
            StateArg::Active => Active,
            StateArg::Completed => Completed,
            StateArg::Failed => Failed,
            StateArg::WaitingChildren => WaitingChildren,
        }
    }
}

/// Options of `add`.
#[derive(Debug, Args)]
pub struct AddOpts {
    /// Delay in ms before the job becomes ready.
    #[arg(long)]
    pub delay: Option<i64>,
    /// Priority, 0 (none) to 2097151; lower runs first.
    #[arg(long)]
    pub priority: Option<i64>,
    /// Attempts in total (0 or 1: no retry).
    #[arg(long)]
    pub attempts: Option<i64>,
    /// Backoff between attempts: `fixed:MS` or `exponential:MS`.
    #[arg(long)]
    pub backoff: Option<String>,
    /// Custom job id (not an integer, no `:`).
    #[arg(long)]
    pub job_id: Option<String>,
    /// Run before the other waiting jobs.
    #[arg(long)]
    pub lifo: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Counts by state, workers, schedulers, paused.
    Stats { queue: String },
    /// Add one job: `add <queue> <name> <json>`.
    Add {
        queue: String,
        name: String,
        /// Job data as JSON.
        data: String,
        #[command(flatten)]
        opts: AddOpts,
    },
    /// Add jobs from a JSON-lines file: `{"name": .., "data": .., "opts": {..}}` per line.
    AddBulk {
        queue: String,
        file: std::path::PathBuf,
    },
    /// Job ids and names in a state.
    Jobs {
        queue: String,
        state: StateArg,
        #[arg(long, default_value_t = 0)]
        start: i64,
        #[arg(long, default_value_t = 19)]
        end: i64,
        /// Oldest first.
        #[arg(long)]
        asc: bool,
    },
    /// Every field of one job, and its logs.
    Job { queue: String, id: String },
    /// Retry a failed (or completed) job, or every failed job with `--all` (moved `--count` per call).
    Retry {
        queue: String,
        id: Option<String>,
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = 1000)]
        count: u64,
    },
    /// Promote a delayed job now, or every delayed job with `--all` (moved `--count` per call).
    Promote {
        queue: String,
        id: Option<String>,
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = 1000)]
        count: u64,
    },
    /// Remove a job (and its children unless `--keep-children`).
    Remove {
        queue: String,
        id: String,
        #[arg(long)]
        keep_children: bool,
    },
    /// Pause the queue.
    Pause { queue: String },
    /// Resume the queue.
    Resume { queue: String },
    /// Remove waiting jobs (and delayed ones with `--delayed`).
    Drain {
        queue: String,
        #[arg(long)]
        delayed: bool,
    },
    /// Delete jobs of a state older than `--grace` ms.
    Clean {
        queue: String,
        state: StateArg,
        #[arg(long, default_value_t = 0)]
        grace: u64,
        #[arg(long, default_value_t = 1000)]
        limit: u64,
    },
    /// Print the events stream, one line per event.
    Events {
        queue: String,
        /// Keep reading new events.
        #[arg(long)]
        follow: bool,
        /// Start after this stream id (default: the last 20 entries, or now with --follow).
        #[arg(long)]
        from: Option<String>,
    },
    /// Add a flow from a JSON file in BullMQ's FlowJob shape (or an array of
    /// them); prints the tree of ids.
    AddFlow { file: std::path::PathBuf },
    /// The flow below a job: the tree with states and return values.
    Flow {
        queue: String,
        id: String,
        /// Levels, counting the job's own (BullMQ's getFlow depth).
        #[arg(long, default_value_t = 10)]
        depth: u32,
        /// Children read per group of each parent.
        #[arg(long, default_value_t = 20)]
        max_children: u64,
    },
    /// Completed/failed metrics and a chart of the last hour.
    Metrics { queue: String },
    /// Read-only consistency audit; exits 1 on a hard violation.
    Audit { queue: String },
    /// The guided tour (about a minute) on a fresh queue.
    Demo,
    /// List, create/replace or remove job schedulers.
    Schedulers {
        queue: String,
        #[command(subcommand)]
        action: SchedulerAction,
    },
    /// Run a worker tree (Worker + LockManager + StalledChecker) with a synthetic
    /// processor; prints a line per second; SIGINT/SIGTERM close it in order.
    Work {
        queue: String,
        /// Jobs run at the same time.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// sleep:MS | echo | fail | fail-rate:P | cpu:MS
        #[arg(long, default_value = "echo")]
        processor: String,
        /// Lock TTL in ms.
        #[arg(long, default_value_t = 30_000)]
        lock_duration: u64,
        /// Stalled-check interval in ms.
        #[arg(long, default_value_t = 30_000)]
        stalled_interval: u64,
        /// Stop after this many processed jobs.
        #[arg(long)]
        max_jobs: Option<u64>,
        /// Worker name (listed by BullMQ's getWorkers).
        #[arg(long)]
        name: Option<String>,
        /// No per-second lines.
        #[arg(long)]
        quiet: bool,
    },
}

/// `schedulers <queue> …`
#[derive(Debug, Subcommand)]
pub enum SchedulerAction {
    /// Every scheduler, earliest next run first.
    List,
    /// Create or replace a scheduler (give `--every` or `--cron`).
    Upsert {
        /// Scheduler id (no `:`).
        id: String,
        /// Interval in ms.
        #[arg(long, conflicts_with = "cron")]
        every: Option<u64>,
        /// Cron pattern (5 fields, or 6 with seconds), as npm cron-parser reads it.
        #[arg(long)]
        cron: Option<String>,
        /// IANA time zone of the cron pattern (default: this process's zone).
        #[arg(long, requires = "cron")]
        tz: Option<String>,
        /// Job name of the iterations (default: the scheduler id).
        #[arg(long)]
        name: Option<String>,
        /// Job data of the iterations, JSON.
        #[arg(long)]
        data: Option<String>,
        /// At most this many iterations.
        #[arg(long)]
        limit: Option<u64>,
        /// No iteration before this time (ms since the epoch).
        #[arg(long)]
        start: Option<u64>,
        /// No iteration after this time (ms since the epoch).
        #[arg(long)]
        end: Option<u64>,
    },
    /// Remove a scheduler and its pending delayed iteration.
    Remove { id: String },
}
