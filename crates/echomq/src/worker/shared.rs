//! State one Worker instance shares with the tasks it owns. Each piece has
//! one owner type: the slot gate ([`SlotGate`]), the held jobs and their
//! LockManager ([`LockSeam`]), the fetch hints ([`FetchHints`]), the blocking
//! connection ([`BlockingConn`]) and the counters ([`Counters`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use echomq_protocol::call::fetch_batch::MoveJobsToActive;
use echomq_protocol::call::lifecycle::{EpochMs, MoveToActive, NextJob};
use echomq_protocol::packing::FetchOpts;
use echomq_protocol::QueueKeys;
use fred::prelude::ClientLike;
use ractor::{ActorRef, ActorStatus};

use super::fetch::blocking::BlockingConn;
use super::fetch::gate::SlotGate;
use super::fetch::hints::FetchHints;
use super::fetch::takes::Takes;
use super::finish::finisher::Finisher;
use super::messages::{WorkerEvent, WorkerMsg};
use super::options::{WorkerOptions, WorkerProcessor};
use crate::connection::pool::Connection;
use crate::error::Result;
use crate::locks::seam::LockSeam;
use crate::queue::handle::Queue;

/// What a worker counts, for [`WorkerStatus`](super::messages::WorkerStatus).
#[derive(Default)]
pub(crate) struct Counters {
    processed: AtomicU64,
    failed: AtomicU64,
    dropped_events: AtomicU64,
    last_fetch: AtomicU64,
}

impl Counters {
    /// A transition was made (completed, failed, retried, delayed).
    pub fn transition(&self) {
        self.processed.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt failed.
    pub fn failure(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    fn dropped_event(&self) {
        self.dropped_events.fetch_add(1, Ordering::Relaxed);
    }

    /// A job was taken now.
    pub fn fetched(&self) {
        self.last_fetch
            .store(crate::clock::now_ms(), Ordering::Relaxed);
    }

    pub fn processed(&self) -> u64 {
        self.processed.load(Ordering::Relaxed)
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    pub fn dropped_events(&self) -> u64 {
        self.dropped_events.load(Ordering::Relaxed)
    }

    /// Time of the last job taken (ms), if any.
    pub fn last_fetch(&self) -> Option<u64> {
        let last = self.last_fetch.load(Ordering::Relaxed);
        (last > 0).then_some(last)
    }
}

pub(crate) struct WorkerShared {
    queue: Arc<Queue>,
    processor: WorkerProcessor,
    opts: WorkerOptions,
    name: Option<Arc<str>>,
    gate: Arc<SlotGate>,
    seam: Arc<LockSeam>,
    hints: FetchHints,
    blocking: Arc<BlockingConn>,
    counters: Counters,
    metrics: crate::telemetry::metrics::QueueMetrics,
    myself: ActorRef<WorkerMsg>,
    events: Option<tokio::sync::mpsc::Sender<WorkerEvent>>,
    finisher: Option<Finisher>,
    /// What is left of `max_jobs`.
    takes: Option<Takes>,
}

impl WorkerShared {
    pub fn new(
        queue: Queue,
        processor: WorkerProcessor,
        opts: WorkerOptions,
        myself: ActorRef<WorkerMsg>,
        events: Option<tokio::sync::mpsc::Sender<WorkerEvent>>,
    ) -> Self {
        // Off for batch workers (they finish a batch their own way) and on
        // a cluster unless the queue is in one slot (a Queue refuses
        // otherwise, so this is belt and braces).
        let one_slot = !queue.connection().pool().next().is_clustered()
            || crate::connection::server::one_slot(queue.connection().prefix(), queue.name());
        let finisher =
            (opts.group_commit > 0 && matches!(processor, WorkerProcessor::Jobs(_)) && one_slot)
                .then(|| Finisher::new(opts.group_commit));
        WorkerShared {
            takes: opts.max_jobs.map(Takes::new),
            finisher,
            name: opts.name.as_deref().map(Arc::from),
            gate: Arc::new(SlotGate::new(opts.concurrency)),
            blocking: Arc::new(BlockingConn::new(
                queue.connection().clone(),
                queue.keys().marker(),
                queue.keys().worker_client_name(opts.name.as_deref()),
            )),
            metrics: crate::telemetry::metrics::QueueMetrics::new(queue.name()),
            queue: Arc::new(queue),
            processor,
            opts,
            seam: Arc::default(),
            hints: FetchHints::default(),
            counters: Counters::default(),
            myself,
            events,
        }
    }

    /// The queue, shared with each job's context without a copy.
    pub fn queue_arc(&self) -> Arc<Queue> {
        self.queue.clone()
    }

    pub fn keys(&self) -> &QueueKeys {
        self.queue.keys()
    }

    pub fn conn(&self) -> &Connection {
        self.queue.connection()
    }

    /// What the worker runs: jobs alone or batches.
    pub fn processor(&self) -> &WorkerProcessor {
        &self.processor
    }

    /// The group commit of the slots' finishes, when on.
    pub fn finisher(&self) -> Option<&Finisher> {
        self.finisher.as_ref()
    }

    pub fn opts(&self) -> &WorkerOptions {
        &self.opts
    }

    pub fn name(&self) -> Option<&Arc<str>> {
        self.name.as_ref()
    }

    pub fn gate(&self) -> &Arc<SlotGate> {
        &self.gate
    }

    pub fn seam(&self) -> &Arc<LockSeam> {
        &self.seam
    }

    pub fn hints(&self) -> &FetchHints {
        &self.hints
    }

    pub fn blocking(&self) -> &Arc<BlockingConn> {
        &self.blocking
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// What is left of `max_jobs`, when set (fetch/takes.rs).
    pub fn takes(&self) -> Option<&Takes> {
        self.takes.as_ref()
    }

    /// Reserves up to `n` takes before a call that may take jobs; `n`
    /// without a limit.
    pub fn reserve_takes(&self, n: u64) -> u64 {
        self.takes.as_ref().map_or(n, |t| t.reserve(n))
    }

    /// Settles `n` reserved takes whose jobs are held now (tracked first,
    /// so a reader of the counts never sees a take in neither place).
    pub fn settle_takes(&self, n: u64) {
        if let Some(t) = &self.takes {
            t.settle(n);
        }
    }

    /// Gives back takes reserved for a call that took fewer jobs.
    pub fn return_takes(&self, n: u64) {
        if let Some(t) = &self.takes {
            t.give_back(n);
        }
    }

    /// This queue's metric handles.
    pub fn telemetry(&self) -> &crate::telemetry::metrics::QueueMetrics {
        &self.metrics
    }

    pub fn myself(&self) -> &ActorRef<WorkerMsg> {
        &self.myself
    }

    /// Whether the actor that owns these tasks still runs; tasks of a dead
    /// instance finish what they hold and take nothing new.
    pub fn alive(&self) -> bool {
        matches!(
            self.myself.get_status(),
            ActorStatus::Starting | ActorStatus::Running | ActorStatus::Upgrading
        )
    }

    pub fn emit(&self, event: WorkerEvent) {
        if let Some(tx) = &self.events {
            if tx.try_send(event).is_err() {
                self.counters.dropped_event();
            }
        }
    }

    pub fn fetch_opts<'a>(&'a self, token: &'a str) -> FetchOpts<'a> {
        super::finish::transition::fetch_opts(&self.opts, token)
    }

    /// moveJobsToActive: one take per token, in order, up to the first
    /// that takes no job; one reply per take made.
    pub async fn move_jobs_to_active(&self, tokens: &[Arc<str>]) -> Result<Vec<NextJob>> {
        let call = MoveJobsToActive::new(
            self.keys(),
            EpochMs(self.hints.clock().now_ms()),
            &self.fetch_opts(""),
            tokens,
        )
        .map_err(|e| crate::error::Error::protocol("moveJobsToActive", e.to_string()))?;
        self.conn().call(&call).await
    }

    pub async fn move_to_active(&self, token: &str) -> Result<NextJob> {
        let call = MoveToActive {
            keys: self.keys(),
            // Redis's time: promotes exactly the jobs due on the clock the
            // due timer waited on (docs/worker.md §Due timer).
            now: EpochMs(self.hints.clock().now_ms()),
            fetch: self.fetch_opts(token),
        };
        self.conn().call(&call).await
    }
}
