//! The server-rendered pages. maud escapes every interpolated value, so job
//! names, data and failure reasons reach the browser as text, never markup.
//!
//! A page asked with the `x-fragment: 1` header answers only its `<main>`
//! content: the page script swaps it in when the live feed says something
//! changed, so the HTML is rendered (and escaped) in one place.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use echomq::{Job, JobState};
use maud::{html, Markup, DOCTYPE};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::Deserialize;
use serde_json::Value;

use crate::actions::{question, Action, ActionInput, ACTIONS, GROUP_ACTIONS};
use crate::error::Failure;
use crate::guard::writable;
use crate::live::truncate;
use crate::model::{self, count_of, SearchField, STATES};
use crate::security::{expired_cookie, session_cookie, Ctx};
use crate::state::App;

type Page = Result<Response, Failure>;

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

fn queue_url(q: &str) -> String {
    format!("/queues/{}", enc(q))
}

fn job_url(q: &str, id: &str) -> String {
    format!("/queues/{}/jobs/{}", enc(q), enc(id))
}

fn confirm_url(q: &str, action: &str, job: Option<&str>) -> String {
    match job {
        Some(j) => format!("/queues/{}/confirm/{action}?job={}", enc(q), enc(j)),
        None => format!("/queues/{}/confirm/{action}", enc(q)),
    }
}

/// Milliseconds since the epoch as a UTC time.
pub(crate) fn time(ms: Option<u64>) -> String {
    ms.and_then(|ms| chrono::DateTime::from_timestamp_millis(ms as i64))
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
        .unwrap_or_else(|| "—".into())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// The whole page, or only the main content for a fragment request.
pub(crate) fn respond(
    app: &App,
    ctx: &Ctx,
    headers: &HeaderMap,
    title: &str,
    queue: Option<&str>,
    body: Markup,
) -> Response {
    let fragment = headers.get("x-fragment").is_some_and(|v| v == "1");
    let mut r = if fragment {
        let mut r = Html(body.into_string()).into_response();
        r.headers_mut()
            .insert("x-fragment", HeaderValue::from_static("1"));
        r
    } else {
        Html(layout(app, ctx, title, queue, body).into_string()).into_response()
    };
    // The page and its fragment share a URL: neither may be cached, or
    // "back" could show a bare fragment or stale counts.
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("x-fragment"));
    r
}

fn layout(app: &App, ctx: &Ctx, title: &str, queue: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="csrf-token" content=(ctx.session.csrf);
                title { (title) " · EchoMQ" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body data-queue=(queue.unwrap_or("")) {
                header.top {
                    a.brand href="/" { "EchoMQ" }
                    span.prefix { "prefix " code { (app.prefix()) } }
                    a.nav href="/relay" { "Relay" }
                    @if app.config.read_only { span.badge.ro { "read-only" } }
                    span #live-status .status { "connecting…" }
                    @if app.config.auth_token.is_some() {
                        form.logout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(ctx.session.csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                div.layout {
                    main #main { (body) }
                    aside.feed {
                        h2 { "Live events" }
                        ul #feed {}
                    }
                }
            }
        }
    }
}

/// A line chart of `values` as inline SVG, with the last value.
fn sparkline(values: &[f64], class: &str) -> Markup {
    const W: f64 = 120.0;
    const H: f64 = 24.0;
    let max = values.iter().copied().fold(0.0, f64::max);
    let n = values.len();
    let points = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x = if n > 1 {
                i as f64 * W / (n - 1) as f64
            } else {
                0.0
            };
            let y = if max > 0.0 {
                H - 1.0 - v / max * (H - 2.0)
            } else {
                H - 1.0
            };
            format!("{x:.1},{y:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ");
    let last = values.last().copied().unwrap_or(0.0);
    html! {
        span.spark title=(format!("now {last:.2}/s, max {max:.2}/s over {n} samples")) {
            svg class=(class) width="120" height="24" viewBox="0 0 120 24" {
                polyline points=(points) fill="none" stroke="currentColor" stroke-width="1.5" {}
            }
            span.spark-value { (format!("{last:.1}")) }
        }
    }
}

fn state_badge(s: JobState) -> Markup {
    html! { span class=(format!("badge state-{}", s.as_str())) { (s.as_str()) } }
}

fn notice(done: Option<&str>) -> Markup {
    html! { @if let Some(msg) = done { p.notice role="status" { (msg) } } }
}

/// `GET /`: every queue of the prefix.
pub(crate) async fn overview(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Query(pq): Query<crate::api::PageQuery>,
    headers: HeaderMap,
) -> Page {
    let o = model::overview(&app, pq.page.unwrap_or(0)).await?;
    let queues = &o.queues;
    let pages = o.total.div_ceil(model::OVERVIEW_PAGE);
    let body = html! {
        div #overview data-poll="1" {}
        h1 { "Queues" }
        @if o.partial {
            p.notice role="status" { "Still looking for queues in a large keyspace: more may appear on the next refresh." }
        }
        @if pages > 1 {
            nav.pager {
                "Queues " (o.page * model::OVERVIEW_PAGE + 1) "–" (o.page * model::OVERVIEW_PAGE + queues.len()) " of " (o.total) " "
                @if o.page > 0 { a href=(format!("/?page={}", o.page - 1)) { "← previous" } " " }
                @if o.page + 1 < pages { a href=(format!("/?page={}", o.page + 1)) { "next →" } }
            }
        }
        @if queues.is_empty() {
            p.empty { "No queue under prefix " code { (app.prefix()) } " yet." }
        } @else {
            table.queues {
                thead { tr {
                    th { "Queue" } th { "Status" }
                    @for s in STATES { th.num { (s.as_str()) } }
                    th.num { "Workers" } th { "Throughput /s" } th { "Failed /s" }
                } }
                tbody { @for q in queues {
                    tr data-queue=(q.name) {
                        td { a.queue-link href=(queue_url(&q.name)) { (q.name) } }
                        td { @if q.paused { span.badge.paused { "paused" } } @else { span.badge.running { "running" } } }
                        @for s in STATES {
                            td class=(format!("num count-{}", s.as_str())) {
                                a href=(format!("{}?state={}", queue_url(&q.name), s.as_str())) { (count_of(&q.counts, s)) }
                            }
                        }
                        td.num { (q.workers) }
                        td { (sparkline(&q.samples.iter().map(|s| s.completed_per_s + s.failed_per_s).collect::<Vec<_>>(), "throughput")) }
                        td { (sparkline(&q.samples.iter().map(|s| s.failed_per_s).collect::<Vec<_>>(), "failures")) }
                    }
                } }
            }
        }
    };
    Ok(respond(&app, &ctx, &headers, "Queues", None, body))
}

fn job_table(queue: &str, rows: &[(&Job, Option<JobState>)]) -> Markup {
    html! {
        @if rows.is_empty() {
            p.empty { "No jobs." }
        } @else {
            table.jobs {
                thead { tr {
                    th { "Id" } th { "Name" }
                    @if rows.iter().any(|(_, s)| s.is_some()) { th { "State" } }
                    th { "Created" } th.num { "Attempts" } th { "Data / failure" }
                } }
                tbody { @for (j, s) in rows {
                    tr data-job=(j.id) {
                        td { a.job-link href=(job_url(queue, &j.id)) { (j.id) } }
                        td { (j.name) }
                        @if let Some(s) = s { td { (state_badge(*s)) } }
                        td { (time(Some(j.timestamp))) }
                        td.num { (j.attempts_made) }
                        td.preview {
                            @if let Some(r) = &j.failed_reason { span.failed { (truncate(r, 120)) } }
                            @else { code { (truncate(&j.data.to_string(), 120)) } }
                        }
                    }
                } }
            }
        }
    }
}

/// Parameters of the queue page.
#[derive(Deserialize)]
pub(crate) struct QueuePageQuery {
    state: Option<String>,
    page: Option<u64>,
    done: Option<String>,
    /// First group (index order) of the groups panel's read.
    groups: Option<u64>,
}

/// `/queues/{q}/confirm/{action}?group=…`.
fn group_confirm_url(q: &str, action: &str, group: &str) -> String {
    format!("/queues/{}/confirm/{action}?group={}", enc(q), enc(group))
}

/// The groups panel (docs/groups.md): the busiest of one bounded read.
fn groups_panel(app: &App, queue: &str, p: &model::GroupsPanel) -> Markup {
    let limit = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let rate =
        |v: Option<(u64, u64)>| v.map_or_else(|| "-".to_owned(), |(m, d)| format!("{m}/{d} ms"));
    let at = |start: u64| format!("{}?groups={start}#groups", queue_url(queue));
    html! {
        @if p.total > 0 {
            h2 #groups { "Groups (" (p.total) ")" }
            p.hint {
                @if p.start == 0 {
                    "The busiest " (p.groups.len()) " of all groups."
                } @else {
                    "The busiest " (p.groups.len()) " of groups " (p.start + 1) "–" (p.start + p.read.max(1))
                    " (id order)."
                }
                " Defaults for groups without their own: concurrency "
                (limit(p.default_concurrency)) ", rate " (rate(p.default_rate_limit)) "."
            }
            table.groups {
                thead { tr {
                    th { "Group" } th.num { "Waiting" } th.num { "Active" } th.num { "Delayed" } th { "Status" }
                    th.num { "Concurrency" } th { "Rate limit" }
                    @if !app.config.read_only { th { "Actions" } }
                } }
                tbody { @for g in &p.groups { tr {
                    td.gid { (g.id) }
                    td.num { (g.waiting) } td.num { (g.active) } td.num { (g.delayed) }
                    td { @if g.paused { span.badge.paused { "paused" } } @else { "running" } }
                    td.num { (limit(g.concurrency)) } td { (rate(g.rate_limit)) }
                    @if !app.config.read_only { td.actions {
                        @if g.paused { a href=(group_confirm_url(queue, "group-resume", &g.id)) { "Resume" } }
                        @else { a href=(group_confirm_url(queue, "group-pause", &g.id)) { "Pause" } }
                        " " a href=(group_confirm_url(queue, "group-concurrency", &g.id)) { "Concurrency" }
                        " " a href=(group_confirm_url(queue, "group-rate-limit", &g.id)) { "Rate limit" }
                    } }
                } } }
            }
            p.pager {
                @if p.start > 0 { a href=(at(p.start.saturating_sub(model::GROUPS_READ))) { "← previous groups" } " " }
                @if p.start + p.read < p.total { a href=(at(p.start + model::GROUPS_READ)) { "next groups →" } }
            }
        }
    }
}

/// The dead letters panel (docs/operations.md §Dead letters): counts by
/// source and class, the newest dead letters, replay one or by filter.
fn dead_letters_panel(app: &App, queue: &str, p: &Option<model::DeadLettersPanel>) -> Markup {
    let Some(p) = p else { return html! {} };
    html! {
        section.dead-letters {
            h2 #dead-letters { "Dead letters (" (p.total) ")" }
            p.hint {
                @for (source, class, n) in &p.counts { (source) " · " (class) ": " (n) "  " }
            }
            @if !app.config.read_only {
                p { a.button href=(confirm_url(queue, "dlq-replay-matching", None)) { "Replay by filter…" } }
            }
            table.dead-letters {
                thead { tr {
                    th { "Id" } th { "Dead-lettered" } th { "Source" } th { "Class" } th { "Name" }
                    th.num { "Attempts" } th { "Reason" } th { "" }
                } }
                tbody { @for d in &p.letters { tr {
                    td { a href=(job_url(queue, &d.id)) { (d.id) } }
                    td { (time(Some(d.dead_lettered_at))) }
                    td { (d.source_queue) " / " (d.source_id) }
                    td { (d.class) }
                    td { (d.name) }
                    td.num { (d.attempts_made) }
                    td { (d.reason) }
                    td { @if !app.config.read_only {
                        a href=(confirm_url(queue, "dlq-replay", Some(&d.id))) { "Replay" }
                    } }
                } } }
            }
        }
    }
}

fn actions_bar(app: &App, queue: &str, paused: bool) -> Markup {
    html! {
        @if !app.config.read_only {
            nav.actions {
                @if paused { a.button href=(confirm_url(queue, "resume", None)) { "Resume" } }
                @else { a.button href=(confirm_url(queue, "pause", None)) { "Pause" } }
                a.button href=(confirm_url(queue, "add", None)) { "Add job" }
                a.button href=(confirm_url(queue, "retry-failed", None)) { "Retry all failed" }
                a.button href=(confirm_url(queue, "clean", None)) { "Clean" }
                a.button.danger href=(confirm_url(queue, "drain", None)) { "Drain" }
            }
        }
    }
}

/// `GET /queues/{queue}`: counts, jobs of a state, workers, schedulers.
pub(crate) async fn queue(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Path(name): Path<String>,
    Query(pq): Query<QueuePageQuery>,
    headers: HeaderMap,
) -> Page {
    let q = app.queue(&name).await?;
    app.live.watch(&app.conn, &name).await;
    let state = model::parse_state(pq.state.as_deref().unwrap_or("waiting"))?;
    let summary = model::summary(&app, &q).await?;
    let page = model::job_page(&app, &q, state, pq.page.unwrap_or(0), None).await?;
    let workers = model::workers(&q).await.unwrap_or_default();
    let schedulers = model::schedulers(&app, &q).await?;
    let groups = model::groups(&q, pq.groups.unwrap_or(0)).await?;
    let dead = model::dead_letters(&q).await?;
    let budget = model::budget(&q).await?;
    let rows: Vec<(&Job, Option<JobState>)> = page.jobs.iter().map(|j| (j, None)).collect();
    let first = page.page * page.size;
    let page_url = |p: u64| format!("{}?state={}&page={p}", queue_url(&name), state.as_str());
    let body = html! {
        p.crumbs { a href="/" { "Queues" } " / " (name) }
        h1 {
            "Queue " span.qname { (name) } " "
            @if summary.paused { span.badge.paused #queue-status { "paused" } }
            @else { span.badge.running #queue-status { "running" } }
        }
        (notice(pq.done.as_deref()))
        @if let Some(b) = &budget {
            p.budget #queue-budget {
                "Bytes kept after work is done: " (echomq::budget::human_bytes(b.used)) " of a budget of "
                (echomq::budget::human_bytes(b.max.unwrap_or(0)))
                " (" (b.completed) " completed and " (b.failed) " failed jobs kept, "
                (b.removed) " removed by the budget)"
            }
        }
        (actions_bar(&app, &name, summary.paused))
        nav.tabs {
            @for s in STATES {
                a.tab.active[s == state] href=(format!("{}?state={}", queue_url(&name), s.as_str())) {
                    (s.as_str()) " " span.count { (count_of(&summary.counts, s)) }
                }
            }
        }
        form.search method="get" action=(format!("{}/search", queue_url(&name))) {
            input type="search" name="q" placeholder="Search…" required;
            select name="field" {
                option value="data" { "text in data" }
                option value="name" { "name" }
                option value="id" { "id" }
            }
            select name="state" {
                option value="all" { "all states" }
                @for s in STATES { option value=(s.as_str()) selected[s == state] { (s.as_str()) } }
            }
            button type="submit" { "Search" }
        }
        (job_table(&name, &rows))
        p.pager {
            @if page.page > 0 { a href=(page_url(page.page - 1)) { "← newer" } " " }
            @if page.total > 0 {
                "jobs " (first + 1) "–" ((first + page.jobs.len() as u64).max(first + 1)) " of " (page.total)
            }
            @if first + page.size < page.total { " " a href=(page_url(page.page + 1)) { "older →" } }
        }
        h2 { "Workers (" (workers.len()) ")" }
        @if workers.is_empty() { p.empty { "No worker connected." } }
        @else {
            table.workers {
                thead { tr { th { "Name" } th { "Address" } th.num { "Age (s)" } th.num { "Idle (s)" } } }
                tbody { @for w in &workers { tr { td { (w.name) } td { (w.addr) } td.num { (w.age_s) } td.num { (w.idle_s) } } } }
            }
        }
        (groups_panel(&app, &name, &groups))
        (dead_letters_panel(&app, &name, &dead))
        h2 { "Job schedulers (" (schedulers.len()) ")" }
        @if schedulers.is_empty() { p.empty { "No job scheduler." } }
        @else {
            table.schedulers {
                thead { tr { th { "Id" } th { "Job name" } th { "Repeat" } th { "Next run" } th.num { "Iterations" } } }
                tbody { @for s in &schedulers { tr {
                    td { (s.id) } td { (s.name) }
                    td {
                        @if let Some(ms) = s.every { "every " (ms) " ms" }
                        @else if let Some(p) = &s.pattern { "cron " code { (p) } @if let Some(tz) = &s.tz { " (" (tz) ")" } }
                    }
                    td { (time(Some(s.next))) }
                    td.num { (s.iterations) }
                } } }
            }
        }
    };
    Ok(respond(&app, &ctx, &headers, &name, Some(&name), body))
}

/// `GET /queues/{queue}/search`.
pub(crate) async fn search(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Path(name): Path<String>,
    Query(sq): Query<crate::api::SearchQuery>,
    headers: HeaderMap,
) -> Page {
    let q = app.queue(&name).await?;
    let field = SearchField::parse(sq.field.as_deref())?;
    let state_name = sq.state.clone().unwrap_or_else(|| "all".into());
    let state = match state_name.as_str() {
        "" | "all" => None,
        s => Some(model::parse_state(s)?),
    };
    let text = sq.q.clone().unwrap_or_default();
    let r = model::search(&app, &q, field, &text, state, sq.cursor.as_deref()).await?;
    let rows: Vec<(&Job, Option<JobState>)> = r.jobs.iter().map(|(j, s)| (j, Some(*s))).collect();
    let body = html! {
        p.crumbs { a href="/" { "Queues" } " / " a href=(queue_url(&name)) { (name) } " / search" }
        h1 { "Search " (field.as_str()) " for " em { (text) } }
        p.search-cost {
            "Read " (r.scanned) " jobs (at most " (app.config.search_budget) " per request)"
            @if let Some(next) = &r.next {
                "; more remain. "
                a #search-more href=(format!("{}/search?q={}&field={}&state={}&cursor={}", queue_url(&name), enc(&text), field.as_str(), enc(&state_name), enc(next))) { "Continue the search →" }
            } @else { "; the whole range was searched." }
        }
        (job_table(&name, &rows))
    };
    Ok(respond(&app, &ctx, &headers, "Search", Some(&name), body))
}

/// Parameters of the job page.
#[derive(Deserialize)]
pub(crate) struct DonePage {
    done: Option<String>,
}

/// `GET /queues/{queue}/jobs/{id}`: everything about one job.
pub(crate) async fn job(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Path((name, id)): Path<(String, String)>,
    Query(dq): Query<DonePage>,
    headers: HeaderMap,
) -> Page {
    let q = app.queue(&name).await?;
    app.live.watch(&app.conn, &name).await;
    let d = model::job_detail(&app, &q, &id).await?;
    let j = &d.job;
    let body = html! {
        p.crumbs { a href="/" { "Queues" } " / " a href=(queue_url(&name)) { (name) } " / job " (id) }
        h1 { "Job " span.jid { (j.id) } " " span #job-state data-state=(d.state.as_str()) { (state_badge(d.state)) } }
        (notice(dq.done.as_deref()))
        p.jname { "Name " code { (j.name) } }
        @if !app.config.read_only {
            nav.actions {
                @if matches!(d.state, JobState::Failed | JobState::Completed) {
                    a.button #action-retry href=(confirm_url(&name, "retry", Some(&j.id))) { "Retry" }
                }
                @if d.state == JobState::Delayed {
                    a.button #action-promote href=(confirm_url(&name, "promote", Some(&j.id))) { "Promote" }
                }
                @if !matches!(d.state, JobState::Failed | JobState::Completed) {
                    a.button.danger #action-cancel href=(confirm_url(&name, "cancel", Some(&j.id))) { "Cancel job" }
                }
                a.button.danger #action-remove href=(confirm_url(&name, "remove", Some(&j.id))) { "Remove" }
            }
        }
        dl.meta {
            dt { "Created" } dd { (time(Some(j.timestamp))) }
            dt { "Processed" } dd { (time(j.processed_on)) }
            dt { "Finished" } dd { (time(j.finished_on)) }
            dt { "Attempts made / started" } dd { (j.attempts_made) " / " (j.attempts_started) }
            dt { "Stalled" } dd { (j.stalled_counter) }
            dt { "Priority" } dd { (j.priority) }
            dt { "Delay" } dd { (j.delay) " ms" }
            @if let Some(pb) = &j.processed_by { dt { "Processed by" } dd { (pb) } }
        }
        @if let Some(p) = &d.parent {
            p.parent { "Parent: " a href=(job_url(&p.queue, &p.id)) { (p.queue) " / " (p.id) } }
        }
        @if !d.children.is_empty() {
            h2 { "Children" }
            table.children {
                thead { tr { th { "Group" } th { "Job" } th { "Value / reason" } } }
                tbody { @for (g, r, extra) in &d.children { tr {
                    td { (g) } td { a href=(job_url(&r.queue, &r.id)) { (r.queue) " / " (r.id) } }
                    td { @if let Some(e) = extra { code { (truncate(e, 200)) } } }
                } } }
            }
        }
        @if let Some(dag) = d.dag.as_ref().filter(|v| v.rows.len() > 1) {
            h2 { "Jobs below (" (dag.rows.len() - 1)
                @if dag.truncated { ", the first " (model::DAG_NODES - 1) " breadth first" }
                "; a job several jobs wait for is listed once)" }
            table.dag #job-dag {
                thead { tr { th { "Level" } th { "Job" } th { "State" } th { "Waits for" } } }
                tbody { @for row in &dag.rows { tr data-depth=(row.depth) {
                    td { (row.depth) }
                    td { a href=(job_url(&row.node.queue, &row.node.id)) { (row.node.queue) " / " (row.node.id) } }
                    td { (state_badge(row.state)) }
                    td { @for (i, w) in row.waits_for.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(job_url(&w.queue, &w.id)) { (w.id) }
                    } }
                } } }
            }
        }
        @for x in &d.decoded {
            h2 { "Decoded " (x.field) " (" code { (x.codec) } ")" }
            @match &x.value {
                Ok(v) => { pre.json.decoded id={ "job-decoded-" (x.field) } { (pretty(v)) } }
                Err(e) => { p.failed id={ "job-decoded-" (x.field) } { "Stored through a codec; not decoded here: " (e) } }
            }
        }
        h2 { "Data" @if !d.decoded.is_empty() { " (as stored)" } }
        pre.json #job-data { (pretty(&j.data)) }
        h2 { "Options" }
        pre.json { (pretty(&Value::Object(j.opts.to_public()))) }
        h2 { "Progress" }
        pre.json { (pretty(&j.progress)) }
        @if let Some(rv) = &j.return_value { h2 { "Return value" } pre.json #job-return { (pretty(rv)) } }
        @if let Some(reason) = &j.failed_reason { h2 { "Failure" } p.failed #job-failure { (reason) } }
        @if !j.stacktrace.is_empty() {
            h2 { "Stack traces (" (j.stacktrace.len()) ", one per failed attempt)" }
            @for t in &j.stacktrace { pre.trace { (t) } }
        }
        h2 { "Logs (" (d.log_count) ")" }
        @if d.logs.is_empty() { p.empty { "No log lines." } }
        @else { ol.logs { @for l in &d.logs { li { (l) } } } }
    };
    Ok(respond(
        &app,
        &ctx,
        &headers,
        &format!("Job {id}"),
        Some(&name),
        body,
    ))
}

/// Parameters of the confirm page (the action's own fields, prefilled).
pub(crate) type ConfirmQuery = ActionInput;

/// `GET /queues/{queue}/confirm/{action}`: the confirm step, a form that
/// posts the action with the session's CSRF token.
pub(crate) async fn confirm(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Path((name, action)): Path<(String, String)>,
    Query(input): Query<ConfirmQuery>,
    headers: HeaderMap,
) -> Page {
    writable(&app)?;
    app.queue(&name).await?;
    let job = input.job.as_deref().filter(|j| !j.is_empty());
    let group = input.group.as_deref().filter(|g| !g.is_empty());
    let ask = question(&action, &name, job, group)
        .ok_or_else(|| Failure::not_found(format!("no action {action:?}")))?;
    if matches!(
        action.as_str(),
        "retry" | "promote" | "remove" | "cancel" | "dlq-replay"
    ) && job.is_none()
    {
        return Err(Failure::bad_request(format!("{action} needs a job id")));
    }
    if GROUP_ACTIONS.contains(&action.as_str()) && group.is_none() {
        return Err(Failure::bad_request(format!("{action} needs a group id")));
    }
    let back = match job {
        Some(_) if action == "dlq-replay" => queue_url(&name),
        Some(j) => job_url(&name, j),
        None => queue_url(&name),
    };
    let body = html! {
        p.crumbs { a href="/" { "Queues" } " / " a href=(queue_url(&name)) { (name) } " / confirm" }
        h1 { "Confirm: " (action) }
        p.question { (ask) }
        form.confirm method="post" action=(format!("{}/actions/{}", queue_url(&name), action)) {
            input type="hidden" name="csrf" value=(ctx.session.csrf);
            @if let Some(j) = job { input type="hidden" name="job" value=(j); }
            @if let Some(g) = group { input type="hidden" name="group" value=(g); }
            @match action.as_str() {
                "group-concurrency" => {
                    label { "Concurrency " input type="number" name="concurrency" min="1" required; }
                }
                "group-rate-limit" => {
                    label { "At most " input type="number" name="max" min="1" required; }
                    label { " releases per (ms) " input type="number" name="duration_ms" min="1" required; }
                }
                "add" => {
                    label { "Name " input type="text" name="name" required value=(input.name.clone().unwrap_or_default()); }
                    label { "Data (JSON) " textarea name="data" rows="6" { (input.data.clone().unwrap_or_else(|| "{}".into())) } }
                    label { "Delay (ms) " input type="number" name="delay_ms" min="0"; }
                    label { "Attempts " input type="number" name="attempts" min="0"; }
                }
                "clean" => {
                    label { "State " select name="state" {
                        @for s in [JobState::Completed, JobState::Failed, JobState::Delayed, JobState::Waiting, JobState::Prioritized] {
                            option value=(s.as_str()) { (s.as_str()) }
                        }
                    } }
                    label { "Older than (ms) " input type="number" name="grace_ms" min="0" value="0"; }
                    label { "At most " input type="number" name="limit" min="0" value="1000"; }
                }
                "drain" => {
                    label { input type="checkbox" name="delayed" value="true"; " also delayed jobs" }
                }
                "dlq-replay-matching" => {
                    label { "Job name " input type="text" name="name" value=(input.name.clone().unwrap_or_default()); }
                    label { " reason contains " input type="text" name="reason" value=(input.reason.clone().unwrap_or_default()); }
                    label { " at most " input type="number" name="limit" min="1" value="100" required; }
                }
                "cancel" => {
                    label { "Reason " input type="text" name="reason" maxlength="1000" placeholder="cancelled from the dashboard"; }
                    label { input type="checkbox" name="retry" value="true"; " retry the job if attempts remain" }
                }
                _ => {}
            }
            div.buttons {
                button.danger #confirm type="submit" { "Confirm" }
                " "
                a.cancel href=(back) { "Cancel" }
            }
        }
    };
    Ok(respond(&app, &ctx, &headers, "Confirm", Some(&name), body))
}

/// `POST /queues/{queue}/actions/{action}` (form): runs the action, then
/// back to the job or queue page with what happened.
pub(crate) async fn act(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Path((name, action)): Path<(String, String)>,
    Form(input): Form<ActionInput>,
) -> Page {
    writable(&app)?;
    ctx.check_csrf(input.csrf.as_deref())?;
    if !ACTIONS.contains(&action.as_str()) {
        return Err(Failure::not_found(format!("no action {action:?}")));
    }
    let parsed = Action::parse(&action, &input)?;
    let q = app.queue(&name).await?;
    let result = parsed.run(&q).await?;
    tracing::info!(queue = %name, action = %action, job = ?parsed.job(), group = ?parsed.group(), "dashboard action");
    let done = format!("{action}: done ({result})");
    let to = match (&parsed, result.get("id").and_then(Value::as_str)) {
        (Action::Add { .. }, Some(id)) => job_url(&name, id),
        (Action::Remove { .. }, _) => queue_url(&name),
        _ => parsed
            .job()
            .map(|j| job_url(&name, j))
            .unwrap_or_else(|| queue_url(&name)),
    };
    Ok(Redirect::to(&format!("{to}?done={}", enc(&done))).into_response())
}

/// `GET /login`.
pub(crate) async fn login_form(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
) -> Page {
    Ok(Html(login_page(&app, &ctx, None).into_string()).into_response())
}

fn login_page(app: &App, ctx: &Ctx, error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Log in · EchoMQ" }
                link rel="stylesheet" href="/assets/app.css";
            }
            body.login {
                main {
                    h1 { "EchoMQ dashboard" }
                    p { "prefix " code { (app.prefix()) } }
                    @if let Some(e) = error { p.failed { (e) } }
                    form method="post" action="/login" {
                        input type="hidden" name="csrf" value=(ctx.session.csrf);
                        label { "Token " input type="password" name="token" autocomplete="current-password" required autofocus; }
                        button type="submit" { "Log in" }
                    }
                }
            }
        }
    }
}

/// The login form's fields.
#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
    csrf: Option<String>,
}

/// `POST /login`: a right token makes a new, logged-in session.
pub(crate) async fn login(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Form(form): Form<LoginForm>,
) -> Page {
    ctx.check_csrf(form.csrf.as_deref())?;
    let Some(token) = app.config.auth_token.as_ref() else {
        return Ok(Redirect::to("/").into_response());
    };
    if !token.matches(&form.token) {
        tracing::warn!("dashboard: a login with a wrong token");
        // Slows guessing down without keeping any state.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let page = login_page(&app, &ctx, Some("Wrong token."));
        return Ok((
            axum::http::StatusCode::UNAUTHORIZED,
            Html(page.into_string()),
        )
            .into_response());
    }
    let session = app.sessions.login(&ctx.session.id);
    let mut r = Redirect::to("/").into_response();
    r.headers_mut()
        .append(header::SET_COOKIE, session_cookie(&session.id));
    Ok(r)
}

/// The logout form's field.
#[derive(Deserialize)]
pub(crate) struct LogoutForm {
    csrf: Option<String>,
}

/// `POST /logout`.
pub(crate) async fn logout(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    Form(form): Form<LogoutForm>,
) -> Page {
    ctx.check_csrf(form.csrf.as_deref())?;
    app.sessions.forget(&ctx.session.id);
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().append(header::SET_COOKIE, expired_cookie());
    Ok(r)
}
