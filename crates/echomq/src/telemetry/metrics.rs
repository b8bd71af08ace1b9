//! Runtime metrics through the `metrics` facade (feature `metrics`): every
//! name EchoMQ records, what it means, and the one place each is recorded.
//!
//! The runtime records into whatever recorder the process installed
//! (`metrics-exporter-prometheus`, a StatsD bridge, …); with none installed,
//! or without the feature, every call here does nothing. Components build a
//! [`QueueMetrics`] once per queue at start, so the hot path touches
//! pre-registered handles and never allocates a label. A recorder installed
//! after a component started is not seen by that component: install it
//! first (the CLI does). The list with units and alert suggestions is in
//! `docs/operations.md §Metrics`.

/// Attempts that ended in a transition (completed, failed, retried, delayed,
/// put back by a rate limit; not a job moved back at shutdown): counter, `queue`.
pub const JOBS_PROCESSED: &str = "echomq_jobs_processed_total";
/// Jobs completed: counter, `queue`.
pub const JOBS_COMPLETED: &str = "echomq_jobs_completed_total";
/// Jobs failed for good (no attempt left, or unrecoverable): counter, `queue`.
pub const JOBS_FAILED: &str = "echomq_jobs_failed_total";
/// Failed attempts that will be retried (now or after a backoff): counter, `queue`.
pub const JOBS_RETRIED: &str = "echomq_jobs_retried_total";
/// Time the processor ran on one attempt: histogram (seconds), `queue`.
pub const JOB_DURATION: &str = "echomq_job_duration_seconds";
/// From the time a job became due (its timestamp plus its delay) to the
/// start of an attempt: histogram (seconds), `queue`.
pub const JOB_WAIT: &str = "echomq_job_wait_seconds";
/// Locks the LockManager held at its last renewal tick: gauge, `queue`.
pub const LOCKS_HELD: &str = "echomq_locks_held";
/// Locks extended by renewal ticks: counter, `queue`.
pub const LOCK_RENEWALS: &str = "echomq_lock_renewals_total";
/// Duration of one renewal call (`extendLocks`, every held lock at once):
/// histogram (seconds), `queue`.
pub const LOCK_RENEWAL_DURATION: &str = "echomq_lock_renewal_duration_seconds";
/// Locks a renewal found gone or taken (the job's processor is cancelled):
/// counter, `queue`.
pub const LOCKS_LOST: &str = "echomq_locks_lost_total";
/// Stalled-job sweeps run by this process: counter, `queue`.
pub const STALLED_SWEEPS: &str = "echomq_stalled_sweeps_total";
/// Stalled jobs moved back to wait by this process's sweeps: counter, `queue`.
pub const STALLED_RECOVERED: &str = "echomq_stalled_jobs_recovered_total";
/// Duration of one stalled sweep (probe and script): histogram (seconds), `queue`.
pub const STALLED_SWEEP_DURATION: &str = "echomq_stalled_sweep_duration_seconds";
/// Scheduler iterations created by this process's workers (the successor
/// of an iteration taken): counter, `queue`.
pub const SCHEDULER_CREATED: &str = "echomq_scheduler_iterations_created_total";
/// Missing scheduler iterations re-created by the reconciliation sweep:
/// counter, `queue`.
pub const SCHEDULER_RESTORED: &str = "echomq_scheduler_iterations_restored_total";
/// Age of the last event a QueueEvents delivered, at delivery (its stream
/// id's time against this host's clock): gauge (seconds), `queue`.
pub const EVENTS_LAG: &str = "echomq_queue_events_lag_seconds";
/// Events a slow subscriber missed (then told as `Lagged`): counter, `queue`.
pub const EVENTS_LAGGED: &str = "echomq_queue_events_lagged_total";
/// Possible gaps in the event stream (the cursor trimmed away, told as
/// `Gap`): counter, `queue`.
pub const EVENTS_GAPS: &str = "echomq_queue_events_gaps_total";
/// Reconnections of the shared pool's clients: counter, no label.
pub const RECONNECTS: &str = "echomq_redis_reconnects_total";

pub(crate) use imp::watch_reconnects;
pub use imp::QueueMetrics;

/// Registers the description and unit of every metric above with the
/// installed recorder (an exporter prints them as `# HELP`). Call once after
/// installing it; without the feature it does nothing.
pub fn describe() {
    imp::describe()
}

#[cfg(feature = "metrics")]
mod imp {
    use std::sync::Arc;
    use std::time::Duration;

    use metrics::{
        counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
        Gauge, Histogram, Unit,
    };

    use super::*;

    /// Pre-registered handles of one queue's metrics. Cheap to clone.
    #[derive(Clone)]
    pub struct QueueMetrics(Arc<Handles>);

    struct Handles {
        processed: Counter,
        completed: Counter,
        failed: Counter,
        retried: Counter,
        duration: Histogram,
        wait: Histogram,
        locks_held: Gauge,
        renewals: Counter,
        renewal_duration: Histogram,
        locks_lost: Counter,
        sweeps: Counter,
        recovered: Counter,
        sweep_duration: Histogram,
        created: Counter,
        restored: Counter,
        events_lag: Gauge,
        events_lagged: Counter,
        events_gaps: Counter,
    }

    impl std::fmt::Debug for QueueMetrics {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("QueueMetrics")
        }
    }

    impl QueueMetrics {
        /// The handles of `queue`, registered with the recorder installed now.
        pub fn new(queue: &str) -> Self {
            let q = || [("queue", queue.to_owned())];
            QueueMetrics(Arc::new(Handles {
                processed: counter!(JOBS_PROCESSED, &q()),
                completed: counter!(JOBS_COMPLETED, &q()),
                failed: counter!(JOBS_FAILED, &q()),
                retried: counter!(JOBS_RETRIED, &q()),
                duration: histogram!(JOB_DURATION, &q()),
                wait: histogram!(JOB_WAIT, &q()),
                locks_held: gauge!(LOCKS_HELD, &q()),
                renewals: counter!(LOCK_RENEWALS, &q()),
                renewal_duration: histogram!(LOCK_RENEWAL_DURATION, &q()),
                locks_lost: counter!(LOCKS_LOST, &q()),
                sweeps: counter!(STALLED_SWEEPS, &q()),
                recovered: counter!(STALLED_RECOVERED, &q()),
                sweep_duration: histogram!(STALLED_SWEEP_DURATION, &q()),
                created: counter!(SCHEDULER_CREATED, &q()),
                restored: counter!(SCHEDULER_RESTORED, &q()),
                events_lag: gauge!(EVENTS_LAG, &q()),
                events_lagged: counter!(EVENTS_LAGGED, &q()),
                events_gaps: counter!(EVENTS_GAPS, &q()),
            }))
        }

        /// An attempt of `job` starts: how long after it became due (its
        /// timestamp plus its delay; for a retried job that includes the
        /// earlier attempts).
        pub fn job_started(&self, job: &echomq_protocol::Job) {
            let due = job.timestamp.saturating_add(job.delay.max(0) as u64);
            let wait = crate::clock::now_ms().saturating_sub(due);
            self.0.wait.record(wait as f64 / 1000.0);
        }

        /// The processor returned (or panicked) after `ran`.
        pub fn job_ran(&self, ran: Duration) {
            self.0.duration.record(ran.as_secs_f64());
        }

        /// An attempt ended in a transition; `completed` when it completed.
        pub fn job_transition(&self, completed: bool) {
            self.0.processed.increment(1);
            if completed {
                self.0.completed.increment(1);
            }
        }

        /// An attempt failed: retried, or failed for good.
        pub fn job_failed(&self, retrying: bool) {
            if retrying {
                self.0.retried.increment(1);
            } else {
                self.0.failed.increment(1);
            }
        }

        /// A renewal tick: `held` locks sent, `lost` of them gone, in `took`.
        pub fn locks_renewed(&self, held: usize, lost: usize, took: Duration) {
            self.0.locks_held.set(held as f64);
            self.0.renewals.increment(held.saturating_sub(lost) as u64);
            self.0.locks_lost.increment(lost as u64);
            self.0.renewal_duration.record(took.as_secs_f64());
        }

        /// A tick with nothing to renew.
        pub fn no_locks_held(&self) {
            self.0.locks_held.set(0.0);
        }

        /// A stalled sweep ended after `took`, recovering `recovered` jobs
        /// (`None` when it failed).
        pub fn stalled_sweep(&self, recovered: Option<usize>, took: Duration) {
            self.0.sweeps.increment(1);
            self.0.recovered.increment(recovered.unwrap_or(0) as u64);
            self.0.sweep_duration.record(took.as_secs_f64());
        }

        /// A worker created the next iteration of a scheduler.
        pub fn iteration_created(&self) {
            self.0.created.increment(1);
        }

        /// A sweep re-created `n` missing iterations.
        pub fn iterations_restored(&self, n: usize) {
            self.0.restored.increment(n as u64);
        }

        /// A QueueEvents delivered a batch whose last entry was written at
        /// `event_ms` (its stream id's time), with a gap before it or not.
        pub fn events_delivered(&self, event_ms: Option<u64>, gap: bool) {
            if let Some(at) = event_ms {
                let lag = crate::clock::now_ms().saturating_sub(at);
                self.0.events_lag.set(lag as f64 / 1000.0);
            }
            if gap {
                self.0.events_gaps.increment(1);
            }
        }

        /// Slow subscribers missed `n` deliveries of one batch.
        pub fn events_missed(&self, n: u64) {
            self.0.events_lagged.increment(n);
        }
    }

    /// Counts the reconnections of `pool`'s clients, for as long as they live.
    pub(crate) fn watch_reconnects(pool: &fred::prelude::Pool) {
        use fred::interfaces::EventInterface;
        let reconnects = counter!(RECONNECTS);
        for client in pool.clients() {
            let c = reconnects.clone();
            // The task ends when the client is dropped (its event channel closes).
            drop(client.on_reconnect(move |_| {
                c.increment(1);
                async { Ok(()) }
            }));
        }
    }

    pub(super) fn describe() {
        let c = |name: &'static str, text: &'static str| describe_counter!(name, Unit::Count, text);
        let s =
            |name: &'static str, text: &'static str| describe_histogram!(name, Unit::Seconds, text);
        c(
            JOBS_PROCESSED,
            "Attempts that ended in a transition (completed, failed, retried, delayed, put back by a rate limit)",
        );
        c(JOBS_COMPLETED, "Jobs completed");
        c(JOBS_FAILED, "Jobs failed for good");
        c(JOBS_RETRIED, "Failed attempts that will be retried");
        s(JOB_DURATION, "Time the processor ran on one attempt");
        s(JOB_WAIT, "Time from a job being due to an attempt starting");
        describe_gauge!(
            LOCKS_HELD,
            Unit::Count,
            "Locks held at the last renewal tick"
        );
        c(LOCK_RENEWALS, "Locks extended by renewal ticks");
        s(
            LOCK_RENEWAL_DURATION,
            "Duration of one renewal call (every held lock at once)",
        );
        c(LOCKS_LOST, "Locks found gone or taken at renewal");
        c(STALLED_SWEEPS, "Stalled-job sweeps run");
        c(STALLED_RECOVERED, "Stalled jobs moved back to wait");
        s(STALLED_SWEEP_DURATION, "Duration of one stalled-job sweep");
        c(SCHEDULER_CREATED, "Scheduler iterations created by workers");
        c(
            SCHEDULER_RESTORED,
            "Missing scheduler iterations re-created by the sweep",
        );
        describe_gauge!(
            EVENTS_LAG,
            Unit::Seconds,
            "Age of the last event delivered by QueueEvents, at delivery"
        );
        c(EVENTS_LAGGED, "Events slow subscribers missed");
        c(
            EVENTS_GAPS,
            "Possible gaps in the event stream (cursor trimmed away)",
        );
        c(
            RECONNECTS,
            "Reconnections of the shared Redis pool's clients",
        );
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use std::time::Duration;

    /// Without the `metrics` feature: nothing is recorded.
    #[derive(Clone, Debug)]
    pub struct QueueMetrics;

    #[allow(missing_docs)]
    impl QueueMetrics {
        #[inline]
        pub fn new(_queue: &str) -> Self {
            QueueMetrics
        }
        #[inline]
        pub fn job_started(&self, _job: &echomq_protocol::Job) {}
        #[inline]
        pub fn job_ran(&self, _ran: Duration) {}
        #[inline]
        pub fn job_transition(&self, _completed: bool) {}
        #[inline]
        pub fn job_failed(&self, _retrying: bool) {}
        #[inline]
        pub fn locks_renewed(&self, _held: usize, _lost: usize, _took: Duration) {}
        #[inline]
        pub fn no_locks_held(&self) {}
        #[inline]
        pub fn stalled_sweep(&self, _recovered: Option<usize>, _took: Duration) {}
        #[inline]
        pub fn iteration_created(&self) {}
        #[inline]
        pub fn iterations_restored(&self, _n: usize) {}
        #[inline]
        pub fn events_delivered(&self, _event_ms: Option<u64>, _gap: bool) {}
        #[inline]
        pub fn events_missed(&self, _n: u64) {}
    }

    #[inline]
    pub(crate) fn watch_reconnects(_pool: &fred::prelude::Pool) {}

    pub(super) fn describe() {}
}
