//! The data the pages and the JSON API show, read through the runtime's
//! getters: queue summaries, workers, schedulers, job pages.

use echomq::{Job, JobCounts, JobState, Queue};
use fred::prelude::ClientInterface;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::Failure;
use crate::series::Sample;
use crate::state::App;

/// Every state a listing can show, in display order.
pub(crate) const STATES: [JobState; 7] = [
    JobState::Waiting,
    JobState::Prioritized,
    JobState::Delayed,
    JobState::Active,
    JobState::WaitingChildren,
    JobState::Completed,
    JobState::Failed,
];

/// A state by its BullMQ name (`waiting` or `wait`, `waiting-children`, …).
pub(crate) fn parse_state(s: &str) -> Result<JobState, Failure> {
    STATES
        .into_iter()
        .find(|st| st.as_str() == s || st.key_suffix() == s)
        .ok_or_else(|| Failure::bad_request(format!("unknown state {s:?}")))
}

/// Counts by BullMQ's state names.
pub(crate) fn counts_json(c: &JobCounts) -> Value {
    json!({
        "waiting": c.waiting,
        "prioritized": c.prioritized,
        "delayed": c.delayed,
        "active": c.active,
        "waiting-children": c.waiting_children,
        "completed": c.completed,
        "failed": c.failed,
    })
}

/// The count of one state.
pub(crate) fn count_of(c: &JobCounts, s: JobState) -> u64 {
    match s {
        JobState::Waiting => c.waiting,
        JobState::Prioritized => c.prioritized,
        JobState::Delayed => c.delayed,
        JobState::Active => c.active,
        JobState::WaitingChildren => c.waiting_children,
        JobState::Completed => c.completed,
        JobState::Failed => c.failed,
        _ => 0,
    }
}

/// One row of the overview.
#[derive(Serialize)]
pub(crate) struct QueueSummary {
    pub name: String,
    #[serde(serialize_with = "ser_counts")]
    pub counts: JobCounts,
    pub paused: bool,
    pub workers: usize,
    pub samples: Vec<Sample>,
}

fn ser_counts<S: serde::Serializer>(c: &JobCounts, s: S) -> Result<S::Ok, S::Error> {
    counts_json(c).serialize(s)
}

pub(crate) async fn summary(app: &App, q: &Queue) -> Result<QueueSummary, Failure> {
    // A server that refuses CLIENT LIST still shows its queues.
    let workers = q.get_workers().await.map(|w| w.len()).unwrap_or(0);
    summary_with(app, q, workers).await
}

async fn summary_with(app: &App, q: &Queue, workers: usize) -> Result<QueueSummary, Failure> {
    let (counts, paused) = tokio::try_join!(q.counts(), q.is_paused())?;
    Ok(QueueSummary {
        name: q.name().to_owned(),
        counts,
        paused,
        workers,
        samples: app.series.of(q.name()),
    })
}

/// Queues per overview page.
pub(crate) const OVERVIEW_PAGE: usize = 50;

/// One page of the overview: the queues found so far, summarised.
pub(crate) struct Overview {
    pub queues: Vec<QueueSummary>,
    /// Queues found in all (the pages together).
    pub total: usize,
    pub page: usize,
    /// The discovery walk has not covered the whole keyspace yet: more
    /// queues may appear on a later request.
    pub partial: bool,
}

/// Page `page` of the queues of the prefix: a bounded step of the discovery
/// walk, then O(1) reads per listed queue (counts, paused) for at most
/// [`OVERVIEW_PAGE`] queues.
pub(crate) async fn overview(app: &App, page: usize) -> Result<Overview, Failure> {
    let found = app
        .discovery
        .advance(&app.conn, crate::discover::REQUEST_BUDGET)
        .await?;
    let total = found.names.len();
    // One CLIENT LIST for every queue; a server that refuses it shows none.
    let clients: String = app
        .conn
        .pool()
        .next()
        .client_list::<String, String>(None, None)
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for name in found
        .names
        .iter()
        .skip(page.saturating_mul(OVERVIEW_PAGE))
        .take(OVERVIEW_PAGE)
    {
        // A queue removed since it was found is skipped.
        if let Ok(q) = app.queue(name).await {
            app.live.watch(&app.conn, name).await;
            let workers = q.telemetry().workers_in(&clients).len();
            out.push(summary_with(app, &q, workers).await?);
        }
    }
    Ok(Overview {
        queues: out,
        total,
        page,
        partial: !found.complete || found.walking && total == 0,
    })
}

/// A worker connection as shown.
#[derive(Serialize)]
pub(crate) struct WorkerView {
    pub name: String,
    pub addr: String,
    pub age_s: String,
    pub idle_s: String,
}

pub(crate) async fn workers(q: &Queue) -> Result<Vec<WorkerView>, Failure> {
    Ok(q.get_workers()
        .await?
        .into_iter()
        .map(|w| {
            let f = |k: &str| w.fields.get(k).cloned().unwrap_or_default();
            WorkerView {
                name: w.worker_name.clone().unwrap_or_else(|| "(unnamed)".into()),
                addr: f("addr"),
                age_s: f("age"),
                idle_s: f("idle"),
            }
        })
        .collect())
}

/// A scheduler as shown.
#[derive(Serialize)]
pub(crate) struct SchedulerView {
    pub id: String,
    pub name: String,
    pub next: u64,
    pub every: Option<u64>,
    pub pattern: Option<String>,
    pub tz: Option<String>,
    pub iterations: u64,
}

/// Schedulers a queue page lists (the earliest next runs).
const SCHEDULERS_SHOWN: u64 = 100;

pub(crate) async fn schedulers(app: &App, q: &Queue) -> Result<Vec<SchedulerView>, Failure> {
    let s = echomq::JobSchedulers::new(&app.conn, q.name())?;
    Ok(s.list_page(0, SCHEDULERS_SHOWN)
        .await?
        .into_iter()
        .map(|i| SchedulerView {
            id: i.id,
            name: i.name,
            next: i.next,
            every: i.every,
            pattern: i.pattern,
            tz: i.tz,
            iterations: i.iteration_count,
        })
        .collect())
}

/// A job as JSON, with BullMQ's field names.
pub(crate) fn job_json(j: &Job) -> Value {
    json!({
        "id": j.id,
        "name": j.name,
        "data": j.data,
        "opts": j.opts.to_public(),
        "timestamp": j.timestamp,
        "delay": j.delay,
        "priority": j.priority,
        "processedOn": j.processed_on,
        "finishedOn": j.finished_on,
        "returnvalue": j.return_value,
        "failedReason": j.failed_reason,
        "stacktrace": j.stacktrace,
        "attemptsMade": j.attempts_made,
        "attemptsStarted": j.attempts_started,
        "stalledCounter": j.stalled_counter,
        "progress": j.progress,
        "processedBy": j.processed_by,
        "parentKey": j.parent_key,
        "repeatJobKey": j.repeat_job_key,
        "deduplicationId": j.deduplication_id,
    })
}

/// A job key (`<prefix>:<queue>:<id>`) as a link target inside the prefix.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct JobRef {
    pub queue: String,
    pub id: String,
}

pub(crate) fn job_ref(prefix: &str, key: &str) -> Option<JobRef> {
    let (queue, id) = key
        .strip_prefix(prefix)?
        .strip_prefix(':')?
        .split_once(':')?;
    Some(JobRef {
        queue: queue.to_owned(),
        id: id.to_owned(),
    })
}

/// Everything the job page shows.
pub(crate) struct JobDetail {
    pub job: Job,
    pub state: JobState,
    pub logs: Vec<String>,
    pub log_count: u64,
    pub parent: Option<JobRef>,
    /// Children by group: (group, child, extra: value or reason).
    pub children: Vec<(&'static str, JobRef, Option<String>)>,
    /// `data` and `returnvalue` when stored through a codec.
    pub decoded: Vec<Decoded>,
    /// The DAG (or tree) below the job, when it has children.
    pub dag: Option<DagView>,
}

/// The jobs below one job, each once however many of them wait for it
/// (docs/flows.md §DAGs), breadth first, at most [`DAG_NODES`].
pub(crate) struct DagView {
    pub rows: Vec<DagRow>,
    /// More nodes were below than shown.
    pub truncated: bool,
}

/// One node of a [`DagView`].
pub(crate) struct DagRow {
    pub node: JobRef,
    /// Distance from the job (0: the job itself).
    pub depth: usize,
    pub state: JobState,
    /// What it waits for (pending or done), at most [`CHILDREN`].
    pub waits_for: Vec<JobRef>,
}

/// Nodes a job page's DAG shows (each costs two reads).
pub(crate) const DAG_NODES: usize = 50;

/// Walks the jobs below `id`: every dependency key of each node's
/// `:dependencies`, `:processed`, `:failed` and `:unsuccessful` (so a node
/// several nodes wait for appears once, linked from each).
async fn dag_below(app: &App, q: &Queue, id: &str) -> Result<DagView, Failure> {
    use std::collections::{HashMap, HashSet, VecDeque};
    let prefix = app.prefix();
    let mut queues: HashMap<String, Queue> = HashMap::new();
    queues.insert(q.name().to_owned(), q.clone());
    let start = JobRef {
        queue: q.name().to_owned(),
        id: id.to_owned(),
    };
    let mut seen: HashSet<(String, String)> = HashSet::new();
    seen.insert((start.queue.clone(), start.id.clone()));
    let mut frontier = VecDeque::from([(start, 0usize)]);
    let mut rows = Vec::new();
    while let Some((node, depth)) = frontier.pop_front() {
        if rows.len() == DAG_NODES {
            return Ok(DagView {
                rows,
                truncated: true,
            });
        }
        let nq = match queues.get(&node.queue) {
            Some(nq) => nq.clone(),
            None => {
                let nq = app.queue(&node.queue).await?;
                queues.insert(node.queue.clone(), nq.clone());
                nq
            }
        };
        let (state, deps) = tokio::try_join!(
            nq.get_job_state(&node.id),
            nq.flows().get_dependencies(&node.id, 0, CHILDREN)
        )?;
        let keys = deps
            .processed
            .keys()
            .chain(deps.unprocessed.iter())
            .chain(deps.ignored.keys())
            .chain(deps.failed.iter());
        // Sets come in no order: sorted, so the page reads the same twice.
        let mut waits_for: Vec<JobRef> = keys.filter_map(|k| job_ref(prefix, k)).collect();
        waits_for.sort_by(|a, b| (&a.queue, &a.id).cmp(&(&b.queue, &b.id)));
        for r in &waits_for {
            if seen.insert((r.queue.clone(), r.id.clone())) {
                frontier.push_back((r.clone(), depth + 1));
            }
        }
        rows.push(DagRow {
            node,
            depth,
            state,
            waits_for,
        });
    }
    Ok(DagView {
        rows,
        truncated: false,
    })
}

/// A payload stored through a codec: decoded with the dashboard's keys, or
/// why not.
pub(crate) struct Decoded {
    /// `data` or `returnvalue`.
    pub field: &'static str,
    /// The codec its envelope names.
    pub codec: String,
    pub value: Result<Value, String>,
}

fn decoded(q: &Queue, job: &Job) -> Vec<Decoded> {
    [
        ("data", Some(&job.data)),
        ("returnvalue", job.return_value.as_ref()),
    ]
    .into_iter()
    .filter_map(|(field, stored)| {
        let stored = stored?;
        let value = q.codec().decode(stored)?.map_err(|e| e.to_string());
        let codec = stored[echomq::codec::CODEC_FIELD]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Some(Decoded {
            field,
            codec,
            value,
        })
    })
    .collect()
}

/// Log lines shown on a job page (the newest).
const LOG_LINES: i64 = 200;
/// Children listed per group.
const CHILDREN: u64 = 100;

pub(crate) async fn job_detail(app: &App, q: &Queue, id: &str) -> Result<JobDetail, Failure> {
    let job = q
        .get_job(id)
        .await?
        .ok_or_else(|| Failure::not_found(format!("no job {id:?} in queue {:?}", q.name())))?;
    let (state, mut logs) = tokio::try_join!(
        q.get_job_state(id),
        q.get_job_logs(id, 0, LOG_LINES - 1, echomq::RangeOrder::Descending)
    )?;
    // The newest lines, shown oldest first.
    logs.logs.reverse();
    let prefix = app.prefix();
    let parent = job.parent_key.as_deref().and_then(|k| job_ref(prefix, k));
    let deps = q.flows().get_dependencies(id, 0, CHILDREN).await?;
    let mut children = Vec::new();
    for (k, v) in &deps.processed {
        if let Some(r) = job_ref(prefix, k) {
            children.push(("processed", r, Some(v.to_string())));
        }
    }
    for k in &deps.unprocessed {
        if let Some(r) = job_ref(prefix, k) {
            children.push(("pending", r, None));
        }
    }
    for (k, reason) in &deps.ignored {
        if let Some(r) = job_ref(prefix, k) {
            children.push(("ignored", r, Some(reason.clone())));
        }
    }
    for k in &deps.failed {
        if let Some(r) = job_ref(prefix, k) {
            children.push(("failed", r, None));
        }
    }
    let dag = if children.is_empty() {
        None
    } else {
        Some(dag_below(app, q, id).await?)
    };
    Ok(JobDetail {
        dag,
        decoded: decoded(q, &job),
        job,
        state,
        logs: logs.logs,
        log_count: logs.count,
        parent,
        children,
    })
}

pub(crate) fn job_detail_json(d: &JobDetail) -> Value {
    let mut v = job_json(&d.job);
    v["state"] = json!(d.state.as_str());
    v["logs"] = json!(d.logs);
    v["logCount"] = json!(d.log_count);
    if let Some(dag) = &d.dag {
        v["below"] = json!({
            "truncated": dag.truncated,
            "nodes": dag.rows.iter().map(|r| json!({
                "queue": r.node.queue,
                "id": r.node.id,
                "depth": r.depth,
                "state": r.state.as_str(),
                "waitsFor": r.waits_for,
            })).collect::<Vec<_>>(),
        });
    }
    // Only when a payload is stored through a codec: {field: {codec, value | error}}.
    if !d.decoded.is_empty() {
        v["decoded"] = d
            .decoded
            .iter()
            .map(|x| {
                let body = match &x.value {
                    Ok(value) => json!({"codec": x.codec, "value": value}),
                    Err(e) => json!({"codec": x.codec, "error": e}),
                };
                (x.field.to_owned(), body)
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    v["parent"] = json!(d.parent);
    v["children"] = d
        .children
        .iter()
        .map(|(g, r, extra)| json!({"group": g, "queue": r.queue, "id": r.id, "detail": extra}))
        .collect();
    v
}

/// A page of jobs of one state.
pub(crate) struct JobPage {
    pub state: JobState,
    pub page: u64,
    pub size: u64,
    pub total: u64,
    pub jobs: Vec<Job>,
}

pub(crate) async fn job_page(
    app: &App,
    q: &Queue,
    state: JobState,
    page: u64,
    size: Option<u64>,
) -> Result<JobPage, Failure> {
    let size = size.unwrap_or(app.config.page_size).clamp(1, 200);
    let start = page.saturating_mul(size);
    let states = [state];
    let (jobs, total) = tokio::try_join!(
        q.get_jobs(
            &states,
            start as i64,
            (start + size - 1) as i64,
            echomq::RangeOrder::Descending
        ),
        q.count_states(&states)
    )?;
    let total = total.first().copied().unwrap_or(0);
    Ok(JobPage {
        state,
        page,
        size,
        total,
        jobs,
    })
}

/// What a search looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SearchField {
    Id,
    Name,
    Data,
}

impl SearchField {
    pub fn parse(s: Option<&str>) -> Result<Self, Failure> {
        match s.unwrap_or("data") {
            "id" => Ok(SearchField::Id),
            "name" => Ok(SearchField::Name),
            "data" => Ok(SearchField::Data),
            other => Err(Failure::bad_request(format!(
                "unknown search field {other:?} (id, name or data)"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SearchField::Id => "id",
            SearchField::Name => "name",
            SearchField::Data => "data",
        }
    }
}

/// One bounded search request's answer.
pub(crate) struct SearchResult {
    pub jobs: Vec<(Job, JobState)>,
    /// Ids read by this request.
    pub scanned: u64,
    /// Where to go on (`<state index>.<cursor>`), `None` when all was read.
    pub next: Option<String>,
}

/// Ids read per script call of a search.
const SEARCH_STEP: u64 = 500;

/// Searches the states (one, or all in [`STATES`] order) reading at most the
/// configured budget of ids, from `cursor` (as a previous answer gave it).
pub(crate) async fn search(
    app: &App,
    q: &Queue,
    field: SearchField,
    text: &str,
    state: Option<JobState>,
    cursor: Option<&str>,
) -> Result<SearchResult, Failure> {
    if text.is_empty() {
        return Err(Failure::bad_request("give something to search for"));
    }
    if field == SearchField::Id {
        let found = match q.get_job(text).await? {
            Some(j) => {
                let s = q.get_job_state(text).await?;
                vec![(j, s)]
            }
            None => Vec::new(),
        };
        return Ok(SearchResult {
            jobs: found,
            scanned: 1,
            next: None,
        });
    }
    let states: Vec<JobState> = match state {
        Some(s) => vec![s],
        None => STATES.to_vec(),
    };
    let (mut idx, mut at) = match cursor {
        Some(c) => {
            let (i, a) = c
                .split_once('.')
                .and_then(|(i, a)| Some((i.parse::<usize>().ok()?, a.parse::<u64>().ok()?)))
                .ok_or_else(|| Failure::bad_request("bad search cursor"))?;
            (i, a)
        }
        None => (0, 0),
    };
    let filter = match field {
        SearchField::Name => echomq::queue::JobFilter {
            name: Some(text.to_owned()),
            data_contains: None,
        },
        _ => echomq::queue::JobFilter {
            name: None,
            data_contains: Some(text.to_owned()),
        },
    };
    let budget = app.config.search_budget;
    let (mut scanned, mut jobs) = (0u64, Vec::new());
    while idx < states.len() && scanned < budget {
        let step = SEARCH_STEP.min(budget - scanned);
        let (next, found) = q
            .search_jobs_page(
                states[idx],
                &filter,
                at,
                step,
                echomq::RangeOrder::Descending,
            )
            .await?;
        jobs.extend(found.into_iter().map(|j| (j, states[idx])));
        match next {
            Some(n) => {
                scanned += n.saturating_sub(at);
                at = n;
            }
            None => {
                // The state ended inside this step: it read what was left.
                let left = q.count_states(&states[idx..=idx]).await?[0].saturating_sub(at);
                scanned += left.min(step);
                idx += 1;
                at = 0;
            }
        }
    }
    Ok(SearchResult {
        jobs,
        scanned,
        next: (idx < states.len()).then(|| format!("{idx}.{at}")),
    })
}

/// Groups one read of the groups panel takes from the queue's index (one
/// getGroups call: a ZRANGE of this many and three reads per group, inside
/// the dashboard's per-call bound, issue 28).
pub(crate) const GROUPS_READ: u64 = 200;
/// Groups the panel shows: the busiest of those read.
pub(crate) const GROUPS_SHOWN: usize = 20;

/// One group of the panel (docs/groups.md).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GroupView {
    pub id: String,
    pub waiting: u64,
    /// Delayed jobs not due yet.
    pub delayed: u64,
    pub active: u64,
    pub paused: bool,
    pub concurrency: Option<u64>,
    /// `(max, duration ms)`.
    pub rate_limit: Option<(u64, u64)>,
}

/// The groups panel: on its first page the busiest [`GROUPS_SHOWN`] groups
/// of the whole queue (`{P}gr:busy`, docs/groups.md §Dashboard), on the next
/// ones the busiest of [`GROUPS_READ`] groups from index `start` (id order),
/// with the total and the queue's defaults.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GroupsPanel {
    pub total: u64,
    pub start: u64,
    pub read: u64,
    pub groups: Vec<GroupView>,
    pub default_concurrency: Option<u64>,
    pub default_rate_limit: Option<(u64, u64)>,
}

/// Bounded calls: one page of the group index, on the first page the
/// global busiest, the queue's defaults.
pub(crate) async fn groups(q: &Queue, start: u64) -> Result<GroupsPanel, Failure> {
    let page = q.groups().page(start, GROUPS_READ).await?;
    let read = page.groups.len() as u64;
    let rows = if start == 0 && page.total > 0 {
        q.groups().busiest(GROUPS_SHOWN as u64).await?.groups
    } else {
        page.groups
    };
    let mut groups: Vec<GroupView> = rows
        .into_iter()
        .map(|g| GroupView {
            id: g.id,
            waiting: g.waiting,
            delayed: g.delayed,
            active: g.active,
            paused: g.paused,
            concurrency: g.concurrency,
            rate_limit: g.rate_limit,
        })
        .collect();
    groups.sort_by(|a, b| {
        (b.waiting + b.delayed + b.active)
            .cmp(&(a.waiting + a.delayed + a.active))
            .then_with(|| a.id.cmp(&b.id))
    });
    groups.truncate(GROUPS_SHOWN);
    let defaults = if page.total > 0 {
        q.groups().defaults().await?
    } else {
        Default::default()
    };
    Ok(GroupsPanel {
        total: page.total,
        start,
        read,
        groups,
        default_concurrency: defaults.concurrency,
        default_rate_limit: defaults.limit,
    })
}

/// Dead letters the panel shows: the newest of one page read.
pub(crate) const DEAD_LETTERS_SHOWN: u64 = 20;

/// One dead letter of the panel (docs/operations.md §Dead letters).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DeadLetterView {
    pub id: String,
    pub name: String,
    pub source_queue: String,
    pub source_id: String,
    pub class: String,
    pub reason: String,
    pub attempts_made: u64,
    pub dead_lettered_at: u64,
}

/// The dead letters panel of a dead-letter queue: its counts by source and
/// class, and the newest [`DEAD_LETTERS_SHOWN`] dead letters.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DeadLettersPanel {
    pub total: u64,
    /// `(source, class, count)`.
    pub counts: Vec<(String, String, u64)>,
    pub letters: Vec<DeadLetterView>,
}

/// Bounded calls: the counts hash, one page of the dead letters; `None`
/// for a queue that holds no dead letter.
pub(crate) async fn dead_letters(q: &Queue) -> Result<Option<DeadLettersPanel>, Failure> {
    let counts = q.dead_letters().counts().await?;
    if counts.is_empty() {
        return Ok(None);
    }
    let letters = q
        .dead_letters()
        .list(
            &echomq::dead_letter::DeadLetterFilter::all(),
            DEAD_LETTERS_SHOWN,
        )
        .await?;
    Ok(Some(DeadLettersPanel {
        total: counts.iter().map(|(_, n)| n).sum(),
        counts: counts
            .into_iter()
            .map(|((source, class), n)| (source, class, n))
            .collect(),
        letters: letters
            .into_iter()
            .map(|d| DeadLetterView {
                id: d.id,
                name: d.job.name,
                source_queue: d.source_queue,
                source_id: d.source_id,
                class: d.class,
                reason: d.job.failed_reason.unwrap_or_default(),
                attempts_made: d.job.attempts_made,
                dead_lettered_at: d.dead_lettered_at,
            })
            .collect(),
    }))
}

/// The queue's byte budget line (docs/operations.md §Memory): the bytes it
/// keeps after work is done and its budget, `None` without a budget. One
/// bounded read-only call (a sample of each finished set).
pub(crate) async fn budget(q: &Queue) -> Result<Option<echomq::budget::ByteBudget>, Failure> {
    let b = q.byte_budget().await?;
    Ok(b.max.is_some().then_some(b))
}
