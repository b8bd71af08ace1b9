//! Whether a server suits a queue, without I/O: the facts read from it
//! ([`ServerFacts`]) and what EchoMQ cannot run on safely ([`ServerProblem`]):
//! too old for the scripts, evicting keys, or a cluster that would spread one
//! queue's keys over several slots. The reading is in `check.rs`.

use super::config::redacted_url;

/// The oldest Redis the script catalogue runs on: `getStateV2` uses `LPOS`
/// (docs/protocol.md §Scripts).
pub const MIN_REDIS_VERSION: (u32, u32, u32) = (6, 0, 6);

/// A server that does not suit EchoMQ, found by [`check_server`](super::check_server).
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

/// What [`server_facts`](super::check::server_facts) read from the server.
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn host_port_of_urls() {
        assert_eq!(host_port("redis://:pw@h/0"), "h:6379");
        assert_eq!(host_port("redis://127.0.0.1:6485"), "127.0.0.1:6485");
    }
}
