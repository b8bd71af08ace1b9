//! `GET /livez` and `GET /readyz` over HTTP/1 (hyper): 200 when the probe
//! passes, 503 when it fails, the probe's lines as a `text/plain` body.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::HealthCheck;

/// What the endpoints answer from: nothing yet while the process connects.
type Slot = Arc<RwLock<Option<Arc<HealthCheck>>>>;

/// The running endpoints; dropping it stops them.
#[derive(Debug)]
pub struct HealthServer {
    addr: SocketAddr,
    check: Slot,
    task: JoinHandle<()>,
}

impl HealthServer {
    /// The address it listens on (the port chosen when `:0` was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers from `check` from now on. Until then the process counts as
    /// starting: live (it is waiting for Redis, a restart would not help)
    /// and not ready.
    pub fn attach(&self, check: HealthCheck) {
        *self.check.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(check));
    }
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` and serves the endpoints there until the returned handle is
/// dropped; they answer from `check`, or as "starting" until one is
/// [attached](HealthServer::attach). Bind to loopback unless a probe from
/// elsewhere needs it: the bodies name the Redis server.
pub async fn serve(addr: SocketAddr, check: Option<HealthCheck>) -> std::io::Result<HealthServer> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    info!(%addr, "health endpoints: /livez /readyz");
    let slot: Slot = Arc::new(RwLock::new(check.map(Arc::new)));
    let check = slot.clone();
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: do not spin.
                    warn!(error = %e, "health endpoint accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let check = check.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let check = check.clone();
                    async move { Ok::<_, Infallible>(respond(&check, req).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    debug!(error = %e, "health connection ended");
                }
            });
        }
    });
    Ok(HealthServer {
        addr,
        check: slot,
        task,
    })
}

async fn respond<B>(slot: &Slot, req: Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n".into());
    }
    let check = slot.read().unwrap_or_else(|p| p.into_inner()).clone();
    let probe = match (req.uri().path(), check) {
        ("/livez" | "/healthz", Some(check)) => check.live().await,
        ("/readyz", Some(check)) => check.ready().await,
        ("/livez" | "/healthz", None) => super::starting("livez", true),
        ("/readyz", None) => super::starting("readyz", false),
        _ => return text(StatusCode::NOT_FOUND, "/livez or /readyz\n".into()),
    };
    let status = if probe.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, probe.to_string())
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
