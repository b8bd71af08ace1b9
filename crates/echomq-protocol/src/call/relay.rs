//! The relay scripts (`lua/relay*-1.lua`, BullMQ 6.7.0's `Relay`,
//! docs/protocol.md §Relay): one type per call.
//!
//! Every namespace script takes `{base}:nodes` as its only KEY and the base
//! as `ARGV[1]`; the registry scripts take the registry key. A relay script's
//! negative reply is a [`RelayCode`] — not a queue [`ScriptErrorCode`], whose
//! numbers mean other things — so the calls that can refuse answer
//! `Result<_, RelayCode>` inside their output.
//!
//! [`ScriptErrorCode`]: crate::reply::ScriptErrorCode

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::relay::{RelayCode, RelayKeys};
use crate::scripts::ScriptId;

/// A relay refusal, or a number that is no relay code.
fn refusal(script: ScriptId, n: i64) -> Result<RelayCode, ReplyError> {
    RelayCode::from_code(n)
        .ok_or_else(|| ReplyError::shape(script, format!("unknown relay code {n}")))
}

fn int(script: ScriptId, r: &Reply) -> Result<i64, ReplyError> {
    r.as_i64()
        .ok_or_else(|| ReplyError::shape(script, format!("expected an integer, got {r:?}")))
}

fn count(script: ScriptId, r: &Reply) -> Result<u64, ReplyError> {
    Ok(int(script, r)?.max(0) as u64)
}

/// A number in text that may be empty (`""`: absent).
fn opt_int(script: ScriptId, r: &Reply) -> Result<Option<i64>, ReplyError> {
    let t = decode::text(script, r)?;
    if t.is_empty() {
        return Ok(None);
    }
    decode::parse_int(&t)
        .map(Some)
        .ok_or_else(|| ReplyError::shape(script, format!("expected a number, got {t:?}")))
}

fn nodes_key(keys: &RelayKeys) -> Vec<Key> {
    keys![keys.nodes()]
}

/// Rows of an array reply, each an array of exactly `width` items.
fn rows(script: ScriptId, reply: Reply, width: usize) -> Result<Vec<Vec<Reply>>, ReplyError> {
    decode::array(script, reply)?
        .into_iter()
        .map(|row| {
            let items = decode::array(script, row)?;
            if items.len() == width {
                Ok(items)
            } else {
                Err(ReplyError::shape(
                    script,
                    format!("a row of {} items, not {width}", items.len()),
                ))
            }
        })
        .collect()
}

/// What a register answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// The node is registered, its lease starts now.
    Registered,
    /// An earlier node of this id still has subscriptions being pruned
    /// (at most 100 a call): call again.
    StillPruning,
}

/// relayRegisterNode-1: register a node (or refresh a live one).
#[derive(Debug, Clone, Copy)]
pub struct RelayRegisterNode<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
    /// Lease, ms.
    pub lease_ms: u64,
    /// Node info, JSON text (stored as is; dashboards show it).
    pub info: &'a str,
    /// The caller's layout version ([`crate::relay::LAYOUT_VERSION`]).
    pub layout: &'a str,
    /// The node's inbox cap, entries.
    pub inbox_max: u64,
}

impl ScriptCall for RelayRegisterNode<'_> {
    type Output = Result<Registration, RelayCode>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayRegisterNode
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.node),
            Arg::int(self.lease_ms),
            Arg::str(self.info),
            Arg::str(self.layout),
            Arg::int(self.inbox_max),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        let s = self.script();
        Ok(match int(s, &reply)? {
            1 => Ok(Registration::Registered),
            0 => Ok(Registration::StillPruning),
            n => Err(refusal(s, n)?),
        })
    }
}

/// relayHeartbeat-1: renew a node's lease. `false`: the node is gone (lease
/// ran out): register again and restore the subscriptions.
#[derive(Debug, Clone, Copy)]
pub struct RelayHeartbeat<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
    /// Lease, ms.
    pub lease_ms: u64,
}

impl ScriptCall for RelayHeartbeat<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::RelayHeartbeat
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.node),
            Arg::int(self.lease_ms),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(int(self.script(), &reply)? == 1)
    }
}

/// relayUnregisterNode-1: a node leaving. `true` when it was registered.
#[derive(Debug, Clone, Copy)]
pub struct RelayUnregisterNode<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
}

impl ScriptCall for RelayUnregisterNode<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::RelayUnregisterNode
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.keys.base()), Arg::str(self.node)]
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(int(self.script(), &reply)? == 1)
    }
}

/// relaySweep-1: drop at most `limit` expired nodes; answers their ids.
#[derive(Debug, Clone, Copy)]
pub struct RelaySweep<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// Most nodes dropped by this call.
    pub limit: u64,
}

impl ScriptCall for RelaySweep<'_> {
    type Output = Vec<String>;

    fn script(&self) -> ScriptId {
        ScriptId::RelaySweep
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.keys.base()), Arg::int(self.limit)]
    }

    fn decode(&self, reply: Reply) -> Result<Vec<String>, ReplyError> {
        decode::strings(self.script(), reply)
    }
}

/// A retained message as a subscribe reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedMessage {
    /// Its message id.
    pub mid: String,
    /// Its publish timestamp, ms.
    pub ts: i64,
    /// Its data, as serialised by the publisher (JSON text).
    pub data: String,
}

/// What a subscribe did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribed {
    /// `false` when the endpoint was already subscribed to the pattern.
    pub added: bool,
    /// The topic's retained message (exact topics only).
    pub retained: Option<RetainedMessage>,
}

/// relaySubscribe-1: subscribe an endpoint of a node to a pattern.
#[derive(Debug, Clone, Copy)]
pub struct RelaySubscribe<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
    /// The endpoint id.
    pub endpoint: &'a str,
    /// The pattern.
    pub pattern: &'a str,
}

impl ScriptCall for RelaySubscribe<'_> {
    type Output = Result<Subscribed, RelayCode>;

    fn script(&self) -> ScriptId {
        ScriptId::RelaySubscribe
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.node),
            Arg::str(self.endpoint),
            Arg::str(self.pattern),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        let s = self.script();
        if let Some(n) = reply.as_i64() {
            return Ok(Err(refusal(s, n)?));
        }
        let parts = decode::array(s, reply)?;
        let [added, mid, ts, data]: [Reply; 4] = parts
            .try_into()
            .map_err(|p: Vec<Reply>| ReplyError::shape(s, format!("{} parts, not 4", p.len())))?;
        let mid = decode::text(s, &mid)?;
        let retained = if mid.is_empty() {
            None
        } else {
            Some(RetainedMessage {
                mid,
                ts: opt_int(s, &ts)?.unwrap_or(0),
                data: decode::text(s, &data)?,
            })
        };
        Ok(Ok(Subscribed {
            added: int(s, &added)? == 1,
            retained,
        }))
    }
}

/// relayRemoveEndpoint-1: every subscription of an endpoint; answers how many.
#[derive(Debug, Clone, Copy)]
pub struct RelayRemoveEndpoint<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
    /// The endpoint id.
    pub endpoint: &'a str,
}

impl ScriptCall for RelayRemoveEndpoint<'_> {
    type Output = u64;

    fn script(&self) -> ScriptId {
        ScriptId::RelayRemoveEndpoint
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.node),
            Arg::str(self.endpoint),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<u64, ReplyError> {
        count(self.script(), &reply)
    }
}

/// What a publish reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The message id (unique and increasing per namespace).
    pub mid: String,
    /// Live nodes that got an inbox entry.
    pub nodes: u64,
    /// Endpoints named in those entries.
    pub endpoints: u64,
}

/// relayPublish-1: publish on a topic, optionally retained.
#[derive(Debug, Clone, Copy)]
pub struct RelayPublish<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The topic.
    pub topic: &'a str,
    /// The data, serialised (JSON text).
    pub data: &'a str,
    /// Publish timestamp, ms.
    pub ts_ms: i64,
    /// Retention, ms (0: not retained).
    pub retain_ms: u64,
    /// Largest data accepted, bytes.
    pub max_bytes: u64,
    /// Inbox cap for nodes that recorded none.
    pub inbox_max: u64,
}

impl ScriptCall for RelayPublish<'_> {
    type Output = Result<Published, RelayCode>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayPublish
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.topic),
            Arg::text(self.data),
            Arg::int(self.ts_ms),
            Arg::int(self.retain_ms),
            Arg::int(self.max_bytes),
            Arg::int(self.inbox_max),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        let s = self.script();
        if let Some(n) = reply.as_i64() {
            return Ok(Err(refusal(s, n)?));
        }
        let parts = decode::array(s, reply)?;
        let [mid, nodes, endpoints]: [Reply; 3] = parts
            .try_into()
            .map_err(|p: Vec<Reply>| ReplyError::shape(s, format!("{} parts, not 3", p.len())))?;
        Ok(Ok(Published {
            mid: decode::text(s, &mid)?,
            nodes: count(s, &nodes)?,
            endpoints: count(s, &endpoints)?,
        }))
    }
}

/// relayDeleteRetained-1: `true` when the topic had a retained message.
#[derive(Debug, Clone, Copy)]
pub struct RelayDeleteRetained<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The topic.
    pub topic: &'a str,
}

impl ScriptCall for RelayDeleteRetained<'_> {
    type Output = Result<bool, RelayCode>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayDeleteRetained
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::str(self.keys.base()), Arg::str(self.topic)]
    }

    fn decode(&self, reply: Reply) -> Result<Self::Output, ReplyError> {
        let s = self.script();
        Ok(match int(s, &reply)? {
            n if n < 0 => Err(refusal(s, n)?),
            n => Ok(n == 1),
        })
    }
}

/// One entry of a node's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The stream id (the next cursor).
    pub id: String,
    /// `k`: `msg` for a message; other kinds (of later layouts) are skipped.
    pub kind: String,
    /// `t`: the topic.
    pub topic: String,
    /// `m`: the message id.
    pub mid: String,
    /// `ts`: publish timestamp, ms.
    pub ts: i64,
    /// `d`: the data as serialised.
    pub data: String,
    /// `e`: the node's endpoints the message is for.
    pub endpoints: Vec<String>,
}

/// relayReadInbox-1: the next batch after `cursor`, marked in flight. Empty
/// when nothing is there or the node's lease ran out.
#[derive(Debug, Clone, Copy)]
pub struct RelayReadInbox<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
    /// Id of the last entry consumed (`0-0`: none).
    pub cursor: &'a str,
    /// Most entries.
    pub count: u64,
}

impl ScriptCall for RelayReadInbox<'_> {
    type Output = Vec<InboxEntry>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayReadInbox
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.node),
            Arg::str(self.cursor),
            Arg::int(self.count),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<Vec<InboxEntry>, ReplyError> {
        let s = self.script();
        let mut out = Vec::new();
        // [[inbox key, [[id, [field, value, …]], …]]]
        for stream in decode::array(s, reply)? {
            let mut parts = decode::array(s, stream)?;
            let entries = match parts.pop() {
                Some(e) => decode::array(s, e)?,
                None => continue,
            };
            for entry in entries {
                let mut e = decode::array(s, entry)?;
                let fields = e.pop().map(|f| decode::pairs(s, f)).transpose()?;
                let id = e
                    .first()
                    .map(|r| decode::text(s, r))
                    .transpose()?
                    .ok_or_else(|| ReplyError::shape(s, "an entry without id"))?;
                let mut entry = InboxEntry {
                    id,
                    kind: String::new(),
                    topic: String::new(),
                    mid: String::new(),
                    ts: 0,
                    data: String::new(),
                    endpoints: Vec::new(),
                };
                for (k, v) in fields.unwrap_or_default() {
                    match k.as_str() {
                        "k" => entry.kind = v,
                        "t" => entry.topic = v,
                        "m" => entry.mid = v,
                        "ts" => entry.ts = decode::parse_int(&v).unwrap_or(0),
                        "d" => entry.data = v,
                        "e" => {
                            entry.endpoints = v
                                .split(',')
                                .filter(|e| !e.is_empty())
                                .map(str::to_owned)
                                .collect()
                        }
                        _ => {}
                    }
                }
                out.push(entry);
            }
        }
        Ok(out)
    }
}

/// relayAckInbox-1: record the reader's cursor.
#[derive(Debug, Clone, Copy)]
pub struct RelayAckInbox<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
    /// Id of the last entry consumed.
    pub cursor: &'a str,
}

impl ScriptCall for RelayAckInbox<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::RelayAckInbox
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.node),
            Arg::str(self.cursor),
        ]
    }

    fn decode(&self, _reply: Reply) -> Result<(), ReplyError> {
        Ok(())
    }
}

/// relayTrimInbox-1: delete consumed entries, cap the inbox; answers the
/// backlog (entries not read yet).
#[derive(Debug, Clone, Copy)]
pub struct RelayTrimInbox<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// The node id.
    pub node: &'a str,
    /// Id of the last entry consumed (`0-0`: none).
    pub cursor: &'a str,
    /// The inbox cap.
    pub max_len: u64,
}

impl ScriptCall for RelayTrimInbox<'_> {
    type Output = u64;

    fn script(&self) -> ScriptId {
        ScriptId::RelayTrimInbox
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.base()),
            Arg::str(self.node),
            Arg::str(self.cursor),
            Arg::int(self.max_len),
        ]
    }

    fn decode(&self, reply: Reply) -> Result<u64, ReplyError> {
        count(self.script(), &reply)
    }
}

/// The `window` ARGV (start, end) of the paged views.
fn window(start: u64, end: Option<u64>) -> [Arg; 2] {
    [
        Arg::int(start),
        end.map_or_else(|| Arg::from_static("-1"), Arg::int),
    ]
}

fn get_args(keys: &RelayKeys, view: &'static str, start: u64, end: Option<u64>) -> Vec<Arg> {
    let [s, e] = window(start, end);
    vec![
        Arg::str(keys.base()),
        Arg::from_static(view),
        s,
        e,
        Arg::empty(),
        Arg::empty(),
    ]
}

/// Totals of a namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayCounts {
    /// Nodes in the lease set (expired ones not swept yet included).
    pub nodes: u64,
    /// Subscriptions.
    pub subscriptions: u64,
    /// Distinct subscribed patterns.
    pub patterns: u64,
    /// Retained messages not expired.
    pub retained: u64,
}

/// relayGet-1 `counts`.
#[derive(Debug, Clone, Copy)]
pub struct RelayGetCounts<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
}

impl ScriptCall for RelayGetCounts<'_> {
    type Output = RelayCounts;

    fn script(&self) -> ScriptId {
        ScriptId::RelayGet
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        get_args(self.keys, "counts", 0, None)
    }

    fn decode(&self, reply: Reply) -> Result<RelayCounts, ReplyError> {
        let s = self.script();
        let parts = decode::array(s, reply)?;
        let [n, sub, p, r]: [Reply; 4] = parts
            .try_into()
            .map_err(|p: Vec<Reply>| ReplyError::shape(s, format!("{} counts, not 4", p.len())))?;
        Ok(RelayCounts {
            nodes: count(s, &n)?,
            subscriptions: count(s, &sub)?,
            patterns: count(s, &p)?,
            retained: count(s, &r)?,
        })
    }
}

/// relayGet-1 `used`: whether a node is alive or a message retained.
#[derive(Debug, Clone, Copy)]
pub struct RelayGetUsed<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
}

impl ScriptCall for RelayGetUsed<'_> {
    type Output = bool;

    fn script(&self) -> ScriptId {
        ScriptId::RelayGet
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        get_args(self.keys, "used", 0, None)
    }

    fn decode(&self, reply: Reply) -> Result<bool, ReplyError> {
        Ok(int(self.script(), &reply)? == 1)
    }
}

/// One node as the dashboard sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayNodeRow {
    /// The node id.
    pub id: String,
    /// Registration time, ms.
    pub registered_at: i64,
    /// End of its lease, ms (`None`: already out of the lease set).
    pub lease_until: Option<i64>,
    /// Its info (`{}` for a node expired but not swept yet; the raw text as
    /// a JSON string when it is not JSON).
    pub info: serde_json::Value,
    /// Last heartbeat, ms.
    pub last_heartbeat: Option<i64>,
    /// Unread inbox entries at its last trim.
    pub backlog: u64,
    /// Inbox entries dropped unread.
    pub dropped: u64,
    /// Its subscriptions.
    pub subscriptions: u64,
}

/// relayGet-1 `nodes`, by registration; `end` inclusive, `None` to the end.
#[derive(Debug, Clone, Copy)]
pub struct RelayGetNodes<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// First position.
    pub start: u64,
    /// Last position, inclusive (`None`: to the end).
    pub end: Option<u64>,
}

impl ScriptCall for RelayGetNodes<'_> {
    type Output = Vec<RelayNodeRow>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayGet
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        get_args(self.keys, "nodes", self.start, self.end)
    }

    fn decode(&self, reply: Reply) -> Result<Vec<RelayNodeRow>, ReplyError> {
        let s = self.script();
        rows(s, reply, 8)?
            .into_iter()
            .map(|r| {
                let info = decode::text(s, &r[3])?;
                let info = if info.is_empty() {
                    serde_json::Value::Object(Default::default())
                } else {
                    serde_json::from_str(&info).unwrap_or(serde_json::Value::String(info))
                };
                Ok(RelayNodeRow {
                    id: decode::text(s, &r[0])?,
                    registered_at: opt_int(s, &r[1])?.unwrap_or(0),
                    lease_until: opt_int(s, &r[2])?,
                    info,
                    last_heartbeat: opt_int(s, &r[4])?,
                    backlog: opt_int(s, &r[5])?.unwrap_or(0).max(0) as u64,
                    dropped: opt_int(s, &r[6])?.unwrap_or(0).max(0) as u64,
                    subscriptions: count(s, &r[7])?,
                })
            })
            .collect()
    }
}

/// Which subscriptions a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionFilter<'a> {
    /// All, by node, endpoint, pattern.
    All,
    /// One node's, by endpoint, pattern.
    Node(&'a str),
    /// One pattern's, by node, endpoint.
    Pattern(&'a str),
}

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelaySubscriptionRow {
    /// The node.
    pub node: String,
    /// The endpoint.
    pub endpoint: String,
    /// The pattern.
    pub pattern: String,
}

/// relayGet-1 `subscriptions`.
#[derive(Debug, Clone, Copy)]
pub struct RelayGetSubscriptions<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// Which ones.
    pub filter: SubscriptionFilter<'a>,
    /// First position.
    pub start: u64,
    /// Last position, inclusive (`None`: to the end).
    pub end: Option<u64>,
}

impl ScriptCall for RelayGetSubscriptions<'_> {
    type Output = Vec<RelaySubscriptionRow>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayGet
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        let mut args = get_args(self.keys, "subscriptions", self.start, self.end);
        let (kind, value) = match self.filter {
            SubscriptionFilter::All => (Arg::empty(), Arg::empty()),
            SubscriptionFilter::Node(n) => (Arg::from_static("node"), Arg::str(n)),
            SubscriptionFilter::Pattern(p) => (Arg::from_static("pattern"), Arg::str(p)),
        };
        args[4] = kind;
        args[5] = value;
        args
    }

    fn decode(&self, reply: Reply) -> Result<Vec<RelaySubscriptionRow>, ReplyError> {
        let s = self.script();
        rows(s, reply, 3)?
            .into_iter()
            .map(|r| {
                Ok(RelaySubscriptionRow {
                    node: decode::text(s, &r[0])?,
                    endpoint: decode::text(s, &r[1])?,
                    pattern: decode::text(s, &r[2])?,
                })
            })
            .collect()
    }
}

/// A subscribed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayPatternRow {
    /// The pattern.
    pub pattern: String,
    /// Its subscriptions.
    pub subscriptions: u64,
}

/// relayGet-1 `patterns`, by pattern.
#[derive(Debug, Clone, Copy)]
pub struct RelayGetPatterns<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// First position.
    pub start: u64,
    /// Last position, inclusive (`None`: to the end).
    pub end: Option<u64>,
}

impl ScriptCall for RelayGetPatterns<'_> {
    type Output = Vec<RelayPatternRow>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayGet
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        get_args(self.keys, "patterns", self.start, self.end)
    }

    fn decode(&self, reply: Reply) -> Result<Vec<RelayPatternRow>, ReplyError> {
        let s = self.script();
        rows(s, reply, 2)?
            .into_iter()
            .map(|r| {
                Ok(RelayPatternRow {
                    pattern: decode::text(s, &r[0])?,
                    subscriptions: count(s, &r[1])?,
                })
            })
            .collect()
    }
}

/// A retained message as the dashboard sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayRetainedRow {
    /// The topic.
    pub topic: String,
    /// When it expires, ms.
    pub expires_at: i64,
    /// Its message id.
    pub mid: String,
    /// Its publish timestamp, ms.
    pub ts: i64,
    /// Its data as serialised.
    pub data: String,
}

/// relayGet-1 `retained`, by expiry.
#[derive(Debug, Clone, Copy)]
pub struct RelayGetRetained<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// First position.
    pub start: u64,
    /// Last position, inclusive (`None`: to the end).
    pub end: Option<u64>,
}

impl ScriptCall for RelayGetRetained<'_> {
    type Output = Vec<RelayRetainedRow>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayGet
    }

    fn keys(&self) -> Vec<Key> {
        nodes_key(self.keys)
    }

    fn args(&self) -> Vec<Arg> {
        get_args(self.keys, "retained", self.start, self.end)
    }

    fn decode(&self, reply: Reply) -> Result<Vec<RelayRetainedRow>, ReplyError> {
        let s = self.script();
        rows(s, reply, 5)?
            .into_iter()
            .map(|r| {
                Ok(RelayRetainedRow {
                    topic: decode::text(s, &r[0])?,
                    expires_at: opt_int(s, &r[1])?.unwrap_or(0),
                    mid: decode::text(s, &r[2])?,
                    ts: opt_int(s, &r[3])?.unwrap_or(0),
                    data: decode::text(s, &r[4])?,
                })
            })
            .collect()
    }
}

/// relayGetNamespaces-1: namespaces of a prefix that may be in use (check
/// each with [`RelayGetUsed`]).
#[derive(Debug, Clone, Copy)]
pub struct RelayGetNamespaces<'a> {
    /// `<prefix>::relay:namespaces` ([`crate::relay::registry_key`]).
    pub registry: &'a str,
}

impl ScriptCall for RelayGetNamespaces<'_> {
    type Output = Vec<String>;

    fn script(&self) -> ScriptId {
        ScriptId::RelayGetNamespaces
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.registry]
    }

    fn args(&self) -> Vec<Arg> {
        Vec::new()
    }

    fn decode(&self, reply: Reply) -> Result<Vec<String>, ReplyError> {
        decode::strings(self.script(), reply)
    }
}

/// relayTouchNamespace-1: note a namespace in use for `for_ms` from now.
#[derive(Debug, Clone, Copy)]
pub struct RelayTouchNamespace<'a> {
    /// The namespace.
    pub keys: &'a RelayKeys,
    /// In use for, ms.
    pub for_ms: u64,
}

impl ScriptCall for RelayTouchNamespace<'_> {
    type Output = ();

    fn script(&self) -> ScriptId {
        ScriptId::RelayTouchNamespace
    }

    fn keys(&self) -> Vec<Key> {
        keys![self.keys.registry()]
    }

    fn args(&self) -> Vec<Arg> {
        vec![
            Arg::str(self.keys.namespace()),
            Arg::int(self.for_ms.max(1)),
        ]
    }

    fn decode(&self, _reply: Reply) -> Result<(), ReplyError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    fn keys() -> RelayKeys {
        RelayKeys::new("emq", "default").unwrap()
    }

    #[test]
    fn argv_follow_the_scripts_headers() {
        let k = keys();
        let base = "emq::relay:{default}";
        assert_eq!(
            argv_text(&RelayRegisterNode {
                keys: &k,
                node: "n1",
                lease_ms: 30_000,
                info: "{}",
                layout: "1",
                inbox_max: 10_000,
            }),
            [base, "n1", "30000", "{}", "1", "10000"]
        );
        assert_eq!(
            argv_text(&RelayPublish {
                keys: &k,
                topic: "a.b",
                data: "1",
                ts_ms: 7,
                retain_ms: 0,
                max_bytes: 524_288,
                inbox_max: 10_000,
            }),
            [base, "a.b", "1", "7", "0", "524288", "10000"]
        );
        assert_eq!(
            argv_text(&RelayGetSubscriptions {
                keys: &k,
                filter: SubscriptionFilter::Node("n1"),
                start: 0,
                end: None,
            }),
            [base, "subscriptions", "0", "-1", "node", "n1"]
        );
        assert_eq!(
            argv_text(&RelayTouchNamespace {
                keys: &k,
                for_ms: 0
            }),
            ["default", "1"]
        );
        assert_eq!(
            RelayGetNamespaces {
                registry: &k.registry()
            }
            .keys()[0]
                .as_str(),
            "emq::relay:namespaces"
        );
    }

    #[test]
    fn replies_decode() {
        let k = keys();
        let sub = RelaySubscribe {
            keys: &k,
            node: "n",
            endpoint: "e",
            pattern: "a.b",
        };
        assert_eq!(
            sub.decode(Reply::Int(-3)).unwrap(),
            Err(RelayCode::NodeNotRegistered)
        );
        let got = sub
            .decode(Reply::Array(vec![
                Reply::Int(1),
                Reply::text("17"),
                Reply::text("5"),
                Reply::text("{\"x\":1}"),
            ]))
            .unwrap()
            .unwrap();
        assert!(got.added);
        assert_eq!(got.retained.unwrap().mid, "17");
        let none = sub
            .decode(Reply::Array(vec![
                Reply::Int(0),
                Reply::text(""),
                Reply::text(""),
                Reply::text(""),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(none.retained, None);
        let read = RelayReadInbox {
            keys: &k,
            node: "n",
            cursor: "0-0",
            count: 10,
        };
        let entries = read
            .decode(Reply::Array(vec![Reply::Array(vec![
                Reply::text("inbox"),
                Reply::Array(vec![Reply::Array(vec![
                    Reply::text("1-0"),
                    Reply::Array(
                        [
                            "k", "msg", "t", "a.b", "m", "9", "ts", "3", "d", "true", "e", "x,y",
                        ]
                        .iter()
                        .map(|s| Reply::text(s))
                        .collect(),
                    ),
                ])]),
            ])]))
            .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].endpoints, ["x", "y"]);
        assert_eq!(entries[0].ts, 3);
        assert_eq!(read.decode(Reply::Nil).unwrap(), Vec::new());
        let del = RelayDeleteRetained {
            keys: &k,
            topic: "a",
        };
        assert_eq!(
            del.decode(Reply::Int(-1)).unwrap(),
            Err(RelayCode::InvalidTopic)
        );
        assert_eq!(del.decode(Reply::Int(0)).unwrap(), Ok(false));
        assert!(del.decode(Reply::Int(-9)).is_err());
    }
}
