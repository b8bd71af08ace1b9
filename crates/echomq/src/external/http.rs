//! [`HttpProcessor`]: each job POSTed to an HTTP(S) endpoint (a serverless
//! function, a service's route), the answer mapped to the job's outcome.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Response, StatusCode, Url};
use serde_json::Value;
use tracing::warn;

use crate::external::wire::{self, Step};
use crate::worker::process::processor::{JobContext, ProcessError, ProcessFuture, Processor};

/// Content types whose body is read as protocol lines (progress and logs
/// streamed while the job runs, then its answer).
const LINE_TYPES: [&str; 3] = [
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
];

/// One request header (`Authorization: Bearer …`). Its value is marked
/// sensitive and never shown: not in `Debug`, not in a log.
#[derive(Clone)]
pub struct HttpHeader {
    name: HeaderName,
    value: HeaderValue,
}

impl HttpHeader {
    /// A header from its name and value.
    pub fn new(name: &str, value: &str) -> Result<Self, HttpError> {
        let name = HeaderName::from_str(name.trim())
            .map_err(|_| HttpError::Header(format!("{:?} is not a header name", name.trim())))?;
        let mut value = HeaderValue::from_str(value.trim()).map_err(|_| {
            HttpError::Header(format!(
                "the value of header {name} has characters a header cannot carry"
            ))
        })?;
        value.set_sensitive(true);
        Ok(HttpHeader { name, value })
    }

    /// The header's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }
}

impl FromStr for HttpHeader {
    type Err = HttpError;

    /// `Name: value`.
    fn from_str(s: &str) -> Result<Self, HttpError> {
        let (name, value) = s.split_once(':').ok_or_else(|| {
            // The text may be a bare secret: only its shape is named.
            HttpError::Header("a header is `Name: value` (no colon found)".into())
        })?;
        HttpHeader::new(name, value)
    }
}

impl fmt::Debug for HttpHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: <redacted>", self.name)
    }
}

/// How an [`HttpProcessor`] calls its endpoint.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The whole request, answer included (default 30 s); past it the
    /// attempt fails and is retried per the job's attempts.
    pub timeout: Duration,
    /// Sent with every request (authentication); never logged.
    pub headers: Vec<HttpHeader>,
    /// A PEM CA to trust for `https://` instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The largest answer body read (default 64 MiB).
    pub max_body_bytes: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: Duration::from_secs(30),
            headers: Vec::new(),
            ca_file: None,
            max_body_bytes: 64 << 20,
        }
    }
}

impl HttpOptions {
    /// The per-request timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds a header.
    pub fn header(mut self, header: HttpHeader) -> Self {
        self.headers.push(header);
        self
    }
}

/// An [`HttpProcessor`] that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("{0}")]
    Url(String),
    /// A header is unusable.
    #[error("{0}")]
    Header(String),
    /// The TLS configuration (CA file) is unusable.
    #[error("{0}")]
    Tls(String),
}

/// POSTs each job, as the JSON `job` message of docs/processors.md, to one
/// endpoint, and maps the answer: 2xx with a JSON body → completed with that
/// value (an empty body: `null`); 2xx with an `application/x-ndjson` body →
/// protocol lines (progress, logs, then `completed` or `failed`), applied as
/// they arrive; 4xx → failed unrecoverably, except 408 and 429, which are
/// retried; 3xx → failed unrecoverably (redirects are not followed, so
/// headers never travel to another host); 5xx, a timeout or a transport
/// error → failed and retried per the job's attempts. TLS is rustls,
/// verifying the server. The lock is renewed while the request runs; a
/// cancelled job aborts its request.
pub struct HttpProcessor {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    url: Url,
    /// The URL without credentials or query (where tokens often travel).
    shown: String,
    headers: HeaderMap,
    timeout: Duration,
    max_body_bytes: usize,
}

impl fmt::Debug for HttpProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.inner.headers.keys().map(HeaderName::as_str).collect();
        f.debug_struct("HttpProcessor")
            .field("endpoint", &self.inner.shown)
            .field("headers", &names)
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

/// `scheme://host:port/path`: no user, password or query.
fn shown(url: &Url) -> String {
    let mut out = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(url.path());
    out
}

impl HttpProcessor {
    /// A processor for `url` (`http://` or `https://`).
    pub fn new(url: &str, options: HttpOptions) -> Result<Self, HttpError> {
        let url = Url::parse(url).map_err(|e| HttpError::Url(format!("endpoint URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(HttpError::Url(format!(
                "endpoint {} is not an http:// or https:// URL",
                shown(&url)
            )));
        }
        let https = url.scheme() == "https";
        let mut tls = crate::connection::tls::verifying_config(options.ca_file.as_deref(), https)
            .map_err(|e| HttpError::Tls(e.to_string()))?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| HttpError::Tls(format!("HTTP client: {}", e.without_url())))?;
        let mut headers = HeaderMap::new();
        for h in &options.headers {
            headers.append(h.name.clone(), h.value.clone());
        }
        let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let inner = Inner {
            shown: shown(&url),
            client,
            url,
            headers,
            timeout: options.timeout,
            max_body_bytes: options.max_body_bytes,
        };
        if !https && !loopback && !inner.headers.is_empty() {
            warn!(
                endpoint = inner.shown,
                "HTTP processor headers go in clear text to a non-loopback host: use https://"
            );
        }
        Ok(HttpProcessor {
            inner: Arc::new(inner),
        })
    }

    /// The endpoint as logs show it (no credentials, no query).
    pub fn endpoint(&self) -> &str {
        &self.inner.shown
    }
}

impl Processor for HttpProcessor {
    fn process(&self, job: JobContext) -> ProcessFuture {
        let inner = self.inner.clone();
        Box::pin(async move {
            tokio::select! {
                biased;
                // Dropping the exchange aborts the request (its connection closes).
                _ = job.cancelled() => Err(ProcessError::failed("cancelled")),
                r = inner.exchange(&job) => r,
            }
        })
    }
}

impl Inner {
    async fn exchange(&self, ctx: &JobContext) -> Result<Value, ProcessError> {
        let request = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, application/x-ndjson")
            .timeout(self.timeout)
            .body(wire::job_message(ctx));
        let mut response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        if status.is_success() {
            if is_lines(&response) {
                return self.lines(ctx, response).await;
            }
            let body = self.body(&mut response).await?;
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(&body).map_err(|_| {
                ProcessError::failed(format!(
                    "HTTP {} from {}: the body is not JSON: {:?}",
                    status.as_u16(),
                    self.shown,
                    wire::excerpt(&String::from_utf8_lossy(&body))
                ))
            });
        }
        // Best effort: the reason is worth having, not worth failing over.
        let body = self.body(&mut response).await.unwrap_or_default();
        let mut text = format!("HTTP {} from {}", status.as_u16(), self.shown);
        if let Some(reason) = error_text(&body) {
            text.push_str(": ");
            text.push_str(&reason);
        }
        Err(classify(status, text))
    }

    fn transport(&self, e: reqwest::Error) -> ProcessError {
        if e.is_timeout() {
            return ProcessError::failed(format!(
                "HTTP request to {} timed out after {} ms",
                self.shown,
                self.timeout.as_millis()
            ));
        }
        // The URL is left out (it may carry a token); the causes are kept.
        let e = e.without_url();
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        ProcessError::failed(format!("HTTP request to {} failed: {text}", self.shown))
    }

    async fn body(&self, response: &mut Response) -> Result<Vec<u8>, ProcessError> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(e))? {
            if body.len() + chunk.len() > self.max_body_bytes {
                return Err(ProcessError::failed(format!(
                    "HTTP answer from {} is over {} bytes",
                    self.shown, self.max_body_bytes
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// A body of protocol lines, applied as they arrive.
    async fn lines(&self, ctx: &JobContext, mut response: Response) -> Result<Value, ProcessError> {
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| self.transport(e))?;
            let ended = chunk.is_none();
            if let Some(chunk) = chunk {
                pending.extend_from_slice(&chunk);
            } else if !pending.is_empty() {
                // A last line without its newline.
                pending.push(b'\n');
            }
            while let Some(at) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=at).collect();
                let text = String::from_utf8_lossy(&line);
                match wire::parse(&text) {
                    Ok(None) => {}
                    Ok(Some(message)) => {
                        if let Step::Done(result) = wire::apply(ctx, message).await {
                            return result;
                        }
                    }
                    Err(e) => {
                        return Err(ProcessError::failed(format!(
                            "HTTP answer from {}: protocol error: {e}",
                            self.shown
                        )))
                    }
                }
            }
            if pending.len() > self.max_body_bytes {
                return Err(ProcessError::failed(format!(
                    "HTTP answer from {}: a line over {} bytes",
                    self.shown, self.max_body_bytes
                )));
            }
            if ended {
                return Err(ProcessError::failed(format!(
                    "HTTP answer from {} ended before a completed or failed message",
                    self.shown
                )));
            }
        }
    }
}

fn is_lines(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|t| LINE_TYPES.contains(&t.as_str()))
}

/// An error body's reason: `{"error": "…"}`'s text, else the body's start.
fn error_text(body: &[u8]) -> Option<String> {
    if let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) {
        if let Some(Value::String(e)) = o.get("error") {
            return Some(wire::excerpt(e));
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| wire::excerpt(text))
}

/// Which failures are worth another attempt.
fn classify(status: StatusCode, text: String) -> ProcessError {
    match status.as_u16() {
        300..=399 => ProcessError::unrecoverable(format!(
            "{text} (redirects are not followed: give the final URL)"
        )),
        408 | 429 => ProcessError::failed(text),
        400..=499 => ProcessError::unrecoverable(text),
        _ => ProcessError::failed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_never_show_their_value() {
        let h: HttpHeader = "Authorization: Bearer s3cret".parse().unwrap();
        assert_eq!(h.name(), "authorization");
        assert_eq!(format!("{h:?}"), "authorization: <redacted>");
        let e = "Bearer s3cret".parse::<HttpHeader>().unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let p = HttpProcessor::new(
            "https://user:pw@fn.example.com/run?code=KEY",
            HttpOptions::default().header(h),
        )
        .unwrap();
        let shown = format!("{p:?}");
        assert!(shown.contains("https://fn.example.com/run"), "{shown}");
        for secret in ["s3cret", "KEY", "pw"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn statuses_map_to_outcomes() {
        let s = |c| StatusCode::from_u16(c).unwrap();
        assert!(matches!(
            classify(s(400), "x".into()),
            ProcessError::Unrecoverable { .. }
        ));
        assert!(matches!(
            classify(s(404), "x".into()),
            ProcessError::Unrecoverable { .. }
        ));
        assert!(matches!(
            classify(s(301), "x".into()),
            ProcessError::Unrecoverable { .. }
        ));
        assert!(matches!(
            classify(s(429), "x".into()),
            ProcessError::Failed { .. }
        ));
        assert!(matches!(
            classify(s(503), "x".into()),
            ProcessError::Failed { .. }
        ));
        assert!(HttpProcessor::new("ftp://x/y", HttpOptions::default()).is_err());
        assert_eq!(
            error_text(br#"{"error":"bad input"}"#).as_deref(),
            Some("bad input")
        );
    }
}
