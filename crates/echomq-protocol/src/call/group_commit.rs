//! Group commit (EchoMQ extension, docs/decisions.md §16): moveJobsToFinished-15
//! runs several moveToFinished in one call. Each entry is exactly the ARGV of
//! one [`MoveToFinished`] and runs the same Lua body, fetch-next included, so
//! the queue ends as it would after the same single calls in order; each
//! entry gets its own [`Verdict`].

use bytes::Bytes;

use super::decode::{self, Reply, ReplyError};
use super::lifecycle::{verdict, MoveToFinished, NextJob, Verdict};
use super::script::{Arg, ScriptCall};
use crate::keys::{Key, QueueKeys};
use crate::scripts::ScriptId;

/// The most finishes one call takes: bounded work per Redis call.
pub const MAX_ENTRIES: usize = 32;

/// The most bytes of packed entries a call of several takes (return values
/// and failure reasons are most of it); a larger finish goes alone.
pub const MAX_BYTES: usize = 1 << 20;

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

/// moveJobsToFinished-15: the finishes of one queue's jobs, in order, in one
/// call. Its output has one verdict per entry, as that entry's
/// [`MoveToFinished`] alone would have answered.
#[derive(Debug, Clone)]
pub struct MoveJobsToFinished<'a> {
    keys: &'a QueueKeys,
    entries: usize,
    packed: Bytes,
}

/// At most the packed bytes of one entry: every header at its longest.
pub fn argv_size(argv: &[Arg]) -> usize {
    5 + argv.iter().map(|v| 5 + v.as_bytes().len()).sum::<usize>()
}

/// The msgpack header of a string of `len` bytes, then the bytes.
fn push_str(buf: &mut Vec<u8>, bytes: &[u8]) {
    // Writing to a Vec cannot fail, and every argument is far below 4 GiB.
    rmp::encode::write_str_len(buf, bytes.len() as u32).expect("msgpack header into a Vec");
    buf.extend_from_slice(bytes);
}

impl<'a> MoveJobsToFinished<'a> {
    /// Packs `entries` (of queue `keys`) into one call, refusing a group
    /// above the bounds.
    pub fn new(
        keys: &'a QueueKeys,
        entries: &[MoveToFinished<'_>],
    ) -> Result<Self, GroupCommitError> {
        let argvs: Vec<Vec<Arg>> = entries.iter().map(|e| e.args()).collect();
        Self::from_argvs(keys, &argvs)
    }

    /// As [`new`](Self::new), from each entry's ARGV as
    /// [`MoveToFinished::args`] made it (a caller that keeps finishes of
    /// other tasks keeps their ARGV, not their borrows).
    pub fn from_argvs(keys: &'a QueueKeys, argvs: &[Vec<Arg>]) -> Result<Self, GroupCommitError> {
        if argvs.is_empty() || argvs.len() > MAX_ENTRIES {
            return Err(GroupCommitError::Count(argvs.len()));
        }
        // ARGV 7 is the entry's `{P}`: the script builds the job key from it.
        if let Some(i) = argvs
            .iter()
            .position(|a| a.len() != 9 || a[6].as_bytes() != keys.prefix_key().as_bytes())
        {
            return Err(GroupCommitError::OtherQueue(i));
        }
        let size: usize = argvs.iter().map(|a| argv_size(a)).sum();
        let mut buf = Vec::with_capacity(size + 5);
        rmp::encode::write_array_len(&mut buf, argvs.len() as u32)
            .expect("msgpack header into a Vec");
        for entry in argvs {
            rmp::encode::write_array_len(&mut buf, entry.len() as u32)
                .expect("msgpack header into a Vec");
            for v in entry {
                push_str(&mut buf, v.as_bytes());
            }
        }
        if argvs.len() > 1 && buf.len() > MAX_BYTES {
            return Err(GroupCommitError::Size(buf.len()));
        }
        Ok(MoveJobsToFinished {
            keys,
            entries: argvs.len(),
            packed: Bytes::from(buf),
        })
    }

    /// At most the bytes `entry` adds to a group's packed argument (every
    /// msgpack header counted at its longest, 5 bytes): a group whose
    /// entries sum to [`MAX_BYTES`] minus 5 or less is within the bound.
    pub fn entry_size(entry: &MoveToFinished<'_>) -> usize {
        argv_size(&entry.args())
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
        vec![Arg::shared(self.packed.clone())]
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

    #[test]
    fn entries_are_the_single_calls_argv() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let a = finish(&k, "1", "\"x\"");
        let b = MoveToFinished {
            target: FinishTarget::Failed,
            fetch_next: true,
            ..finish(&k, "2", "boom")
        };
        let call = MoveJobsToFinished::new(&k, &[a.clone(), b.clone()]).unwrap();
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
        let packed: Vec<Vec<serde_bytes_like::B>> =
            rmp_serde::from_slice(argv[0].as_bytes()).unwrap();
        let singles: Vec<Vec<Vec<u8>>> = [a, b]
            .iter()
            .map(|e| e.args().iter().map(|v| v.as_bytes().to_vec()).collect())
            .collect();
        let unpacked: Vec<Vec<Vec<u8>>> = packed
            .into_iter()
            .map(|e| e.into_iter().map(|b| b.0).collect())
            .collect();
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
        assert!(MoveJobsToFinished::entry_size(&e) > MAX_BYTES);
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
