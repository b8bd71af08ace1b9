//! `GET /metrics` over HTTP/1 (feature `prometheus`): the runtime metrics
//! of [`super::metrics`] through `metrics-exporter-prometheus`, followed by
//! BullMQ's queue-state gauges ([`super::queue_state`]) of the watched
//! queues, read from Redis at each scrape (so they are never staler than the
//! scrape itself). `docs/operations.md §Metrics` lists what is served.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::{info, warn};

use crate::capacity::{CapacityBoard, CapacityError, CapacitySettings};
use crate::http::{self, Served};
use crate::queue::handle::Queue;

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Histogram buckets (seconds) of every `*_seconds` histogram: from a fast
/// script call to a long job.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// How long one scrape waits for a queue's counts before leaving it out.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("prometheus recorder: {0}")]
pub struct InstallError(String);

/// Installs the Prometheus recorder as the process's global `metrics`
/// recorder (the first call; later calls return the same handle) and
/// describes EchoMQ's metrics. Call it before starting workers and actors:
/// they take their metric handles when they start.
pub fn install() -> Result<PrometheusHandle, InstallError> {
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
        .map_err(|e| InstallError(e.to_string()))?
        .install_recorder()
        .map_err(|e| InstallError(e.to_string()))?;
    super::metrics::describe();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

type Watched = Arc<RwLock<Vec<Queue>>>;

/// The running endpoint; dropping it stops it.
#[derive(Debug)]
pub struct MetricsServer {
    served: Served,
    queues: Watched,
    capacity: Capacities,
}

/// The capacity monitors of the watched queues (`echomq_capacity_*`),
/// replaced whole when the settings change.
type Capacities = Arc<RwLock<Arc<CapacityBoard>>>;

impl MetricsServer {
    /// The address it listens on (the port chosen when `:0` was asked).
    pub fn addr(&self) -> SocketAddr {
        self.served.addr()
    }

    /// Adds `queue`'s BullMQ state gauges to every scrape from now on.
    pub fn watch(&self, queue: Queue) {
        let mut q = self.queues.write().unwrap_or_else(|p| p.into_inner());
        if !q.iter().any(|w| w.keys().name() == queue.keys().name()) {
            q.push(queue);
        }
    }

    /// Computes the watched queues' `echomq_capacity_*` gauges with
    /// `settings` from now on (the defaults until called), starting their
    /// smoothing afresh.
    pub fn set_capacity(&self, settings: CapacitySettings) -> Result<(), CapacityError> {
        let board = Arc::new(CapacityBoard::new(settings)?);
        *self.capacity.write().unwrap_or_else(|p| p.into_inner()) = board;
        Ok(())
    }
}

/// Installs the recorder ([`install`]) and serves `/metrics` on `addr` until
/// the handle is dropped. Bind to loopback unless a scraper elsewhere needs
/// it: the text names every watched queue. A non-loopback address is logged.
pub async fn serve(addr: SocketAddr) -> std::io::Result<MetricsServer> {
    let handle = install().map_err(std::io::Error::other)?;
    let queues: Watched = Arc::default();
    let capacity: Capacities = Arc::default();
    let router =
        Router::new()
            .fallback(respond)
            .with_state((handle, queues.clone(), capacity.clone()));
    let served = http::serve(addr, router).await?;
    let addr = served.addr();
    if addr.ip().is_loopback() {
        info!(%addr, "metrics endpoint: /metrics");
    } else {
        warn!(%addr, "metrics endpoint: /metrics on a non-loopback address; anyone who reaches it reads queue names and counts");
    }
    Ok(MetricsServer {
        served,
        queues,
        capacity,
    })
}

async fn respond(
    State((handle, watched, capacity)): State<(PrometheusHandle, Watched, Capacities)>,
    req: Request,
) -> Response {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return http::text(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "GET or HEAD only\n".into(),
        );
    }
    if req.uri().path() != "/metrics" {
        return http::text(StatusCode::NOT_FOUND, TEXT, "/metrics\n".into());
    }
    handle.run_upkeep();
    let mut body = handle.render();
    let queues = watched.read().unwrap_or_else(|p| p.into_inner()).clone();
    let mut samples = Vec::with_capacity(queues.len());
    let mut groups = Vec::new();
    let mut dead = Vec::new();
    let mut budgets = Vec::new();
    for q in &queues {
        if let Ok(Ok(Some(b))) =
            tokio::time::timeout(SAMPLE_TIMEOUT, super::budget_state::sample(q)).await
        {
            budgets.push(b);
        }
        if let Ok(Ok(d)) = tokio::time::timeout(SAMPLE_TIMEOUT, q.dead_letters().sample()).await {
            dead.push(d);
        }
        // Top-N groups only: bounded cardinality, one bounded call.
        if let Ok(Ok(g)) = tokio::time::timeout(SAMPLE_TIMEOUT, q.groups().sample()).await {
            groups.push(g);
        }
        match tokio::time::timeout(SAMPLE_TIMEOUT, q.telemetry().prometheus_sample()).await {
            Ok(Ok(s)) => samples.push(s),
            Ok(Err(e)) => {
                warn!(queue = %q.name(), error = %e, "queue state left out of the scrape")
            }
            Err(_) => {
                warn!(queue = %q.name(), "queue state left out of the scrape: Redis too slow")
            }
        }
    }
    if !samples.is_empty() {
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str(&super::queue_state::render(&samples, &[]));
        body.push('\n');
    }
    let groups = super::group_state::render(&groups);
    if !groups.is_empty() {
        body.push_str(&groups);
        body.push('\n');
    }
    let board = capacity.read().unwrap_or_else(|p| p.into_inner()).clone();
    let capacity = crate::capacity::render::render(&board.observe(&queues).await);
    if !capacity.is_empty() {
        body.push_str(&capacity);
        body.push('\n');
    }
    let budgets = super::budget_state::render(&budgets);
    if !budgets.is_empty() {
        body.push_str(&budgets);
        body.push('\n');
    }
    let dead = super::dead_letter_state::render(&dead);
    if !dead.is_empty() {
        body.push_str(&dead);
        body.push('\n');
    }
    http::text(StatusCode::OK, TEXT, body)
}
