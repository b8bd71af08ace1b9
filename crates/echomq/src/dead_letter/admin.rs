//! The dead-letter queue's side: list, show and replay dead letters by
//! filter, a page of [`PAGE`] entries per read (never the whole set in one
//! call), replays one script call per job.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use echomq_protocol::call::dead_letter::{ReplayDeadLetter, Replayed};
use echomq_protocol::{Job, QueueKeys};
use fred::prelude::{ClientLike, HashesInterface, KeysInterface, SortedSetsInterface};
use fred::types::{ClusterHash, CustomCommand};

use super::target::DeadLetterError;
use crate::error::Result;
use crate::queue::DeadLetters;

/// Dead letters read per call.
pub const PAGE: u64 = 100;

/// The dead-letter fields a dead letter carries besides the job's.
mod field {
    pub const QUEUE: &str = "dlq.queue";
    pub const ID: &str = "dlq.id";
    pub const CLASS: &str = "dlq.class";
    pub const AT: &str = "dlq.at";
}

/// One dead letter.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Its id in the dead-letter queue.
    pub id: String,
    /// The job as it failed (its id is the dead letter's): name, data,
    /// options, `failed_reason`, `stacktrace`, `attempts_made`, timestamps.
    pub job: Job,
    /// The queue it came from (its name).
    pub source_queue: String,
    /// Its id in that queue.
    pub source_id: String,
    /// The reason class ([`REASON_CLASSES`](super::REASON_CLASSES)).
    pub class: String,
    /// When it was dead-lettered (Redis ms).
    pub dead_lettered_at: u64,
}

/// Which dead letters an operation applies to; every field set must match.
/// Default: all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterFilter {
    /// The job's name, exactly.
    pub name: Option<String>,
    /// A text the failure reason contains.
    pub reason: Option<String>,
    /// Dead-lettered at or after (Redis ms).
    pub since: Option<u64>,
    /// Dead-lettered before (Redis ms).
    pub before: Option<u64>,
    /// The source queue's name.
    pub source: Option<String>,
    /// The reason class.
    pub class: Option<String>,
}

impl DeadLetterFilter {
    /// Every dead letter.
    pub fn all() -> Self {
        Self::default()
    }

    /// Sets [`name`](Self::name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets [`reason`](Self::reason).
    pub fn reason(mut self, text: impl Into<String>) -> Self {
        self.reason = Some(text.into());
        self
    }

    /// Sets [`since`](Self::since).
    pub fn since(mut self, ms: u64) -> Self {
        self.since = Some(ms);
        self
    }

    /// Sets [`before`](Self::before).
    pub fn before(mut self, ms: u64) -> Self {
        self.before = Some(ms);
        self
    }

    /// Sets [`source`](Self::source).
    pub fn source(mut self, queue: impl Into<String>) -> Self {
        self.source = Some(queue.into());
        self
    }

    /// Sets [`class`](Self::class).
    pub fn class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }

    fn matches(&self, d: &DeadLetter) -> bool {
        self.name.as_ref().is_none_or(|n| *n == d.job.name)
            && self.reason.as_ref().is_none_or(|t| {
                d.job
                    .failed_reason
                    .as_deref()
                    .is_some_and(|r| r.contains(t.as_str()))
            })
            && self.source.as_ref().is_none_or(|s| *s == d.source_queue)
            && self.class.as_ref().is_none_or(|c| *c == d.class)
            && self.since.is_none_or(|t| d.dead_lettered_at >= t)
            && self.before.is_none_or(|t| d.dead_lettered_at < t)
    }
}

/// Where a paged read goes on: the score (dead-lettering time) reached and
/// how many entries of that score to skip (those already seen and still
/// there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadLetterCursor {
    score: u64,
    skip: u64,
}

/// A page of dead letters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeadLetterPage {
    /// The matching dead letters of the page.
    pub letters: Vec<DeadLetter>,
    /// Entries read (matching or not).
    pub scanned: u64,
    /// Where the next page starts; `None` at the end.
    pub next: Option<DeadLetterCursor>,
}

/// How a replay runs. Default: every match, as fast as the calls go.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Replay at most this many.
    pub limit: Option<u64>,
    /// At most this many jobs per second (paced: the n-th goes no earlier
    /// than n / rate seconds after the first one's reply).
    pub rate: Option<f64>,
}

impl ReplayOptions {
    /// Sets [`limit`](Self::limit).
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// Sets [`rate`](Self::rate).
    pub fn rate(mut self, per_second: f64) -> Self {
        self.rate = Some(per_second);
        self
    }
}

/// A dead letter a replay left where it was, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplaySkip {
    /// The dead letter.
    pub id: String,
    /// Its source queue.
    pub source_queue: String,
    /// Why: "source queue does not exist", "source queue holds a job with id …".
    pub reason: String,
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// (dead letter id, source queue, job id there) of each job replayed.
    pub replayed: Vec<(String, String, String)>,
    /// Matches left in place.
    pub skipped: Vec<ReplaySkip>,
}

impl DeadLetters<'_> {
    /// How many dead letters the queue holds.
    pub async fn count(self) -> Result<u64> {
        Ok(self
            .queue
            .connection()
            .pool()
            .zcard(self.queue.keys().failed())
            .await?)
    }

    /// Dead letters by source queue and reason class (a hash the scripts
    /// keep, read in one call): `((source, class), count)`.
    pub async fn counts(self) -> Result<Vec<((String, String), u64)>> {
        let prefix = self.queue.connection().prefix();
        let raw: HashMap<String, String> = self
            .queue
            .connection()
            .pool()
            .hgetall(counts_key(self.queue.keys()))
            .await?;
        let mut out: Vec<((String, String), u64)> = raw
            .into_iter()
            .filter_map(|(k, v)| {
                let (src, class) = k.split_once('\t')?;
                let src = src.strip_prefix(prefix).and_then(|s| s.strip_prefix(':'))?;
                let n = v.parse::<i64>().ok()?.max(0) as u64;
                Some(((src.to_owned(), class.to_owned()), n))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort();
        Ok(out)
    }

    /// One dead letter, `None` when there is none with that id.
    pub async fn show(self, id: &str) -> Result<Option<DeadLetter>> {
        let hash: HashMap<String, String> = self
            .queue
            .connection()
            .pool()
            .hgetall(self.queue.keys().job(id))
            .await?;
        if hash.is_empty() {
            return Ok(None);
        }
        letter(self.queue.connection().prefix(), id, hash).map(Some)
    }

    /// One page of dead letters matching `filter`, newest first (`oldest`
    /// false) or oldest first, from `from` (`None`: the start). Reads at most
    /// 100 (`PAGE`) entries, whatever the queue holds.
    pub async fn page(
        self,
        filter: &DeadLetterFilter,
        oldest_first: bool,
        from: Option<DeadLetterCursor>,
    ) -> Result<DeadLetterPage> {
        let entries = self.read_page(filter, oldest_first, from).await?;
        let mut cursor = from;
        let mut letters = Vec::new();
        let scanned = entries.len() as u64;
        for (score, letter) in entries {
            advance(&mut cursor, score, true);
            if let Some(l) = letter.filter(|l| filter.matches(l)) {
                letters.push(l);
            }
        }
        Ok(DeadLetterPage {
            letters,
            scanned,
            next: if scanned < PAGE { None } else { cursor },
        })
    }

    /// The first `limit` dead letters matching `filter`, newest first, read
    /// a page at a time.
    pub async fn list(self, filter: &DeadLetterFilter, limit: u64) -> Result<Vec<DeadLetter>> {
        let mut out = Vec::new();
        let mut from = None;
        loop {
            let page = self.page(filter, false, from).await?;
            for l in page.letters {
                if out.len() as u64 >= limit {
                    return Ok(out);
                }
                out.push(l);
            }
            match page.next {
                Some(next) if (out.len() as u64) < limit => from = Some(next),
                _ => return Ok(out),
            }
        }
    }

    /// Replays one dead letter: back to its source queue as a fresh job
    /// (same id, name, data and options, attempts reset), out of this
    /// queue, in one script call.
    pub async fn replay_one(self, id: &str) -> Result<String> {
        let dlq = self.queue.name().to_owned();
        let letter = self
            .show(id)
            .await?
            .ok_or_else(|| DeadLetterError::NotFound {
                dlq: dlq.clone(),
                id: id.to_owned(),
            })?;
        match self.replay_letter(&letter).await? {
            Replayed::Done(new_id) => Ok(new_id),
            Replayed::NoSource => Err(DeadLetterError::NoSource {
                queue: letter.source_queue,
            }
            .into()),
            Replayed::IdTaken => Err(crate::Error::Config(format!(
                "source queue {:?} already holds a job with id {:?}; dead letter {id} left in place",
                letter.source_queue, letter.source_id
            ))),
            _ => Err(DeadLetterError::NotFound {
                dlq,
                id: id.to_owned(),
            }
            .into()),
        }
    }

    /// Replays the dead letters matching `filter`, oldest first, one script
    /// call each (a replay stopped anywhere and run again neither doubles
    /// nor loses a job), paced by `options.rate`. A filter naming a source
    /// queue that does not exist, or matching nothing, is refused with
    /// nothing moved.
    pub async fn replay(
        self,
        filter: &DeadLetterFilter,
        options: ReplayOptions,
    ) -> Result<ReplayReport> {
        if let Some(rate) = options.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(crate::Error::Config(
                    "a replay rate must be a positive number of jobs per second".into(),
                ));
            }
        }
        let conn = self.queue.connection();
        if let Some(source) = &filter.source {
            let keys = QueueKeys::new(conn.prefix(), source)?;
            if conn.pool().exists::<i64, _>(keys.meta()).await? == 0 {
                return Err(DeadLetterError::NoSource {
                    queue: source.clone(),
                }
                .into());
            }
        }
        let limit = options.limit.unwrap_or(u64::MAX);
        let mut report = ReplayReport::default();
        let mut matched = 0u64;
        let mut cursor = None;
        let mut started: Option<Instant> = None;
        'pages: loop {
            let entries = self.read_page(filter, true, cursor).await?;
            let scanned = entries.len() as u64;
            for (score, letter) in entries {
                let Some(letter) = letter.filter(|l| filter.matches(l)) else {
                    advance(&mut cursor, score, true);
                    continue;
                };
                if matched >= limit {
                    break 'pages;
                }
                matched += 1;
                // Paced from the first call's reply: Redis ran that call
                // before it, so the n-th runs at least n / rate after it on
                // any clock, whatever the first call's latency.
                if let (Some(rate), Some(start)) = (options.rate, started) {
                    let due = start + Duration::from_secs_f64((matched - 1) as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let replayed = self.replay_letter(&letter).await?;
                started.get_or_insert_with(Instant::now);
                let kept = match replayed {
                    Replayed::Done(new_id) => {
                        report.replayed.push((
                            letter.id.clone(),
                            letter.source_queue.clone(),
                            new_id,
                        ));
                        false
                    }
                    Replayed::NoSource => {
                        report
                            .skipped
                            .push(skip(&letter, "source queue does not exist"));
                        true
                    }
                    Replayed::IdTaken => {
                        let why = format!("source queue holds a job with id {}", letter.source_id);
                        report.skipped.push(skip(&letter, &why));
                        true
                    }
                    // Replayed or removed by someone else meanwhile.
                    _ => false,
                };
                advance(&mut cursor, score, kept);
            }
            if scanned < PAGE {
                break;
            }
        }
        if matched == 0 {
            return Err(DeadLetterError::NoMatch {
                dlq: self.queue.name().to_owned(),
            }
            .into());
        }
        Ok(report)
    }

    async fn replay_letter(self, letter: &DeadLetter) -> Result<Replayed> {
        let conn = self.queue.connection();
        let source = QueueKeys::new(conn.prefix(), &letter.source_queue)?;
        conn.call(&ReplayDeadLetter {
            dlq: self.queue.keys(),
            id: &letter.id,
            source: &source,
        })
        .await
    }

    /// One page of the `failed` set in the filter's time window, each entry
    /// with its score and its dead letter (`None` when its hash is gone).
    async fn read_page(
        self,
        filter: &DeadLetterFilter,
        ascending: bool,
        from: Option<DeadLetterCursor>,
    ) -> Result<Vec<(u64, Option<DeadLetter>)>> {
        let conn = self.queue.connection();
        let keys = self.queue.keys();
        let key = keys.failed();
        let low = filter.since.map_or("-inf".to_owned(), |t| t.to_string());
        let high = filter.before.map_or("+inf".to_owned(), |t| format!("({t}"));
        let (skip, low, high) = match from {
            Some(c) if ascending => (c.skip, c.score.to_string(), high),
            Some(c) => (c.skip, low, c.score.to_string()),
            None => (0, low, high),
        };
        let mut args = vec![key.clone()];
        if ascending {
            args.extend([low, high, "BYSCORE".to_owned()]);
        } else {
            args.extend([high, low, "BYSCORE".to_owned(), "REV".to_owned()]);
        }
        args.extend([
            "LIMIT".to_owned(),
            skip.to_string(),
            PAGE.to_string(),
            "WITHSCORES".to_owned(),
        ]);
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let command = CustomCommand::new_static("ZRANGE", ClusterHash::Custom(slot), true);
        let client = conn.pool().next();
        let flat: Vec<String> = client.custom(command, args).await?;
        let ids: Vec<(String, u64)> = flat
            .chunks(2)
            .filter_map(|c| match c {
                [id, score] => Some((id.clone(), score.parse::<f64>().ok()? as u64)),
                _ => None,
            })
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let pipe = client.pipeline();
        for (id, _) in &ids {
            pipe.hgetall::<(), _>(keys.job(id)).await?;
        }
        let hashes: Vec<HashMap<String, String>> = pipe.all().await?;
        let mut out = Vec::with_capacity(ids.len());
        for ((id, score), hash) in ids.into_iter().zip(hashes) {
            let letter = if hash.is_empty() {
                None
            } else {
                letter(conn.prefix(), &id, hash).ok()
            };
            out.push((score, letter));
        }
        Ok(out)
    }
}

/// The next read skips the entries of the last score seen that are still
/// in the set (`kept`), so a page that removed entries loses none.
fn advance(cursor: &mut Option<DeadLetterCursor>, score: u64, kept: bool) {
    let c = cursor.get_or_insert(DeadLetterCursor { score, skip: 0 });
    if c.score != score {
        *c = DeadLetterCursor { score, skip: 0 };
    }
    if kept {
        c.skip += 1;
    }
}

fn skip(letter: &DeadLetter, reason: &str) -> ReplaySkip {
    ReplaySkip {
        id: letter.id.clone(),
        source_queue: letter.source_queue.clone(),
        reason: reason.to_owned(),
    }
}

fn letter(prefix: &str, id: &str, hash: HashMap<String, String>) -> Result<DeadLetter> {
    let source_key = hash.get(field::QUEUE).cloned().unwrap_or_default();
    let source_queue = source_key
        .strip_prefix(prefix)
        .and_then(|s| s.strip_prefix(':'))
        .unwrap_or(&source_key)
        .to_owned();
    let source_id = hash.get(field::ID).cloned().unwrap_or_default();
    let class = hash.get(field::CLASS).cloned().unwrap_or_default();
    let dead_lettered_at = hash
        .get(field::AT)
        .and_then(|t| echomq_protocol::call::decode::parse_int(t))
        .unwrap_or(0)
        .max(0) as u64;
    let job = Job::from_hash(id, hash)?;
    Ok(DeadLetter {
        id: id.to_owned(),
        job,
        source_queue,
        source_id,
        class,
        dead_lettered_at,
    })
}

/// The hash of dead-letter counts by source and class: `{D}dlq:counts`,
/// fields `<prefix>:<source>\t<class>` (read with the prefix stripped).
pub(crate) fn counts_key(dlq: &QueueKeys) -> String {
    dlq.key("dlq:counts")
}
