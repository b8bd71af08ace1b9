//! Properties of every decoder of foreign data and of its encoder
//! (docs/decisions.md §Foreign data): what EchoMQ writes reads back as
//! written, and anything else reads as a value or a typed error — never a
//! panic. The byte-level targets are the fuzz targets' (`fuzz/`, `just
//! fuzz`); here they run on proptest's inputs, a few hundred cases each, so
//! the whole file stays well under the suite's time budget in a debug build.

use crate::targets;

use std::collections::HashMap;

use bytes::Bytes;
use echomq_protocol::call::decode::parse_int;
use echomq_protocol::call::lifecycle::{EpochMs, MoveToActive, NextJob};
use echomq_protocol::call::scheduler::{RepeatOptions, SchedulerInfo};
use echomq_protocol::call::{Reply, ScriptCall};
use echomq_protocol::job::field;
use echomq_protocol::packing::{pack_map, AddArgs, FetchOpts, FinishOpts, Limiter, MetricsSize};
use echomq_protocol::{
    relay, Backoff, Deduplication, Event, EventKind, Job, JobOptions, KeepJobs, ParentRef,
    QueueKeys,
};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Shrinking a failure is worth more than its time; a pass is not slowed.
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

/// Text that includes what foreign writers produce: any char, JSON-looking
/// text, numbers beyond every range.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => ".{0,16}",
        1 => "[0-9eE.+-]{0,24}",
        1 => "[\\[\\]{}\":,0-9a-z ]{0,24}",
    ]
}

/// A JSON number (every finite float survives text exactly: see
/// `floats_survive_json_text`).
fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| f.is_finite().then(|| Value::from(f))),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        json_number(),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            vec((text(), inner), 0..5).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Option keys of a newer client: never one this crate interprets.
fn extra() -> impl Strategy<Value = Map<String, Value>> {
    btree_map("x-[a-z]{1,6}", json(), 0..3).prop_map(|m| m.into_iter().collect())
}

fn keep_jobs() -> impl Strategy<Value = KeepJobs> {
    prop_oneof![
        any::<bool>().prop_map(KeepJobs::Remove),
        any::<u64>().prop_map(KeepJobs::Count),
        (
            option::of(any::<u64>()),
            option::of(any::<u64>()),
            option::of(any::<u64>())
        )
            .prop_map(|(age, count, limit)| KeepJobs::Policy { age, count, limit }),
    ]
}

fn backoff() -> impl Strategy<Value = Backoff> {
    let jitter = option::of((0u32..=8).prop_map(|n| f64::from(n) / 8.0));
    prop_oneof![
        (any::<u64>(), jitter.clone()).prop_map(|(delay, jitter)| Backoff::Fixed { delay, jitter }),
        (any::<u64>(), jitter).prop_map(|(delay, jitter)| Backoff::Exponential { delay, jitter }),
        ("x-[a-z]{1,6}", any::<u32>())
            .prop_map(|(t, n)| Backoff::Custom(serde_json::json!({"type": t, "n": n}))),
    ]
}

fn deduplication() -> impl Strategy<Value = Deduplication> {
    (
        ".{1,8}",
        option::of(any::<u64>()),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(id, ttl, extend, replace, keep)| {
            let mut d = Deduplication::new(id)
                .extend(extend)
                .replace(replace)
                .keep_last_if_active(keep);
            d.ttl = ttl;
            d
        })
}

/// Options as EchoMQ stores them (`attempts` is always written).
fn job_options() -> impl Strategy<Value = JobOptions> {
    let numbers = (
        option::of(any::<i64>()),
        option::of(any::<i64>()),
        any::<i64>(),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
    );
    let shapes = (
        option::of(backoff()),
        option::of(keep_jobs()),
        option::of(keep_jobs()),
        option::of(deduplication()),
        option::of((".{0,8}", ".{0,8}").prop_map(|(id, queue)| ParentRef { id, queue })),
        option::of(".{0,10}"),
        any::<[bool; 5]>(),
        extra(),
    );
    (numbers, shapes).prop_map(|(n, s)| {
        let (delay, priority, attempts, keep_logs, timestamp, stack_trace_limit, size_limit) = n;
        let (backoff, on_complete, on_fail, dedup, parent, job_id, flags, extra) = s;
        JobOptions {
            delay,
            priority,
            lifo: flags[0],
            job_id,
            attempts: Some(attempts),
            backoff,
            remove_on_complete: on_complete,
            remove_on_fail: on_fail,
            keep_logs,
            timestamp,
            stack_trace_limit,
            size_limit,
            deduplication: dedup,
            parent,
            on_failure: (1..5)
                .find(|&i| flags[i])
                .map(|i| echomq_protocol::OnChildFailure::ALL[i - 1]),
            timeout: timestamp.map(|t| t % 86_400_000),
            group: None,
            extra,
        }
    })
}

/// Counters and times the decoder reads as non-negative integers.
fn count() -> impl Strategy<Value = u64> {
    0..=i64::MAX as u64
}

fn job() -> impl Strategy<Value = Job> {
    let head = (
        ".{0,12}",
        ".{0,12}",
        json(),
        job_options(),
        count(),
        any::<i64>(),
        any::<i64>(),
        option::of(count()),
        option::of(count()),
    );
    let tail = (
        option::of(json()),
        option::of(".{0,12}"),
        vec(".{0,12}", 0..3),
        (count(), count(), count()),
        json(),
        option::of(".{0,12}"),
        option::of(".{0,12}"),
        (option::of(".{0,12}"), option::of(json())),
        (option::of(".{0,12}"), option::of(".{0,12}")),
    );
    (head, tail).prop_map(|(h, t)| {
        let (id, name, data, opts, timestamp, delay, priority, processed_on, finished_on) = h;
        let (return_value, failed_reason, stacktrace, counters, progress, defa, pb, p, r) = t;
        Job {
            id,
            name,
            data,
            opts,
            timestamp,
            delay,
            priority,
            processed_on,
            finished_on,
            return_value,
            failed_reason,
            stacktrace,
            attempts_made: counters.0,
            attempts_started: counters.1,
            stalled_counter: counters.2,
            progress,
            deferred_failure: defa,
            processed_by: pb,
            parent_key: p.0,
            parent: p.1,
            repeat_job_key: r.0,
            deduplication_id: r.1,
        }
    })
}

/// A job hash as a client writes it (the scripts' HMSET, Node's JSON.stringify).
fn job_hash(j: &Job) -> Vec<(&'static str, String)> {
    let json = |v: &Value| v.to_string();
    let mut h = vec![
        (field::NAME, j.name.clone()),
        (field::DATA, json(&j.data)),
        (field::OPTS, json(&Value::Object(j.opts.to_stored()))),
        (field::TIMESTAMP, j.timestamp.to_string()),
        (field::DELAY, j.delay.to_string()),
        (field::PRIORITY, j.priority.to_string()),
        (field::ATTEMPTS_MADE, j.attempts_made.to_string()),
        (field::ATTEMPTS_STARTED, j.attempts_started.to_string()),
        (field::STALLED_COUNTER, j.stalled_counter.to_string()),
        (field::PROGRESS, json(&j.progress)),
        (field::STACKTRACE, json(&Value::from(j.stacktrace.clone()))),
    ];
    let mut opt = |f: &'static str, v: Option<String>| {
        if let Some(v) = v {
            h.push((f, v));
        }
    };
    opt(field::PROCESSED_ON, j.processed_on.map(|n| n.to_string()));
    opt(field::FINISHED_ON, j.finished_on.map(|n| n.to_string()));
    opt(field::RETURN_VALUE, j.return_value.as_ref().map(json));
    opt(field::FAILED_REASON, j.failed_reason.clone());
    opt(field::DEFERRED_FAILURE, j.deferred_failure.clone());
    opt(field::PROCESSED_BY, j.processed_by.clone());
    opt(field::PARENT_KEY, j.parent_key.clone());
    opt(field::PARENT, j.parent.as_ref().map(json));
    opt(field::REPEAT_JOB_KEY, j.repeat_job_key.clone());
    opt(field::DEDUPLICATION_ID, j.deduplication_id.clone());
    h
}

fn event_kind() -> impl Strategy<Value = EventKind> {
    let id = || ".{0,10}";
    let prev = || option::of("[a-z]{1,8}");
    prop_oneof![
        (id(), ".{0,8}").prop_map(|(job_id, name)| EventKind::Added { job_id, name }),
        (id(), prev()).prop_map(|(job_id, prev)| EventKind::Waiting { job_id, prev }),
        (id(), any::<u64>()).prop_map(|(job_id, delay)| EventKind::Delayed { job_id, delay }),
        (id(), prev()).prop_map(|(job_id, prev)| EventKind::Active { job_id, prev }),
        (id(), json()).prop_map(|(job_id, data)| EventKind::Progress { job_id, data }),
        (id(), json(), prev()).prop_map(|(job_id, return_value, prev)| EventKind::Completed {
            job_id,
            return_value,
            prev
        }),
        (id(), ".{0,12}", prev()).prop_map(|(job_id, failed_reason, prev)| EventKind::Failed {
            job_id,
            failed_reason,
            prev
        }),
        (id(), any::<u64>()).prop_map(|(job_id, attempts_made)| EventKind::RetriesExhausted {
            job_id,
            attempts_made
        }),
        id().prop_map(|job_id| EventKind::Stalled { job_id }),
        Just(EventKind::Paused),
        Just(EventKind::Resumed),
        Just(EventKind::Drained),
        (id(), "[a-z]{0,8}").prop_map(|(job_id, prev)| EventKind::Removed { job_id, prev }),
        any::<u64>().prop_map(|count| EventKind::Cleaned { count }),
        id().prop_map(|job_id| EventKind::Duplicated { job_id }),
        (id(), id(), id()).prop_map(|(job_id, d, j)| EventKind::Deduplicated {
            job_id,
            deduplication_id: d,
            deduplicated_job_id: j
        }),
        (id(), prev()).prop_map(|(job_id, prev)| EventKind::WaitingChildren { job_id, prev }),
        ("x-[a-z]{1,6}", vec(("y-[a-z]{1,4}", ".{0,6}"), 0..3))
            .prop_map(|(name, fields)| EventKind::Unknown { name, fields }),
    ]
}

/// An events stream entry as the scripts XADD it.
fn event_fields(kind: &EventKind) -> Vec<(String, String)> {
    let mut f = vec![("event".to_owned(), kind.name().to_owned())];
    let mut put = |k: &str, v: String| f.push((k.to_owned(), v));
    use EventKind::*;
    match kind {
        Added { job_id, name } => {
            put("jobId", job_id.clone());
            put("name", name.clone());
        }
        Waiting { job_id, prev } | Active { job_id, prev } | WaitingChildren { job_id, prev } => {
            put("jobId", job_id.clone());
            if let Some(p) = prev {
                put("prev", p.clone());
            }
        }
        Delayed { job_id, delay } => {
            put("jobId", job_id.clone());
            put("delay", delay.to_string());
        }
        Progress { job_id, data } => {
            put("jobId", job_id.clone());
            put("data", data.to_string());
        }
        Completed {
            job_id,
            return_value,
            prev,
        } => {
            put("jobId", job_id.clone());
            put("returnvalue", return_value.to_string());
            if let Some(p) = prev {
                put("prev", p.clone());
            }
        }
        Failed {
            job_id,
            failed_reason,
            prev,
        } => {
            put("jobId", job_id.clone());
            put("failedReason", failed_reason.clone());
            if let Some(p) = prev {
                put("prev", p.clone());
            }
        }
        RetriesExhausted {
            job_id,
            attempts_made,
        } => {
            put("jobId", job_id.clone());
            put("attemptsMade", attempts_made.to_string());
        }
        Stalled { job_id } | Duplicated { job_id } => put("jobId", job_id.clone()),
        Removed { job_id, prev } => {
            put("jobId", job_id.clone());
            put("prev", prev.clone());
        }
        Cleaned { count } => put("count", count.to_string()),
        Deduplicated {
            job_id,
            deduplication_id,
            deduplicated_job_id,
        } => {
            put("jobId", job_id.clone());
            put("deduplicationId", deduplication_id.clone());
            put("deduplicatedJobId", deduplicated_job_id.clone());
        }
        Unknown { fields, .. } => f.extend(fields.iter().cloned()),
        Paused | Resumed | Drained => {}
        _ => unreachable!("a kind the strategy does not make"),
    }
    f
}

/// A script reply tree, its strings drawn from field names and numbers as
/// often as from anything.
fn reply() -> impl Strategy<Value = Reply> {
    let bulk = prop_oneof![
        text().prop_map(|s| Bytes::from(s.into_bytes())),
        vec(any::<u8>(), 0..12).prop_map(Bytes::from),
        prop::sample::select(vec!["name", "data", "opts", "atm", "-1", "1", "{}"])
            .prop_map(|s| Bytes::from_static(s.as_bytes())),
    ];
    let leaf = prop_oneof![
        Just(Reply::Nil),
        any::<i64>().prop_map(Reply::Int),
        (-12i64..12).prop_map(Reply::Int),
        any::<f64>().prop_map(Reply::Double),
        bulk.prop_map(Reply::Bulk),
    ];
    leaf.prop_recursive(4, 48, 10, |inner| vec(inner, 0..10).prop_map(Reply::Array))
}

proptest! {
    #![proptest_config(config(400))]

    /// Each fuzz target returns on any bytes (and its invariants hold).
    #[test]
    fn fuzz_targets_return_on_any_bytes(data in vec(any::<u8>(), 0..384)) {
        for (_, target) in targets::TARGETS {
            target(&data);
        }
    }

    /// Every script call's decoder on any reply tree: a value or a typed error.
    #[test]
    fn every_reply_decoder_returns(r in reply(), s in text(), n in any::<u64>(), i in any::<i64>()) {
        targets::every_call(&r, &s, n, i);
    }
}

proptest! {
    #![proptest_config(config(200))]

    /// Options: stored, as JSON text (the `opts` field) and packed (the
    /// add scripts' argument), each reads back as written.
    #[test]
    fn job_options_round_trip(o in job_options()) {
        let stored = o.to_stored();
        prop_assert_eq!(&JobOptions::from_stored(&stored), &o);
        let text = Value::Object(stored.clone()).to_string();
        let Ok(Value::Object(read)) = serde_json::from_str::<Value>(&text) else {
            panic!("stored options are a JSON object: {text}");
        };
        prop_assert_eq!(&JobOptions::from_stored(&read), &o);
        let unpacked: Value = rmp_serde::from_slice(&pack_map(&stored)).unwrap();
        prop_assert_eq!(unpacked, Value::Object(stored));
        let public = o.to_public();
        prop_assert!(echomq_protocol::options::SHORT_NAMES
            .iter()
            .all(|(short, _)| !public.contains_key(*short)));
    }

    /// A job hash written by a client reads back as the job, through the
    /// text pairs and through the worker's next-job reply.
    #[test]
    fn job_hash_round_trip(j in job()) {
        let hash = job_hash(&j);
        let pairs = hash.iter().map(|(k, v)| (*k, v.as_str()));
        prop_assert_eq!(&Job::from_fields(&j.id, pairs), &Ok(j.clone()));
        let map: HashMap<String, String> =
            hash.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        prop_assert_eq!(&Job::from_hash(&j.id, map), &Ok(j.clone()));
        let reply = Reply::Array(vec![
            Reply::Array(hash.iter().flat_map(|(k, v)| [Reply::text(k), Reply::text(v)]).collect()),
            Reply::text(&j.id),
        ]);
        let keys = QueueKeys::new("emq", "q").unwrap();
        let call = MoveToActive {
            keys: &keys,
            now: EpochMs(0),
            fetch: FetchOpts { token: "t", lock_duration: 1, limiter: None, name: None },
        };
        let Ok(NextJob::Job { id, fields }) = call.decode(reply) else {
            panic!("a job reply");
        };
        prop_assert_eq!(fields.to_job(&id), Ok(j));
    }

    /// A job hash of known fields and foreign values: a job or a typed error
    /// naming a field the job is read from.
    #[test]
    fn foreign_job_hashes_are_typed_errors(
        fields in vec((prop::sample::select(FIELDS.to_vec()), text()), 0..12),
    ) {
        match Job::from_fields("1", fields.iter().map(|(k, v)| (*k, v.as_str()))) {
            Ok(_) => {}
            Err(echomq_protocol::DecodeError::MissingField { field, .. })
            | Err(echomq_protocol::DecodeError::InvalidField { field, .. }) => {
                prop_assert!(FIELDS.contains(&field), "{}", field);
            }
            Err(e) => panic!("an error of another kind: {e}"),
        }
    }

    /// An events stream entry as the scripts write it reads back as its kind.
    #[test]
    fn events_round_trip(kind in event_kind(), id in "[0-9]{1,13}-[0-9]{1,3}") {
        let e = Event::parse(id.clone(), event_fields(&kind));
        prop_assert_eq!(e, Event { id, kind });
    }

    /// Lua and JS numbers: every integer, as text or as a float rendering.
    #[test]
    fn integers_read_back(n in any::<i64>(), f in -(1i64 << 52)..(1i64 << 52)) {
        prop_assert_eq!(parse_int(&n.to_string()), Some(n));
        prop_assert_eq!(Reply::text(&n.to_string()).as_i64(), Some(n));
        prop_assert_eq!(Reply::Int(n).to_text(), Some(n.to_string()));
        prop_assert_eq!(parse_int(&format!("{:.1}", f as f64)), Some(f));
        prop_assert_eq!(parse_int(&format!("{:e}", f as f64)), Some(f));
    }

    /// Numbers as foreign text: no panic, and never a value out of range.
    #[test]
    fn foreign_numbers_are_none_or_in_range(s in text()) {
        let _ = parse_int(&s);
        let _ = Reply::text(&s).as_i64();
    }

    /// The packed arguments decode to what was packed.
    #[test]
    fn packed_arguments_round_trip(
        token in ".{0,12}",
        name in option::of(".{0,12}"),
        n in any::<u64>(),
        attempts in any::<i64>(),
        limiter in option::of((any::<u64>(), any::<u64>())),
        keep in option::of(keep_jobs()),
    ) {
        let limiter = limiter.map(|(max, duration)| Limiter { max, duration });
        let fetch: Value = rmp_serde::from_slice(&FetchOpts {
            token: &token,
            lock_duration: n,
            limiter,
            name: name.as_deref(),
        }.pack()).unwrap();
        prop_assert_eq!(&fetch["token"], &Value::from(token.clone()));
        prop_assert_eq!(&fetch["lockDuration"], &Value::from(n));
        prop_assert_eq!(fetch.get("name").and_then(Value::as_str), name.as_deref());
        prop_assert_eq!(fetch.get("limiter").map(|l| (l["max"].as_u64(), l["duration"].as_u64())),
            limiter.map(|l| (Some(l.max), Some(l.duration))));
        let keep_jobs = KeepJobs::to_finish_keep_jobs(keep.as_ref());
        let finish: Value = rmp_serde::from_slice(&FinishOpts {
            token: &token,
            name: name.as_deref(),
            keep_jobs: keep_jobs.clone(),
            limiter,
            lock_duration: n,
            attempts,
            max_metrics_size: MetricsSize::Points(n),
        }.pack()).unwrap();
        prop_assert_eq!(&finish["token"], &Value::from(token.clone()));
        prop_assert_eq!(&finish["maxMetricsSize"], &Value::from(n));
        prop_assert_eq!(finish.get("attempts").and_then(Value::as_i64).unwrap_or(0), attempts);
        let sent = finish.get("keepJobs").cloned();
        match keep_jobs {
            Some(m) if !(m.is_empty() || m.len() == 1 && m.get("count") == Some(&Value::from(-1))) => {
                prop_assert_eq!(sent, Some(Value::Object(m)));
            }
            _ => prop_assert_eq!(sent, None),
        }
        let args: Vec<Value> = rmp_serde::from_slice(&AddArgs {
            prefix_key: "emq:q:",
            custom_id: &token,
            name: name.as_deref().unwrap_or_default(),
            timestamp: n,
            repeat_job_key: name.as_deref(),
            ..Default::default()
        }.pack()).unwrap();
        prop_assert_eq!(&args[1], &Value::from(token));
        prop_assert_eq!(&args[3], &Value::from(n));
        prop_assert_eq!(args.len(), if name.is_some() { 8 } else { 4 });
    }

    /// A scheduler hash as the scripts write it reads back.
    #[test]
    fn scheduler_hash_round_trip(
        name in ".{0,8}",
        next in any::<u64>(),
        every in option::of(0..=i64::MAX as u64),
        pattern in option::of("[0-9*/ ,-]{1,16}"),
        dates in (option::of(0..=i64::MAX as u64), option::of(0..=i64::MAX as u64)),
        ic in 0..=i64::MAX as u64,
        data in option::of(json()),
        opts in option::of(job_options()),
    ) {
        let mut h = HashMap::new();
        h.insert("name".to_owned(), name.clone());
        h.insert("ic".to_owned(), ic.to_string());
        if let Some(e) = every { h.insert("every".to_owned(), e.to_string()); }
        if let Some(p) = &pattern { h.insert("pattern".to_owned(), p.clone()); }
        if let Some(s) = dates.0 { h.insert("startDate".to_owned(), s.to_string()); }
        if let Some(e) = dates.1 { h.insert("endDate".to_owned(), e.to_string()); }
        if let Some(d) = &data { h.insert("data".to_owned(), d.to_string()); }
        let stored = opts.map(|o| o.to_stored());
        if let Some(o) = &stored { h.insert("opts".to_owned(), Value::Object(o.clone()).to_string()); }
        let info = SchedulerInfo::from_hash("s", next, h);
        prop_assert_eq!((&info.name, info.next, info.every, &info.pattern), (&name, next, every, &pattern));
        prop_assert_eq!((info.start_date, info.end_date, info.iteration_count), (dates.0, dates.1, ic));
        prop_assert_eq!(&info.data, &data);
        prop_assert_eq!(&info.options, &stored);
    }

    /// `repeat` options read back as written, with a client's own keys kept.
    #[test]
    fn repeat_options_round_trip(
        every in option::of(any::<u64>()),
        pattern in option::of(".{1,12}"),
        tz in option::of("[A-Za-z/_]{1,12}"),
        numbers in (option::of(any::<u64>()), option::of(any::<u64>()), option::of(any::<u64>()), option::of(any::<u64>())),
        count in any::<u64>(),
        extra in extra(),
    ) {
        let r = RepeatOptions {
            every,
            pattern,
            tz,
            limit: numbers.0,
            offset: numbers.1,
            start_date: numbers.2,
            end_date: numbers.3,
            count,
            extra,
        };
        prop_assert_eq!(RepeatOptions::from_map(r.to_map()), r);
    }

    /// Topics select themselves and the patterns made from them.
    #[test]
    fn topics_and_patterns(
        segments in vec("[A-Za-z0-9_:%-]{1,6}", 1..6),
        stars in vec(any::<bool>(), 6),
        tail in 0usize..6,
    ) {
        let topic = segments.join(".");
        prop_assert!(relay::check_topic(&topic).is_ok());
        let pattern: Vec<&str> = segments
            .iter()
            .zip(&stars)
            .map(|(s, star)| if *star { "*" } else { s.as_str() })
            .collect();
        let pattern = pattern.join(".");
        prop_assert!(relay::check_pattern(&pattern).is_ok());
        prop_assert!(relay::matches(&pattern, &topic), "{} {}", pattern, topic);
        let cut = tail.min(segments.len() - 1);
        let mut prefix: Vec<&str> = segments[..cut].iter().map(String::as_str).collect();
        prefix.push(">");
        let open = prefix.join(".");
        prop_assert!(relay::check_pattern(&open).is_ok());
        prop_assert!(relay::matches(&open, &topic), "{} {}", open, topic);
        let longer = format!("{topic}.x");
        prop_assert!(!relay::matches(&longer, &topic));
    }
}

/// The fields a job is read from.
const FIELDS: &[&str] = &echomq_protocol::job::READ;

/// Floats through JSON text, as the `data` of a job travels (and as a
/// worker's return value comes back): exact.
#[test]
fn floats_survive_json_text() {
    let mut runner = proptest::test_runner::TestRunner::new(config(2_000));
    runner
        .run(&any::<f64>(), |f| {
            if f.is_finite() {
                let back: Value = serde_json::from_str(&Value::from(f).to_string()).unwrap();
                prop_assert_eq!(back.as_f64(), Some(f));
            }
            Ok(())
        })
        .unwrap();
}

/// The floats first found changed by one unit in the last place on the way
/// through JSON text, before serde_json's exact float parsing was enabled.
#[test]
fn floats_once_read_one_ulp_off() {
    for f in [96104.53594991533, -6.4172881356630324e-232] {
        let back: Value = serde_json::from_str(&Value::from(f).to_string()).unwrap();
        assert_eq!(back.as_f64(), Some(f));
        let job = Job::from_fields("1", [("name", "n"), ("data", &format!("{{\"x\":{f}}}"))]);
        assert_eq!(job.unwrap().data["x"].as_f64(), Some(f));
    }
}
