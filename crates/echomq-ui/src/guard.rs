//! The middleware in front of every route ([`guard`]): the Host check, the
//! bearer token or the session, CSRF and the origin check, the hardening
//! headers; and the read-only switch every action asks ([`writable`]).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::error::{ApiFailure, Failure};
use crate::security::{
    bearer, cookie, harden, host_is_loopback, same_origin, session_cookie, unauthorized, Ctx,
    Session, CSRF_HEADER, SESSION_COOKIE,
};
use crate::state::App;

/// Paths served without a login.
fn is_public(path: &str) -> bool {
    path == "/login" || path.starts_with("/assets/")
}

/// The middleware in front of every route.
pub(crate) async fn guard(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let api = path.starts_with("/api/");
    let token = app.config.auth_token.as_ref();
    let headers = req.headers();
    if token.is_none() && !host_is_loopback(headers) {
        return Failure::forbidden(
            "without --auth-token this dashboard answers only to localhost names",
        )
        .into_response();
    }
    // Without a configured token a bearer header proves nothing and is
    // ignored: such a request is treated as a browser's (CSRF applies).
    let via_bearer = match (token, bearer(headers)) {
        (Some(t), Some(given)) if t.matches(given) => true,
        (Some(_), Some(_)) => return unauthorized(true),
        _ => false,
    };
    let known = if via_bearer {
        None
    } else {
        cookie(headers, SESSION_COOKIE).and_then(|id| app.sessions.get(id))
    };
    let fresh = known.is_none() && !via_bearer;
    let session = match known {
        Some(s) => s,
        // A script's request gets a throwaway session: nothing to remember.
        None if via_bearer => Session {
            id: String::new(),
            csrf: String::new(),
            authed: true,
            last_seen: Instant::now(),
        },
        None => app.sessions.create(token.is_none()),
    };
    let authed = token.is_none() || via_bearer || session.authed;
    let ctx = Ctx {
        session,
        via_bearer,
    };
    let safe = matches!(*req.method(), Method::GET | Method::HEAD);
    let refusal = if !authed && !is_public(&path) {
        Some(if api || !safe {
            unauthorized(api)
        } else {
            Redirect::to("/login").into_response()
        })
    } else if !safe && !via_bearer && !same_origin(headers) {
        Some(Failure::forbidden("cross-origin request refused").into_response())
    } else if !safe && api {
        let given = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        ctx.check_csrf(given)
            .err()
            .map(|f| ApiFailure(f).into_response())
    } else {
        None
    };
    let id = ctx.session.id.clone();
    let mut resp = match refusal {
        Some(r) => r,
        None => {
            req.extensions_mut().insert(ctx);
            next.run(req).await
        }
    };
    if fresh {
        resp.headers_mut()
            .append(header::SET_COOKIE, session_cookie(&id));
    }
    harden(resp.headers_mut());
    resp
}

/// `--read-only` refuses every action.
pub(crate) fn writable(app: &App) -> Result<(), Failure> {
    if app.config.read_only {
        return Err(Failure::forbidden(
            "this dashboard is read-only (--read-only): actions are disabled",
        ));
    }
    Ok(())
}
