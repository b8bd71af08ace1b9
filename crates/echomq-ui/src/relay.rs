//! The relay panel (`GET /relay`, `GET /api/relay`): one namespace's nodes,
//! subscriptions, patterns and retained messages, read-only, through the
//! relay's own getters (`relayGet-1`, paged: at most [`PAGE`] rows a list).
//! Node info, topics and retained data come from any client of the relay,
//! so they are shown as text: maud escapes every interpolated value.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use echomq::relay::{
    namespaces, RelayClient, RelayCounts, RelayError, RelayNodeRow, RelayPatternRow,
    RelayRetainedRow, RelaySubscriptionRow, SubscriptionFilter, DEFAULT_NAMESPACE, PAGE,
};
use maud::html;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiFailure, Failure};
use crate::live::truncate;
use crate::pages::{respond, time};
use crate::security::Ctx;
use crate::state::App;

/// `?namespace=` of the relay pages.
#[derive(Deserialize)]
pub(crate) struct RelayQuery {
    namespace: Option<String>,
}

impl From<RelayError> for Failure {
    fn from(e: RelayError) -> Self {
        match e {
            RelayError::Runtime(e) => e.into(),
            RelayError::Input(_) => Failure::bad_request(e.to_string()),
            other => Failure::new(StatusCode::BAD_GATEWAY, other.to_string()),
        }
    }
}

/// One namespace as the panel shows it.
struct Panel {
    namespace: String,
    namespaces: Vec<String>,
    counts: RelayCounts,
    nodes: Vec<RelayNodeRow>,
    subscriptions: Vec<RelaySubscriptionRow>,
    patterns: Vec<RelayPatternRow>,
    retained: Vec<RelayRetainedRow>,
}

async fn panel(app: &App, q: RelayQuery) -> Result<Panel, Failure> {
    let namespace = q.namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    let client = RelayClient::new(&app.conn, &namespace)?;
    Ok(Panel {
        namespaces: namespaces(&app.conn).await?,
        counts: client.counts().await?,
        nodes: client.nodes(0, None).await?,
        subscriptions: client
            .subscriptions(SubscriptionFilter::All, 0, None)
            .await?,
        patterns: client.patterns(0, None).await?,
        retained: client.retained(0, None).await?,
        namespace,
    })
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

fn info(n: &RelayNodeRow, key: &str) -> String {
    match n.info.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// `GET /relay?namespace=NS`.
pub(crate) async fn page(
    State(app): State<Arc<App>>,
    Extension(ctx): Extension<Ctx>,
    headers: HeaderMap,
    Query(q): Query<RelayQuery>,
) -> Result<Response, Failure> {
    let p = panel(&app, q).await?;
    let more = |shown: usize, total: u64| {
        html! {
            @if total > shown as u64 {
                p.more { "Showing the first " (shown) " of " (total) "." }
            }
        }
    };
    let body = html! {
        h1 { "Relay " code { (p.namespace) } }
        @if !p.namespaces.is_empty() {
            nav.namespaces {
                "Namespaces in use: "
                @for ns in &p.namespaces {
                    a href=(format!("/relay?namespace={}", enc(ns))) { (ns) } " "
                }
            }
        }
        p.counts {
            (p.counts.nodes) " node(s), " (p.counts.subscriptions) " subscription(s) on "
            (p.counts.patterns) " pattern(s), " (p.counts.retained) " retained message(s)"
        }
        h2 { "Nodes" }
        @if p.nodes.is_empty() { p.empty { "No node." } } @else {
            table.relay-nodes {
                thead { tr {
                    th { "Id" } th { "Name" } th { "Host" } th.num { "Pid" } th { "Version" }
                    th { "Registered" } th { "Lease until" } th { "Last heartbeat" }
                    th.num { "Backlog" } th.num { "Dropped" } th.num { "Subscriptions" }
                } }
                tbody { @for n in &p.nodes {
                    tr data-node=(n.id) {
                        td { code { (n.id) } }
                        td { (info(n, "name")) } td { (info(n, "host")) } td.num { (info(n, "pid")) }
                        td { (info(n, "version")) }
                        td { (time(Some(n.registered_at.max(0) as u64))) }
                        td { @match n.lease_until {
                            Some(t) => (time(Some(t.max(0) as u64))),
                            None => span.badge.paused { "expired" },
                        } }
                        td { (time(n.last_heartbeat.map(|t| t.max(0) as u64))) }
                        td.num { (n.backlog) } td.num { (n.dropped) } td.num { (n.subscriptions) }
                    }
                } }
            }
            (more(p.nodes.len(), p.counts.nodes))
        }
        h2 { "Subscriptions" }
        @if p.subscriptions.is_empty() { p.empty { "No subscription." } } @else {
            table.relay-subscriptions {
                thead { tr { th { "Node" } th { "Endpoint" } th { "Pattern" } } }
                tbody { @for s in &p.subscriptions {
                    tr { td { code { (s.node) } } td { code { (s.endpoint) } } td { code { (s.pattern) } } }
                } }
            }
            (more(p.subscriptions.len(), p.counts.subscriptions))
        }
        h2 { "Patterns" }
        @if p.patterns.is_empty() { p.empty { "No pattern." } } @else {
            table.relay-patterns {
                thead { tr { th { "Pattern" } th.num { "Subscriptions" } } }
                tbody { @for pt in &p.patterns {
                    tr { td { code { (pt.pattern) } } td.num { (pt.subscriptions) } }
                } }
            }
            (more(p.patterns.len(), p.counts.patterns))
        }
        h2 { "Retained messages" }
        @if p.retained.is_empty() { p.empty { "No retained message." } } @else {
            table.relay-retained {
                thead { tr { th { "Topic" } th { "Published" } th { "Expires" } th { "Data" } } }
                tbody { @for r in &p.retained {
                    tr {
                        td { code { (r.topic) } }
                        td { (time(Some(r.ts.max(0) as u64))) }
                        td { (time(Some(r.expires_at.max(0) as u64))) }
                        td.preview { code { (truncate(&r.data, 200)) } }
                    }
                } }
            }
            (more(p.retained.len(), p.counts.retained))
        }
        p.hint { "Read-only. Lists show at most " (PAGE) " rows." }
    };
    Ok(respond(&app, &ctx, &headers, "Relay", None, body))
}

/// `GET /api/relay?namespace=NS`: the same, as JSON.
pub(crate) async fn api(
    State(app): State<Arc<App>>,
    Query(q): Query<RelayQuery>,
) -> Result<Json<Value>, ApiFailure> {
    let p = panel(&app, q).await?;
    let nodes: Vec<Value> = p
        .nodes
        .iter()
        .map(|n| {
            json!({"id": n.id, "info": n.info, "registeredAt": n.registered_at,
                   "leaseUntil": n.lease_until, "lastHeartbeat": n.last_heartbeat,
                   "backlog": n.backlog, "dropped": n.dropped, "subscriptions": n.subscriptions})
        })
        .collect();
    let subscriptions: Vec<Value> = p
        .subscriptions
        .iter()
        .map(|s| json!({"nodeId": s.node, "endpointId": s.endpoint, "pattern": s.pattern}))
        .collect();
    let patterns: Vec<Value> = p
        .patterns
        .iter()
        .map(|pt| json!({"pattern": pt.pattern, "subscriptions": pt.subscriptions}))
        .collect();
    let retained: Vec<Value> = p
        .retained
        .iter()
        .map(|r| json!({"topic": r.topic, "expiresAt": r.expires_at, "mid": r.mid, "ts": r.ts, "data": r.data}))
        .collect();
    Ok(Json(json!({
        "prefix": app.prefix(),
        "namespace": p.namespace,
        "namespaces": p.namespaces,
        "counts": {"nodes": p.counts.nodes, "subscriptions": p.counts.subscriptions,
                   "patterns": p.counts.patterns, "retained": p.counts.retained},
        "nodes": nodes,
        "subscriptions": subscriptions,
        "patterns": patterns,
        "retained": retained,
    })))
}
