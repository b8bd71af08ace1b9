//! The subcommands, one module each with its arguments and its `run`
//! (cargo's `commands/`, mini-redis's `cmd/`). [`Command`] only dispatches.

use clap::{Subcommand, ValueEnum};
use echomq::protocol::QueueKeys;
use echomq::{Connection, Queue, QueueOptions};

use crate::target::Target;

mod add;
mod add_bulk;
mod add_flow;
mod adopt;
mod audit;
mod blobs;
mod budget;
mod cancel;
mod clean;
mod concurrency;
mod dag_release;
mod dedup;
mod demo;
mod dlq;
mod drain;
mod events;
mod flow;
mod groups;
mod job;
mod jobs;
mod limiter;
mod metrics;
mod obliterate;
mod pause;
mod promote;
mod relay;
mod remove;
mod resume;
mod retry;
mod schedulers;
mod stats;
mod ui;
mod work;

/// What a command's `run` ends with: an error of the runtime gets its
/// readable line and exit code, any other error its text and exit code 1.
pub(crate) type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Counts by state, workers, schedulers, paused.
    Stats(stats::Args),
    /// Add one job: `add <queue> <name> <json>`.
    Add(add::Args),
    /// Add jobs from a JSON-lines file: `{"name": .., "data": .., "opts": {..}}` per line.
    /// Every line is checked first (nothing is written if one is bad); then
    /// `--chunk` lines go per round trip, with a progress bar. Where it stops
    /// it names the line to resume from.
    AddBulk(add_bulk::Args),
    /// Job ids and names in a state.
    Jobs(jobs::Args),
    /// Every field of one job, and its logs.
    Job(job::Args),
    /// Cancel a job: a running one is failed (or retried with `--retry`) at
    /// once and its worker told to stop; a waiting or delayed one is removed.
    Cancel(cancel::Args),
    /// Retry a failed (or completed) job, or every failed job with `--all` (moved `--count` per call).
    Retry(retry::Args),
    /// Promote a delayed job now, or every delayed job with `--all` (moved `--count` per call).
    Promote(promote::Args),
    /// Remove a job (and its children unless `--keep-children`).
    Remove(remove::Args),
    /// Pause the queue.
    Pause(pause::Args),
    /// Resume the queue.
    Resume(resume::Args),
    /// Remove waiting jobs (and delayed ones with `--delayed`), `--chunk` per
    /// call; run it again to go on after an interruption.
    Drain(drain::Args),
    /// Delete jobs of a state older than `--grace` ms, at most `--limit`
    /// (0: all of them), `--chunk` per call.
    Clean(clean::Args),
    /// Delete the whole queue (pausing it first), `--chunk` jobs per call;
    /// refuses while jobs are active unless `--force`. Run it again to go on
    /// after an interruption.
    Obliterate(obliterate::Args),
    /// Print the events stream, one line per event.
    Events(events::Args),
    /// Show, set or remove the global rate limit.
    Limiter(limiter::Args),
    /// The groups of a queue (counts, settings), or change one.
    Groups(groups::Args),
    /// The dead letters of a dead-letter queue: list, show, replay by filter.
    Dlq(dlq::Args),
    /// Show, set or remove the global concurrency.
    Concurrency(concurrency::Args),
    /// Show or free a deduplication id.
    Dedup(dedup::Args),
    /// Add a flow from a JSON file in BullMQ's FlowJob shape (or an array of
    /// them); prints the tree of ids. A `{"dag": [...]}` file adds a DAG.
    AddFlow(add_flow::Args),
    /// Delete the offloaded payloads no job of the queue uses any more
    /// (removed, replaced or never added), a page per call (docs/operations.md §Memory).
    Blobs(blobs::Args),
    /// Hand finished DAG nodes of these queues to the nodes that also wait
    /// for them (docs/flows.md §DAGs), until Ctrl-C or SIGTERM.
    DagRelease(dag_release::Args),
    /// The flow below a job: the tree with states and return values.
    Flow(flow::Args),
    /// Completed/failed metrics and a chart of the last hour.
    Metrics(metrics::Args),
    /// Read-only consistency audit; exits 1 on a hard violation.
    Audit(audit::Args),
    /// Show the queue's byte budget and the bytes it keeps, or set it
    /// (`--max-bytes 64MiB`) or remove it (`--clear`); docs/operations.md §Memory.
    Budget(budget::Args),
    /// The guided tour (about a minute) on a fresh queue.
    Demo,
    /// List, create/replace or remove job schedulers.
    Schedulers(schedulers::Args),
    /// Run a worker tree (Worker + LockManager + StalledChecker) whose jobs go to
    /// handler processes in any language (`exec:`), an HTTP endpoint (`http:`) or a
    /// synthetic processor (docs/processors.md), as a service: waits for Redis, rides out outages, serves
    /// health endpoints; prints a line per second; SIGINT/SIGTERM close it in
    /// order. Every option also comes from `ECHOMQ_*` and `--config FILE`
    /// (precedence: flag > env > file > default; docs/deployment.md §Running as a service).
    Work(Box<work::Args>),
    /// Serve the web dashboard (queues, jobs, search, actions, live feed) on
    /// 127.0.0.1:8080; see docs/ui.md.
    Ui(ui::Args),
    /// The relay (BullMQ's fleet pub/sub): publish, subscribe, show; see docs/relay.md.
    Relay(relay::Args),
    /// What a running BullMQ queue holds that matters to a mixed fleet
    /// (legacy repeatable jobs, the meta version, keys of unknown shape);
    /// `--apply` turns legacy repeatables into job schedulers (docs/migrating.md).
    Adopt(adopt::AdoptArgs),
}

impl Command {
    /// Runs the command; answers the process's exit code.
    pub(crate) async fn run(self, t: &Target) -> i32 {
        let done = match self {
            Command::Stats(a) => stats::run(a, t).await,
            Command::Add(a) => add::run(a, t).await,
            Command::AddBulk(a) => add_bulk::run(a, t).await,
            Command::Jobs(a) => jobs::run(a, t).await,
            Command::Job(a) => job::run(a, t).await,
            Command::Cancel(a) => cancel::run(a, t).await,
            Command::Retry(a) => retry::run(a, t).await,
            Command::Promote(a) => promote::run(a, t).await,
            Command::Remove(a) => remove::run(a, t).await,
            Command::Pause(a) => pause::run(a, t).await,
            Command::Resume(a) => resume::run(a, t).await,
            Command::Drain(a) => drain::run(a, t).await,
            Command::Blobs(a) => blobs::run(a, t).await,
            Command::Clean(a) => clean::run(a, t).await,
            Command::Obliterate(a) => obliterate::run(a, t).await,
            Command::Events(a) => events::run(a, t).await,
            Command::Limiter(a) => limiter::run(a, t).await,
            Command::Groups(a) => groups::run(a, t).await,
            Command::Dlq(a) => dlq::run(a, t).await,
            Command::Concurrency(a) => concurrency::run(a, t).await,
            Command::Dedup(a) => dedup::run(a, t).await,
            Command::AddFlow(a) => add_flow::run(a, t).await,
            Command::DagRelease(a) => dag_release::run(a, t).await,
            Command::Flow(a) => flow::run(a, t).await,
            Command::Metrics(a) => metrics::run(a, t).await,
            Command::Audit(a) => audit::run(a, t).await,
            Command::Budget(a) => budget::run(a, t).await,
            Command::Demo => demo::run(t).await,
            Command::Schedulers(a) => schedulers::run(a, t).await,
            // These have exit codes of their own (a service's, a server's,
            // the relay's, adopt's report).
            Command::Work(a) => return work::run(*a, t).await,
            Command::Ui(a) => return ui::run(a, t).await,
            Command::Relay(a) => return relay::run(a, t).await,
            Command::Adopt(a) => return adopt::run(a, t).await,
        };
        match done {
            Ok(()) => 0,
            Err(e) => match e.downcast_ref::<echomq::Error>() {
                Some(err) => {
                    let d = echomq_cli::diagnose::diagnose(err, Some(&t.url));
                    crate::style::print_error(&d.message);
                    d.class.exit_code()
                }
                None => {
                    crate::style::print_error(&e.to_string());
                    1
                }
            },
        }
    }
}

/// A queue named on the command line, its keys checked: commands check it
/// first, then their own arguments, and only then connect, so a bad
/// argument never writes anything.
pub(crate) struct QueueArg<'a> {
    target: &'a Target,
    name: &'a str,
    codec: echomq::codec::CodecOptions,
}

/// Checks the keys of queue `name` under the target's prefix.
pub(crate) fn queue<'a>(target: &'a Target, name: &'a str) -> Res<QueueArg<'a>> {
    QueueKeys::new(&target.prefix, name)?;
    Ok(QueueArg {
        target,
        name,
        codec: Default::default(),
    })
}

/// Whether a command writes the queue's meta hash when it opens the queue
/// (a read-only command must not).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

impl QueueArg<'_> {
    /// Opens the queue with these payload codec settings.
    pub(crate) fn with_codec(mut self, codec: echomq::codec::CodecOptions) -> Self {
        self.codec = codec;
        self
    }

    /// Connects, opens the queue and runs `f` on it; the connection is closed
    /// after.
    pub(crate) async fn run<T>(
        self,
        access: Access,
        f: impl AsyncFnOnce(&Connection, &Queue) -> Res<T>,
    ) -> Res<T> {
        let conn = Connection::connect(self.target.config.clone()).await?;
        let options = QueueOptions::default()
            .skip_meta_update(access == Access::Read)
            .codec(self.codec);
        let queue = Queue::with_options(&conn, self.name, options).await?;
        let r = f(&conn, &queue).await;
        conn.close().await;
        r
    }
}

/// A job state as named on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum StateArg {
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

/// `s` cut to `n` characters, with `…` when cut.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// Ctrl-C and SIGTERM, caught from the moment a long-running command (the
/// worker, the dashboard, a DAG releaser) arms them: a signal that comes
/// while it is still starting up is kept for [`StopSignals::recv`], rather
/// than killing the process by the default disposition between the first
/// job (or the first printed line) and the wait for it.
pub(crate) struct StopSignals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Installs the handlers now; must run inside the runtime.
    pub(crate) fn arm() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            StopSignals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// Until one of them came (or had come since [`StopSignals::arm`]);
    /// answers its name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                _ = next(&mut self.interrupt) => "SIGINT",
                _ = next(&mut self.terminate) => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.ok();
            "Ctrl-C"
        }
    }
}
