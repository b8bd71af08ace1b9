//! Deduplication ids of a queue: who owns one, and freeing it
//! (docs/protocol.md §Deduplication).

use echomq_protocol::call::dedup::RemoveDeduplicationKey;
use echomq_protocol::job::field;
use fred::prelude::{HashesInterface, KeysInterface};

use super::handles::Dedup;
use crate::error::{Error, Result};

impl Dedup<'_> {
    /// The id of the job that currently owns deduplication id `dedup_id`
    /// (adds with that id are dropped in its favour), `None` when no job does.
    pub async fn get_deduplication_job_id(self, dedup_id: &str) -> Result<Option<String>> {
        Ok(self
            .queue
            .conn
            .pool()
            .get(self.queue.keys.dedup(dedup_id))
            .await?)
    }

    /// Frees deduplication id `dedup_id` whoever owns it, so the next add with
    /// it is stored (BullMQ's `queue.removeDeduplicationKey`). Answers whether
    /// there was a key to delete.
    pub async fn remove_deduplication_key(self, dedup_id: &str) -> Result<bool> {
        let removed: i64 = self
            .queue
            .conn
            .pool()
            .del(self.queue.keys.dedup(dedup_id))
            .await?;
        Ok(removed > 0)
    }

    /// Frees the deduplication id of job `job_id` only while that job still
    /// owns it (BullMQ's `job.removeDeduplicationKey`): a key another job has
    /// claimed since is left alone. `false` when the job has no deduplication
    /// id or no longer owns it; [`Error::JobNotFound`] when the job is gone.
    pub async fn remove_job_deduplication_key(self, job_id: &str) -> Result<bool> {
        let dedup_id: Option<String> = self
            .queue
            .conn
            .pool()
            .hget(self.queue.keys.job(job_id), field::DEDUPLICATION_ID)
            .await?;
        let Some(dedup_id) = dedup_id else {
            if !self.queue.job_exists(job_id).await? {
                return Err(Error::JobNotFound(job_id.to_owned()));
            }
            return Ok(false);
        };
        let call = RemoveDeduplicationKey {
            keys: &self.queue.keys,
            dedup_id: &dedup_id,
            job_id,
        };
        self.queue.conn.call(&call).await
    }
}
