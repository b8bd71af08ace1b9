//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use echomq::queue::DEFAULT_CHUNK;

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
    /// PEM file of the CA that signs the server's TLS certificate (with a
    /// rediss:// URL). Default: the system's root certificates.
    #[arg(long, env = "ECHOMQ_TLS_CA_FILE", global = true, value_name = "PEM")]
    pub tls_ca_file: Option<PathBuf>,
    /// PEM file of the client certificate, for servers that require mutual TLS.
    #[arg(
        long,
        env = "ECHOMQ_TLS_CERT_FILE",
        global = true,
        value_name = "PEM",
        requires = "tls_key_file"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    #[arg(
        long,
        env = "ECHOMQ_TLS_KEY_FILE",
        global = true,
        value_name = "PEM",
        requires = "tls_cert_file"
    )]
    pub tls_key_file: Option<PathBuf>,
    /// DANGEROUS: accept any server certificate. The traffic is encrypted but
    /// the server is not authenticated, so anyone on the path can read every
    /// password and job. Only for a throwaway test server.
    #[arg(long, env = "ECHOMQ_TLS_INSECURE", global = true)]
    pub tls_insecure: bool,
    /// Durability mode: after every write, wait (up to 500 ms) until this many
    /// replicas have it, else report an error, so an acknowledged write
    /// survives the loss of its primary. Default: off.
    #[arg(long, env = "ECHOMQ_WAIT_REPLICAS", global = true, value_name = "N")]
    pub wait_replicas: Option<u32>,
    /// How long a command waits for Redis's reply, ms. A write whose reply
    /// does not come in time has an unknown outcome (exit code 5). Default
    /// 10 000.
    #[arg(long, env = "ECHOMQ_COMMAND_TIMEOUT", global = true, value_name = "MS")]
    pub command_timeout: Option<u64>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Where the command connects.
    pub fn target(&self) -> crate::target::Target {
        crate::target::Target {
            url: self.url.clone(),
            prefix: self.prefix.clone(),
            config: self.connection_config(),
        }
    }

    /// The connection settings of the global flags.
    pub fn connection_config(&self) -> echomq::ConnectionConfig {
        let mut c = echomq::ConnectionConfig::with_url(&self.url);
        c.prefix = self.prefix.clone();
        c.tls = echomq::connection::TlsOptions {
            ca_file: self.tls_ca_file.clone(),
            cert_file: self.tls_cert_file.clone(),
            key_file: self.tls_key_file.clone(),
            insecure: self.tls_insecure,
        };
        c.durability = self
            .wait_replicas
            .map(|replicas| echomq::connection::Durability {
                replicas,
                ..Default::default()
            });
        if let Some(ms) = self.command_timeout {
            c.command_timeout = std::time::Duration::from_millis(ms.max(1));
        }
        c
    }
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
    /// Fail an attempt still running after MS ms (EchoMQ workers; retried
    /// while attempts remain).
    #[arg(long, value_name = "MS")]
    pub timeout: Option<u64>,
    /// Put the job in this group (docs/groups.md): it runs under the
    /// group's concurrency, rate limit and pause, round robin with the others.
    #[arg(long)]
    pub group: Option<String>,
    /// Priority inside the group (with --group), lower first.
    #[arg(long, requires = "group")]
    pub group_priority: Option<i64>,
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
    /// Every line is checked first (nothing is written if one is bad); then
    /// `--chunk` lines go per round trip, with a progress bar. Where it stops
    /// it names the line to resume from.
    AddBulk {
        queue: String,
        file: std::path::PathBuf,
        /// Start at this line of the file (1-based, blank lines counted): to
        /// resume a run that stopped.
        #[arg(long, default_value_t = 1)]
        from_line: usize,
        /// Lines per pipelined round trip.
        #[arg(long, default_value_t = 1000)]
        chunk: usize,
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
        /// Only jobs with this name (`--start`/`--end` then count matches).
        #[arg(long)]
        name: Option<String>,
        /// Only jobs whose data (JSON text) contains TEXT.
        #[arg(long)]
        search: Option<String>,
    },
    /// Every field of one job, and its logs.
    Job { queue: String, id: String },
    /// Cancel a job: a running one is failed (or retried with `--retry`) at
    /// once and its worker told to stop; a waiting or delayed one is removed.
    Cancel {
        queue: String,
        id: String,
        /// Why, stored as the failure reason.
        #[arg(long, default_value = "cancelled")]
        reason: String,
        /// Count the attempt and retry the job if attempts remain, instead of failing it for good.
        #[arg(long)]
        retry: bool,
    },
    /// Retry a failed (or completed) job, or every failed job with `--all` (moved `--count` per call).
    Retry {
        queue: String,
        id: Option<String>,
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = DEFAULT_CHUNK)]
        count: u64,
    },
    /// Promote a delayed job now, or every delayed job with `--all` (moved `--count` per call).
    Promote {
        queue: String,
        id: Option<String>,
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = DEFAULT_CHUNK)]
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
    /// Remove waiting jobs (and delayed ones with `--delayed`), `--chunk` per
    /// call; run it again to go on after an interruption.
    Drain {
        queue: String,
        #[arg(long)]
        delayed: bool,
        /// Jobs per call.
        #[arg(long, default_value_t = DEFAULT_CHUNK)]
        chunk: u64,
    },
    /// Delete jobs of a state older than `--grace` ms, at most `--limit`
    /// (0: all of them), `--chunk` per call.
    Clean {
        queue: String,
        state: StateArg,
        #[arg(long, default_value_t = 0)]
        grace: u64,
        #[arg(long, default_value_t = 1000)]
        limit: u64,
        /// Jobs per call.
        #[arg(long, default_value_t = DEFAULT_CHUNK)]
        chunk: u64,
    },
    /// Delete the whole queue (pausing it first), `--chunk` jobs per call;
    /// refuses while jobs are active unless `--force`. Run it again to go on
    /// after an interruption.
    Obliterate {
        queue: String,
        #[arg(long)]
        force: bool,
        /// Jobs per call.
        #[arg(long, default_value_t = DEFAULT_CHUNK as u32)]
        chunk: u32,
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
    /// Show, set or remove the global rate limit.
    Limiter {
        queue: String,
        #[command(subcommand)]
        action: crate::limits::LimiterAction,
    },
    /// The groups of a queue (counts, settings), or change one.
    Groups {
        queue: String,
        #[command(subcommand)]
        action: Option<crate::groups::GroupsAction>,
    },
    /// Show, set or remove the global concurrency.
    Concurrency {
        queue: String,
        #[command(subcommand)]
        action: crate::limits::ConcurrencyAction,
    },
    /// Show or free a deduplication id.
    Dedup {
        queue: String,
        #[command(subcommand)]
        action: crate::dedup::DedupAction,
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
    /// Run a worker tree (Worker + LockManager + StalledChecker) whose jobs go to
    /// handler processes in any language (`exec:`), an HTTP endpoint (`http:`) or a
    /// synthetic processor (docs/processors.md), as a service: waits for Redis, rides out outages, serves
    /// health endpoints; prints a line per second; SIGINT/SIGTERM close it in
    /// order. Every option also comes from `ECHOMQ_*` and `--config FILE`
    /// (precedence: flag > env > file > default; docs/deployment.md §Running as a service).
    Work(Box<crate::service::WorkArgs>),
    /// Serve the web dashboard (queues, jobs, search, actions, live feed) on
    /// 127.0.0.1:8080; see docs/ui.md.
    Ui(crate::ui::UiArgs),
    /// The relay (BullMQ's fleet pub/sub): publish, subscribe, show; see docs/relay.md.
    Relay(crate::relay::RelayCmd),
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

impl Command {
    /// Whether a limits or deduplication command only reads (the queue's
    /// meta hash is then left alone).
    pub fn reads_only_limits(&self) -> bool {
        match self {
            Command::Limiter { action, .. } => crate::limits::limiter_reads_only(action),
            Command::Concurrency { action, .. } => crate::limits::concurrency_reads_only(action),
            Command::Dedup { action, .. } => crate::dedup::dedup_reads_only(action),
            Command::Groups { action, .. } => crate::groups::groups_reads_only(action),
            _ => false,
        }
    }
}
