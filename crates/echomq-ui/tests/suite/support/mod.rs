//! A dashboard over a throwaway redis-server, and an HTTP client that keeps
//! its session cookie by hand (so a test sees exactly what it sends).

#![allow(dead_code)]

use std::time::Duration;

use echomq::{Connection, ConnectionConfig};
use echomq_integration_tests::RedisServer;
use echomq_ui::{RunningUi, UiConfig};
use reqwest::header::{HeaderMap, HeaderValue, COOKIE, SET_COOKIE};
use reqwest::{Method, Response, StatusCode};
use serde_json::Value;

pub const PREFIX_OTHER: &str = "other";

pub struct Harness {
    pub redis: RedisServer,
    pub conn: Connection,
    pub ui: RunningUi,
    pub http: reqwest::Client,
}

/// Samples fast, so throughput shows within a test.
pub fn fast() -> UiConfig {
    UiConfig::default()
        .bind("127.0.0.1:0".parse().unwrap())
        .sample_every(Duration::from_millis(200))
}

pub async fn start(config: UiConfig) -> Harness {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let ui = echomq_ui::start(conn.clone(), config)
        .await
        .expect("the dashboard starts");
    Harness {
        redis,
        conn,
        ui,
        http: client(),
    }
}

pub fn client() -> reqwest::Client {
    // reqwest's rustls comes without a provider in this workspace (the
    // runtime's HTTP processor passes its own configuration): the tests'
    // plain-HTTP client takes the process default, ring, as fred does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A connection to the same server under another prefix.
pub async fn other_prefix(redis: &RedisServer) -> Connection {
    let mut c = ConnectionConfig::with_url(redis.url());
    c.prefix = PREFIX_OTHER.into();
    Connection::connect(c).await.unwrap()
}

impl Harness {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.ui.url())
    }

    pub async fn get(&self, path: &str) -> Response {
        self.http.get(self.url(path)).send().await.unwrap()
    }

    pub async fn json(&self, path: &str) -> Value {
        let r = self.get(path).await;
        assert_eq!(r.status(), StatusCode::OK, "GET {path}");
        r.json().await.unwrap()
    }

    pub async fn html(&self, path: &str) -> String {
        let r = self.get(path).await;
        assert_eq!(r.status(), StatusCode::OK, "GET {path}");
        r.text().await.unwrap()
    }

    /// A browser-like session: its cookie and CSRF token.
    pub async fn session(&self) -> Session {
        let r = self.get("/api/session").await;
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = session_cookie(r.headers()).expect("a fresh session gets a cookie");
        let v: Value = r.json().await.unwrap();
        Session {
            cookie,
            csrf: v["csrf"].as_str().unwrap().to_owned(),
        }
    }

    /// `POST /api/queues/{queue}/actions/{action}` with extra headers.
    pub async fn api_action(
        &self,
        queue: &str,
        action: &str,
        body: Value,
        headers: &[(&'static str, String)],
    ) -> Response {
        let mut req = self.http.request(
            Method::POST,
            self.url(&format!("/api/queues/{queue}/actions/{action}")),
        );
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.json(&body).send().await.unwrap()
    }

    /// The same action through the HTML form.
    pub async fn form_action(
        &self,
        queue: &str,
        action: &str,
        fields: &[(&str, &str)],
        headers: &[(&'static str, String)],
    ) -> Response {
        let mut req = self.http.request(
            Method::POST,
            self.url(&format!("/queues/{queue}/actions/{action}")),
        );
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let body: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={}", enc(v)))
            .collect::<Vec<_>>()
            .join("&");
        req.header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap()
    }
}

pub struct Session {
    pub cookie: String,
    pub csrf: String,
}

impl Session {
    /// Headers of an API action from this session.
    pub fn api(&self) -> Vec<(&'static str, String)> {
        vec![
            ("cookie", self.cookie.clone()),
            ("x-csrf-token", self.csrf.clone()),
        ]
    }
}

/// `name=value` of the session cookie a response sets.
pub fn session_cookie(h: &HeaderMap<HeaderValue>) -> Option<String> {
    h.get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("emq_ui_session=") && !v.contains("Max-Age=0"))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

pub fn with_cookie(cookie: &str) -> (reqwest::header::HeaderName, String) {
    (COOKIE, cookie.to_owned())
}

/// Percent-encodes a form value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of `name="csrf" value="…"` in a page.
pub fn csrf_in(html: &str) -> String {
    let at = html.find(r#"name="csrf" value=""#).expect("a CSRF field");
    let rest = &html[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// Polls `f` until it answers `Some`, panicking with `what` after 30 s.
pub async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The summary of `queue` in `GET /api/queues`.
pub fn queue_of<'a>(all: &'a Value, queue: &str) -> Option<&'a Value> {
    all["queues"]
        .as_array()?
        .iter()
        .find(|q| q["name"] == queue)
}
