//! The JSON endpoints under `/api/`: the same data and actions as the pages,
//! for scripts (send `Authorization: Bearer <token>`, or the session cookie
//! with the `x-csrf-token` header on POSTs).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::actions::{Action, ActionInput};
use crate::error::ApiFailure;
use crate::guard::writable;
use crate::model::{self, SearchField};
use crate::security::Ctx;
use crate::state::App;

type ApiResult = Result<Json<Value>, ApiFailure>;

/// `GET /api/session`: this session's CSRF token (for a cookie-based script).
pub(crate) async fn session(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
) -> Json<Value> {
    Json(json!({
        "csrf": ctx.session.csrf,
        "prefix": app.prefix(),
        "readOnly": app.config.read_only,
    }))
}

/// Paging of the overview.
#[derive(Deserialize)]
pub(crate) struct PageQuery {
    pub page: Option<usize>,
}

/// `GET /api/queues?page=`: the queues of the prefix with counts and
/// samples, [`model::OVERVIEW_PAGE`] per page; `partial` while discovery has
/// not walked the whole keyspace yet.
pub(crate) async fn queues(State(app): State<Arc<App>>, Query(pq): Query<PageQuery>) -> ApiResult {
    let o = model::overview(&app, pq.page.unwrap_or(0)).await?;
    Ok(Json(json!({
        "prefix": app.prefix(),
        "queues": o.queues,
        "total": o.total,
        "page": o.page,
        "pageSize": model::OVERVIEW_PAGE,
        "partial": o.partial,
    })))
}

/// The groups panel's read (`?groups=START`).
#[derive(Deserialize)]
pub(crate) struct QueueQuery {
    pub groups: Option<u64>,
}

/// `GET /api/queues/{queue}?groups=`: counts, paused, workers, schedulers,
/// and the groups panel (the busiest of one page of groups).
pub(crate) async fn queue(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(qq): Query<QueueQuery>,
) -> ApiResult {
    let q = app.queue(&name).await?;
    let summary = model::summary(&app, &q).await?;
    let workers = model::workers(&q).await.unwrap_or_default();
    let schedulers = model::schedulers(&app, &q).await?;
    let groups = model::groups(&q, qq.groups.unwrap_or(0)).await?;
    let budget = model::budget(&q).await?;
    Ok(Json(json!({
        "name": summary.name,
        "counts": model::counts_json(&summary.counts),
        "paused": summary.paused,
        "workers": workers,
        "schedulers": schedulers,
        "groups": groups,
        "budget": budget.map(|b| json!({
            "max_bytes": b.max,
            "used_bytes": b.used,
            "removed": b.removed,
        })),
        "samples": summary.samples,
    })))
}

/// Paging of a listing.
#[derive(Deserialize)]
pub(crate) struct ListQuery {
    pub state: Option<String>,
    pub page: Option<u64>,
    pub size: Option<u64>,
}

/// `GET /api/queues/{queue}/jobs?state=&page=&size=`: newest first.
pub(crate) async fn jobs(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(lq): Query<ListQuery>,
) -> ApiResult {
    let q = app.queue(&name).await?;
    let state = model::parse_state(lq.state.as_deref().unwrap_or("waiting"))?;
    let p = model::job_page(&app, &q, state, lq.page.unwrap_or(0), lq.size).await?;
    Ok(Json(json!({
        "state": p.state.as_str(),
        "page": p.page,
        "size": p.size,
        "total": p.total,
        "jobs": p.jobs.iter().map(model::job_json).collect::<Vec<_>>(),
    })))
}

/// `GET /api/queues/{queue}/jobs/{id}`: the job with state, logs, links.
pub(crate) async fn job(
    State(app): State<Arc<App>>,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult {
    let q = app.queue(&name).await?;
    let d = model::job_detail(&app, &q, &id).await?;
    Ok(Json(model::job_detail_json(&d)))
}

/// A search request.
#[derive(Deserialize)]
pub(crate) struct SearchQuery {
    pub q: Option<String>,
    pub field: Option<String>,
    pub state: Option<String>,
    pub cursor: Option<String>,
}

/// `GET /api/queues/{queue}/search?q=&field=id|name|data&state=&cursor=`:
/// reads at most the search budget of jobs, answering `next` to go on.
pub(crate) async fn search(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(sq): Query<SearchQuery>,
) -> ApiResult {
    let q = app.queue(&name).await?;
    let field = SearchField::parse(sq.field.as_deref())?;
    let state = match sq.state.as_deref().filter(|s| !s.is_empty() && *s != "all") {
        Some(s) => Some(model::parse_state(s)?),
        None => None,
    };
    let r = model::search(
        &app,
        &q,
        field,
        sq.q.as_deref().unwrap_or(""),
        state,
        sq.cursor.as_deref(),
    )
    .await?;
    Ok(Json(json!({
        "field": field.as_str(),
        "scanned": r.scanned,
        "budget": app.config.search_budget,
        "next": r.next,
        "jobs": r.jobs.iter().map(|(j, s)| {
            let mut v = model::job_json(j);
            v["state"] = json!(s.as_str());
            v
        }).collect::<Vec<_>>(),
    })))
}

/// `POST /api/queues/{queue}/actions/{action}` with a JSON object body.
pub(crate) async fn action(
    State(app): State<Arc<App>>,
    Path((name, action)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> ApiResult {
    writable(&app)?;
    let input = ActionInput::from_json(&body)?;
    let action = Action::parse(&action, &input)?;
    let q = app.queue(&name).await?;
    let result = action.run(&q).await?;
    tracing::info!(queue = %name, action = ?action, "dashboard action");
    Ok(Json(json!({ "ok": true, "result": result })))
}
