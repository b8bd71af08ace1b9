//! Large reads as many bounded calls: a range of more than [`READ_PAGE`]
//! entries (or one counted from the end, `0..=-1`) is resolved against the
//! state's size and read page by page, so no single call hydrates a whole
//! state (BullMQ's `getJobs(0, -1)` on a large queue is one call of that
//! size: docs/scale.md).

use std::collections::BTreeMap;

use echomq_protocol::call::admin::{GetRanges, RangeOrder};
use echomq_protocol::call::getters::{GetJobs, JobEntry};
use fred::prelude::{ClientLike, ListInterface};

use super::handle::Queue;
use super::range::{is_large, resolve, READ_PAGE};
use super::types::JobState;
use crate::error::Result;

impl Queue {
    /// getJobs for one state over a large range, page by page.
    pub(super) async fn get_jobs_paged(
        &self,
        state: &str,
        start: i64,
        end: i64,
        order: RangeOrder,
    ) -> Result<Vec<JobEntry>> {
        let len = self.count_suffix(state).await?;
        let Some((from, to)) = resolve(start, end, len) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut at = from;
        while at <= to {
            let last = (at + READ_PAGE - 1).min(to);
            let call = GetJobs {
                keys: &self.keys,
                start: at as i64,
                end: last as i64,
                order,
                states: &[state],
            };
            out.extend(self.conn.call(&call).await?.into_iter().flatten());
            at = last + 1;
        }
        Ok(out)
    }

    /// getRanges for one state over a large range, page by page; ids in the
    /// script's order (the caller reverses ascending list ranges).
    pub(super) async fn get_ranges_paged(
        &self,
        state: JobState,
        start: i64,
        end: i64,
        order: RangeOrder,
    ) -> Result<Vec<String>> {
        let len = self.count_suffix(state.key_suffix()).await?;
        let Some((from, to)) = resolve(start, end, len) else {
            return Ok(Vec::new());
        };
        let mut pages: Vec<Vec<String>> = Vec::new();
        let mut at = from;
        while at <= to {
            let last = (at + READ_PAGE - 1).min(to);
            let call = GetRanges {
                keys: &self.keys,
                start: at as i64,
                end: last as i64,
                order,
                states: &[state.key_suffix()],
            };
            pages.push(self.conn.call(&call).await?.into_iter().flatten().collect());
            at = last + 1;
        }
        // An ascending list page comes head-first; the pages themselves are
        // in ascending order, so the caller's reversal needs them last-first.
        if order == RangeOrder::Ascending && state.is_list() {
            pages.reverse();
        }
        Ok(pages.into_iter().flatten().collect())
    }

    async fn count_suffix(&self, suffix: &str) -> Result<u64> {
        let call = echomq_protocol::call::admin::GetCounts {
            keys: &self.keys,
            states: &[suffix],
            delayed_before: None,
        };
        Ok(self.conn.call(&call).await?[0])
    }

    /// `LRANGE` of a large range of a list, page by page.
    pub(super) async fn lrange_paged(
        &self,
        key: &str,
        start: i64,
        end: i64,
    ) -> Result<Vec<String>> {
        let pool = self.conn.pool();
        if !is_large(start, end) {
            return Ok(pool.lrange(key, start, end).await?);
        }
        let len: u64 = pool.llen(key).await?;
        let Some((from, to)) = resolve(start, end, len) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut at = from;
        while at <= to {
            let last = (at + READ_PAGE - 1).min(to);
            let page: Vec<String> = pool.lrange(key, at as i64, last as i64).await?;
            out.extend(page);
            at = last + 1;
        }
        Ok(out)
    }

    /// Every field of a hash by `HSCAN` pages (a parent's `:processed` with
    /// 10 000 children is about ten calls, not one of that size).
    pub(crate) async fn hash_paged(&self, key: String) -> Result<BTreeMap<String, String>> {
        use fred::types::{ClusterHash, CustomCommand};
        let client = self.conn.pool().next();
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let command = CustomCommand::new_static("HSCAN", ClusterHash::Custom(slot), false);
        let mut out = BTreeMap::new();
        let mut cursor = String::from("0");
        loop {
            let (next, flat): (String, Vec<String>) = client
                .custom(
                    command.clone(),
                    vec![
                        key.clone(),
                        cursor,
                        "COUNT".to_owned(),
                        READ_PAGE.to_string(),
                    ],
                )
                .await?;
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.insert(k, v);
            }
            if next == "0" {
                return Ok(out);
            }
            cursor = next;
        }
    }
}
