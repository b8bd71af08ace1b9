//! Queue-wide operations as many bounded calls: drain, clean, bulk retry and
//! promotion, obliterate. Each call touches at most one chunk of jobs, so
//! Redis serves other clients between them whatever the queue holds, and a
//! caller sees progress after every chunk (docs/scale.md §Chunked
//! operations). All of them are resumable: their state is the queue itself,
//! so running one again after an interruption goes on with what is left.

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

impl Queue {
    /// [`Queue::drain`] in steps of `chunk` jobs, telling `progress` after
    /// each. Removes what `wait`, `paused`, `prioritized` (and `delayed`
    /// when asked) held when it began, each job as drain-5 removes it,
    /// sparing current scheduler iterations in place. Returns the number
    /// removed.
    pub async fn drain_chunked(
        &self,
        include_delayed: bool,
        chunk: u64,
        mut progress: impl FnMut(Progress),
    ) -> Result<u64> {
        let chunk = chunk.max(1);
        let mut targets = vec![DrainTarget::Wait, DrainTarget::Paused];
        if include_delayed {
            targets.push(DrainTarget::Delayed);
        }
        targets.push(DrainTarget::Prioritized);
        let suffixes: Vec<&str> = targets.iter().map(|t| t.key_suffix()).collect();
        let sizes = self
            .conn
            .call(&GetCounts {
                keys: &self.keys,
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
                let step = self
                    .conn
                    .call(&DrainChunk {
                        keys: &self.keys,
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

    /// Deletes the jobs of `state` older than `grace`, `chunk` per call
    /// (cleanJobsInSet with a limit), at most `limit` in all (0: every one),
    /// telling `progress` after each call. Returns the number deleted.
    ///
    /// Each call looks at the oldest candidates left, as Node's
    /// `clean(grace, chunk)`; the first call that deletes fewer than it may
    /// ends the clean (the rest is younger, or a window of locked active jobs
    /// or current scheduler iterations blocks it).
    pub async fn clean_chunked(
        &self,
        grace: Duration,
        state: JobState,
        limit: u64,
        chunk: u64,
        mut progress: impl FnMut(Progress),
    ) -> Result<u64> {
        if state == JobState::Unknown {
            return Err(ValidationError::Option {
                option: "state",
                reason: "cannot clean the unknown state".into(),
            }
            .into());
        }
        let chunk = chunk.max(1);
        let total = self.count_states(&[state]).await?[0];
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
            let deleted = self
                .conn
                .call(&CleanJobsInSet {
                    keys: &self.keys,
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

    /// [`Queue::retry_jobs`], telling `progress` after every call.
    pub async fn retry_jobs_with(
        &self,
        state: FinishTarget,
        count: u64,
        finished_before_ms: Option<u64>,
        progress: impl FnMut(Progress),
    ) -> Result<u64> {
        let from = match state {
            FinishTarget::Failed => BulkSource::Failed,
            FinishTarget::Completed => BulkSource::Completed,
        };
        let until = finished_before_ms.unwrap_or_else(crate::clock::now_ms);
        self.move_jobs_to_wait_with(from, count, Some(until), progress)
            .await
    }

    /// [`Queue::promote_all`], telling `progress` after every call.
    pub async fn promote_all_with(
        &self,
        count: u64,
        progress: impl FnMut(Progress),
    ) -> Result<u64> {
        self.move_jobs_to_wait_with(BulkSource::Delayed, count, None, progress)
            .await
    }

    /// moveJobsToWait, `count` per call, until the eligible jobs are moved.
    /// Returns the number eligible when it began.
    pub(super) async fn move_jobs_to_wait_with(
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

    /// [`Queue::obliterate`] with `chunk` jobs per call, telling `progress`
    /// after each. Resumable: a queue left half obliterated is still paused,
    /// and obliterating it again goes on.
    pub async fn obliterate_with(
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
