//! Who may do what: the auth token (bearer header or a login cookie), the
//! per-session CSRF token, the Origin and Host checks, and read-only mode.
//!
//! A browser session is a random id in an HttpOnly, SameSite=Strict cookie;
//! the server keeps its CSRF token and whether it logged in. A request that
//! carries the bearer token is a script, not a browser: it needs no CSRF
//! token because no browser attaches that header on its own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::error::{ApiFailure, Failure};

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
    pub last_seen: Instant,
}

/// The server-side session table.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    pub(crate) fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let s = map.get_mut(id)?;
        if s.last_seen.elapsed() > SESSION_IDLE {
            map.remove(id);
            return None;
        }
        s.last_seen = Instant::now();
        Some(s.clone())
    }

    pub(crate) fn create(&self, authed: bool) -> Session {
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

pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
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
pub(crate) fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = host_name(host);
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A browser tells where a request comes from; one from another origin is
/// refused. A client that sends neither header is no browser.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
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

/// Headers that keep a page from running or loading anything but its own
/// script and style, from being framed, and from leaking its address to
/// other sites.
pub(crate) fn harden(h: &mut HeaderMap) {
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

pub(crate) fn unauthorized(api: bool) -> Response {
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
