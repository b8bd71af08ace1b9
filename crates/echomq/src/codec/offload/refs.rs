//! The Redis side of offload: every blob written is stamped in `{P}blobs`
//! before it is written (so a producer that dies half-way leaves a blob the
//! sweep finds), and given its job in `{P}blobs:owner` once the job's id is
//! known; the sweep deletes what no job uses.

use echomq_protocol::call::lifecycle::EpochMs;
use echomq_protocol::call::offload::{blobs_key, owners_key, CollectBlobs};
use echomq_protocol::keys::QueueKeys;
use fred::prelude::{HashesInterface, SortedSetsInterface};

use super::OffloadOptions;
use crate::connection::pool::Connection;
use crate::error::Result;

/// Stamps a blob about to be written with now, and gives it its job when
/// the id is already known (a return value's): one round trip.
pub(crate) async fn announce(
    conn: &Connection,
    keys: &QueueKeys,
    blob: &str,
    owner: Option<&str>,
) -> Result<()> {
    let pipeline = conn.pool().next().pipeline();
    pipeline
        .zadd::<(), _, _>(
            blobs_key(keys),
            None,
            None,
            false,
            false,
            (crate::clock::now_ms() as f64, blob),
        )
        .await?;
    if let Some(owner) = owner {
        pipeline
            .hset::<(), _, _>(owners_key(keys), (blob, owner))
            .await?;
    }
    let _: Vec<fred::types::Value> = pipeline.all().await?;
    Ok(())
}

/// Records the job a blob belongs to.
pub(crate) async fn own(conn: &Connection, keys: &QueueKeys, owned: &[(&str, &str)]) -> Result<()> {
    if owned.is_empty() {
        return Ok(());
    }
    let pairs: Vec<(&str, &str)> = owned.to_vec();
    conn.pool()
        .hset::<(), _, _>(owners_key(keys), pairs)
        .await?;
    Ok(())
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlobSweep {
    /// Blobs looked at (at most the page; fewer: none else is due).
    pub examined: usize,
    /// Blobs deleted from the store and forgotten.
    pub deleted: usize,
}

/// One bounded page: blobs not found in use since `grace_ms` ago are looked
/// at; those no job holds are deleted from the store, then forgotten. A blob
/// the store fails to delete stays tracked, for the next sweep.
pub(crate) async fn collect(
    conn: &Connection,
    keys: &QueueKeys,
    offload: &OffloadOptions,
    grace_ms: u64,
    page: u64,
) -> Result<BlobSweep> {
    let now = crate::clock::now_ms();
    let found = conn
        .call(&CollectBlobs {
            keys,
            cutoff: EpochMs(now.saturating_sub(grace_ms)),
            now: EpochMs(now),
            page,
        })
        .await?;
    let mut gone = Vec::with_capacity(found.unused.len());
    for key in &found.unused {
        match offload.store.delete(key).await {
            Ok(()) => gone.push(key.as_str()),
            Err(e) => {
                tracing::warn!(blob = %key, error = %e, "blob not deleted; kept for the next sweep")
            }
        }
    }
    if !gone.is_empty() {
        conn.pool()
            .zrem::<(), _, _>(blobs_key(keys), gone.clone())
            .await?;
        conn.pool()
            .hdel::<(), _, _>(owners_key(keys), gone.clone())
            .await?;
    }
    Ok(BlobSweep {
        examined: found.read as usize,
        deleted: gone.len(),
    })
}
