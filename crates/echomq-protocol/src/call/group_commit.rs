//! Group commit (EchoMQ extension, docs/decisions.md §16): moveJobsToFinished-15
//! runs several moveToFinished in one call. Each entry runs the same Lua
//! body as one [`MoveToFinished`], fetch-next included, so the queue ends as
//! it would after the same single calls in order; each entry gets its own
//! [`Verdict`]. What the entries share (the prefix, the FinishOpts but for
//! the lock token) is sent once per call; each entry carries what is its own.

use bytes::Bytes;

use super::decode::{self, Reply, ReplyError};
use super::lifecycle::{verdict, FinishTarget, MoveToFinished, NextJob, Verdict};
use super::script::{Arg, ScriptCall};
use crate::keys::{Key, QueueKeys};
use crate::packing::pack_fields;
use crate::scripts::ScriptId;

/// The most finishes one call takes: bounded work per Redis call.
pub const MAX_ENTRIES: usize = 32;

/// The most bytes of packed entries and options a call of several takes
/// (return values and failure reasons are most of it); a larger finish goes
/// alone.
pub const MAX_BYTES: usize = 1 << 20;

/// The bytes a group adds to its entries' [`GroupEntry::size`]: the two
/// arrays' headers, each at its longest.
pub const GROUP_OVERHEAD: usize = 10;

/// Why a group of finishes cannot be one call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupCommitError {
    /// None, or more than [`MAX_ENTRIES`].
    #[error("a group commit takes 1 to {MAX_ENTRIES} finishes, not {0}")]
    Count(usize),
    /// Several entries above [`MAX_BYTES`] packed.
    #[error("a group commit of several finishes takes at most {MAX_BYTES} bytes, not {0}")]
    Size(usize),
    /// An entry of another queue than the call's.
    #[error("finish {0} of the group is of another queue")]
    OtherQueue(usize),
}

/// One finish of a group, owned (a finisher keeps the finishes of other
/// tasks, not their borrows): what is its own, and its FinishOpts packed
/// without the token, which the finishes of one worker share.
#[derive(Debug, Clone)]
pub struct GroupEntry {
    prefix: Arg,
    id: Arg,
    now: Arg,
    value: Arg,
    target: FinishTarget,
    fetch_next: bool,
    token: Arg,
    opts: Bytes,
    fields: Arg,
}

impl GroupEntry {
    /// The group entry of `call`.
    pub fn of(call: &MoveToFinished<'_>) -> Self {
        GroupEntry {
            prefix: Arg::key(&call.keys.fixed().base),
            id: Arg::str(call.id),
            now: Arg::int(call.now.0),
            value: Arg::str(call.value),
            target: call.target,
            fetch_next: call.fetch_next,
            token: Arg::str(call.opts.token),
            opts: Bytes::from(call.opts.pack_without_token()),
            fields: Arg::packed_or_empty(pack_fields(call.fields)),
        }
    }

    /// At most the bytes this entry adds to a group's arguments, its options
    /// counted as if no other entry shared them (every msgpack header at its
    /// longest, 5 bytes): a group whose entries sum to [`MAX_BYTES`] minus
    /// [`GROUP_OVERHEAD`] or less is within the bound.
    pub fn size(&self) -> usize {
        // The array header, then 8 strings; target, flag and index are short.
        5 + 3 * (5 + 9)
            + [&self.id, &self.now, &self.value, &self.token, &self.fields]
                .iter()
                .map(|v| 5 + v.as_bytes().len())
                .sum::<usize>()
            + 5
            + self.opts.len()
    }
}

/// moveJobsToFinished-15: the finishes of one queue's jobs, in order, in one
/// call. Its output has one verdict per entry, as that entry's
/// [`MoveToFinished`] alone would have answered.
#[derive(Debug, Clone)]
pub struct MoveJobsToFinished<'a> {
    keys: &'a QueueKeys,
    entries: usize,
    shared: Bytes,
    packed: Bytes,
}

/// The msgpack header of a string of `len` bytes, then the bytes.
fn push_str(buf: &mut Vec<u8>, bytes: &[u8]) {
    // Writing to a Vec cannot fail, and every argument is far below 4 GiB.
    rmp::encode::write_str_len(buf, bytes.len() as u32).expect("msgpack header into a Vec");
    buf.extend_from_slice(bytes);
}

fn push_array_len(buf: &mut Vec<u8>, len: usize) {
    rmp::encode::write_array_len(buf, len as u32).expect("msgpack header into a Vec");
}

impl<'a> MoveJobsToFinished<'a> {
    /// Packs `entries` (of queue `keys`) into one call, refusing a group
    /// above the bounds.
    pub fn new(
        keys: &'a QueueKeys,
        entries: &[MoveToFinished<'_>],
    ) -> Result<Self, GroupCommitError> {
        let entries: Vec<GroupEntry> = entries.iter().map(GroupEntry::of).collect();
        Self::from_entries(keys, &entries)
    }

    /// As [`new`](Self::new), from each finish's [`GroupEntry`].
    pub fn from_entries(
        keys: &'a QueueKeys,
        entries: &[GroupEntry],
    ) -> Result<Self, GroupCommitError> {
        if entries.is_empty() || entries.len() > MAX_ENTRIES {
            return Err(GroupCommitError::Count(entries.len()));
        }
        // The script builds each job key from ARGV 1, the call's `{P}`.
        if let Some(i) = entries
            .iter()
            .position(|e| e.prefix.as_bytes() != keys.prefix_key().as_bytes())
        {
            return Err(GroupCommitError::OtherQueue(i));
        }
        // Distinct options, in order of first use: a worker's finishes have
        // one or two (retention differs between completed and failed).
        let mut distinct: Vec<&Bytes> = Vec::with_capacity(2);
        let mut shared = Vec::new();
        let mut index = Vec::with_capacity(entries.len());
        for e in entries {
            let i = match distinct.iter().position(|o| **o == e.opts) {
                Some(i) => i,
                None => {
                    distinct.push(&e.opts);
                    distinct.len() - 1
                }
            };
            index.push(i + 1);
        }
        push_array_len(&mut shared, distinct.len());
        for o in &distinct {
            push_str(&mut shared, o);
        }
        let size: usize = entries.iter().map(GroupEntry::size).sum();
        let mut buf = Vec::with_capacity(size + 5);
        push_array_len(&mut buf, entries.len());
        for (e, i) in entries.iter().zip(index) {
            push_array_len(&mut buf, 8);
            push_str(&mut buf, e.id.as_bytes());
            push_str(&mut buf, e.now.as_bytes());
            push_str(&mut buf, e.value.as_bytes());
            push_str(&mut buf, e.target.as_str().as_bytes());
            push_str(&mut buf, if e.fetch_next { b"1" } else { b"0" });
            push_str(&mut buf, i.to_string().as_bytes());
            push_str(&mut buf, e.token.as_bytes());
            push_str(&mut buf, e.fields.as_bytes());
        }
        let total = shared.len() + buf.len();
        if entries.len() > 1 && total > MAX_BYTES {
            return Err(GroupCommitError::Size(total));
        }
        Ok(MoveJobsToFinished {
            keys,
            entries: entries.len(),
            shared: Bytes::from(shared),
            packed: Bytes::from(buf),
        })
    }

    /// The number of finishes.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Never true: a group holds at least one finish.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
}

impl ScriptCall for MoveJobsToFinished<'_> {
    type Output = Vec<Verdict<Option<NextJob>>>;

    fn script(&self) -> ScriptId {
        ScriptId::MoveJobsToFinished
    }

    fn keys(&self) -> Vec<Key> {
        let f = self.keys.fixed();
        keys![
            &f.wait,
            &f.active,
            &f.prioritized,
            &f.events,
            &f.stalled,
            &f.limiter,
            &f.delayed,
            &f.paused,
            &f.meta,
            &f.pc,
            &f.completed,
            &f.failed,
            &f.metrics_completed,
            &f.marker,
            &f.metrics_failed,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::key(&self.keys.fixed().base),
            Arg::shared(self.shared.clone()),
            Arg::shared(self.packed.clone()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        let items = decode::array(self.script(), reply)?;
        if items.len() != self.entries {
            return Err(ReplyError::shape(
                self.script(),
                format!("{} replies for {} finishes", items.len(), self.entries),
            ));
        }
        items
            .into_iter()
            .map(|item| verdict(self.script(), item))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::lifecycle::{EpochMs, FinishTarget, Refusal};
    use crate::call::script::argv_text;
    use crate::packing::{FinishOpts, MetricsSize};
    use crate::reply::ScriptErrorCode;

    fn opts(token: &str) -> FinishOpts<'_> {
        FinishOpts {
            token,
            name: None,
            keep_jobs: None,
            limiter: None,
            lock_duration: 30_000,
            attempts: 0,
            max_metrics_size: MetricsSize::Off,
        }
    }

    fn finish<'a>(k: &'a QueueKeys, id: &'a str, value: &'a str) -> MoveToFinished<'a> {
        MoveToFinished {
            keys: k,
            id,
            now: EpochMs(10),
            target: FinishTarget::Completed,
            value,
            fetch_next: false,
            opts: opts("t"),
            fields: &[],
        }
    }

    /// Entry `e` of a group and the options it names, put back into the ARGV
    /// of the single moveToFinished the script runs it as (the options map
    /// with the entry's token, unpacked).
    fn as_single(prefix: &[u8], shared: &[Vec<u8>], e: &[Vec<u8>]) -> Vec<serde_json::Value> {
        let text = |b: &[u8]| serde_json::Value::from(b.to_vec());
        let field: &[u8] = if e[3] == b"completed" {
            b"returnvalue"
        } else {
            b"failedReason"
        };
        let index: usize = std::str::from_utf8(&e[5]).unwrap().parse().unwrap();
        let mut opts: serde_json::Value = rmp_serde::from_slice(&shared[index - 1]).unwrap();
        assert!(opts.get("token").is_none(), "shared options carry no token");
        opts["token"] = String::from_utf8(e[6].clone()).unwrap().into();
        vec![
            text(&e[0]),
            text(&e[1]),
            text(field),
            text(&e[2]),
            text(&e[3]),
            text(&e[4]),
            text(prefix),
            opts,
            text(&e[7]),
        ]
    }

    fn single(call: &MoveToFinished<'_>) -> Vec<serde_json::Value> {
        call.args()
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if i == 7 {
                    rmp_serde::from_slice(v.as_bytes()).unwrap()
                } else {
                    serde_json::Value::from(v.as_bytes().to_vec())
                }
            })
            .collect()
    }

    #[test]
    fn entries_are_the_single_calls_argv_with_what_they_share_sent_once() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let a = finish(&k, "1", "\"x\"");
        let mut keep = serde_json::Map::new();
        keep.insert("count".into(), 5.into());
        let b = MoveToFinished {
            target: FinishTarget::Failed,
            fetch_next: true,
            opts: FinishOpts {
                keep_jobs: Some(keep),
                attempts: 3,
                ..opts("u")
            },
            ..finish(&k, "2", "boom")
        };
        let fields = [("stacktrace", "[]".to_owned())];
        let c = MoveToFinished {
            opts: opts("v"),
            fields: &fields,
            ..finish(&k, "3", "7")
        };
        let calls = [a, b, c];
        let call = MoveJobsToFinished::new(&k, &calls).unwrap();
        assert_eq!(call.keys().len(), ScriptId::MoveJobsToFinished.num_keys());
        assert_eq!(
            call.keys()[10..],
            [
                "emq:q:completed",
                "emq:q:failed",
                "emq:q:metrics:completed",
                "emq:q:marker",
                "emq:q:metrics:failed"
            ]
        );
        let argv = call.args();
        assert_eq!(argv.len(), 3);
        assert_eq!(argv[0].as_bytes(), b"emq:q:");
        let shared: Vec<serde_bytes_like::B> = rmp_serde::from_slice(argv[1].as_bytes()).unwrap();
        let shared: Vec<Vec<u8>> = shared.into_iter().map(|b| b.0).collect();
        // a and c share their options (tokens apart); b has its own.
        assert_eq!(shared.len(), 2);
        let packed: Vec<Vec<serde_bytes_like::B>> =
            rmp_serde::from_slice(argv[2].as_bytes()).unwrap();
        let unpacked: Vec<Vec<serde_json::Value>> = packed
            .into_iter()
            .map(|e| {
                let e: Vec<Vec<u8>> = e.into_iter().map(|b| b.0).collect();
                assert_eq!(e.len(), 8);
                as_single(argv[0].as_bytes(), &shared, &e)
            })
            .collect();
        let singles: Vec<Vec<serde_json::Value>> = calls.iter().map(single).collect();
        assert_eq!(unpacked, singles);
        let _ = argv_text(&call);
    }

    /// A msgpack string read as bytes (the entries carry msgpack in strings).
    mod serde_bytes_like {
        pub struct B(pub Vec<u8>);
        impl<'de> serde::Deserialize<'de> for B {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<B, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = B;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("bytes")
                    }
                    fn visit_str<E>(self, v: &str) -> Result<B, E> {
                        Ok(B(v.as_bytes().to_vec()))
                    }
                    fn visit_bytes<E>(self, v: &[u8]) -> Result<B, E> {
                        Ok(B(v.to_vec()))
                    }
                }
                d.deserialize_any(V)
            }
        }
    }

    #[test]
    fn bounds_are_typed_errors() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let other = QueueKeys::new("emq", "r").unwrap();
        assert_eq!(
            MoveJobsToFinished::new(&k, &[]).unwrap_err(),
            GroupCommitError::Count(0)
        );
        let many: Vec<_> = (0..33).map(|_| finish(&k, "1", "1")).collect();
        assert_eq!(
            MoveJobsToFinished::new(&k, &many).unwrap_err(),
            GroupCommitError::Count(33)
        );
        assert!(MoveJobsToFinished::new(&k, &many[..32]).is_ok());
        assert_eq!(
            MoveJobsToFinished::new(&k, &[finish(&k, "1", "1"), finish(&other, "2", "1")])
                .unwrap_err(),
            GroupCommitError::OtherQueue(1)
        );
        let big = "x".repeat(MAX_BYTES);
        assert!(MoveJobsToFinished::new(&k, &[finish(&k, "1", &big)]).is_ok());
        assert!(matches!(
            MoveJobsToFinished::new(&k, &[finish(&k, "1", &big), finish(&k, "2", "1")]),
            Err(GroupCommitError::Size(_))
        ));
        let e = finish(&k, "1", &big);
        assert!(GroupEntry::of(&e).size() > MAX_BYTES);
    }

    #[test]
    fn one_verdict_per_entry() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call =
            MoveJobsToFinished::new(&k, &[finish(&k, "1", "1"), finish(&k, "2", "1")]).unwrap();
        assert_eq!(
            call.decode(Reply::Array(vec![Reply::Int(0), Reply::Int(-2)]))
                .unwrap(),
            vec![
                Verdict::Done(None),
                Verdict::Refused(Refusal::LockLost(ScriptErrorCode::JobLockNotExist))
            ]
        );
        assert!(call.decode(Reply::Array(vec![Reply::Int(0)])).is_err());
        assert!(call
            .decode(Reply::Array(vec![Reply::Int(0), Reply::Int(-8)]))
            .is_err());
    }
}
