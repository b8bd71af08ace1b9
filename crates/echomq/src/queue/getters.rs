//! Read-only getters with BullMQ's semantics: counts per priority, a job's
//! logs with their total, the queue's workers (named connections), and a
//! job's state by BullMQ's name.

use std::collections::HashMap;

use echomq_protocol::call::admin::{GetCounts, RangeOrder};
use echomq_protocol::call::lifecycle::EpochMs;
use echomq_protocol::call::limits::GetCountsPerPriority;
use echomq_protocol::validate::MAX_PRIORITY;
use fred::prelude::{ClientInterface, ListInterface, SortedSetsInterface};

use super::handle::Queue;
use super::types::JobState;
use crate::error::{Error, Result};

/// One connection of a worker of this queue, as `CLIENT LIST` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker's name (the part after `:w:`), `None` for an unnamed worker.
    pub worker_name: Option<String>,
    /// The raw connection name (`<prefix>:<base64(queue)>[:w:<name>]`),
    /// Node's `rawname`.
    pub rawname: String,
    /// Every `key=value` of the `CLIENT LIST` line (`addr`, `age`, `idle`, …).
    pub fields: HashMap<String, String>,
}

/// A page of a job's log lines and how many the job has in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLogs {
    /// The lines of the page, in the order asked for.
    pub logs: Vec<String>,
    /// Lines stored for the job.
    pub count: u64,
}

/// Which jobs [`Queue::find_jobs`] keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs with exactly this name.
    pub name: Option<String>,
    /// Only jobs whose data, as stored JSON text, contains this text.
    pub data_contains: Option<String>,
}

/// Ids read per call while [`Queue::find_jobs`] scans a state.
const SCAN_PAGE: u64 = 500;

/// The most ids one [`Queue::search_jobs_page`] call reads, whatever count it
/// is asked: each id costs the script a read of its hash, so a call stays
/// within a few ms at any queue size.
pub const SEARCH_PAGE_MAX: u64 = 1000;

impl JobState {
    /// BullMQ's name of the state, as `getJobState` answers it (`waiting`,
    /// `waiting-children`, `unknown`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Unknown => "unknown",
            other => other.key_suffix(),
        }
    }
}

impl Queue {
    /// Ready jobs per priority (priority 0 counts the wait list), one entry per
    /// distinct priority in first-seen order, as BullMQ's
    /// `getCountsPerPriority`. Refuses a priority above the maximum.
    pub async fn get_counts_per_priority(&self, priorities: &[u32]) -> Result<Vec<(u32, u64)>> {
        let mut unique: Vec<u32> = Vec::with_capacity(priorities.len());
        for p in priorities {
            if i64::from(*p) > MAX_PRIORITY {
                return Err(echomq_protocol::ValidationError::Option {
                    option: "priority",
                    reason: format!("must be within 0..={MAX_PRIORITY} (got {p})"),
                }
                .into());
            }
            if !unique.contains(p) {
                unique.push(*p);
            }
        }
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        let counts = self
            .conn
            .call(&GetCountsPerPriority {
                keys: &self.keys,
                priorities: &unique,
            })
            .await?;
        Ok(unique.into_iter().zip(counts).collect())
    }

    /// Jobs in `delayed`; with `due_before` (ms), only those due strictly
    /// before it (BullMQ 6.7's `getDelayedCount(timestamp)`).
    pub async fn get_delayed_count(&self, due_before: Option<u64>) -> Result<u64> {
        let counts = self
            .conn
            .call(&GetCounts {
                keys: &self.keys,
                states: &[JobState::Delayed.key_suffix()],
                delayed_before: due_before.map(EpochMs),
            })
            .await?;
        Ok(counts[0])
    }

    /// When a delayed job is due (ms), `None` when it is not in `delayed`.
    /// Read from its score (`floor(score / 4096)`), not from `timestamp +
    /// delay`: a deduplicated add with `reschedule` (BullMQ 6.7) moves the
    /// score and the `delay` field but keeps the job's `timestamp`.
    pub async fn get_due_time(&self, id: &str) -> Result<Option<u64>> {
        let score: Option<f64> = self.conn.pool().zscore(self.keys.delayed(), id).await?;
        Ok(score.map(|s| (s / 4096.0).floor() as u64))
    }

    /// Log lines `start..=end` of job `id` (inclusive, negative from the
    /// end) with the total count, in `order` (BullMQ's `getJobLogs`); a large range is read in pages.
    pub async fn get_job_logs(
        &self,
        id: &str,
        start: i64,
        end: i64,
        order: RangeOrder,
    ) -> Result<JobLogs> {
        let key = self.keys.logs(id);
        let pool = self.conn.pool();
        // A large range is read in pages (lrange_paged), as every large read.
        let (logs, count): (Vec<String>, u64) = if order == RangeOrder::Ascending {
            tokio::try_join!(self.lrange_paged(&key, start, end), async {
                Ok(pool.llen(&key).await?)
            })?
        } else {
            let (mut page, count): (Vec<String>, u64) =
                tokio::try_join!(self.lrange_paged(&key, -(end + 1), -(start + 1)), async {
                    Ok(pool.llen(&key).await?)
                })?;
            page.reverse();
            (page, count)
        };
        Ok(JobLogs { logs, count })
    }

    /// The jobs of `state` that `filter` keeps, matches `start..=end` (0-based,
    /// in the asked order). The state is scanned page by page with
    /// searchJobs, which filters on the server, so only matches travel and no
    /// single call is long.
    pub async fn find_jobs(
        &self,
        state: JobState,
        filter: &JobFilter,
        start: usize,
        end: usize,
        order: RangeOrder,
    ) -> Result<Vec<echomq_protocol::Job>> {
        use echomq_protocol::call::getters::SearchJobs;
        let (mut matched, mut out, mut cursor) = (0usize, Vec::new(), Some(0u64));
        while let Some(at) = cursor {
            let call = SearchJobs {
                keys: &self.keys,
                state: state.key_suffix(),
                cursor: at,
                count: SCAN_PAGE,
                order,
                name: filter.name.as_deref(),
                text: filter.data_contains.as_deref(),
            };
            let (next, page) = self.conn.call(&call).await?;
            for (id, fields) in page {
                if matched >= start {
                    out.push(echomq_protocol::Job::from_hash(
                        &id,
                        fields.into_iter().collect(),
                    )?);
                }
                matched += 1;
                if matched > end {
                    return Ok(out);
                }
            }
            cursor = next;
        }
        Ok(out)
    }

    /// One bounded step of a search: reads `count` ids (at most
    /// [`SEARCH_PAGE_MAX`]) of `state` from `cursor` (0-based, in the asked
    /// order) and answers the next cursor (`None` once the state is
    /// exhausted) with the jobs `filter` keeps.
    /// Unlike [`Queue::find_jobs`] the cost of one call is fixed by `count`,
    /// whatever the number of matches, so a caller can cap a request's work.
    pub async fn search_jobs_page(
        &self,
        state: JobState,
        filter: &JobFilter,
        cursor: u64,
        count: u64,
        order: RangeOrder,
    ) -> Result<(Option<u64>, Vec<echomq_protocol::Job>)> {
        use echomq_protocol::call::getters::SearchJobs;
        let call = SearchJobs {
            keys: &self.keys,
            state: state.key_suffix(),
            cursor,
            count: count.clamp(1, SEARCH_PAGE_MAX),
            order,
            name: filter.name.as_deref(),
            text: filter.data_contains.as_deref(),
        };
        let (next, page) = self.conn.call(&call).await?;
        let jobs = page
            .into_iter()
            .map(|(id, fields)| echomq_protocol::Job::from_hash(&id, fields.into_iter().collect()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok((next, jobs))
    }

    /// The connections of this queue's workers, Rust or Node, found by the
    /// names they give themselves (BullMQ's `getWorkers`). A server that
    /// refuses `CLIENT LIST` is an error.
    pub async fn get_workers(&self) -> Result<Vec<WorkerInfo>> {
        let list: String = self
            .conn
            .pool()
            .next()
            .client_list::<String, String>(None, None)
            .await
            .map_err(Error::from)?;
        Ok(parse_workers(&list, &self.keys.worker_client_name(None)))
    }
}

impl super::handles::Telemetry<'_> {
    /// This queue's workers in a `CLIENT LIST` reply the caller read once
    /// for many queues (a dashboard listing every queue asks the server
    /// once, not once per queue). Same matching as [`Queue::get_workers`].
    pub fn workers_in(self, client_list: &str) -> Vec<WorkerInfo> {
        parse_workers(client_list, &self.queue.keys.worker_client_name(None))
    }
}

/// The lines of `CLIENT LIST` named `base` or `base:w:<name>`.
fn parse_workers(list: &str, base: &str) -> Vec<WorkerInfo> {
    let named = format!("{base}:w:");
    list.lines()
        .filter_map(|line| {
            let fields: HashMap<String, String> = line
                .split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let raw = fields.get("name")?.clone();
            let worker_name = if raw == base {
                None
            } else {
                Some(raw.strip_prefix(&named)?.to_owned())
            };
            Some(WorkerInfo {
                worker_name,
                rawname: raw,
                fields,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_found_by_connection_name() {
        let list = "id=1 addr=1.2.3.4:5 name=emq:cQ==:w:alpha age=3\n\
                    id=2 addr=x name=emq:cQ== age=1\n\
                    id=3 addr=y name=emq:cQ==:qe age=1\n\
                    id=4 addr=z name= age=1\n";
        let w = parse_workers(list, "emq:cQ==");
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].worker_name.as_deref(), Some("alpha"));
        assert_eq!(w[0].fields["addr"], "1.2.3.4:5");
        assert_eq!(w[1].worker_name, None);
        assert_eq!(w[1].rawname, "emq:cQ==");
    }
}
