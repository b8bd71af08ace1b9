//! Finding the queues of a prefix, as BullMQ tools do, by their `meta` hash
//! and `id` counter (a queue that never had a job may have only its meta
//! hash; one opened by an old client only its id counter) — but never as one
//! walk of the keyspace per request: a prefix with ten million jobs has
//! twenty million keys, and SCAN visits them all whatever it matches.
//!
//! [`Discovery`] keeps the names found and a SCAN cursor. Each caller (a
//! page, the API, the sampler) advances the walk by a bounded number of SCAN
//! steps and reads the names known so far. One walk of the whole keyspace
//! is a cycle; at the end of a cycle the names become exactly what it found
//! (queues that went away are dropped). On a small keyspace a request's
//! budget covers a whole cycle, so it sees every queue at once; on a large
//! one the list fills in over a few requests and sampler ticks
//! (docs/ui.md §Scale, docs/scale.md).

use std::collections::BTreeSet;

use echomq::protocol::QueueKeys;
use echomq::Connection;
use fred::prelude::KeysInterface;
use tokio::sync::Mutex;

/// Queues listed at most: a prefix with more is beyond a dashboard.
pub(crate) const MAX_QUEUES: usize = 1000;
/// Keys SCAN looks at per call.
const SCAN_COUNT: u32 = 1000;
/// SCAN calls one page or API request may make.
pub(crate) const REQUEST_BUDGET: u32 = 10;
/// SCAN calls one sampler tick may make.
pub(crate) const SAMPLER_BUDGET: u32 = 100;

/// The queues found so far and where the walk is.
#[derive(Default)]
pub(crate) struct Discovery {
    walk: Mutex<Walk>,
}

#[derive(Default)]
struct Walk {
    /// The names the last complete cycle found (and, until the first cycle
    /// completes, what the first one found so far).
    known: BTreeSet<String>,
    /// What the cycle in progress has found.
    found: BTreeSet<String>,
    /// SCAN cursor of the cycle in progress ("0": a cycle begins).
    cursor: String,
    /// Cycles completed.
    cycles: u64,
}

/// What a caller of [`Discovery::advance`] gets: the names, and whether they
/// are the result of a complete walk.
pub(crate) struct Found {
    pub names: Vec<String>,
    /// A walk of the whole keyspace has completed since the first call.
    pub complete: bool,
    /// The walk in progress has not reached the end yet.
    pub walking: bool,
}

impl Discovery {
    /// Advances the walk by at most `budget` SCAN calls and answers the
    /// names known. A walk that completes within the budget starts the next
    /// one on the following call, so a small keyspace is walked whole by
    /// every call.
    pub async fn advance(&self, conn: &Connection, budget: u32) -> echomq::Result<Found> {
        let mut w = self.walk.lock().await;
        let prefix = conn.prefix();
        let client = conn.pool().next();
        // `:meta` and `:id` in one glob (SCAN has no alternatives):
        // `<prefix>:*:[mi][ed]*` also lets through a few other keys
        // (`…:metrics:…`, an id starting with "me"); `name_of` drops them.
        let pattern = format!("{}:*:[mi][ed]*", glob_escape(prefix));
        let mut ended = false;
        for _ in 0..budget.max(1) {
            let cursor = std::mem::take(&mut w.cursor);
            let cursor = if cursor.is_empty() {
                "0".to_owned()
            } else {
                cursor
            };
            let (next, keys): (String, Vec<String>) = client
                .scan_page(cursor, pattern.clone(), Some(SCAN_COUNT), None)
                .await?;
            for key in keys {
                if let Some(name) = ["meta", "id"].iter().find_map(|s| name_of(prefix, &key, s)) {
                    if w.found.len() < MAX_QUEUES {
                        w.found.insert(name);
                    }
                }
            }
            if next == "0" {
                w.known = std::mem::take(&mut w.found);
                w.cycles += 1;
                w.cursor = String::new();
                ended = true;
                break;
            }
            w.cursor = next;
        }
        let mut names: BTreeSet<String> = w.known.clone();
        if !ended {
            names.extend(w.found.iter().cloned());
        }
        Ok(Found {
            names: names.into_iter().take(MAX_QUEUES).collect(),
            complete: w.cycles > 0,
            walking: !ended,
        })
    }
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
        assert_eq!(name_of("emq", "emq:mail:metrics:completed", "meta"), None);
        // Relay keys, whatever their topic or node id ends with.
        assert_eq!(
            name_of("emq", "emq::relay:{default}:a.b:meta", "meta"),
            None
        );
        assert_eq!(name_of("emq", "emq::relay:{x}:id", "id"), None);
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }
}
