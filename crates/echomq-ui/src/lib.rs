//! # echomq-ui
//!
//! The web dashboard behind `echomq ui`: every queue of a prefix with its
//! counts, throughput and failure sparklines, workers and schedulers; jobs by
//! state with paging and a bounded search; a job page; the operator's actions
//! (each behind a confirm step); and a live feed over Server-Sent Events from
//! [`echomq::QueueEvents`]. The same data is served as JSON under `/api/`.
//!
//! Pages are rendered on the server with maud (escaping by construction); a
//! small script compiled into the binary does the live updates.
//!
//! Security model (docs/ui.md): loopback by default; a non-loopback bind
//! needs an [`AuthToken`]; `read_only` hides and refuses every action;
//! actions are POSTs checked for a per-session CSRF token and their origin;
//! a request only reaches queues that exist under the configured prefix.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let conn = echomq::Connection::connect_url("redis://127.0.0.1:6379").await?;
//! let ui = echomq_ui::start(conn, echomq_ui::UiConfig::default()).await?;
//! println!("dashboard on {}", ui.url());
//! ui.shutdown().await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod actions;
mod api;
mod assets;
mod config;
mod discover;
mod error;
mod guard;
mod live;
mod model;
mod pages;
mod relay;
mod sampler;
mod security;
mod series;
mod sse;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use echomq::Connection;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::{AuthToken, ConfigError, UiConfig, MIN_TOKEN_LEN};
pub use error::UiError;

use state::App;

/// Largest request body accepted (an added job's data is at most 1 MiB).
const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// A running dashboard. Dropping it leaves the server running until the
/// runtime stops; [`RunningUi::shutdown`] stops it in order.
pub struct RunningUi {
    addr: SocketAddr,
    app: Arc<App>,
    server: JoinHandle<std::io::Result<()>>,
}

impl std::fmt::Debug for RunningUi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningUi")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RunningUi {
    /// The address the server listens on (the real port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until the server stops (it stops on [`RunningUi::shutdown`] or
    /// a serve error).
    pub async fn wait(&mut self) -> Result<(), UiError> {
        (&mut self.server)
            .await
            .map_err(|e| UiError::Io(std::io::Error::other(e)))??;
        Ok(())
    }

    /// Stops accepting requests, ends the live feeds, closes the event
    /// readers and waits for the server to finish.
    pub async fn shutdown(mut self) -> Result<(), UiError> {
        self.app.cancel.cancel();
        self.app.live.close();
        self.wait().await
    }
}

/// Checks `config`, binds, and serves the dashboard for the queues of
/// `conn`'s prefix in a background task.
pub async fn start(conn: Connection, config: UiConfig) -> Result<RunningUi, UiError> {
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(config.bind).await?;
    let addr = listener.local_addr()?;
    let cancel = CancellationToken::new();
    tracing::info!(
        %addr,
        prefix = conn.prefix(),
        read_only = config.read_only,
        auth = config.auth_token.is_some(),
        "dashboard listening"
    );
    let app = Arc::new(App {
        conn,
        config,
        sessions: Default::default(),
        live: live::LiveHub::new(),
        series: Default::default(),
        cancel: cancel.clone(),
        discovery: Default::default(),
    });
    tokio::spawn(sampler::run_sampler(app.clone()));
    let router = router(app.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { cancel.cancelled().await })
            .await
    });
    Ok(RunningUi { addr, app, server })
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/queues/{queue}", get(pages::queue))
        .route("/queues/{queue}/search", get(pages::search))
        .route("/queues/{queue}/jobs/{id}", get(pages::job))
        .route("/queues/{queue}/confirm/{action}", get(pages::confirm))
        .route("/queues/{queue}/actions/{action}", post(pages::act))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/relay", get(relay::page))
        .route("/events", get(sse::events))
        .route("/api/session", get(api::session))
        .route("/api/queues", get(api::queues))
        .route("/api/queues/{queue}", get(api::queue))
        .route("/api/queues/{queue}/jobs", get(api::jobs))
        .route("/api/queues/{queue}/jobs/{id}", get(api::job))
        .route("/api/queues/{queue}/search", get(api::search))
        .route("/api/queues/{queue}/actions/{action}", post(api::action))
        .route("/api/relay", get(relay::api))
        .route("/api/events", get(sse::events))
        .route("/assets/app.js", get(assets::js))
        .route("/assets/app.css", get(assets::css))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            guard::guard,
        ))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}
