//! Queue-wide operations as many bounded calls: drain, clean, bulk retry and
//! promotion, obliterate. Each call touches at most one chunk of jobs, so
//! Redis serves other clients between them whatever the queue holds, and a
//! caller sees progress after every chunk (docs/scale.md §Chunked
//! operations). All of them are resumable: their state is the queue itself,
//! so running one again after an interruption goes on with what is left.
//!
//! One spelling for all of them: `queue.chunked(size)` answers a
//! [`Chunked`] whose methods are the operations, with
//! [`Chunked::on_progress`] to hear of each call. The plain `Queue::drain`,
//! `clean` and `obliterate` stay one-liners for the common case.

use std::time::Duration;

use echomq_protocol::call::admin::{
    BulkSource, CleanJobsInSet, GetCounts, MoveJobsToWait, Obliterate, ObliterateStep,
};
use echomq_protocol::call::chunked::{DrainChunk, DrainTarget};
use echomq_protocol::validate::ValidationError;
use echomq_protocol::{FinishTarget, ScriptId};
use fred::prelude::SortedSetsInterface;

use super::handle::Queue;
use super::types::JobState;
use crate::error::{Error, Result};

/// Jobs one call of a chunked operation may touch, by default. Removing a
/// job costs Redis up to ~37 µs (its hash, logs, dependencies and its entry:
/// `cleanJobsInSet-3` of 1 000 took 36.9 ms, docs/benchmarks.md §Scale), so
/// 250 keeps one call near the few-ms budget of docs/scale.md.
pub const DEFAULT_CHUNK: u64 = 250;

/// How far a chunked operation got, after each of its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Jobs handled so far (removed, moved, deleted).
    pub done: u64,
    /// Jobs there were to handle when it began (an estimate on a live
    /// queue: others may add or take jobs meanwhile).
    pub total: u64,
    /// Script calls made so far.
    pub calls: u64,
}

/// A queue-wide operation run in calls of at most `size` jobs each,
/// telling a progress callback after every call: `queue.chunked(250)`
/// (see the module docs). Borrowed from a [`Queue`]; consumed by the
/// operation it runs.
pub struct Chunked<'q, F = fn(Progress)> {
    queue: &'q Queue,
    size: u64,
    progress: F,
}

impl std::fmt::Debug for Chunked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunked")
            .field("queue", &self.queue.name())
            .field("size", &self.size)
            .finish()
    }
}

impl Queue {
    /// The queue-wide operations (drain, clean, obliterate, bulk retry and
    /// promotion) in calls of `size` jobs each, with progress after every
    /// call.
    pub fn chunked(&self, size: u64) -> Chunked<'_> {
        Chunked {
            queue: self,
            size,
            progress: |_| {},
        }
    }
}

impl<'q, F: FnMut(Progress)> Chunked<'q, F> {
    /// Tells `progress` after every call of the operation.
    pub fn on_progress<G: FnMut(Progress)>(self, progress: G) -> Chunked<'q, G> {
        Chunked {
            queue: self.queue,
            size: self.size,
            progress,
        }
    }

    /// [`Queue::drain`] in steps of the chunk size. Removes what `wait`,
    /// `paused`, `prioritized` (and `delayed` when asked) held when it
    /// began, each job as drain-5 removes it, sparing current scheduler
    /// iterations in place. Returns the number removed.
    pub async fn drain(self, include_delayed: bool) -> Result<u64> {
        let Chunked {
            queue,
            size: chunk,
            mut progress,
        } = self;
        let chunk = chunk.max(1);
        let mut targets = vec![DrainTarget::Wait, DrainTarget::Paused];
        if include_delayed {
            targets.push(DrainTarget::Delayed);
        }
        targets.push(DrainTarget::Prioritized);
        let suffixes: Vec<&str> = targets.iter().map(|t| t.key_suffix()).collect();
        let sizes = queue
            .conn
            .call(&GetCounts {
                keys: &queue.keys,
                states: &suffixes,
                delayed_before: None,
            })
            .await?;
        let mut p = Progress {
            total: sizes.iter().sum(),
            ..Progress::default()
        };
        for (target, size) in targets.into_iter().zip(sizes) {
            // Jobs added at the head meanwhile are not the drain's: stop once
            // as many ids as the structure held have been looked at.
            let (mut spared, mut looked) = (0u64, 0u64);
            while looked < size {
                let step = queue
                    .conn
                    .call(&DrainChunk {
                        keys: &queue.keys,
                        target,
                        spared_before: spared,
                        budget: chunk.min(size - looked),
                    })
                    .await?;
                p.calls += 1;
                p.done += step.removed;
                progress(p);
                spared += step.spared;
                looked += step.looked_at;
                if step.looked_at == 0 {
                    break;
                }
            }
        }
        Ok(p.done)
    }

    /// Deletes the jobs of `state` older than `grace`, a chunk per call
    /// (cleanJobsInSet with a limit), at most `limit` in all (0: every one).
    /// Returns the number deleted (not the ids: [`Queue::clean`] lists them).
    ///
    /// Each call looks at the oldest candidates left, as Node's
    /// `clean(grace, chunk)`; the first call that deletes fewer than it may
    /// ends the clean (the rest is younger, or a window of locked active jobs
    /// or current scheduler iterations blocks it).
    pub async fn clean(self, grace: Duration, state: JobState, limit: u64) -> Result<u64> {
        let Chunked {
            queue,
            size: chunk,
            mut progress,
        } = self;
        if state == JobState::Unknown {
            return Err(ValidationError::Option {
                option: "state",
                reason: "cannot clean the unknown state".into(),
            }
            .into());
        }
        let chunk = chunk.max(1);
        let total = queue.count_states(&[state]).await?[0];
        let mut p = Progress {
            total: if limit == 0 { total } else { total.min(limit) },
            ..Progress::default()
        };
        let cutoff_ms = crate::clock::now_ms().saturating_sub(grace.as_millis() as u64);
        loop {
            let want = if limit == 0 {
                chunk
            } else {
                chunk.min(limit - p.done)
            };
            if want == 0 {
                break;
            }
            let deleted = queue
                .conn
                .call(&CleanJobsInSet {
                    keys: &queue.keys,
                    state: state.key_suffix(),
                    cutoff_ms,
                    limit: want,
                })
                .await?
                .len() as u64;
            p.calls += 1;
            p.done += deleted;
            progress(p);
            if deleted < want {
                break;
            }
        }
        Ok(p.done)
    }

    /// Node's `queue.retryJobs({state, count, timestamp})` with the chunk
    /// size as `count`: moves every job of `state` that finished at or
    /// before `finished_before_ms` (default now) to the head of wait, a
    /// chunk per script call. Priorities and `lifo` are ignored and attempt
    /// counters kept, and a retried flow child is pending for its parent
    /// again, as in BullMQ 6.7.0. Returns the number of jobs eligible when
    /// the call began (concurrent changes by others may make the number
    /// actually moved differ). A chunk of 0 moves nothing (Node would loop
    /// forever).
    pub async fn retry_jobs(
        self,
        state: FinishTarget,
        finished_before_ms: Option<u64>,
    ) -> Result<u64> {
        let from = match state {
            FinishTarget::Failed => BulkSource::Failed,
            FinishTarget::Completed => BulkSource::Completed,
        };
        let until = finished_before_ms.unwrap_or_else(crate::clock::now_ms);
        self.queue
            .move_jobs_to_wait(from, self.size, Some(until), self.progress)
            .await
    }

    /// Node's `queue.promoteJobs({count})` with the chunk size as `count`:
    /// moves every delayed job to the head of wait, a chunk per script
    /// call. Unlike [`Queue::promote`] a job's priority is ignored and its
    /// `delay` field kept, as in BullMQ 6.7.0. Returns the number of
    /// delayed jobs when the call began; a chunk of 0 moves nothing.
    pub async fn promote_all(self) -> Result<u64> {
        self.queue
            .move_jobs_to_wait(BulkSource::Delayed, self.size, None, self.progress)
            .await
    }

    /// [`Queue::obliterate`] with a chunk of jobs per call. Resumable: a
    /// queue left half obliterated is still paused, and obliterating it
    /// again goes on.
    pub async fn obliterate(self, force: bool) -> Result<()> {
        let chunk = u32::try_from(self.size.max(1)).unwrap_or(u32::MAX);
        self.queue.obliterate_in(force, chunk, self.progress).await
    }
}

impl Queue {
    /// moveJobsToWait, `count` per call, until the eligible jobs are moved.
    /// Returns the number eligible when it began.
    async fn move_jobs_to_wait(
        &self,
        from: BulkSource,
        count: u64,
        until_ms: Option<u64>,
        mut progress: impl FnMut(Progress),
    ) -> Result<u64> {
        if count == 0 {
            return Ok(0);
        }
        let call = MoveJobsToWait {
            keys: &self.keys,
            from,
            count,
            until_ms,
        };
        let eligible = self.eligible(from, until_ms).await?;
        let mut p = Progress {
            total: eligible,
            ..Progress::default()
        };
        loop {
            let more = self.conn.call(&call).await?;
            p.calls += 1;
            // Counted on the server (O(log n)): a moved job leaves the set.
            p.done = eligible.saturating_sub(self.eligible(from, until_ms).await?);
            progress(p);
            if !more {
                break;
            }
        }
        Ok(eligible)
    }

    async fn eligible(&self, from: BulkSource, until_ms: Option<u64>) -> Result<u64> {
        let set = self.keys.key(from.key_suffix());
        let pool = self.conn.pool();
        Ok(match until_ms {
            Some(ms) => pool.zcount(set, 0.0, ms as f64).await?,
            None => pool.zcard(set).await?,
        })
    }

    /// Obliterate, `chunk` jobs per call, telling `progress` after each.
    async fn obliterate_in(
        &self,
        force: bool,
        chunk: u32,
        mut progress: impl FnMut(Progress),
    ) -> Result<()> {
        self.pause().await?;
        let remaining = |c: super::types::JobCounts| {
            c.waiting + c.prioritized + c.delayed + c.active + c.completed + c.failed
        };
        let total = remaining(self.counts().await?);
        let mut p = Progress {
            total,
            ..Progress::default()
        };
        let call = Obliterate {
            keys: &self.keys,
            max_jobs: chunk.max(1),
            force,
        };
        loop {
            let step = self.conn.call(&call).await?;
            p.calls += 1;
            match step {
                ObliterateStep::Done => {
                    p.done = total;
                    progress(p);
                    return Ok(());
                }
                ObliterateStep::Again => {
                    p.done = total.saturating_sub(remaining(self.counts().await?));
                    progress(p);
                }
                ObliterateStep::NotPaused => {
                    return Err(Error::protocol(
                        ScriptId::Obliterate.name(),
                        "queue is not paused",
                    ))
                }
                ObliterateStep::ActiveJobs => return Err(Error::ActiveJobs),
            }
        }
    }
}
