//! The relay's wire layout (BullMQ 6.7.0's `Relay`, docs/protocol.md §Relay):
//! the keys of a namespace, the topic grammar every relay script checks, and
//! the negative codes those scripts answer.
//!
//! Keys live under `<prefix>::relay:{<namespace>}`. The empty segment after
//! the prefix keeps them out of the queues' keyspace: every queue key is
//! `<prefix>:<queue>:…` with a non-empty queue name, so no queue (not even
//! one named `relay`) can meet a relay key, and a scanner of `<prefix>:*`
//! skips them by that empty segment ([`is_relay_key`]). The namespace is the
//! hash tag: one namespace is one cluster slot.

use thiserror::Error;

/// The relay data layout this crate writes (`:layout` hash, field `layout`).
/// Nodes of another layout are refused a namespace (code -6).
pub const LAYOUT_VERSION: &str = "1";

/// The namespace BullMQ's `Relay` uses when none is given.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Longest topic or pattern, in bytes.
pub const MAX_TOPIC_LEN: usize = 512;

/// Most segments of a topic or pattern.
pub const MAX_SEGMENTS: usize = 16;

/// Longest node, endpoint or namespace id, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// Whether `key` is one of the relay's keys under `prefix`
/// (`<prefix>::relay:…` or anything else of `<prefix>::`): no queue key has
/// an empty segment after the prefix, so tools that find queues by scanning
/// `<prefix>:*` skip these.
pub fn is_relay_key(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|rest| rest.starts_with("::"))
}

/// The keys of one relay namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayKeys {
    prefix: String,
    namespace: String,
    base: String,
    nodes: String,
}

impl RelayKeys {
    /// The keys of `namespace` under `prefix`; the namespace must be an id
    /// (`[A-Za-z0-9_-]{1,64}`, as BullMQ checks it).
    pub fn new(prefix: &str, namespace: &str) -> Result<Self, RelayInputError> {
        crate::validate::validate_prefix(prefix)
            .map_err(|e| RelayInputError::Prefix(e.to_string()))?;
        check_id("namespace", namespace)?;
        let base = format!("{prefix}::relay:{{{namespace}}}");
        Ok(Self {
            prefix: prefix.to_owned(),
            namespace: namespace.to_owned(),
            nodes: format!("{base}:nodes"),
            base,
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `<prefix>::relay:{<namespace>}`: what every relay script gets as `ARGV[1]`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `{base}:nodes`, the lease set: `KEYS[1]` of every namespace script.
    pub fn nodes(&self) -> &str {
        &self.nodes
    }

    /// `{base}:<suffix>` (`layout`, `started`, `subs`, `cleanup`, `retained`, `mid`).
    pub fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.base)
    }

    /// `{base}:<node>:node`, a node's record.
    pub fn node_record(&self, node: &str) -> String {
        format!("{}:{node}:node", self.base)
    }

    /// `{base}:<node>:inbox`, a node's inbox stream.
    pub fn inbox(&self, node: &str) -> String {
        format!("{}:{node}:inbox", self.base)
    }

    /// `{base}:<topic>:ret`, a topic's retained message.
    pub fn retained(&self, topic: &str) -> String {
        format!("{}:{topic}:ret", self.base)
    }

    /// `<prefix>::relay:namespaces`, the registry of namespaces in use.
    pub fn registry(&self) -> String {
        registry_key(&self.prefix)
    }

    /// The client name of a node's inbox connection, as BullMQ names it
    /// (`<base64(base)>:<node>`), so a listing of clients finds the node.
    pub fn inbox_client_name(&self, node: &str) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(self.base.as_bytes());
        format!("{b64}:{node}")
    }
}

/// `<prefix>::relay:namespaces`.
pub fn registry_key(prefix: &str) -> String {
    format!("{prefix}::relay:namespaces")
}

/// A relay input refused before anything is sent: the same rules the
/// scripts apply, so a refusal here is exactly what the script would answer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RelayInputError {
    /// Not a topic (a concrete topic has no wildcard).
    #[error("invalid relay topic {topic:?}: {reason}")]
    Topic {
        /// The topic given.
        topic: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// Not a pattern.
    #[error("invalid relay pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern given.
        pattern: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// Not an id (`[A-Za-z0-9_-]{1,64}`).
    #[error("invalid relay {what} {id:?}: must be 1 to 64 of A-Z a-z 0-9 _ -")]
    Id {
        /// `namespace`, `node id` or `endpoint id`.
        what: &'static str,
        /// The id given.
        id: String,
    },
    /// The key prefix is unusable.
    #[error("invalid key prefix: {0}")]
    Prefix(String),
}

/// Checks an id (namespace, node, endpoint).
pub fn check_id(what: &'static str, id: &str) -> Result<(), RelayInputError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RelayInputError::Id {
            what,
            id: id.to_owned(),
        })
    }
}

fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'%' | b'-'))
}

/// The segments of `text` under the grammar, wildcards allowed or not.
fn segments(text: &str, wildcards: bool) -> Result<Vec<&str>, &'static str> {
    if text.is_empty() {
        return Err("must not be empty");
    }
    if text.len() > MAX_TOPIC_LEN {
        return Err("longer than 512 bytes");
    }
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() > MAX_SEGMENTS {
        return Err("more than 16 segments");
    }
    let last = parts.len() - 1;
    for (i, p) in parts.iter().enumerate() {
        match *p {
            "*" if wildcards => {}
            ">" if wildcards && i == last => {}
            ">" if wildcards => return Err("'>' may only be the last segment"),
            "*" | ">" => return Err("wildcards are for patterns, not topics"),
            p if segment_ok(p) => {}
            "" => return Err("empty segment"),
            _ => return Err("a segment may only hold A-Z a-z 0-9 _ : % -"),
        }
    }
    Ok(parts)
}

/// Checks a concrete topic (what is published on).
pub fn check_topic(topic: &str) -> Result<(), RelayInputError> {
    segments(topic, false)
        .map(drop)
        .map_err(|reason| RelayInputError::Topic {
            topic: topic.to_owned(),
            reason,
        })
}

/// Checks a pattern (what is subscribed to): a topic, or one with `*`
/// segments and a trailing `>`.
pub fn check_pattern(pattern: &str) -> Result<(), RelayInputError> {
    segments(pattern, true)
        .map(drop)
        .map_err(|reason| RelayInputError::Pattern {
            pattern: pattern.to_owned(),
            reason,
        })
}

/// Whether `pattern` has a wildcard (then it never gets retained messages).
pub fn has_wildcard(pattern: &str) -> bool {
    pattern.split('.').any(|s| s == "*" || s == ">")
}

/// Whether a valid `pattern` selects a valid `topic`: `*` is one segment,
/// a trailing `>` one or more.
pub fn matches(pattern: &str, topic: &str) -> bool {
    let topic: Vec<&str> = topic.split('.').collect();
    let mut n = 0;
    for (i, p) in pattern.split('.').enumerate() {
        if p == ">" {
            return topic.len() > i;
        }
        match topic.get(i) {
            Some(t) if p == "*" || p == *t => {}
            _ => return false,
        }
        n = i + 1;
    }
    n == topic.len()
}

/// The negative replies of the relay scripts (BullMQ's `RelayErrorCode`).
/// They are the relay's own: the queue scripts' codes of the same numbers
/// mean something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
#[non_exhaustive]
pub enum RelayCode {
    /// `-1`: invalid topic.
    #[error("invalid topic")]
    InvalidTopic,
    /// `-2`: invalid topic pattern.
    #[error("invalid topic pattern")]
    InvalidPattern,
    /// `-3`: the node is not registered (its lease ran out).
    #[error("relay node is not registered")]
    NodeNotRegistered,
    /// `-4`: the message data is larger than the limit.
    #[error("message data is too large")]
    DataTooLarge,
    /// `-5`: invalid node or endpoint id.
    #[error("invalid relay node or endpoint id")]
    InvalidId,
    /// `-6`: the namespace is used by nodes of another layout version.
    #[error("the relay namespace is in use with an incompatible data layout")]
    IncompatibleLayout,
}

impl RelayCode {
    /// The code of a negative reply, `None` for any other number.
    pub fn from_code(n: i64) -> Option<Self> {
        Some(match n {
            -1 => RelayCode::InvalidTopic,
            -2 => RelayCode::InvalidPattern,
            -3 => RelayCode::NodeNotRegistered,
            -4 => RelayCode::DataTooLarge,
            -5 => RelayCode::InvalidId,
            -6 => RelayCode::IncompatibleLayout,
            _ => return None,
        })
    }

    /// The integer on the wire.
    pub fn code(self) -> i64 {
        match self {
            RelayCode::InvalidTopic => -1,
            RelayCode::InvalidPattern => -2,
            RelayCode::NodeNotRegistered => -3,
            RelayCode::DataTooLarge => -4,
            RelayCode::InvalidId => -5,
            RelayCode::IncompatibleLayout => -6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_bullmq_layout() {
        let k = RelayKeys::new("emq", "default").unwrap();
        assert_eq!(k.base(), "emq::relay:{default}");
        assert_eq!(k.nodes(), "emq::relay:{default}:nodes");
        assert_eq!(k.inbox("n1"), "emq::relay:{default}:n1:inbox");
        assert_eq!(k.node_record("n1"), "emq::relay:{default}:n1:node");
        assert_eq!(k.retained("a.b"), "emq::relay:{default}:a.b:ret");
        assert_eq!(k.registry(), "emq::relay:namespaces");
        assert_eq!(k.inbox_client_name("n1"), "ZW1xOjpyZWxheTp7ZGVmYXVsdH0=:n1");
        assert!(RelayKeys::new("emq", "a b").is_err());
        assert!(RelayKeys::new("emq", "").is_err());
        assert!(RelayKeys::new("emq:", "x").is_err());
        assert!(is_relay_key("emq", k.nodes()));
        assert!(!is_relay_key("emq", "emq:mail:meta"));
        assert!(!is_relay_key("emq", "emqx::relay"));
    }

    #[test]
    fn the_grammar_is_the_scripts_grammar() {
        for ok in [
            "a",
            "queues.emails.jobs.42.progress",
            "a:b%2F-_",
            &format!("{}y", "x.".repeat(15)),
        ] {
            assert!(check_topic(ok).is_ok(), "{ok}");
            assert!(check_pattern(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a..b",
            "a.",
            ".a",
            "a b",
            "a|b",
            "é",
            &format!("{}y", "x.".repeat(16)),
            &"a".repeat(513),
        ] {
            assert!(check_topic(bad).is_err(), "{bad:?}");
            assert!(check_pattern(bad).is_err(), "{bad:?}");
        }
        assert!(check_topic("a.*").is_err());
        assert!(check_topic("a.>").is_err());
        assert!(check_pattern("a.*.c").is_ok());
        assert!(check_pattern("*").is_ok());
        assert!(check_pattern(">").is_ok());
        assert!(check_pattern("a.>").is_ok());
        assert!(check_pattern("a.>.b").is_err());
        assert!(check_pattern("a.b*").is_err());
        assert!(check_id("node id", &"a".repeat(64)).is_ok());
        assert!(check_id("node id", &"a".repeat(65)).is_err());
        assert!(check_id("node id", "a.b").is_err());
    }

    #[test]
    fn wildcards_match_as_bullmq_matches() {
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "a.b.c"));
        assert!(!matches("a.b.c", "a.b"));
        assert!(matches("a.*", "a.b"));
        assert!(!matches("a.*", "a"));
        assert!(!matches("a.*", "a.b.c"));
        assert!(matches("a.>", "a.b"));
        assert!(matches("a.>", "a.b.c"));
        assert!(!matches("a.>", "a"));
        assert!(matches(">", "a"));
        assert!(matches("*.b.>", "x.b.y.z"));
        assert!(!matches("*.b.>", "x.c.y"));
        assert!(has_wildcard("a.>") && has_wildcard("*.x") && !has_wildcard("a.b"));
    }

    #[test]
    fn codes_round_trip() {
        for n in -6..=-1 {
            assert_eq!(RelayCode::from_code(n).unwrap().code(), n);
        }
        assert_eq!(RelayCode::from_code(-7), None);
    }
}
