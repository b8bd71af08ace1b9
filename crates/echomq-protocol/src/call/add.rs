//! Adding one job: addStandardJob-9, addDelayedJob-6 and addPrioritizedJob-9.
//!
//! The three scripts take the same ARGV (AddArgs, data, options) and differ in
//! their KEYS, so one call type covers them and picks the script from the
//! job's delay and priority, as the producer must (docs/protocol.md).

use serde_json::{Map, Value};

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::packing::{pack_map, AddArgs};
use crate::scripts::ScriptId;

/// Which add script a job needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddKind {
    /// Ready now, priority 0 (addStandardJob).
    Standard,
    /// Due later (addDelayedJob); a priority, if any, applies on promotion.
    Delayed,
    /// Ready now with a priority (addPrioritizedJob).
    Prioritized,
}

impl AddKind {
    /// The script a job with this delay (ms) and priority goes through: a
    /// positive delay wins over a priority.
    pub fn for_job(delay_ms: i64, priority: i64) -> AddKind {
        if delay_ms > 0 {
            AddKind::Delayed
        } else if priority > 0 {
            AddKind::Prioritized
        } else {
            AddKind::Standard
        }
    }

    fn script(self) -> ScriptId {
        match self {
            AddKind::Standard => ScriptId::AddStandardJob,
            AddKind::Delayed => ScriptId::AddDelayedJob,
            AddKind::Prioritized => ScriptId::AddPrioritizedJob,
        }
    }
}

/// Adds one job; answers its id (the existing id for a duplicate custom id,
/// the owner's id when deduplicated).
#[derive(Debug, Clone)]
pub struct AddJob<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Which script.
    pub kind: AddKind,
    /// Name, id, timestamp and parent of the job.
    pub args: AddArgs<'a>,
    /// The payload as JSON text.
    pub data: &'a str,
    /// The options in their stored (Node) spelling.
    pub opts: &'a Map<String, Value>,
}

impl ScriptCall for AddJob<'_> {
    type Output = String;

    fn script(&self) -> ScriptId {
        self.kind.script()
    }

    fn keys(&self) -> Vec<Key> {
        let k = self.keys;
        match self.kind {
            AddKind::Standard => keys![
                &k.fixed().wait,
                &k.fixed().paused,
                &k.fixed().meta,
                &k.fixed().id,
                &k.fixed().completed,
                &k.fixed().delayed,
                &k.fixed().active,
                &k.fixed().events,
                &k.fixed().marker,
            ],
            AddKind::Delayed => keys![
                &k.fixed().marker,
                &k.fixed().meta,
                &k.fixed().id,
                &k.fixed().delayed,
                &k.fixed().completed,
                &k.fixed().events,
            ],
            AddKind::Prioritized => keys![
                &k.fixed().marker,
                &k.fixed().meta,
                &k.fixed().id,
                &k.fixed().prioritized,
                &k.fixed().delayed,
                &k.fixed().completed,
                &k.fixed().active,
                &k.fixed().events,
                &k.fixed().pc,
            ],
        }
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::packed(self.args.pack()),
            Arg::str(self.data),
            Arg::packed(pack_map(self.opts)),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<String, ReplyError> {
        // A generated id can come back as a Lua number; only negatives are codes.
        if let Reply::Int(n) = reply {
            return decode::code(self.script(), n).map(|n| n.to_string());
        }
        decode::text(self.script(), &reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;
    use crate::reply::ScriptErrorCode;

    fn call<'a>(k: &'a QueueKeys, kind: AddKind, opts: &'a Map<String, Value>) -> AddJob<'a> {
        AddJob {
            keys: k,
            kind,
            args: AddArgs {
                prefix_key: k.prefix_key(),
                name: "n",
                timestamp: 5,
                ..Default::default()
            },
            data: r#"{"b":1,"a":2}"#,
            opts,
        }
    }

    #[test]
    fn kind_follows_delay_then_priority() {
        assert_eq!(AddKind::for_job(0, 0), AddKind::Standard);
        assert_eq!(AddKind::for_job(0, 3), AddKind::Prioritized);
        assert_eq!(AddKind::for_job(10, 3), AddKind::Delayed);
    }

    #[test]
    fn keys_and_args_per_script() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let opts = Map::new();
        for kind in [AddKind::Standard, AddKind::Delayed, AddKind::Prioritized] {
            let c = call(&k, kind, &opts);
            let argv = argv_text(&c);
            assert_eq!(argv.len(), 3);
            assert_eq!(argv[1], r#"{"b":1,"a":2}"#, "data is sent as is");
            assert_eq!(
                c.args()[0].as_bytes()[0],
                0x94,
                "AddArgs without trailing nils"
            );
            assert_eq!(c.args()[2].as_bytes(), [0x80], "empty options map");
        }
        assert_eq!(call(&k, AddKind::Standard, &opts).keys()[0], "emq:q:wait");
        assert_eq!(call(&k, AddKind::Delayed, &opts).keys()[3], "emq:q:delayed");
        assert_eq!(call(&k, AddKind::Prioritized, &opts).keys()[8], "emq:q:pc");
    }

    #[test]
    fn decodes_ids_and_codes() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let opts = Map::new();
        let c = call(&k, AddKind::Standard, &opts);
        assert_eq!(c.decode(Reply::text("abc")).unwrap(), "abc");
        assert_eq!(c.decode(Reply::Int(12)).unwrap(), "12");
        assert_eq!(
            c.decode(Reply::Int(-5)).unwrap_err().code(),
            Some(ScriptErrorCode::ParentJobNotExist)
        );
        assert!(c.decode(Reply::Array(vec![])).is_err());
    }
}
