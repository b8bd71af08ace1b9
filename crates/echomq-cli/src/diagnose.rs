//! Errors a person can read: one line saying what failed, where, and what to
//! check (naming this command's flags), and the [`FailureClass`] whose
//! [`exit_code`](FailureClass::exit_code) the `echomq` command exits with
//! (documented in `docs/deployment.md §Running as a service`).
//!
//! fred reports a refused connection as the `Debug` dump of an `io::Error`;
//! an operator needs one line. What the error says is read by the runtime's
//! one classifier ([`Error::redis_condition`], the signs
//! [`Error::is_connection`] reads); this module only gives each condition
//! its line and class. A failure without a known condition is a
//! [`FailureClass::Connection`] when the classifier calls it transient.

use echomq::connection::{host_port, redacted_url};
use echomq::Error;

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
    /// A write was sent but its reply never came (timeout, broken
    /// connection): it may have been applied. Not "unreachable": retrying
    /// blindly may apply it twice.
    OutcomeUnknown,
    /// Anything else, once running.
    Runtime,
}

impl FailureClass {
    /// The process exit code of this class: 2 config, 3 connection,
    /// 4 server, 5 outcome unknown, 1 runtime.
    pub fn exit_code(self) -> i32 {
        match self {
            FailureClass::Runtime => 1,
            FailureClass::Config => 2,
            FailureClass::Connection => 3,
            FailureClass::Server => 4,
            FailureClass::OutcomeUnknown => 5,
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

/// One readable line about `e`, naming the server of `url` when given.
pub fn diagnose(e: &Error, url: Option<&str>) -> Diagnosis {
    let at = url
        .map(host_port)
        .unwrap_or_else(|| "the server".to_owned());
    let (class, message) = match e {
        Error::Redis(r) => redis_line(e, r, &at, url),
        Error::OutcomeUnknown { operation, source } => (
            FailureClass::OutcomeUnknown,
            format!(
                "Redis at {at} did not answer {operation} after it was sent ({}): it may or may not have been applied; \
                 check the queue (e.g. `echomq stats`, `echomq job`) before retrying, since a blind retry may apply it twice",
                first_line(&io_message(source.details()))
            ),
        ),
        Error::Server(p) => (FailureClass::Server, p.to_string()),
        Error::Config(_) | Error::Validation(_) | Error::Scheduler(_) | Error::DeadLetter(_) => {
            (FailureClass::Config, e.to_string())
        }
        other => (FailureClass::Runtime, other.to_string()),
    };
    Diagnosis { class, message }
}

/// The line of a Redis error, by the condition the runtime's classifier
/// reads from it ([`Error::redis_condition`]).
fn redis_line(
    e: &Error,
    r: &fred::error::Error,
    at: &str,
    url: Option<&str>,
) -> (FailureClass, String) {
    use echomq::AuthFailure::*;
    use echomq::RedisCondition as C;
    use FailureClass::*;
    let io = io_message(r.details());
    let check_url = "check --url / ECHOMQ_URL";
    let reply = |what: &str| (Connection, format!("Redis at {at} {what}"));
    match e.redis_condition() {
        Some(C::Auth(WrongPass)) => (
            Server,
            format!("Redis at {at} refused the user name or password: check the credentials in the URL (redis://USER:PASSWORD@host:port)"),
        ),
        Some(C::Auth(NoAuth)) => (
            Server,
            format!("Redis at {at} requires a password and none was sent: put it in the URL (redis://:PASSWORD@host:port)"),
        ),
        Some(C::Auth(NoPasswordSet)) => (
            Server,
            format!("Redis at {at} has no password set but one was sent: remove it from the URL, or set `requirepass` on the server"),
        ),
        Some(C::CrossSlot) => (
            Server,
            format!("Redis Cluster at {at} refused keys of one call in different slots (CROSSSLOT): put a hash tag in the prefix, e.g. --prefix '{{emq}}'"),
        ),
        Some(C::ClusterDown) => (
            Connection,
            format!("Redis Cluster at {at} is down or a hash slot is not served (CLUSTERDOWN): check the cluster with `redis-cli --cluster check {at}`"),
        ),
        Some(C::Loading) => reply("is still loading its data set into memory: wait for it"),
        Some(C::Busy) => reply("is busy running a script (BUSY): wait for it to end, or stop it with SCRIPT KILL"),
        Some(C::ReadOnly) => reply("is a read-only replica (READONLY): a failover is in progress, or --url names a replica instead of the primary"),
        Some(C::MasterDown) => reply("is a replica that lost its primary (MASTERDOWN): a failover is in progress"),
        Some(C::TryAgain) => reply("asked to try again (TRYAGAIN): a hash slot is being moved"),
        Some(C::Tls) => (
            Connection,
            format!("TLS handshake with Redis at {at} failed ({}): check rediss:// against the server's TLS port, the CA certificate and the server name", first_line(&io)),
        ),
        Some(C::InvalidConfig) => {
            let shown = url.map(redacted_url).unwrap_or_default();
            (
                Config,
                format!(
                    "the Redis URL {shown:?} is not usable ({}): {check_url}",
                    first_line(&io)
                ),
            )
        }
        Some(C::Timeout) => (
            Connection,
            format!("Redis at {at} did not answer in time: check that the address is right, that no firewall drops the traffic, and that the server is not overloaded"),
        ),
        Some(C::Refused) => (
            Connection,
            format!("cannot connect to Redis at {at}: connection refused; is redis-server running and listening there? {check_url}"),
        ),
        Some(C::UnknownHost) => (
            Connection,
            format!("cannot resolve the host of Redis at {at} (DNS): check the host name ({check_url}) and this machine's DNS"),
        ),
        Some(C::ConnectionLost) => (
            Connection,
            format!(
                "connection to Redis at {at} failed: {}; check that the server is up and reachable",
                first_line(&io)
            ),
        ),
        _ => {
            let class = if e.is_connection() {
                Connection
            } else {
                Runtime
            };
            (class, format!("Redis at {at}: {}", first_line(&io)))
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::ErrorKind;

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
    fn exit_codes_are_distinct() {
        use FailureClass::*;
        let codes: Vec<i32> = [Runtime, Config, Connection, Server, OutcomeUnknown]
            .map(FailureClass::exit_code)
            .into();
        assert_eq!(codes, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn transient_refusals_are_connection_failures_with_a_line_each() {
        for (reply, says) in [
            ("BUSY Redis is busy running a script.", "SCRIPT KILL"),
            (
                "READONLY You can't write against a read only replica.",
                "read-only replica",
            ),
            ("MASTERDOWN Link with MASTER is down", "lost its primary"),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot",
                "being moved",
            ),
        ] {
            let d = diagnose(&redis(ErrorKind::Unknown, reply), Some("redis://h:7000"));
            assert_eq!(d.class, FailureClass::Connection, "{reply}");
            assert!(d.message.starts_with("Redis at h:7000 "), "{d}");
            assert!(d.message.contains(says), "{d}");
        }
    }
}
