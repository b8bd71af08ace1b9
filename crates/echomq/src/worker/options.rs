//! What a worker is started with: its settings ([`WorkerOptions`], BullMQ's
//! defaults) and its arguments ([`WorkerArgs`]).

use std::sync::Arc;
use std::time::Duration;

use echomq_protocol::call::groups::GroupDefaults;
use echomq_protocol::KeepJobs;
use ractor::ActorRef;

use super::finish::backoff_strategy::BackoffStrategy;
use super::messages::{WorkerEvent, WorkerMsg};
use super::process::batch_processor::{BatchOptions, BatchProcessor};
use super::process::processor::Processor;
use crate::locks::manager::LockManagerArgs;
use crate::locks::protocol::{LockManagerMsg, LockOwnerRef};
use crate::queue::handle::Queue;
use crate::queue::limits::RateLimit;

/// Settings of a worker; the defaults are BullMQ 6.7.0's.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Jobs run at the same time. Default 1.
    pub concurrency: usize,
    /// TTL of a job lock, set on take and on every renewal. Default 30 s.
    pub lock_duration: Duration,
    /// How often the lock is renewed; `None` = `lock_duration / 2`.
    pub lock_renew_time: Option<Duration>,
    /// Period of the stalled check (run by the StalledChecker actor; kept
    /// here so one settings struct describes the worker). Default 30 s.
    pub stalled_interval: Duration,
    /// Stalls tolerated before a job is failed. Default 1.
    pub max_stalled_count: u64,
    /// BZPOPMIN timeout (delayed jobs have their own timer). Default 5 s
    /// (capped at 10 s).
    pub drain_delay: Duration,
    /// Worker name: `pb` of taken jobs and the `:w:<name>` suffix of the
    /// blocking connection's client name. Default none.
    pub name: Option<String>,
    /// A failed attempt of a job started this many times (`ats`) is not
    /// retried: the job fails with its error (BullMQ 6.7.0); a job whose `ats`
    /// exceeds it anyway (recovered from a stall) is failed on pick-up.
    /// Default none; `Some(0)` also means no limit, as BullMQ's
    /// `maxStartedAttempts: 0`.
    pub max_started_attempts: Option<u64>,
    /// Retention after completion when the job sets none.
    pub remove_on_complete: Option<KeepJobs>,
    /// Retention after final failure when the job sets none.
    pub remove_on_fail: Option<KeepJobs>,
    /// Metrics data points (`None` = metrics off).
    pub max_metrics_size: Option<u64>,
    /// How often the actor checks that the blocking read is alive. Default 5 s.
    pub watchdog_interval: Duration,
    /// How long a cancelled processor may run on before its future is
    /// dropped. Default 1 s.
    pub cancel_grace: Duration,
    /// Pause between tries when producing the next iteration of a job
    /// scheduler fails on the connection (BullMQ's `runRetryDelay`).
    /// Default 15 s.
    pub run_retry_delay: Duration,
    /// The worker's rate limiter: at most `max` jobs start per `duration`
    /// across every worker of the queue that uses the same limiter, Rust or
    /// Node (they share `{P}limiter`). A global limit set on the queue
    /// overrides its max. Default none.
    pub limiter: Option<RateLimit>,
    /// Computes the retry delay of jobs whose backoff type is custom (BullMQ's
    /// `settings.backoffStrategy`). Without it such a job fails for good.
    pub backoff_strategy: Option<BackoffStrategy>,
    /// The timeout of jobs that set none (`JobOptions::timeout`): past it the
    /// processor is cancelled and the attempt fails with a timeout reason.
    /// Default none.
    pub default_timeout: Option<Duration>,
    /// BullMQ Pro's `group: {concurrency, limit}`: the concurrency and rate
    /// limit of every group without settings of its own, fleet-wide. Written
    /// to the queue's group defaults when the worker starts (the last worker
    /// started holds; `Groups::set_defaults`); the feeders read them.
    /// Default none (the stored defaults are left as they are).
    pub group: Option<GroupDefaults>,
    /// Group commit (docs/decisions.md §16): how many finishing calls
    /// (complete, final fail) the slots may have in flight at once. A finish
    /// made while that many are in flight waits for one to return and then
    /// leaves with every other finish made meanwhile in one
    /// `moveJobsToFinished` call (at most 16 jobs, 1 MiB: the script takes
    /// 32, but 32 held Redis past a few ms at c100), with the effects
    /// of the single calls; a finish that finds fewer in flight goes at
    /// once, alone. No timer: a lone job is never delayed. `0` turns it off
    /// (every finish its own call). Default 2: with one call in flight the
    /// client and Redis take turns (a third less throughput at c16 on two
    /// cores, docs/benchmarks.md); with two, one call runs in Redis while
    /// the client handles the other's reply. Batch workers
    /// (`WorkerArgs::batched`) finish in their own way and ignore it; so do
    /// manual workers.
    pub group_commit: usize,
    /// The most jobs this worker takes in its life (`echomq work
    /// --max-jobs`): past it, it fetches nothing more — neither a
    /// `moveToActive` nor a fetch-next of a finishing call — and its
    /// [`WorkerCounts::takes_left`](super::messages::WorkerCounts) reads 0. A
    /// take whose call brought no job is given back;
    /// [`WorkerCounts::max_jobs_done`](super::messages::WorkerCounts::max_jobs_done)
    /// says when every take has been made and every job let go. Default none
    /// (no limit).
    pub max_jobs: Option<u64>,
    /// Where the jobs this worker fails for good go (docs/operations.md
    /// §Dead letters): their final failure (last attempt, or unrecoverable)
    /// runs `moveToDeadLetter`, which fails the job as moveToFinished does
    /// and moves it to this queue in the same call; nothing stays in this
    /// queue's `failed` set (and `remove_on_fail` does not apply). Refused
    /// at start when it names the worker's own queue, or (Redis Cluster)
    /// a queue without its hash tag. Final failures skip group commit.
    /// Default none: they stay in `failed`, as BullMQ's.
    pub dead_letter: Option<crate::dead_letter::DeadLetterQueue>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            concurrency: 1,
            lock_duration: Duration::from_millis(30_000),
            lock_renew_time: None,
            stalled_interval: Duration::from_millis(30_000),
            max_stalled_count: 1,
            drain_delay: Duration::from_secs(5),
            name: None,
            max_started_attempts: None,
            remove_on_complete: None,
            remove_on_fail: None,
            max_metrics_size: None,
            watchdog_interval: Duration::from_secs(5),
            cancel_grace: Duration::from_secs(1),
            run_retry_delay: Duration::from_secs(15),
            limiter: None,
            backoff_strategy: None,
            default_timeout: None,
            group: None,
            group_commit: 2,
            max_jobs: None,
            dead_letter: None,
        }
    }
}

/// Builder setters, one per setting: `WorkerOptions::default().concurrency(8)`.
impl WorkerOptions {
    /// Sets [`backoff_strategy`](Self::backoff_strategy).
    pub fn backoff_strategy(mut self, strategy: BackoffStrategy) -> Self {
        self.backoff_strategy = Some(strategy);
        self
    }

    /// Sets [`limiter`](Self::limiter).
    pub fn limiter(mut self, limit: RateLimit) -> Self {
        self.limiter = Some(limit);
        self
    }

    /// Sets [`group`](Self::group).
    pub fn group(mut self, defaults: GroupDefaults) -> Self {
        self.group = Some(defaults);
        self
    }

    /// Sets [`dead_letter`](Self::dead_letter).
    pub fn dead_letter(mut self, dlq: crate::dead_letter::DeadLetterQueue) -> Self {
        self.dead_letter = Some(dlq);
        self
    }

    /// Sets [`group_commit`](Self::group_commit) (`0` = off).
    pub fn group_commit(mut self, in_flight: usize) -> Self {
        self.group_commit = in_flight;
        self
    }

    /// Sets [`concurrency`](Self::concurrency).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets [`lock_duration`](Self::lock_duration).
    pub fn lock_duration(mut self, d: Duration) -> Self {
        self.lock_duration = d;
        self
    }

    /// Sets [`lock_renew_time`](Self::lock_renew_time).
    pub fn lock_renew_time(mut self, d: Duration) -> Self {
        self.lock_renew_time = Some(d);
        self
    }

    /// Sets [`stalled_interval`](Self::stalled_interval).
    pub fn stalled_interval(mut self, d: Duration) -> Self {
        self.stalled_interval = d;
        self
    }

    /// Sets [`max_stalled_count`](Self::max_stalled_count).
    pub fn max_stalled_count(mut self, n: u64) -> Self {
        self.max_stalled_count = n;
        self
    }

    /// Sets [`drain_delay`](Self::drain_delay).
    pub fn drain_delay(mut self, d: Duration) -> Self {
        self.drain_delay = d;
        self
    }

    /// Sets [`name`](Self::name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets [`max_started_attempts`](Self::max_started_attempts) (0 = no limit).
    pub fn max_started_attempts(mut self, n: u64) -> Self {
        self.max_started_attempts = Some(n);
        self
    }

    /// Sets [`remove_on_complete`](Self::remove_on_complete).
    pub fn remove_on_complete(mut self, keep: KeepJobs) -> Self {
        self.remove_on_complete = Some(keep);
        self
    }

    /// Sets [`remove_on_fail`](Self::remove_on_fail).
    pub fn remove_on_fail(mut self, keep: KeepJobs) -> Self {
        self.remove_on_fail = Some(keep);
        self
    }

    /// Sets [`max_metrics_size`](Self::max_metrics_size).
    pub fn max_metrics_size(mut self, points: u64) -> Self {
        self.max_metrics_size = Some(points);
        self
    }

    /// Sets [`watchdog_interval`](Self::watchdog_interval).
    pub fn watchdog_interval(mut self, d: Duration) -> Self {
        self.watchdog_interval = d;
        self
    }

    /// Sets [`cancel_grace`](Self::cancel_grace).
    pub fn cancel_grace(mut self, d: Duration) -> Self {
        self.cancel_grace = d;
        self
    }

    /// Sets [`default_timeout`](Self::default_timeout).
    pub fn default_timeout(mut self, d: Duration) -> Self {
        self.default_timeout = Some(d);
        self
    }

    /// Sets [`run_retry_delay`](Self::run_retry_delay).
    pub fn run_retry_delay(mut self, d: Duration) -> Self {
        self.run_retry_delay = d;
        self
    }
}

/// What a worker runs for the jobs it takes.
#[derive(Clone)]
pub enum WorkerProcessor {
    /// Each job alone: a slot of `concurrency` runs one job at a time
    /// (BullMQ's processor). [`WorkerArgs::new`].
    Jobs(Arc<dyn Processor>),
    /// Jobs in batches (BullMQ Pro's batches): a slot runs one batch at a
    /// time, taken as the [`BatchOptions`] say. [`WorkerArgs::batched`].
    Batches(Arc<dyn BatchProcessor>, BatchOptions),
}

/// Start-up arguments of a [`Worker`](super::actor::Worker).
#[derive(Clone)]
pub struct WorkerArgs {
    /// The queue (and through it the shared connection).
    pub queue: Queue,
    /// The code run for the jobs taken: each alone, or in batches.
    pub processor: WorkerProcessor,
    /// Settings.
    pub options: WorkerOptions,
    /// The LockManager that renews this worker's locks, when already spawned.
    /// A LockManager spawned with this worker's ref attaches itself instead.
    pub lock_manager: Option<ActorRef<LockManagerMsg>>,
    /// Where [`WorkerEvent`]s go; full channel = event dropped and counted.
    pub events: Option<tokio::sync::mpsc::Sender<WorkerEvent>>,
}

impl WorkerArgs {
    /// Arguments with default options and no event channel.
    pub fn new(queue: Queue, processor: Arc<dyn Processor>) -> Self {
        WorkerArgs {
            queue,
            processor: WorkerProcessor::Jobs(processor),
            options: WorkerOptions::default(),
            lock_manager: None,
            events: None,
        }
    }

    /// Arguments of a worker that takes jobs in batches of `batch` for
    /// `processor`.
    pub fn batched(queue: Queue, processor: Arc<dyn BatchProcessor>, batch: BatchOptions) -> Self {
        WorkerArgs {
            queue,
            processor: WorkerProcessor::Batches(processor, batch),
            options: WorkerOptions::default(),
            lock_manager: None,
            events: None,
        }
    }

    /// The LockManager arguments matching these settings.
    pub fn lock_manager_args(&self, worker: Option<ActorRef<WorkerMsg>>) -> LockManagerArgs {
        LockManagerArgs {
            connection: self.queue.connection().clone(),
            keys: self.queue.keys().clone(),
            lock_duration: self.options.lock_duration,
            lock_renew_time: self.options.lock_renew_time,
            owner: worker.map(LockOwnerRef::new),
        }
    }
}

impl LockManagerArgs {
    /// These arguments, reporting lost locks to `worker` (the Worker whose
    /// locks the LockManager renews).
    pub fn reporting_to(mut self, worker: &ActorRef<WorkerMsg>) -> Self {
        self.owner = Some(LockOwnerRef::new(worker.clone()));
        self
    }
}
