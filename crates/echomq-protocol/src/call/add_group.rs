//! Adds in groups (EchoMQ extension, issue 42): addStandardJobs-9 runs
//! several addStandardJob in one call. Each entry is exactly the ARGV of one
//! [`AddJob`] of kind [`AddKind::Standard`] and runs the same Lua body, so
//! the queue ends as after the same single calls in order; each entry gets
//! its own answer, a Redis refusal of one entry included.

use bytes::Bytes;

use super::add::{AddJob, AddKind};
use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::{Key, QueueKeys};
use crate::scripts::ScriptId;

/// The most adds one call takes: bounded work per Redis call.
pub const MAX_ADDS: usize = 100;

/// The most bytes of packed entries a call of several takes.
pub const MAX_BYTES: usize = 1 << 20;

/// Why a group of adds cannot be one call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddGroupError {
    /// None, or more than [`MAX_ADDS`].
    #[error("an add group takes 1 to {MAX_ADDS} jobs, not {0}")]
    Count(usize),
    /// Several entries above [`MAX_BYTES`] packed.
    #[error("an add group of several jobs takes at most {MAX_BYTES} bytes, not {0}")]
    Size(usize),
    /// An add that is not a standard one (delayed, prioritized), or of
    /// another queue.
    #[error("add {0} of the group is not a standard add of the call's queue")]
    NotStandard(usize),
}

/// What one entry of a group answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddAnswer {
    /// What that addStandardJob answered: the id, or its code.
    Script(Result<String, ReplyError>),
    /// Redis refused a command of this entry (its message); what a single
    /// call writes before such an error is written.
    Refused(String),
}

/// addStandardJobs-9: standard adds of one queue, in order, in one call.
#[derive(Debug, Clone)]
pub struct AddStandardJobs<'a> {
    keys: &'a QueueKeys,
    entries: usize,
    packed: Bytes,
}

fn push_str(buf: &mut Vec<u8>, bytes: &[u8]) {
    // Writing to a Vec cannot fail, and every argument is far below 4 GiB.
    rmp::encode::write_str_len(buf, bytes.len() as u32).expect("msgpack header into a Vec");
    buf.extend_from_slice(bytes);
}

impl<'a> AddStandardJobs<'a> {
    /// Packs `adds` (standard adds of queue `keys`) into one call, refusing a
    /// group above the bounds.
    pub fn new(keys: &'a QueueKeys, adds: &[AddJob<'_>]) -> Result<Self, AddGroupError> {
        if adds.is_empty() || adds.len() > MAX_ADDS {
            return Err(AddGroupError::Count(adds.len()));
        }
        if let Some(i) = adds
            .iter()
            .position(|a| a.kind != AddKind::Standard || a.keys.prefix_key() != keys.prefix_key())
        {
            return Err(AddGroupError::NotStandard(i));
        }
        let mut buf = Vec::new();
        rmp::encode::write_array_len(&mut buf, adds.len() as u32)
            .expect("msgpack header into a Vec");
        for a in adds {
            rmp::encode::write_array_len(&mut buf, 3).expect("msgpack header into a Vec");
            for v in a.args() {
                push_str(&mut buf, v.as_bytes());
            }
        }
        if adds.len() > 1 && buf.len() > MAX_BYTES {
            return Err(AddGroupError::Size(buf.len()));
        }
        Ok(AddStandardJobs {
            keys,
            entries: adds.len(),
            packed: Bytes::from(buf),
        })
    }

    /// The number of adds.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Never true: a group holds at least one add.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
}

impl ScriptCall for AddStandardJobs<'_> {
    type Output = Vec<AddAnswer>;

    fn script(&self) -> ScriptId {
        ScriptId::AddStandardJobs
    }

    fn keys(&self) -> Vec<Key> {
        let f = self.keys.fixed();
        keys![
            &f.wait,
            &f.paused,
            &f.meta,
            &f.id,
            &f.completed,
            &f.delayed,
            &f.active,
            &f.events,
            &f.marker,
        ]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::shared(self.packed.clone())]
    }

    fn decode(&self, reply: Reply) -> Result<Vec<AddAnswer>, ReplyError> {
        let script = self.script();
        let items = decode::array(script, reply)?;
        if items.len() != self.entries {
            return Err(ReplyError::shape(
                script,
                format!("{} replies for {} adds", items.len(), self.entries),
            ));
        }
        items
            .into_iter()
            .map(|item| match item {
                Reply::Int(n) => Ok(AddAnswer::Script(
                    decode::code(script, n).map(|n| n.to_string()),
                )),
                Reply::Array(parts) => match parts.as_slice() {
                    [Reply::Bulk(tag), Reply::Bulk(message)] if &tag[..] == b"err" => Ok(
                        AddAnswer::Refused(String::from_utf8_lossy(message).into_owned()),
                    ),
                    _ => Err(ReplyError::shape(
                        script,
                        "an entry's reply of another shape",
                    )),
                },
                other => Ok(AddAnswer::Script(decode::text(script, &other))),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::AddArgs;
    use crate::reply::ScriptErrorCode;
    use serde_json::Map;

    fn add<'a>(
        k: &'a QueueKeys,
        kind: AddKind,
        opts: &'a Map<String, serde_json::Value>,
    ) -> AddJob<'a> {
        AddJob {
            keys: k,
            kind,
            args: AddArgs {
                prefix_key: k.prefix_key(),
                name: "n",
                timestamp: 5,
                ..Default::default()
            },
            data: "{}",
            opts,
        }
    }

    #[test]
    fn entries_are_the_single_calls_argv() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let opts = Map::new();
        let a = add(&k, AddKind::Standard, &opts);
        let call = AddStandardJobs::new(&k, &[a.clone(), a.clone()]).unwrap();
        assert_eq!(call.keys(), a.keys(), "addStandardJob's KEYS");
        // Read back with msgpack's own decoder: 2 entries of 3 strings.
        let bytes = call.args()[0].as_bytes().to_vec();
        let mut rd = &bytes[..];
        assert_eq!(rmp::decode::read_array_len(&mut rd).unwrap(), 2);
        let single: Vec<Vec<u8>> = a.args().iter().map(|v| v.as_bytes().to_vec()).collect();
        for _ in 0..2 {
            assert_eq!(rmp::decode::read_array_len(&mut rd).unwrap(), 3);
            let entry: Vec<Vec<u8>> = (0..3)
                .map(|_| {
                    let len = rmp::decode::read_str_len(&mut rd).unwrap() as usize;
                    let (s, rest) = rd.split_at(len);
                    rd = rest;
                    s.to_vec()
                })
                .collect();
            assert_eq!(entry, single);
        }
        assert!(rd.is_empty());
    }

    #[test]
    fn bounds_are_typed_errors() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let opts = Map::new();
        let a = add(&k, AddKind::Standard, &opts);
        assert_eq!(
            AddStandardJobs::new(&k, &[]).unwrap_err(),
            AddGroupError::Count(0)
        );
        let many = vec![a.clone(); MAX_ADDS + 1];
        assert_eq!(
            AddStandardJobs::new(&k, &many).unwrap_err(),
            AddGroupError::Count(MAX_ADDS + 1)
        );
        assert_eq!(
            AddStandardJobs::new(&k, &[a.clone(), add(&k, AddKind::Delayed, &opts)]).unwrap_err(),
            AddGroupError::NotStandard(1)
        );
    }

    #[test]
    fn each_entry_gets_its_answer() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let opts = Map::new();
        let a = add(&k, AddKind::Standard, &opts);
        let call = AddStandardJobs::new(&k, &[a.clone(), a.clone(), a]).unwrap();
        let answers = call
            .decode(Reply::Array(vec![
                Reply::text("7"),
                Reply::Int(-5),
                Reply::Array(vec![Reply::text("err"), Reply::text("WRONGTYPE x")]),
            ]))
            .unwrap();
        assert_eq!(answers[0], AddAnswer::Script(Ok("7".into())));
        assert!(
            matches!(&answers[1], AddAnswer::Script(Err(e)) if e.code() == Some(ScriptErrorCode::ParentJobNotExist))
        );
        assert_eq!(answers[2], AddAnswer::Refused("WRONGTYPE x".into()));
        assert!(call.decode(Reply::Array(vec![Reply::Int(1)])).is_err());
    }
}
