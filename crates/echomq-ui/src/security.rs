//! Who may do what: the auth token (bearer header or a login cookie), the
//! per-session CSRF token, the Origin and Host checks, and read-only mode.
//!
//! A browser session is a random id in an HttpOnly, SameSite=Strict cookie;
//! the server keeps its CSRF token and whether it logged in. A request that
//! carries the bearer token is a script, not a browser: it needs no CSRF
//! token because no browser attaches that header on its own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::error::{ApiFailure, Failure};
use crate::state::App;

/// Name of the session cookie.
pub(crate) const SESSION_COOKIE: &str = "emq_ui_session";
/// Header a script sends the CSRF token in (forms send the `csrf` field).
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";
/// Sessions kept at most; the least recently seen goes first.
const MAX_SESSIONS: usize = 10_000;
/// A session unused this long is forgotten.
const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);

/// One browser session.
#[derive(Clone)]
pub(crate) struct Session {
    pub id: String,
    pub csrf: String,
    pub authed: bool,
    last_seen: Instant,
}

/// The server-side session table.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let s = map.get_mut(id)?;
        if s.last_seen.elapsed() > SESSION_IDLE {
            map.remove(id);
            return None;
        }
        s.last_seen = Instant::now();
        Some(s.clone())
    }

    fn create(&self, authed: bool) -> Session {
        let s = Session {
            id: random_token(),
            csrf: random_token(),
            authed,
            last_seen: Instant::now(),
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, s| s.last_seen.elapsed() < SESSION_IDLE);
            if map.len() >= MAX_SESSIONS {
                let oldest = map
                    .iter()
                    .min_by_key(|(_, s)| s.last_seen)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    map.remove(&k);
                }
            }
        }
        map.insert(s.id.clone(), s.clone());
        s
    }

    /// A logged-in session replacing `old`: a new id, so an id planted
    /// before the login is worth nothing after it.
    pub fn login(&self, old: &str) -> Session {
        self.forget(old);
        self.create(true)
    }

    /// Forgets a session.
    pub fn forget(&self, id: &str) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// 32 random bytes from the OS, URL-safe base64.
pub(crate) fn random_token() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    URL_SAFE_NO_PAD.encode(b)
}

/// What the guard learnt about a request, for the handlers.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub session: Session,
    /// The request carried the bearer token (a script).
    pub via_bearer: bool,
}

impl Ctx {
    /// Checks the CSRF token a form or header carried.
    pub fn check_csrf(&self, given: Option<&str>) -> Result<(), Failure> {
        if self.via_bearer {
            return Ok(());
        }
        match given {
            Some(t) if bool::from(t.as_bytes().ct_eq(self.session.csrf.as_bytes())) => Ok(()),
            _ => Err(Failure::forbidden(
                "missing or wrong CSRF token: reload the page and try again",
            )),
        }
    }
}

/// The cookie that carries a session id.
pub(crate) fn session_cookie(id: &str) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict"
    ))
    .expect("a base64url id is a valid header value")
}

/// The cookie that ends a session.
pub(crate) fn expired_cookie() -> HeaderValue {
    HeaderValue::from_static("emq_ui_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// The host name of the Host header, without the port.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
}

/// Without a token the dashboard only answers to loopback names, so a page
/// of another site whose name was rebound to 127.0.0.1 cannot read it.
fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = host_name(host);
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A browser tells where a request comes from; one from another origin is
/// refused. A client that sends neither header is no browser.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let (Ok(origin), Some(host)) = (
        origin.to_str(),
        headers.get(header::HOST).and_then(|h| h.to_str().ok()),
    ) else {
        return false;
    };
    origin == format!("http://{host}") || origin == format!("https://{host}")
}

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

/// Headers that keep a page from running or loading anything but its own
/// script and style, from being framed, and from leaking its address to
/// other sites.
fn harden(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it Chromium sends `Origin: null` with a
    // form POST, which the origin check must refuse.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

fn unauthorized(api: bool) -> Response {
    let f = Failure::new(
        StatusCode::UNAUTHORIZED,
        "authentication required: send `Authorization: Bearer <token>` or log in",
    );
    if api {
        ApiFailure(f).into_response()
    } else {
        f.into_response()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn loopback_names_only() {
        assert!(host_is_loopback(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(host_is_loopback(&headers(&[("host", "localhost:1")])));
        assert!(host_is_loopback(&headers(&[("host", "[::1]:8080")])));
        assert!(!host_is_loopback(&headers(&[(
            "host",
            "evil.example:8080"
        )])));
        assert!(!host_is_loopback(&headers(&[])));
    }

    #[test]
    fn origins() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null")
        ])));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = headers(&[("cookie", "a=1; emq_ui_session=abc; b=2")]);
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
