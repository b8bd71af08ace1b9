//! Finding the queues of a prefix, as BullMQ tools do: SCAN for
//! `<prefix>:*:meta` and `<prefix>:*:id` (a queue that never had a job may
//! have only its meta hash; one opened by an old client only its id counter).

use std::collections::BTreeSet;

use echomq::protocol::QueueKeys;
use echomq::Connection;
use fred::prelude::KeysInterface;

/// Queues listed at most: a prefix with more is beyond a dashboard.
pub(crate) const MAX_QUEUES: usize = 1000;
/// Keys SCAN looks at per call.
const SCAN_COUNT: u32 = 1000;

/// The queue names under the connection's prefix, sorted.
pub(crate) async fn queue_names(conn: &Connection) -> echomq::Result<Vec<String>> {
    let prefix = conn.prefix();
    let client = conn.pool().next();
    let mut names = BTreeSet::new();
    for suffix in ["meta", "id"] {
        let pattern = format!("{}:*:{suffix}", glob_escape(prefix));
        let mut cursor = String::from("0");
        loop {
            let (next, keys): (String, Vec<String>) = client
                .scan_page(cursor, pattern.clone(), Some(SCAN_COUNT), None)
                .await?;
            names.extend(keys.iter().filter_map(|k| name_of(prefix, k, suffix)));
            if next == "0" || names.len() >= MAX_QUEUES {
                break;
            }
            cursor = next;
        }
    }
    Ok(names.into_iter().take(MAX_QUEUES).collect())
}

/// Whether queue `keys` exists under its prefix (meta hash or id counter).
pub(crate) async fn exists(conn: &Connection, keys: &QueueKeys) -> echomq::Result<bool> {
    let n: i64 = conn
        .pool()
        .exists(vec![keys.meta(), keys.key("id")])
        .await?;
    Ok(n > 0)
}

/// `<prefix>:<name>:<suffix>` → `name`, when `name` is a valid queue name.
/// The relay's keys (`<prefix>::relay:…`) are never a queue's.
fn name_of(prefix: &str, key: &str, suffix: &str) -> Option<String> {
    if echomq::protocol::relay::is_relay_key(prefix, key) {
        return None;
    }
    let name = key
        .strip_prefix(prefix)?
        .strip_prefix(':')?
        .strip_suffix(suffix)?
        .strip_suffix(':')?;
    QueueKeys::new(prefix, name).ok()?;
    Some(name.to_owned())
}

/// The prefix as a literal inside a SCAN glob.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_meta_and_id_keys() {
        assert_eq!(
            name_of("emq", "emq:mail:meta", "meta").as_deref(),
            Some("mail")
        );
        assert_eq!(name_of("emq", "emq:{x}:id", "id").as_deref(), Some("{x}"));
        // A job key that happens to end in :meta is not a queue.
        assert_eq!(name_of("emq", "emq:mail:7:meta", "meta"), None);
        assert_eq!(name_of("emq", "other:mail:meta", "meta"), None);
        assert_eq!(name_of("emq", "emqx:mail:meta", "meta"), None);
        // Relay keys, whatever their topic or node id ends with.
        assert_eq!(
            name_of("emq", "emq::relay:{default}:a.b:meta", "meta"),
            None
        );
        assert_eq!(name_of("emq", "emq::relay:{x}:id", "id"), None);
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }
}
