//! Queue metrics: the per-minute counts of finished jobs that moveToFinished
//! records when a worker runs with `maxMetricsSize` (docs/flows.md §Metrics).

use super::decode::{self, Reply, ReplyError};
use super::script::{Arg, ScriptCall};
use crate::keys::Key;
use crate::keys::QueueKeys;
use crate::scripts::ScriptId;

/// Which series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricsKind {
    /// Completed jobs.
    Completed,
    /// Jobs failed for good.
    Failed,
}

impl MetricsKind {
    /// The key suffix (`completed`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsKind::Completed => "completed",
            MetricsKind::Failed => "failed",
        }
    }
}

/// A metrics series as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Metrics {
    /// Jobs counted since metrics were first recorded.
    pub count: u64,
    /// When the last data point was pushed (ms), `None` before the first finish.
    pub prev_ts: Option<u64>,
    /// `count` at that time.
    pub prev_count: u64,
    /// Jobs per minute for the requested range, in the stored order: each
    /// push LPUSHes the count since the previous point followed by a zero per
    /// further elapsed minute (so the head is the latest push's last value).
    pub data: Vec<u64>,
    /// Data points stored in all.
    pub total_points: u64,
}

/// getMetrics-2.
#[derive(Debug, Clone)]
pub struct GetMetrics<'a> {
    /// The queue.
    pub keys: &'a QueueKeys,
    /// Which series.
    pub kind: MetricsKind,
    /// First index (0 = newest minute).
    pub start: i64,
    /// Last index, inclusive (`-1` = oldest).
    pub end: i64,
}

impl ScriptCall for GetMetrics<'_> {
    type Output = Metrics;

    fn script(&self) -> ScriptId {
        ScriptId::GetMetrics
    }

    fn keys(&self) -> Vec<Key> {
        let hash = self.keys.metrics(self.kind.as_str());
        let data = format!("{hash}:data");
        keys![hash, data]
    }

    fn args(&self) -> Vec<Arg> {
        vec![Arg::int(self.start), Arg::int(self.end)]
    }

    fn decode(&self, reply: Reply) -> Result<Metrics, ReplyError> {
        let s = self.script();
        let mut parts = decode::array(s, reply)?.into_iter();
        let (Some(meta), Some(data), Some(len)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ReplyError::shape(s, "expected [meta, data, length]"));
        };
        let meta = decode::array(s, meta)?;
        let num = |r: Option<&Reply>| r.and_then(Reply::as_i64).map(|n| n.max(0) as u64);
        let data = decode::array(s, data)?
            .iter()
            .map(|r| {
                r.as_i64()
                    .map(|n| n.max(0) as u64)
                    .ok_or_else(|| ReplyError::shape(s, format!("data point {r:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Metrics {
            count: num(meta.first()).unwrap_or(0),
            prev_ts: num(meta.get(1)),
            prev_count: num(meta.get(2)).unwrap_or(0),
            data,
            total_points: len.as_i64().unwrap_or(0).max(0) as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::script::argv_text;

    #[test]
    fn keys_args_and_reply() {
        let k = QueueKeys::new("emq", "q").unwrap();
        let c = GetMetrics {
            keys: &k,
            kind: MetricsKind::Failed,
            start: 0,
            end: -1,
        };
        assert_eq!(argv_text(&c), ["0", "-1"]);
        assert_eq!(
            c.keys(),
            ["emq:q:metrics:failed", "emq:q:metrics:failed:data"]
        );
        let r = Reply::Array(vec![
            Reply::Array(vec![
                Reply::text("7"),
                Reply::text("120000"),
                Reply::text("5"),
            ]),
            Reply::Array(vec![Reply::text("2"), Reply::text("0")]),
            Reply::Int(2),
        ]);
        let m = c.decode(r).unwrap();
        assert_eq!(m.count, 7);
        assert_eq!(m.prev_ts, Some(120_000));
        assert_eq!(m.data, [2, 0]);
        let empty = Reply::Array(vec![
            Reply::Array(vec![Reply::Nil, Reply::Nil, Reply::Nil]),
            Reply::Array(vec![]),
            Reply::Int(0),
        ]);
        assert_eq!(c.decode(empty).unwrap(), Metrics::default());
    }
}
