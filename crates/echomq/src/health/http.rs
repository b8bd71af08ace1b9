//! `GET /livez` and `GET /readyz`: 200 when the probe passes, 503 when it
//! fails, the probe's lines as a `text/plain` body; served by the crate's
//! HTTP server (`crate::http`).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::Router;
use tracing::info;

use super::check::{starting, HealthCheck};
use crate::http::{self, Served};

/// What the endpoints answer from: nothing yet while the process connects.
type Slot = Arc<RwLock<Option<Arc<HealthCheck>>>>;

const TEXT: &str = "text/plain; charset=utf-8";

/// The running endpoints; dropping it stops them.
#[derive(Debug)]
pub struct HealthServer {
    served: Served,
    check: Slot,
}

impl HealthServer {
    /// The address it listens on (the port chosen when `:0` was asked).
    pub fn addr(&self) -> SocketAddr {
        self.served.addr()
    }

    /// Answers from `check` from now on. Until then the process counts as
    /// starting: live (it is waiting for Redis, a restart would not help)
    /// and not ready.
    pub fn attach(&self, check: HealthCheck) {
        *self.check.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(check));
    }
}

/// Binds `addr` and serves the endpoints there until the returned handle is
/// dropped; they answer from `check`, or as "starting" until one is
/// [attached](HealthServer::attach). Bind to loopback unless a probe from
/// elsewhere needs it: the bodies name the Redis server.
pub async fn serve(addr: SocketAddr, check: Option<HealthCheck>) -> std::io::Result<HealthServer> {
    let slot: Slot = Arc::new(RwLock::new(check.map(Arc::new)));
    let router = Router::new().fallback(respond).with_state(slot.clone());
    let served = http::serve(addr, router).await?;
    info!(addr = %served.addr(), "health endpoints: /livez /readyz");
    Ok(HealthServer {
        served,
        check: slot,
    })
}

async fn respond(State(slot): State<Slot>, req: Request) -> Response {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return http::text(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "GET or HEAD only\n".into(),
        );
    }
    let check = slot.read().unwrap_or_else(|p| p.into_inner()).clone();
    let probe = match (req.uri().path(), check) {
        ("/livez" | "/healthz", Some(check)) => check.live().await,
        ("/readyz", Some(check)) => check.ready().await,
        ("/livez" | "/healthz", None) => starting("livez", true),
        ("/readyz", None) => starting("readyz", false),
        _ => return http::text(StatusCode::NOT_FOUND, TEXT, "/livez or /readyz\n".into()),
    };
    let status = if probe.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    http::text(status, TEXT, probe.to_string())
}
