//! The page script and style, compiled into the binary (no build step).

use axum::http::header;
use axum::response::IntoResponse;

/// `GET /assets/app.js`.
pub(crate) async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("assets/app.js"),
    )
}

/// `GET /assets/app.css`.
pub(crate) async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("assets/app.css"),
    )
}
