//! The crate's one HTTP server (axum, HTTP/1): the health endpoints and the
//! Prometheus endpoint are each a router served here, so both get the same
//! accept loop, connection handling and shutdown on drop.

use std::net::SocketAddr;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::warn;

/// A router being served; dropping it stops the server.
#[derive(Debug)]
pub(crate) struct Served {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Served {
    /// The address it listens on (the port chosen when `:0` was asked).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` and serves `router` there until the handle is dropped.
pub(crate) async fn serve(addr: SocketAddr, router: Router) -> std::io::Result<Served> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        // axum's loop waits out accept errors (out of file descriptors)
        // instead of spinning; it returns only if the listener itself fails.
        if let Err(e) = axum::serve(listener, router).await {
            warn!(error = %e, %addr, "HTTP server stopped");
        }
    });
    Ok(Served { addr, task })
}

/// A plain-text answer with `content_type`.
pub(crate) fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
