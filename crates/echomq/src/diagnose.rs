//! Errors a person can read, and whether the server suits a queue.
//!
//! fred reports a refused connection as the `Debug` dump of an `io::Error`;
//! an operator needs one line saying what failed, where, and what to check.
//! [`diagnose`] turns any [`Error`] into such a line and a
//! [`FailureClass`], whose [`exit_code`](FailureClass::exit_code) is the one
//! the `echomq` command exits with (documented in `docs/deployment.md §Running as a service`).
//!
//! [`check_server`] refuses, before any job is taken, a server EchoMQ cannot
//! run on safely: too old for the scripts, evicting keys, or a cluster that
//! would spread one queue's keys over several slots.

use fred::error::ErrorKind;
use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand};

use crate::config::redacted_url;
use crate::connection::Connection;
use crate::error::{Error, Result};

/// The oldest Redis the script catalogue runs on: `getStateV2` uses `LPOS`
/// (docs/protocol.md §Scripts).
pub const MIN_REDIS_VERSION: (u32, u32, u32) = (6, 0, 6);

/// What kind of failure an error is: it decides the exit code, and whether
/// waiting may help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureClass {
    /// The configuration is unusable (a bad flag, URL, prefix or file).
    Config,
    /// Redis could not be reached (refused, unknown host, timeout, TLS,
    /// cluster down): retrying later may succeed.
    Connection,
    /// Redis answered but refused us or does not suit a queue (password,
    /// version, eviction policy, cluster slots).
    Server,
    /// Anything else, once running.
    Runtime,
}

impl FailureClass {
    /// The process exit code of this class: 2 config, 3 connection,
    /// 4 server, 1 runtime.
    pub fn exit_code(self) -> i32 {
        match self {
            FailureClass::Runtime => 1,
            FailureClass::Config => 2,
            FailureClass::Connection => 3,
            FailureClass::Server => 4,
        }
    }
}

/// One readable line about an error, and its class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    /// What kind of failure it is.
    pub class: FailureClass,
    /// What failed, where, and what to check; one line.
    pub message: String,
}

impl std::fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A server that does not suit EchoMQ, found by [`check_server`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerProblem {
    /// Older than [`MIN_REDIS_VERSION`].
    Version {
        /// `host:port` of the server.
        at: String,
        /// The `redis_version` it reports.
        found: String,
    },
    /// `maxmemory-policy` is not `noeviction`: Redis may delete job hashes
    /// or (with a `volatile-*` policy) the lock keys of running jobs.
    Eviction {
        /// `host:port` of the server.
        at: String,
        /// The policy it reports.
        policy: String,
    },
    /// In a cluster, the keys of one queue must share one hash slot, which
    /// takes a `{hash tag}` in the prefix or the queue name.
    ClusterSlots {
        /// The key prefix.
        prefix: String,
        /// The queue name.
        queue: String,
    },
}

impl std::fmt::Display for ServerProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b, c) = MIN_REDIS_VERSION;
        match self {
            ServerProblem::Version { at, found } => write!(
                f,
                "Redis at {at} is version {found}; EchoMQ needs {a}.{b}.{c} or newer: upgrade the server"
            ),
            ServerProblem::Eviction { at, policy } => write!(
                f,
                "Redis at {at} has maxmemory-policy {policy}: it may delete queue keys and job locks when memory runs short; set `maxmemory-policy noeviction` (redis.conf or CONFIG SET)"
            ),
            ServerProblem::ClusterSlots { prefix, queue } => write!(
                f,
                "the keys of queue {queue:?} with prefix {prefix:?} fall into different Redis Cluster slots: put a hash tag in the prefix, e.g. --prefix '{{{prefix}}}'"
            ),
        }
    }
}

impl std::error::Error for ServerProblem {}

/// One readable line about `e`, naming the server of `url` when given.
pub fn diagnose(e: &Error, url: Option<&str>) -> Diagnosis {
    let at = url
        .map(host_port)
        .unwrap_or_else(|| "the server".to_owned());
    let (class, message) = match e {
        Error::Redis(r) => redis_line(r, &at, url),
        Error::Server(p) => (FailureClass::Server, p.to_string()),
        Error::Config(_) | Error::Validation(_) | Error::Scheduler(_) => {
            (FailureClass::Config, e.to_string())
        }
        other => (FailureClass::Runtime, other.to_string()),
    };
    Diagnosis { class, message }
}

fn redis_line(r: &fred::error::Error, at: &str, url: Option<&str>) -> (FailureClass, String) {
    use FailureClass::*;
    let details = r.details();
    let io = io_message(details);
    let lower = details.to_ascii_lowercase();
    let check_url = "check --url / ECHOMQ_URL";
    if details.starts_with("WRONGPASS") || lower.contains("invalid password") {
        return (
            Server,
            format!("Redis at {at} refused the user name or password: check the credentials in the URL (redis://USER:PASSWORD@host:port)"),
        );
    }
    if details.starts_with("NOAUTH") || lower.contains("authentication required") {
        return (
            Server,
            format!("Redis at {at} requires a password and none was sent: put it in the URL (redis://:PASSWORD@host:port)"),
        );
    }
    if lower.contains("without any password configured") {
        return (
            Server,
            format!("Redis at {at} has no password set but one was sent: remove it from the URL, or set `requirepass` on the server"),
        );
    }
    if details.starts_with("CROSSSLOT") {
        return (
            Server,
            format!("Redis Cluster at {at} refused keys of one call in different slots (CROSSSLOT): put a hash tag in the prefix, e.g. --prefix '{{emq}}'"),
        );
    }
    if details.starts_with("CLUSTERDOWN") {
        return (
            Connection,
            format!("Redis Cluster at {at} is down or a hash slot is not served (CLUSTERDOWN): check the cluster with `redis-cli --cluster check {at}`"),
        );
    }
    if details.starts_with("LOADING") {
        return (
            Connection,
            format!("Redis at {at} is still loading its data set into memory: wait for it"),
        );
    }
    if r.kind().to_str() == "TLS Error" {
        return (
            Connection,
            format!("TLS handshake with Redis at {at} failed ({}): check rediss:// against the server's TLS port, the CA certificate and the server name", first_line(&io)),
        );
    }
    match r.kind() {
        ErrorKind::Url | ErrorKind::Config | ErrorKind::InvalidArgument => {
            let shown = url.map(redacted_url).unwrap_or_default();
            return (
                Config,
                format!(
                    "the Redis URL {shown:?} is not usable ({}): {check_url}",
                    first_line(&io)
                ),
            );
        }
        ErrorKind::Timeout => {
            return (
                Connection,
                format!("Redis at {at} did not answer in time: check that the address is right, that no firewall drops the traffic, and that the server is not overloaded"),
            );
        }
        _ => {}
    }
    let io_lower = io.to_ascii_lowercase();
    if lower.contains("connectionrefused") || io_lower.contains("connection refused") {
        return (
            Connection,
            format!("cannot connect to Redis at {at}: connection refused; is redis-server running and listening there? {check_url}"),
        );
    }
    if [
        "lookup address",
        "name or service not known",
        "nodename nor servname",
        "no address associated",
        "temporary failure in name resolution",
        "failed to resolve",
    ]
    .iter()
    .any(|s| io_lower.contains(s))
    {
        return (
            Connection,
            format!("cannot resolve the host of Redis at {at} (DNS): check the host name ({check_url}) and this machine's DNS"),
        );
    }
    if matches!(r.kind(), ErrorKind::IO | ErrorKind::Canceled)
        || lower.contains("connectionreset")
        || lower.contains("broken pipe")
    {
        return (
            Connection,
            format!(
                "connection to Redis at {at} failed: {}; check that the server is up and reachable",
                first_line(&io)
            ),
        );
    }
    (Runtime, format!("Redis at {at}: {}", first_line(&io)))
}

/// The human part of fred's IO details, which are the `Debug` of an
/// `io::Error` (`Os { code: 111, kind: ConnectionRefused, message: "…" }`
/// or `Custom { kind: …, error: "…" }`); other details unchanged.
fn io_message(details: &str) -> String {
    for field in ["message: \"", "error: \""] {
        if let Some(start) = details.find(field) {
            let rest = &details[start + field.len()..];
            if let Some(end) = rest.find('"') {
                return rest[..end].to_owned();
            }
        }
    }
    details.to_owned()
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default().trim()
}

/// `host:port` of a URL, without user info or path; the URL itself when it
/// has no authority.
pub fn host_port(url: &str) -> String {
    let Some(rest) = url.split_once("://").map(|(_, r)| r) else {
        return redacted_url(url);
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() {
        "127.0.0.1:6379".to_owned()
    } else if host.contains(':') && !host.ends_with(']') {
        host.to_owned()
    } else {
        format!("{host}:6379")
    }
}

/// What [`server_facts`] read from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFacts {
    /// `redis_version` of INFO server.
    pub version: String,
    /// `maxmemory-policy`, `None` when CONFIG GET is refused (some managed
    /// services rename it).
    pub maxmemory_policy: Option<String>,
    /// Whether the connection is to a cluster.
    pub clustered: bool,
}

impl ServerFacts {
    /// Every problem of this server for the queues `queues` under `prefix`
    /// (`at` names the server in the messages).
    pub fn problems(&self, at: &str, prefix: &str, queues: &[&str]) -> Vec<ServerProblem> {
        let mut found = Vec::new();
        if parse_version(&self.version).is_none_or(|v| v < MIN_REDIS_VERSION) {
            found.push(ServerProblem::Version {
                at: at.to_owned(),
                found: self.version.clone(),
            });
        }
        if let Some(policy) = &self.maxmemory_policy {
            if policy != "noeviction" {
                found.push(ServerProblem::Eviction {
                    at: at.to_owned(),
                    policy: policy.clone(),
                });
            }
        }
        if self.clustered {
            for queue in queues {
                if !one_slot(prefix, queue) {
                    found.push(ServerProblem::ClusterSlots {
                        prefix: prefix.to_owned(),
                        queue: (*queue).to_owned(),
                    });
                }
            }
        }
        found
    }
}

/// `major.minor.patch` of a version string (missing parts read as 0).
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().unwrap_or(Some(0))?;
    let patch = parts.next().unwrap_or(Some(0))?;
    Some((major, minor, patch))
}

/// Whether every key `{prefix}:{queue}:…` hashes to one cluster slot: the
/// key's hash tag (Redis takes the text between the first `{` and the next
/// `}`, when not empty) must lie within `prefix:queue`.
pub fn one_slot(prefix: &str, queue: &str) -> bool {
    let base = format!("{prefix}:{queue}");
    let Some(open) = base.find('{') else {
        return false;
    };
    match base[open + 1..].find('}') {
        Some(len) => len > 0,
        None => false,
    }
}

/// Reads the server's version, eviction policy and mode.
pub async fn server_facts(conn: &Connection) -> Result<ServerFacts> {
    let client = conn.pool().next();
    let info: String = client.info(Some(fred::types::InfoKind::Server)).await?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned();
    // A raw command: fred's typed CONFIG needs a feature this crate leaves off.
    let config_get = CustomCommand::new_static("CONFIG", ClusterHash::Random, false);
    let policy: std::result::Result<Vec<String>, _> = client
        .custom(config_get, vec!["GET", "maxmemory-policy"])
        .await;
    let maxmemory_policy = match policy {
        Ok(pair) => pair.into_iter().nth(1),
        Err(e) => {
            tracing::debug!(error = %e, "CONFIG GET maxmemory-policy refused; eviction policy not checked");
            None
        }
    };
    Ok(ServerFacts {
        version,
        maxmemory_policy,
        clustered: client.is_clustered(),
    })
}

/// Refuses a server with any [`ServerProblem`] for these queues (the first
/// one found, as [`Error::Server`]); answers its facts otherwise.
pub async fn check_server(conn: &Connection, queues: &[&str]) -> Result<ServerFacts> {
    let facts = server_facts(conn).await?;
    let at = host_port(&conn.config().url);
    match facts
        .problems(&at, conn.prefix(), queues)
        .into_iter()
        .next()
    {
        Some(p) => Err(Error::Server(p)),
        None => Ok(facts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(kind: ErrorKind, details: &str) -> Error {
        Error::Redis(fred::error::Error::new(kind, details.to_owned()))
    }

    #[test]
    fn connection_refused_is_one_line_without_a_debug_dump() {
        let e = redis(
            ErrorKind::IO,
            r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#,
        );
        let d = diagnose(&e, Some("redis://127.0.0.1:6485"));
        assert_eq!(d.class, FailureClass::Connection);
        assert_eq!(
            d.message,
            "cannot connect to Redis at 127.0.0.1:6485: connection refused; is redis-server running and listening there? check --url / ECHOMQ_URL"
        );
        assert!(!d.message.contains("Os {"));
    }

    #[test]
    fn auth_cluster_and_tag_messages() {
        let d = diagnose(
            &redis(
                ErrorKind::Auth,
                "WRONGPASS invalid username-password pair or user is disabled.",
            ),
            Some("redis://u:secret@db:7000/0"),
        );
        assert_eq!(d.class, FailureClass::Server);
        assert!(
            d.message
                .starts_with("Redis at db:7000 refused the user name or password"),
            "{d}"
        );
        assert!(!d.message.contains("secret"));
        let d = diagnose(
            &redis(
                ErrorKind::Cluster,
                "CROSSSLOT Keys in request don't hash to the same slot",
            ),
            Some("redis-cluster://h:7000"),
        );
        assert_eq!(d.class, FailureClass::Server);
        assert!(
            d.message.contains("CROSSSLOT") && d.message.contains("--prefix '{emq}'"),
            "{d}"
        );
    }

    #[test]
    fn versions_and_slots() {
        assert_eq!(parse_version("7.0.15"), Some((7, 0, 15)));
        assert_eq!(parse_version("6"), Some((6, 0, 0)));
        assert_eq!(parse_version("x"), None);
        assert!(one_slot("{emq}", "q"));
        assert!(one_slot("emq", "{q}"));
        assert!(!one_slot("emq", "q"));
        assert!(!one_slot("emq{}", "q"));
        let facts = ServerFacts {
            version: "5.0.7".into(),
            maxmemory_policy: Some("volatile-lru".into()),
            clustered: true,
        };
        let lines: Vec<String> = facts
            .problems("h:1", "emq", &["q"])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "Redis at h:1 is version 5.0.7; EchoMQ needs 6.0.6 or newer: upgrade the server",
                "Redis at h:1 has maxmemory-policy volatile-lru: it may delete queue keys and job locks when memory runs short; set `maxmemory-policy noeviction` (redis.conf or CONFIG SET)",
                "the keys of queue \"q\" with prefix \"emq\" fall into different Redis Cluster slots: put a hash tag in the prefix, e.g. --prefix '{emq}'",
            ]
        );
    }

    #[test]
    fn exit_codes_are_distinct() {
        use FailureClass::*;
        let codes: Vec<i32> = [Runtime, Config, Connection, Server]
            .map(FailureClass::exit_code)
            .into();
        assert_eq!(codes, [1, 2, 3, 4]);
        assert_eq!(host_port("redis://:pw@h/0"), "h:6379");
        assert_eq!(host_port("redis://127.0.0.1:6485"), "127.0.0.1:6485");
    }
}
