//! The msgpack arguments scripts take (docs/protocol.md).
//!
//! Rules that matter on the wire: numbers are msgpack numbers, never strings;
//! "absent" is msgpack nil or an omitted map key, never `""`.

use serde::Serialize;
use serde_json::{Map, Value};

fn pack<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // Most packed arguments (FinishOpts, FetchOpts, AddArgs) fit in 128
    // bytes: one allocation instead of a growth by doubling from 8.
    let mut buf = Vec::with_capacity(128);
    // Serialising plain structs, strings, numbers and JSON values to a Vec
    // cannot fail: there is no I/O and no non-string map key.
    rmp_serde::encode::write_named(&mut buf, value).expect("msgpack encoding of plain data");
    buf
}

/// The AddArgs array of the add scripts: up to 9 elements.
#[derive(Debug, Clone, Default)]
pub struct AddArgs<'a> {
    /// `{P}` of the queue.
    pub prefix_key: &'a str,
    /// The custom id, or `""` for a generated one.
    pub custom_id: &'a str,
    /// Job name.
    pub name: &'a str,
    /// Creation time, ms.
    pub timestamp: u64,
    /// Full key of the parent (flows).
    pub parent_key: Option<&'a str>,
    /// `<parentKey>:dependencies`.
    pub parent_dependencies_key: Option<&'a str>,
    /// Parent descriptor `{id, queueKey, …}`.
    pub parent: Option<&'a Value>,
    /// Scheduler id of a scheduler iteration.
    pub repeat_job_key: Option<&'a str>,
    /// `{P}de:<dedupId>`.
    pub deduplication_key: Option<&'a str>,
    /// Inside a flow insert: a child that already existed does not release
    /// its parent; releaseParentIfNoPendingDependencies does, after the
    /// whole flow (sent as `1`, absent otherwise).
    pub defer_parent_release: bool,
}

/// One AddArgs element.
#[derive(Serialize)]
#[serde(untagged)]
enum AddArg<'a> {
    Text(&'a str),
    Number(u64),
    Json(&'a Value),
    Nil(Option<()>),
}

impl<'a> AddArgs<'a> {
    /// Packs the array; positions never shift, absent entries are nil, and
    /// nils at the end are left out (the scripts read a missing element as
    /// nil): Redis's msgpack decoder makes a table slot for every element,
    /// nil or not, and a plain add has five trailing nils.
    pub fn pack(&self) -> Vec<u8> {
        let text = |s: Option<&'a str>| s.map_or(AddArg::Nil(None), AddArg::Text);
        let items = [
            AddArg::Text(self.prefix_key),
            AddArg::Text(self.custom_id),
            AddArg::Text(self.name),
            AddArg::Number(self.timestamp),
            text(self.parent_key),
            text(self.parent_dependencies_key),
            self.parent.map_or(AddArg::Nil(None), AddArg::Json),
            text(self.repeat_job_key),
            text(self.deduplication_key),
            if self.defer_parent_release {
                AddArg::Number(1)
            } else {
                AddArg::Nil(None)
            },
        ];
        let len = items
            .iter()
            .rposition(|a| !matches!(a, AddArg::Nil(_)))
            .map_or(0, |last| last + 1);
        pack(&items[..len])
    }
}

/// Packs a JSON object as a msgpack map (job options, keepJobs, scheduler options).
pub fn pack_map(map: &Map<String, Value>) -> Vec<u8> {
    pack(map)
}

/// A worker's rate limiter `{max, duration}`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Limiter {
    /// Jobs per window.
    pub max: u64,
    /// Window length, ms.
    pub duration: u64,
}

/// FetchOpts of moveToActive and fetch-next.
#[derive(Debug, Clone, Serialize)]
pub struct FetchOpts<'a> {
    /// Lock token for the taken job (`"0"` = do not lock; EchoMQ never sends it).
    pub token: &'a str,
    /// Lock TTL, ms.
    #[serde(rename = "lockDuration")]
    pub lock_duration: u64,
    /// Worker rate limiter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limiter: Option<Limiter>,
    /// Worker name, stored as `pb` on the taken job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
}

impl FetchOpts<'_> {
    /// Packs the map.
    pub fn pack(&self) -> Vec<u8> {
        pack(self)
    }

    /// Packs the map without `token`: what the takes of one batched fetch
    /// share (moveJobsToActive-11 sets each take's token).
    pub fn pack_without_token(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Shared<'a> {
            #[serde(rename = "lockDuration")]
            lock_duration: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            limiter: Option<Limiter>,
            #[serde(skip_serializing_if = "Option::is_none")]
            name: Option<&'a str>,
        }
        pack(&Shared {
            lock_duration: self.lock_duration,
            limiter: self.limiter,
            name: self.name,
        })
    }
}

/// `maxMetricsSize`: a number, or `""` when metrics are off (never nil).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum MetricsSize {
    /// Data points to keep.
    Points(u64),
    /// Metrics disabled; serialises as `""`.
    #[serde(serialize_with = "empty_string")]
    Off,
}

fn empty_string<S: serde::Serializer>(s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str("")
}

/// FinishOpts of moveToFinished.
///
/// Fields at their defaults are left out of the map (moveToFinished reads a
/// missing `keepJobs` as "keep everything", a missing `attempts` as 0 and a
/// missing `maxMetricsSize` as "metrics off"): every entry costs Redis a
/// string and a table slot per finished job.
#[derive(Debug, Clone, Serialize)]
pub struct FinishOpts<'a> {
    /// Lock token of the finishing worker.
    pub token: &'a str,
    /// Worker name (for `pb` of a fetched next job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    /// Retention of the target set; `None` (or `{count: -1}`) keeps every job
    /// and is left out.
    #[serde(rename = "keepJobs", skip_serializing_if = "keeps_every_job")]
    pub keep_jobs: Option<Map<String, Value>>,
    /// Worker rate limiter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limiter: Option<Limiter>,
    /// Lock TTL of a fetched next job, ms.
    #[serde(rename = "lockDuration")]
    pub lock_duration: u64,
    /// The job's `opts.attempts`; left out when 0 (unset).
    #[serde(skip_serializing_if = "is_zero")]
    pub attempts: i64,
    /// Metrics size; left out when metrics are off.
    #[serde(rename = "maxMetricsSize", skip_serializing_if = "MetricsSize::is_off")]
    pub max_metrics_size: MetricsSize,
}

fn keeps_every_job(keep: &Option<Map<String, Value>>) -> bool {
    keeps_every_job_ref(&keep.as_ref())
}

fn keeps_every_job_ref(keep: &Option<&Map<String, Value>>) -> bool {
    keep.is_none_or(|keep| {
        keep.is_empty() || (keep.len() == 1 && keep.get("count") == Some(&Value::from(-1)))
    })
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl MetricsSize {
    fn is_off(&self) -> bool {
        matches!(self, MetricsSize::Off)
    }
}

impl FinishOpts<'_> {
    /// Packs the map.
    pub fn pack(&self) -> Vec<u8> {
        pack(self)
    }

    /// Packs the map without `token`: what the finishes of one worker share
    /// in a group commit (moveJobsToFinished-15 sets each entry's token).
    pub fn pack_without_token(&self) -> Vec<u8> {
        pack(&SharedFinishOpts {
            name: self.name,
            keep_jobs: self.keep_jobs.as_ref(),
            limiter: self.limiter,
            lock_duration: self.lock_duration,
            attempts: self.attempts,
            max_metrics_size: self.max_metrics_size,
        })
    }
}

/// [`FinishOpts`] but its token, with the same names and omissions.
#[derive(Serialize)]
struct SharedFinishOpts<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(rename = "keepJobs", skip_serializing_if = "keeps_every_job_ref")]
    keep_jobs: Option<&'a Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limiter: Option<Limiter>,
    #[serde(rename = "lockDuration")]
    lock_duration: u64,
    #[serde(skip_serializing_if = "is_zero")]
    attempts: i64,
    #[serde(rename = "maxMetricsSize", skip_serializing_if = "MetricsSize::is_off")]
    max_metrics_size: MetricsSize,
}

/// FieldsToUpdate: alternating names and values, or `None` when there is nothing
/// (the caller then sends `""`).
pub fn pack_fields<K: AsRef<str>, V: AsRef<str>>(fields: &[(K, V)]) -> Option<Vec<u8>> {
    if fields.is_empty() {
        return None;
    }
    let flat: Vec<&str> = fields
        .iter()
        .flat_map(|(k, v)| [k.as_ref(), v.as_ref()])
        .collect();
    Some(pack(&flat))
}

/// A msgpack array of strings (extendLocks tokens and ids).
pub fn pack_strings<S: AsRef<str>>(items: &[S]) -> Vec<u8> {
    let v: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    pack(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_args_keep_positions_and_leave_out_trailing_nils() {
        let bytes = AddArgs {
            prefix_key: "emq:q:",
            name: "n",
            timestamp: 5,
            ..Default::default()
        }
        .pack();
        let v: rmpv_like::Val = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(
            v.0,
            vec![
                serde_json::json!("emq:q:"),
                serde_json::json!(""),
                serde_json::json!("n"),
                serde_json::json!(5)
            ]
        );
        assert_eq!(bytes[0], 0x94); // fixarray of 4
        let bytes = AddArgs {
            prefix_key: "emq:q:",
            name: "n",
            timestamp: 5,
            deduplication_key: Some("emq:q:de:x"),
            ..Default::default()
        }
        .pack();
        let v: rmpv_like::Val = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(v.0.len(), 9);
        assert_eq!(bytes[0], 0x99); // fixarray of 9
        assert_eq!(
            v.0[4],
            Value::Null,
            "absent entries before the last are nil"
        );
        assert_eq!(v.0[8], serde_json::json!("emq:q:de:x"));
        let bytes = AddArgs {
            prefix_key: "emq:q:",
            name: "n",
            timestamp: 5,
            defer_parent_release: true,
            ..Default::default()
        }
        .pack();
        let v: rmpv_like::Val = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(v.0.len(), 10, "the flag is element [10]");
        assert_eq!(v.0[9], serde_json::json!(1));
    }

    #[test]
    fn finish_opts_leave_out_defaults() {
        let packed = |keep: Option<Value>, attempts: i64, metrics: MetricsSize| {
            let bytes = FinishOpts {
                token: "t",
                name: None,
                keep_jobs: keep.map(|k| k.as_object().cloned().unwrap()),
                limiter: None,
                lock_duration: 1,
                attempts,
                max_metrics_size: metrics,
            }
            .pack();
            rmp_serde::from_slice::<serde_json::Value>(&bytes).unwrap()
        };
        let v = packed(None, 0, MetricsSize::Off);
        assert_eq!(v, serde_json::json!({"token": "t", "lockDuration": 1}));
        let v = packed(
            Some(serde_json::json!({"count": -1})),
            3,
            MetricsSize::Points(10),
        );
        assert!(v.get("keepJobs").is_none(), "count -1 keeps every job");
        assert_eq!(v["attempts"], 3);
        assert_eq!(v["maxMetricsSize"], 10);
        let v = packed(Some(serde_json::json!({"count": 0})), 0, MetricsSize::Off);
        assert_eq!(v["keepJobs"]["count"], 0);
    }

    mod rmpv_like {
        #[derive(serde::Deserialize)]
        pub struct Val(pub Vec<serde_json::Value>);
    }
}
