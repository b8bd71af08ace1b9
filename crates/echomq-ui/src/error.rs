//! What a request can fail with, and how each failure answers: JSON under
//! `/api/`, a small escaped HTML page elsewhere.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::Json;

/// Why the dashboard did not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UiError {
    /// The settings were refused.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Binding or serving failed.
    #[error("dashboard server: {0}")]
    Io(#[from] std::io::Error),
    /// Redis or the runtime failed.
    #[error(transparent)]
    Runtime(#[from] echomq::Error),
}

/// A failed request: a status and a message safe to show.
#[derive(Debug)]
pub(crate) struct Failure {
    pub status: StatusCode,
    pub message: String,
}

impl Failure {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
}

impl From<echomq::Error> for Failure {
    fn from(e: echomq::Error) -> Self {
        use echomq::Error as E;
        let status = match &e {
            E::Validation(_) | E::Scheduler(_) => StatusCode::BAD_REQUEST,
            E::JobNotFound(_) => StatusCode::NOT_FOUND,
            E::DeadLetter(echomq::dead_letter::DeadLetterError::NotFound { .. }) => {
                StatusCode::NOT_FOUND
            }
            E::DeadLetter(_) => StatusCode::CONFLICT,
            E::Script { .. } | E::ActiveJobs => StatusCode::CONFLICT,
            _ => {
                tracing::warn!(error = %e, "dashboard request failed");
                StatusCode::BAD_GATEWAY
            }
        };
        Failure::new(status, e.to_string())
    }
}

/// A failure answered as JSON (`{"error": …}`).
#[derive(Debug)]
pub(crate) struct ApiFailure(pub Failure);

impl From<Failure> for ApiFailure {
    fn from(f: Failure) -> Self {
        ApiFailure(f)
    }
}

impl From<echomq::Error> for ApiFailure {
    fn from(e: echomq::Error) -> Self {
        ApiFailure(e.into())
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        (
            self.0.status,
            Json(serde_json::json!({ "error": self.0.message })),
        )
            .into_response()
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let page = maud::html! {
            (maud::DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "EchoMQ: " (self.status.as_u16()) } link rel="stylesheet" href="/assets/app.css"; }
                body { main class="error" { h1 { (self.status) } p { (self.message) } p { a href="/" { "Back to the overview" } } } }
            }
        };
        (self.status, Html(page.into_string())).into_response()
    }
}
