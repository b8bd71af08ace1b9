//! Fetch in batches (EchoMQ extension, issue 42): moveJobsToActive-11 takes
//! several jobs in one call for a worker with several free slots. Each take
//! runs moveToActive's own Lua body with its own token, so the queue ends as
//! after the same [`MoveToActive`] calls in order, up to the first that took
//! no job; the calls after that one are not made.

use super::decode::{self, Reply, ReplyError};
use super::lifecycle::{EpochMs, MoveToActive, NextJob};
use super::script::{Arg, ScriptCall};
use crate::keys::{Key, QueueKeys};
use crate::packing::{pack_strings, FetchOpts};
use crate::scripts::ScriptId;

/// The most takes one call makes: bounded work per Redis call.
pub const MAX_TAKES: usize = 32;

/// Why a batch of takes cannot be one call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchBatchError {
    /// No token, or more than [`MAX_TAKES`].
    #[error("a batched fetch takes 1 to {MAX_TAKES} tokens, not {0}")]
    Count(usize),
}

/// moveJobsToActive-11: up to one job per token, each locked with its own.
/// Its output has one [`NextJob`] per take made: every one but the last is a
/// [`NextJob::Job`]; the last is what the first take without a job answered,
/// or a job when every token took one.
#[derive(Debug, Clone)]
pub struct MoveJobsToActive<'a> {
    keys: &'a QueueKeys,
    now: EpochMs,
    shared: Vec<u8>,
    tokens: Vec<u8>,
    count: usize,
}

impl<'a> MoveJobsToActive<'a> {
    /// Takes for `tokens` in order, with `fetch`'s lock duration, limiter and
    /// name (its own token is not sent).
    pub fn new<S: AsRef<str>>(
        keys: &'a QueueKeys,
        now: EpochMs,
        fetch: &FetchOpts<'_>,
        tokens: &[S],
    ) -> Result<Self, FetchBatchError> {
        if tokens.is_empty() || tokens.len() > MAX_TAKES {
            return Err(FetchBatchError::Count(tokens.len()));
        }
        Ok(MoveJobsToActive {
            keys,
            now,
            shared: fetch.pack_without_token(),
            tokens: pack_strings(tokens),
            count: tokens.len(),
        })
    }

    /// The number of takes asked for.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Never true: a batch asks for at least one take.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl ScriptCall for MoveJobsToActive<'_> {
    type Output = Vec<NextJob>;

    fn script(&self) -> ScriptId {
        ScriptId::MoveJobsToActive
    }

    fn keys(&self) -> Vec<Key> {
        MoveToActive::key_list(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::key(&self.keys.fixed().base),
            Arg::int(self.now.0),
            Arg::packed(self.shared.clone()),
            Arg::packed(self.tokens.clone()),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Vec<NextJob>, ReplyError> {
        let items = decode::array(self.script(), reply)?;
        if items.is_empty() || items.len() > self.count {
            return Err(ReplyError::shape(
                self.script(),
                format!("{} replies for {} takes", items.len(), self.count),
            ));
        }
        let last = items.len() - 1;
        let takes = items
            .into_iter()
            .map(|item| NextJob::decode(self.script(), item))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(i) = takes[..last]
            .iter()
            .position(|t| !matches!(t, NextJob::Job { .. }))
        {
            return Err(ReplyError::shape(
                self.script(),
                format!("take {} took no job but is not the last", i + 1),
            ));
        }
        Ok(takes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::Limiter;

    fn fetch() -> FetchOpts<'static> {
        FetchOpts {
            token: "ignored",
            lock_duration: 30_000,
            limiter: Some(Limiter {
                max: 2,
                duration: 1000,
            }),
            name: Some("w"),
        }
    }

    #[test]
    fn the_options_go_once_without_a_token_and_the_tokens_in_order() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call = MoveJobsToActive::new(&k, EpochMs(5), &fetch(), &["a", "b"]).unwrap();
        assert_eq!(call.keys().len(), ScriptId::MoveJobsToActive.num_keys());
        assert_eq!(
            call.keys(),
            MoveToActive::key_list(&k),
            "moveToActive's KEYS"
        );
        let argv = call.args();
        assert_eq!(argv[0].as_bytes(), b"emq:q:");
        assert_eq!(argv[1].as_bytes(), b"5");
        let shared: serde_json::Value = rmp_serde::from_slice(argv[2].as_bytes()).unwrap();
        let mut single: serde_json::Value = rmp_serde::from_slice(&fetch().pack()).unwrap();
        single.as_object_mut().unwrap().remove("token");
        assert_eq!(shared, single);
        let tokens: Vec<String> = rmp_serde::from_slice(argv[3].as_bytes()).unwrap();
        assert_eq!(tokens, ["a", "b"]);
    }

    #[test]
    fn bounds_are_typed_errors() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let none: [&str; 0] = [];
        assert_eq!(
            MoveJobsToActive::new(&k, EpochMs(5), &fetch(), &none).unwrap_err(),
            FetchBatchError::Count(0)
        );
        let many = vec!["t"; 33];
        assert_eq!(
            MoveJobsToActive::new(&k, EpochMs(5), &fetch(), &many).unwrap_err(),
            FetchBatchError::Count(33)
        );
        assert!(MoveJobsToActive::new(&k, EpochMs(5), &fetch(), &many[..32]).is_ok());
    }

    #[test]
    fn only_the_last_take_may_be_without_a_job() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let call = MoveJobsToActive::new(&k, EpochMs(5), &fetch(), &["a", "b"]).unwrap();
        let nothing = || {
            Reply::Array(vec![
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(0),
            ])
        };
        let job = || {
            Reply::Array(vec![
                Reply::Array(vec![Reply::Bulk("name".into()), Reply::Bulk("n".into())]),
                Reply::Bulk("7".into()),
                Reply::Int(0),
                Reply::Int(0),
            ])
        };
        assert_eq!(
            call.decode(Reply::Array(vec![nothing()])).unwrap(),
            vec![NextJob::Nothing]
        );
        let two = call.decode(Reply::Array(vec![job(), nothing()])).unwrap();
        assert!(matches!(&two[0], NextJob::Job { id, .. } if id == "7"));
        assert!(call.decode(Reply::Array(vec![nothing(), job()])).is_err());
        assert!(call.decode(Reply::Array(vec![])).is_err());
        assert!(call
            .decode(Reply::Array(vec![job(), job(), job()]))
            .is_err());
    }
}
