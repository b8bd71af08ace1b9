//! The [`Queue`] handle: opening a queue (its meta hash), and the reads
//! every other part of the queue module builds on. The operations live by
//! topic beside it: `add`, `admin`, `dedup`, `edit`, `flows`, `getters`,
//! `limits`.

use std::collections::{HashMap, HashSet};

use echomq_protocol::call::admin::{
    FinishedReply, GetCounts, GetRanges, GetStateBounded, IsFinished, RangeOrder,
};
use echomq_protocol::call::getters::GetJobs;
use echomq_protocol::{Job, QueueKeys, PROTOCOL_VERSION};
use fred::prelude::{ClientLike, HashesInterface, KeysInterface};

use super::types::{Finished, JobCounts, JobState, QueueOptions};
use crate::connection::pool::Connection;
use crate::error::{Error, Result};

/// Meta hash fields the queue handle writes or reads.
mod meta {
    /// Approximate length of the events stream.
    pub const MAX_LEN_EVENTS: &str = "opts.maxLenEvents";
    /// Protocol version of the last client that opened the queue.
    pub const VERSION: &str = "version";
    /// Present while the queue is paused.
    pub const PAUSED: &str = "paused";
}

/// Entries of a list [`Queue::get_job_state`] searches from each end.
const STATE_SEARCH_REACH: u64 = 1000;

/// The producer and admin handle of one queue. Cheap to clone; all clones share
/// the [`Connection`].
#[derive(Clone, Debug)]
pub struct Queue {
    pub(crate) conn: Connection,
    pub(crate) keys: QueueKeys,
    pub(crate) options: QueueOptions,
    /// Concurrent adds in flight and waiting to be grouped, shared by the
    /// handle's clones (`coalesce.rs`).
    pub(crate) adds: std::sync::Arc<super::coalesce::AddGroups>,
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
            adds: Default::default(),
        };
        if !q.options.skip_meta_update {
            let max_len = q.options.max_len_events.to_string();
            q.conn
                .pool()
                .hset::<(), _, _>(
                    q.keys.meta(),
                    [
                        (meta::MAX_LEN_EVENTS, max_len.as_str()),
                        (meta::VERSION, PROTOCOL_VERSION),
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

    /// How this handle stores payloads: decode a job's data read through
    /// [`Queue::get_job`] with `queue.codec().load(&job.data).await` (which
    /// also reads offloaded payloads) or, inline ones only, `decode`.
    #[cfg(feature = "codec")]
    pub fn codec(&self) -> &crate::codec::CodecOptions {
        &self.options.codec
    }

    /// One bounded sweep of the blobs this queue's payloads were offloaded
    /// to (docs/operations.md §Memory): of at most `page` blobs not found in
    /// use for `grace`, those no job holds any more (removed by retention or
    /// any client, replaced, or never added) are deleted from the store.
    /// Call again while `examined` equals the page. Without offload
    /// configured, [`Error::Config`].
    #[cfg(feature = "codec")]
    pub async fn collect_blobs(
        &self,
        grace: std::time::Duration,
        page: u64,
    ) -> Result<crate::codec::BlobSweep> {
        let Some(off) = &self.options.codec.offload else {
            return Err(Error::Config(
                "collect_blobs needs an offload store (CodecOptions::offload)".into(),
            ));
        };
        crate::codec::offload::refs::collect(
            &self.conn,
            &self.keys,
            off,
            grace.as_millis() as u64,
            page,
        )
        .await
    }

    /// The shared connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Reads a job, `None` when it does not exist.
    pub async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        let hash: HashMap<String, String> = self.conn.pool().hgetall(self.keys.job(id)).await?;
        if hash.is_empty() {
            return Ok(None);
        }
        Ok(Some(Job::from_hash(id, hash)?))
    }

    /// Whether a job's hash exists.
    pub async fn job_exists(&self, id: &str) -> Result<bool> {
        Ok(self.conn.pool().exists::<i64, _>(self.keys.job(id)).await? == 1)
    }

    /// The state of job `id` by BullMQ's name (`getJobState`);
    /// [`JobState::Unknown`] when it does not exist. Long lists are searched
    /// a bounded distance from each end (getStateBounded, docs/scale.md
    /// §Getters): the answer is getStateV2's, except that a job hash in no
    /// structure at all reads `Waiting` while a list holds more than 2000 ids.
    pub async fn get_job_state(&self, id: &str) -> Result<JobState> {
        let call = GetStateBounded {
            keys: &self.keys,
            id,
            reach: STATE_SEARCH_REACH,
        };
        Ok(JobState::parse(&self.conn.call(&call).await?))
    }

    /// Whether the queue is paused.
    pub async fn is_paused(&self) -> Result<bool> {
        Ok(self
            .conn
            .pool()
            .hexists(self.keys.meta(), meta::PAUSED)
            .await?)
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
        let suffixes: Vec<&str> = states.iter().map(|s| s.key_suffix()).collect();
        let call = GetCounts {
            keys: &self.keys,
            states: &suffixes,
            delayed_before: None,
        };
        self.conn.call(&call).await
    }

    /// A return value through this handle's codec: decoded (an offloaded
    /// one read from the store) when this handle can, else as it is (with a
    /// warning when it is an envelope that cannot be opened).
    pub(crate) async fn decoded(&self, value: serde_json::Value) -> serde_json::Value {
        #[cfg(feature = "codec")]
        match self.options.codec.load(&value).await {
            None => {}
            Some(Ok(v)) => return v,
            Some(Err(e)) => {
                tracing::warn!(queue = %self.name(), error = %e, "return value left encoded: it cannot be decoded")
            }
        }
        value
    }

    /// Whether a job finished, with its result (decoded through the
    /// handle's codec) or failure reason.
    pub async fn is_finished(&self, id: &str) -> Result<Finished> {
        let call = IsFinished {
            keys: &self.keys,
            id,
        };
        match self.conn.call(&call).await {
            Ok(FinishedReply::No) => Ok(Finished::No),
            // A return value that is not JSON (foreign writer) reads as null.
            Ok(FinishedReply::Completed(json)) => Ok(Finished::Completed(
                self.decoded(serde_json::from_str(&json).unwrap_or(serde_json::Value::Null))
                    .await,
            )),
            Ok(FinishedReply::Failed(reason)) => Ok(Finished::Failed(reason)),
            Err(Error::Script {
                code: echomq_protocol::ScriptErrorCode::JobNotExist,
                ..
            }) => Err(Error::JobNotFound(id.to_owned())),
            Err(e) => Err(e),
        }
    }

    /// Job ids in the given states, `start..=end` of each, in `order`
    /// (getRanges). Ids are unique in the result.
    pub async fn get_ranges(
        &self,
        states: &[JobState],
        start: i64,
        end: i64,
        order: RangeOrder,
    ) -> Result<Vec<String>> {
        let suffixes: Vec<&str> = states.iter().map(|s| s.key_suffix()).collect();
        let call = GetRanges {
            keys: &self.keys,
            start,
            end,
            order,
            states: &suffixes,
        };
        let per_state = if super::range::is_large(start, end) {
            let mut all = Vec::with_capacity(states.len());
            for state in states {
                all.push(
                    self.get_ranges_paged(*state, start, end, call.order)
                        .await?,
                );
            }
            all
        } else {
            self.conn.call(&call).await?
        };
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (state, mut ids) in states.iter().zip(per_state) {
            // Lists hold the newest at the head; the script returns an ascending
            // list range head-first, so it is reversed here, as Node does.
            if order == RangeOrder::Ascending && state.is_list() {
                ids.reverse();
            }
            out.extend(ids.into_iter().filter(|id| seen.insert(id.clone())));
        }
        Ok(out)
    }

    /// Jobs in the given states, `start..=end` of each, in `order`, read with their hashes in one atomic call (getJobs, as
    /// BullMQ's `getJobs`): ids whose hash is gone are skipped and a bounded
    /// page is refilled from the ids after it. A job is listed once.
    pub async fn get_jobs(
        &self,
        states: &[JobState],
        start: i64,
        end: i64,
        order: RangeOrder,
    ) -> Result<Vec<Job>> {
        let mut suffixes: Vec<&str> = Vec::with_capacity(states.len());
        for s in states.iter().map(|s| s.key_suffix()) {
            if !suffixes.contains(&s) {
                suffixes.push(s);
            }
        }
        let call = GetJobs {
            keys: &self.keys,
            start,
            end,
            order,
            states: &suffixes,
        };
        // A large range goes page by page (docs/scale.md), one state at a time.
        let entries = if super::range::is_large(start, end) {
            let mut all = Vec::new();
            for state in &suffixes {
                all.extend(self.get_jobs_paged(state, start, end, call.order).await?);
            }
            all
        } else {
            self.conn.call(&call).await?.into_iter().flatten().collect()
        };
        let mut seen = HashSet::new();
        let mut jobs = Vec::new();
        for (id, fields) in entries {
            if seen.insert(id.clone()) {
                jobs.push(Job::from_hash(&id, fields.into_iter().collect())?);
            }
        }
        Ok(jobs)
    }
}

/// Scripts build job keys from the prefix, so on Redis Cluster every key of a
/// queue must hash to one slot (docs/decisions.md §4 Key layout). Refuse a
/// layout that would cross slots, saying how to fix it.
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
