//! Connection configuration: a plain struct with documented defaults.

use std::path::PathBuf;
use std::time::Duration;

/// How to reach Redis and how many connections to share.
#[derive(Clone)]
pub struct ConnectionConfig {
    /// A fred URL: `redis://host:port/db`, `rediss://…`, `redis-cluster://…?node=h:p`,
    /// `redis-sentinel://…`. Default `redis://127.0.0.1:6379`.
    pub url: String,
    /// Key prefix of every queue. Default `emq` (docs/decisions.md §4 Key layout).
    pub prefix: String,
    /// Clients in the shared pool. Scripts are pipelined on each connection,
    /// so a few connections carry any concurrency; fewer connections let Redis
    /// read more commands per event (measured: 37 vs 43 µs of Redis CPU per
    /// processed job at concurrency 16 with 2 vs 8). Default 2.
    pub pool_size: usize,
    /// Timeout of ordinary (non-blocking) commands. Default 10 s.
    pub command_timeout: Duration,
    /// Timeout of establishing a connection. Default 10 s.
    pub connect_timeout: Duration,
    /// Delay between reconnection attempts (retried forever). Default 500 ms.
    pub reconnect_delay: Duration,
    /// How a `rediss://` connection authenticates the server and itself.
    /// Default: verify against the system's root certificates, no client
    /// certificate. Only a `rediss…://` URL encrypts; TLS options with any
    /// other URL are refused.
    pub tls: TlsOptions,
    /// Opt-in durability: after every script call, `WAIT` until this many
    /// replicas have the write. Redis replicates asynchronously, so without
    /// it a write acknowledged by a primary that dies (or is demoted) before
    /// a replica got it is lost after the failover; with it, such a call
    /// fails instead (an I/O-kind error the caller retries). Costs one round
    /// trip per call. Default `None`.
    pub durability: Option<Durability>,
}

/// How many replicas must acknowledge each write, and how long to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Durability {
    /// Replicas that must have the write. Default 1.
    pub replicas: u32,
    /// Longest wait for them; the call fails when they did not answer in
    /// time. Default 500 ms.
    pub timeout: Duration,
}

impl Default for Durability {
    fn default() -> Self {
        Self {
            replicas: 1,
            timeout: Duration::from_millis(500),
        }
    }
}

/// TLS settings of a `rediss://`, `rediss-cluster://` or `rediss-sentinel://`
/// URL. Such a connection is always encrypted and the server certificate is
/// always verified (chain and host name), unless [`insecure`](Self::insecure)
/// says otherwise; there is no fallback to plaintext.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM file of the certificate authorities that sign the server's
    /// certificate (a private CA, as managed Redis services hand out).
    /// Default `None`: the system's root certificates.
    pub ca_file: Option<PathBuf>,
    /// PEM file of this client's certificate chain, for servers that require
    /// mutual TLS (`tls-auth-clients yes`). Needs [`key_file`](Self::key_file).
    /// Default `None`.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the private key of [`cert_file`](Self::cert_file).
    /// Default `None`.
    pub key_file: Option<PathBuf>,
    /// **Dangerous.** Accept any server certificate: traffic is still
    /// encrypted, but anyone on the path can impersonate the server and read
    /// every password and job. For a throwaway test server only; a warning is
    /// logged on every connection made with it. Default `false`.
    pub insecure: bool,
}

impl TlsOptions {
    /// True when any option differs from the default.
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.insecure
    }
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            prefix: echomq_protocol::DEFAULT_PREFIX.into(),
            pool_size: 2,
            command_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            reconnect_delay: Duration::from_millis(500),
            tls: TlsOptions::default(),
            durability: None,
        }
    }
}

impl ConnectionConfig {
    /// The defaults with another URL.
    pub fn with_url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }
}

impl std::fmt::Debug for ConnectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionConfig")
            .field("url", &redacted_url(&self.url))
            .field("prefix", &self.prefix)
            .field("pool_size", &self.pool_size)
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_delay", &self.reconnect_delay)
            .field("tls", &self.tls)
            .field("durability", &self.durability)
            .finish()
    }
}

/// The URL with any password (user info, or a query parameter whose name
/// contains "password") replaced by `***`, for logs and `Debug`.
pub fn redacted_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = redact_userinfo(base);
    if let Some(q) = query {
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("password") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let user = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        // `redis://secret@host` is a password without a user name.
        None if !userinfo.is_empty() => "***".to_owned(),
        None => String::new(),
    };
    format!("{}{}{}", &url[..scheme_end], user, &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_a_password() {
        for url in [
            "redis://:s3cret@127.0.0.1:6379/0",
            "rediss://user:s3cret@h:1",
            "redis://s3cret@h",
            "redis-sentinel://u:s3cret@h:26379/0?sentinelPassword=s3cret&node=h:2",
        ] {
            let c = ConnectionConfig::with_url(url);
            let shown = format!("{c:?}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        assert_eq!(redacted_url("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redacted_url("redis://u:p@h:1"), "redis://u:***@h:1");
    }
}
