//! A legacy repeatable job of BullMQ <= 4: its `{P}repeat` member
//! `name:id:endDate:tz:<pattern|every>`, the ids BullMQ 4 gave its iterations,
//! and the job scheduler it becomes. No I/O.

use std::collections::HashMap;

use echomq_protocol::call::scheduler::{field, json_u64, opt, RepeatOptions};
use md5::{Digest, Md5};
use serde_json::{Map, Value as Json};

/// How a legacy repeatable repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyRepeat {
    /// A cron pattern.
    Cron(String),
    /// Every so many ms.
    Every(u64),
}

/// A legacy `{P}repeat` member, parsed as BullMQ 4's `keyToData` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyKey {
    /// The member as stored.
    pub member: String,
    /// Name of the jobs it produces.
    pub name: String,
    /// The custom job id given to the first add (empty when none).
    pub job_id: String,
    /// End date, ms.
    pub end_date: Option<u64>,
    /// Time zone of the pattern.
    pub tz: Option<String>,
    /// Pattern or interval.
    pub repeat: LegacyRepeat,
}

impl LegacyKey {
    /// Parses a member; `None` when it is not of the legacy shape (a job
    /// scheduler id, or BullMQ 5's hashed repeat key).
    pub fn parse(member: &str) -> Option<LegacyKey> {
        let parts: Vec<&str> = member.splitn(5, ':').collect();
        if parts.len() < 5 {
            return None;
        }
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let end_date = match parts[2] {
            "" => None,
            s if digits(s) => Some(s.parse().ok()?),
            _ => return None,
        };
        let suffix = parts[4];
        let repeat = if digits(suffix) {
            LegacyRepeat::Every(suffix.parse().ok()?)
        } else if suffix.contains(' ') || suffix.starts_with('@') {
            LegacyRepeat::Cron(suffix.to_owned())
        } else {
            return None;
        };
        Some(LegacyKey {
            member: member.to_owned(),
            name: parts[0].to_owned(),
            job_id: parts[1].to_owned(),
            end_date,
            tz: Some(parts[3]).filter(|t| !t.is_empty()).map(str::to_owned),
            repeat,
        })
    }

    /// The scheduler id: the checksum BullMQ 4 put in every iteration id
    /// (`repeat:<checksum>:<millis>`), md5(name + jobId + md5(member)). Taking
    /// it keeps the pending iteration's id, so no job has to be re-created.
    pub fn scheduler_id(&self) -> String {
        let namespace = md5_hex(&self.member);
        md5_hex(&format!("{}{}{}", self.name, self.job_id, namespace))
    }

    /// `repeat:<scheduler id>:<millis>`.
    pub fn iteration_id(&self, millis: u64) -> String {
        format!("repeat:{}:{millis}", self.scheduler_id())
    }
}

fn md5_hex(s: &str) -> String {
    let digest = Md5::digest(s.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A date as BullMQ 4 stored it in `repeat` options: millis, or the JSON text
/// of a `Date` (ISO 8601).
fn date_ms(v: &Json) -> Option<u64> {
    json_u64(v).or_else(|| {
        let s = v.as_str()?;
        let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
        u64::try_from(t.timestamp_millis()).ok()
    })
}

/// What the conversion writes for one legacy entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Conversion {
    /// The definition hash, in the order `storeJobScheduler` writes it.
    pub definition: Vec<(String, String)>,
    /// The pending iteration's options, rewritten (JSON object).
    pub iteration_opts: Map<String, Json>,
    /// The template's options (for a successor the caller creates).
    pub template_opts: Map<String, Json>,
    /// The `repeat` options of the latest iteration.
    pub repeat: RepeatOptions,
}

/// Builds the scheduler of `key` whose latest iteration runs at `millis`,
/// from that iteration's job hash (empty when the job is gone: the template
/// is then empty too).
pub(crate) fn convert(key: &LegacyKey, millis: u64, job: &HashMap<String, String>) -> Conversion {
    let mut opts: Map<String, Json> = job
        .get("opts")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let mut stored_repeat = match opts.remove(opt::REPEAT) {
        Some(Json::Object(m)) => m,
        _ => Map::new(),
    };
    // The first add's custom id: in the member already, never an option of a
    // scheduler's iteration.
    stored_repeat.remove("jobId");
    stored_repeat.remove("cron");
    stored_repeat.remove(field::IMMEDIATELY);
    let start_date = stored_repeat.get(field::START_DATE).and_then(date_ms);
    let end_date = key
        .end_date
        .or_else(|| stored_repeat.get(field::END_DATE).and_then(date_ms));
    let limit = stored_repeat.get(field::LIMIT).and_then(json_u64);
    let count = stored_repeat
        .get(field::COUNT)
        .and_then(json_u64)
        .unwrap_or(1)
        .max(1);
    let tz = key.tz.clone().or_else(|| {
        stored_repeat
            .get(field::TZ)
            .and_then(Json::as_str)
            .map(str::to_owned)
    });
    let (pattern, every, offset) = match &key.repeat {
        LegacyRepeat::Cron(p) => (Some(p.clone()), None, None),
        // BullMQ 4 put every iteration on a multiple of the interval; the
        // phase keeps the scheduler's slots where they were.
        LegacyRepeat::Every(ms) => (None, Some(*ms), Some(millis % (*ms).max(1))),
    };
    let repeat = RepeatOptions {
        every,
        pattern: pattern.clone(),
        tz: tz.clone(),
        limit,
        offset: offset.filter(|o| *o != 0),
        start_date,
        end_date,
        count,
        extra: Map::new(),
    };

    let mut template = opts.clone();
    for k in [
        opt::JOB_ID,
        opt::DELAY,
        opt::TIMESTAMP,
        opt::PREV_MILLIS,
        opt::REPEAT_JOB_KEY,
    ] {
        template.remove(k);
    }
    if template.get(opt::ATTEMPTS).and_then(json_u64) == Some(0) {
        template.remove(opt::ATTEMPTS);
    }

    let mut definition: Vec<(String, String)> = vec![(field::NAME.into(), key.name.clone())];
    let mut put = |f: &str, v: Option<String>| {
        if let Some(v) = v {
            definition.push((f.to_owned(), v));
        }
    };
    put(field::TZ, tz);
    put(field::LIMIT, limit.map(|n| n.to_string()));
    put(field::PATTERN, pattern);
    put(field::START_DATE, start_date.map(|n| n.to_string()));
    put(field::END_DATE, end_date.map(|n| n.to_string()));
    put(field::EVERY, every.map(|n| n.to_string()));
    put(field::OFFSET, offset.map(|n| n.to_string()));
    if !template.is_empty() {
        put(
            field::OPTS,
            Some(Json::Object(template.clone()).to_string()),
        );
    }
    put(
        field::DATA,
        job.get("data").filter(|d| d.as_str() != "{}").cloned(),
    );
    put(field::ITERATION_COUNT, Some(count.to_string()));

    let mut iteration_opts = opts;
    iteration_opts.insert(opt::REPEAT.into(), Json::Object(repeat.to_map()));
    Conversion {
        definition,
        iteration_opts,
        template_opts: template,
        repeat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_as_bullmq_4_writes_them() {
        let k = LegacyKey::parse("nightly::1796417456075:Europe/London:*/5 * * * * *").unwrap();
        assert_eq!(k.name, "nightly");
        assert_eq!(k.job_id, "");
        assert_eq!(k.end_date, Some(1_796_417_456_075));
        assert_eq!(k.tz.as_deref(), Some("Europe/London"));
        assert_eq!(k.repeat, LegacyRepeat::Cron("*/5 * * * * *".into()));
        // The id BullMQ 4.18.3 gave this entry's iteration.
        assert_eq!(k.scheduler_id(), "ab4e129bc8e2116cf669e5fb236e24f0");
        let e = LegacyKey::parse("tick:myid:::3000").unwrap();
        assert_eq!(e.repeat, LegacyRepeat::Every(3000));
        assert_eq!(e.scheduler_id(), "7475bc6a4f0f1d1bb8ecc4453f3e719b");
        assert!(LegacyKey::parse("my-scheduler").is_none());
        assert!(LegacyKey::parse("a:b:c:d").is_none());
        assert!(LegacyKey::parse("a:b:notanumber:UTC:0 * * * *").is_none());
    }

    #[test]
    fn conversion_keeps_the_definition_and_the_template() {
        let k = LegacyKey::parse("nightly::1796417456075:Europe/London:*/5 * * * * *").unwrap();
        let job: HashMap<String, String> = [
            ("data".to_owned(), r#"{"a":1}"#.to_owned()),
            (
                "opts".to_owned(),
                r#"{"prevMillis":1796331060000,"timestamp":1,"jobId":"repeat:x:1","repeat":{"tz":"Europe/London","count":4,"pattern":"*/5 * * * * *","limit":100,"endDate":1796417456075},"delay":3297,"attempts":3}"#.to_owned(),
            ),
        ]
        .into_iter()
        .collect();
        let c = convert(&k, 1_796_331_060_000, &job);
        let def: HashMap<_, _> = c.definition.iter().cloned().collect();
        assert_eq!(def["pattern"], "*/5 * * * * *");
        assert_eq!(def["tz"], "Europe/London");
        assert_eq!(def["limit"], "100");
        assert_eq!(def["endDate"], "1796417456075");
        assert_eq!(def["ic"], "4");
        assert_eq!(def["opts"], r#"{"attempts":3}"#);
        assert_eq!(def["data"], r#"{"a":1}"#);
        assert!(!def.contains_key("offset"));
        let repeat = c.iteration_opts["repeat"].as_object().unwrap();
        assert_eq!(repeat["count"], 4);
        assert!(!repeat.contains_key("jobId"));
        assert_eq!(c.iteration_opts["prevMillis"], 1_796_331_060_000u64);
    }
}
