//! The decoders of foreign data as functions of raw bytes, shared by the
//! property tests (`tests/suite/properties.rs`, proptest) and the fuzz targets
//! (`fuzz/`, libFuzzer): each must return for any input — a value or a
//! typed error, never a panic — and the invariants it checks hold for
//! every input (a failed `assert!` is a finding like a crash).
//!
//! Raw bytes become structured input through [`Input`], which reads them
//! as a stream of choices: a short input already reaches the known field
//! names and reply shapes, which a coverage-guided fuzzer then mutates.

#![allow(dead_code)]

use bytes::Bytes;
use echomq_protocol::call::add::{AddJob, AddKind};
use echomq_protocol::call::admin::{
    AddLog, BulkSource, ChangeDelay, ChangePriority, CleanJobsInSet, Drain, GetCounts, GetRanges,
    GetState, GetStateBounded, IsFinished, MoveJobsToWait, Obliterate, Pause, PauseAction, Promote,
    PushSide, RangeOrder, RemoveJob, ReprocessJob, UpdateData, UpdateProgress,
};
use echomq_protocol::call::audit::{AuditHead, AuditKeys, AuditPage};
use echomq_protocol::call::chunked::{DrainChunk, DrainTarget};
use echomq_protocol::call::dedup::RemoveDeduplicationKey;
use echomq_protocol::call::flow::{
    AddParentJob, AuditFlows, FlowAdd, GetDependencyCounts, MoveToWaitingChildren, Paginate,
    RemoveChildDependency, RemoveUnprocessedChildren,
};
use echomq_protocol::call::getters::{GetJobs, SearchJobs};
use echomq_protocol::call::lifecycle::{
    DelayKind, EpochMs, ExtendLock, ExtendLocks, FinishTarget, MoveJobFromActiveToWait,
    MoveToActive, MoveToDelayed, MoveToFinished, NextJob, PushEnd, ReleaseLock, RetryJob,
};
use echomq_protocol::call::limits::{GetCountsPerPriority, GetRateLimitTtl, IsMaxed};
use echomq_protocol::call::metrics::{GetMetrics, MetricsKind};
use echomq_protocol::call::relay::{
    RelayAckInbox, RelayDeleteRetained, RelayGetCounts, RelayGetNamespaces, RelayGetNodes,
    RelayGetPatterns, RelayGetRetained, RelayGetSubscriptions, RelayGetUsed, RelayHeartbeat,
    RelayPublish, RelayReadInbox, RelayRegisterNode, RelayRemoveEndpoint, RelaySubscribe,
    RelaySweep, RelayTouchNamespace, RelayTrimInbox, RelayUnregisterNode, SubscriptionFilter,
};
use echomq_protocol::call::scheduler::{
    AddJobScheduler, AdoptLegacyRepeatable, GetJobScheduler, IterationOptions, RemoveJobScheduler,
    RepeatOptions, SchedulerInfo, SchedulerOptions, UpdateJobScheduler,
};
use echomq_protocol::call::stalled::MoveStalledJobsToWait;
use echomq_protocol::call::{Reply, ScriptCall};
use echomq_protocol::job::field;
use echomq_protocol::packing::{AddArgs, FetchOpts, FinishOpts, MetricsSize};
use echomq_protocol::relay::{self, RelayKeys};
use echomq_protocol::{validate, DecodeError, Event, Job, JobOptions, KeepJobs, QueueKeys};
use serde_json::{Map, Value};
use std::time::Duration;

/// A fuzz target: returns for any bytes.
pub type Target = fn(&[u8]);

/// Every target, by name (the fuzz crate has one binary per entry).
pub const TARGETS: &[(&str, Target)] = &[
    ("job_hash", job_hash),
    ("job_opts", job_opts),
    ("event", event),
    ("reply", reply),
    ("scheduler", scheduler),
    ("relay_names", relay_names),
    ("names", names),
];

/// Known names the input reaches with one byte: hash fields, event names,
/// option keys, reply words.
const WORDS: &[&str] = &[
    field::NAME,
    field::DATA,
    field::OPTS,
    field::TIMESTAMP,
    field::DELAY,
    field::PRIORITY,
    field::PROCESSED_ON,
    field::FINISHED_ON,
    field::RETURN_VALUE,
    field::FAILED_REASON,
    field::STACKTRACE,
    field::ATTEMPTS_MADE,
    field::ATTEMPTS_MADE_LEGACY,
    field::ATTEMPTS_STARTED,
    field::STALLED_COUNTER,
    field::DEFERRED_FAILURE,
    field::PROCESSED_BY,
    field::PROGRESS,
    field::PARENT_KEY,
    field::PARENT,
    field::REPEAT_JOB_KEY,
    field::DEDUPLICATION_ID,
    "event",
    "jobId",
    "prev",
    "count",
    "attemptsMade",
    "deduplicationId",
    "deduplicatedJobId",
    "added",
    "waiting",
    "delayed",
    "active",
    "progress",
    "completed",
    "failed",
    "retries-exhausted",
    "stalled",
    "removed",
    "cleaned",
    "duplicated",
    "deduplicated",
    "waiting-children",
    "every",
    "pattern",
    "tz",
    "limit",
    "startDate",
    "endDate",
    "offset",
    "ic",
    "k",
    "t",
    "m",
    "ts",
    "d",
    "e",
    "msg",
    "",
    "0",
    "-1",
    "1",
    "12.0",
    "1e3",
    "1e400",
    "-9223372036854775808",
    "18446744073709551616",
    "NaN",
    "{}",
    "[]",
    "null",
    "true",
    r#"{"id":"p","queue":"emq:q"}"#,
    r#"{"attempts":3,"backoff":{"type":"exponential","delay":10}}"#,
];

/// Raw bytes read as a stream of choices; past the end every read is zero
/// or empty, so any input is a complete one.
pub struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { rest: data }
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((b, rest)) => {
                self.rest = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n.max(1)
    }

    /// A number: mostly small, sometimes any 64 bits.
    pub fn int(&mut self) -> i64 {
        match self.byte() {
            b @ 0..=199 => i64::from(b) - 20,
            200..=219 => {
                let mut a = [0u8; 8];
                for x in &mut a {
                    *x = self.byte();
                }
                i64::from_le_bytes(a)
            }
            220..=239 => [i64::MIN, i64::MAX, -1, 0, 1_700_000_000_000][self.below(5)],
            _ => -12 + self.below(13) as i64,
        }
    }

    /// Bytes: a known word (one byte), or a run of raw bytes.
    pub fn bytes(&mut self) -> Vec<u8> {
        let b = self.byte();
        if (b as usize) < WORDS.len() {
            return WORDS[b as usize].as_bytes().to_vec();
        }
        let len = (b as usize - WORDS.len()) % 64;
        let take = len.min(self.rest.len());
        let (head, rest) = self.rest.split_at(take);
        self.rest = rest;
        head.to_vec()
    }

    /// Text, lossily (the `&str` decoders take text).
    pub fn text(&mut self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    /// A script reply of at most `depth` levels.
    pub fn reply(&mut self, depth: u32) -> Reply {
        match self.below(if depth == 0 { 4 } else { 6 }) {
            0 => Reply::Nil,
            1 => Reply::Int(self.int()),
            2 => Reply::Bulk(Bytes::from(self.bytes())),
            3 => Reply::Double(
                [f64::NAN, f64::INFINITY, -1.5, 1e300, self.int() as f64][self.below(5)],
            ),
            _ => {
                let n = self.below(12);
                Reply::Array((0..n).map(|_| self.reply(depth - 1)).collect())
            }
        }
    }

    /// Field/value pairs as raw bytes (a hash as HGETALL gives it).
    pub fn pairs(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let n = self.below(24);
        (0..n).map(|_| (self.bytes(), self.bytes())).collect()
    }
}

/// A job hash: decoded from text pairs (`Job::from_fields`), and from the
/// next-job reply a worker gets (raw bytes, UTF-8 checked there).
pub fn job_hash(data: &[u8]) {
    let mut input = Input::new(data);
    let id = input.text();
    let pairs = input.pairs();
    let text: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect();
    let decoded = Job::from_fields(&id, text.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if let Ok(job) = &decoded {
        let last_name = text.iter().rev().find(|(k, _)| k == field::NAME);
        assert_eq!(Some(&job.name), last_name.map(|(_, v)| v));
        assert_eq!(job.id, id);
    }
    let all_text = pairs
        .iter()
        .all(|(k, v)| std::str::from_utf8(k).is_ok() && std::str::from_utf8(v).is_ok());
    let reply = Reply::Array(vec![
        Reply::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [Reply::Bulk(k.into()), Reply::Bulk(v.into())])
                .collect(),
        ),
        Reply::Bulk(Bytes::from(id.clone().into_bytes())),
        Reply::Int(input.int()),
        Reply::Int(input.int()),
    ]);
    let keys = QueueKeys::new("emq", "q").expect("a valid queue");
    let call = MoveToActive {
        keys: &keys,
        now: EpochMs(0),
        fetch: FetchOpts {
            token: "t",
            lock_duration: 1,
            limiter: None,
            name: None,
        },
    };
    match call.decode(reply) {
        Ok(NextJob::Job { id: got, fields }) => {
            assert_eq!(got, id);
            // As the lossy text pairs decode, or refused for bytes that are
            // not text (and then only that).
            match fields.to_job(&got) {
                Err(DecodeError::InvalidField { reason, .. }) if reason == "not UTF-8 text" => {
                    assert!(!all_text)
                }
                again => assert_eq!(again, decoded),
            }
        }
        Ok(other) => panic!("a job reply read as {other:?}"),
        Err(e) => panic!("a job reply of text ids is refused: {e}"),
    }
}

/// Stored options (`opts`, JSON text): read, written back, read again;
/// the second reading equals the first written back, and the packed
/// (msgpack) form decodes to the stored form.
pub fn job_opts(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(Value::Object(stored)) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    let o = JobOptions::from_stored(&stored);
    let _ = o.validate();
    let _ = o.to_public();
    let _ = o.parent_descriptor();
    let _ = KeepJobs::to_keep_jobs(o.remove_on_complete.as_ref());
    let _ = KeepJobs::to_finish_keep_jobs(o.remove_on_fail.as_ref());
    let once = JobOptions::from_stored(&o.to_stored());
    let twice = JobOptions::from_stored(&once.to_stored());
    assert_eq!(once, twice, "stored options settle after one write-back");
    let packed = echomq_protocol::packing::pack_map(&once.to_stored());
    let unpacked: Value = rmp_serde::from_slice(&packed).expect("our own msgpack decodes");
    assert_eq!(unpacked, Value::Object(once.to_stored()));
}

/// An events stream entry: never lost, its name kept.
pub fn event(data: &[u8]) {
    let mut input = Input::new(data);
    let id = input.text();
    let fields: Vec<(String, String)> = (0..input.below(12))
        .map(|_| (input.text(), input.text()))
        .collect();
    let name = fields
        .iter()
        .find(|(k, _)| k == "event")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let e = Event::parse(id.clone(), fields);
    assert_eq!(e.id, id);
    let _ = e.kind.job_id();
    if name.is_empty() || matches!(e.kind, echomq_protocol::EventKind::Unknown { .. }) {
        assert_eq!(e.kind.name(), name);
    }
}

/// Runs `$call`'s encoders and its decoder on `$reply`.
macro_rules! drive {
    ($reply:expr, $($call:expr),+ $(,)?) => {{
        $(
            let call = $call;
            let _ = call.keys();
            let _ = call.args();
            let _ = call.decode($reply.clone());
        )+
    }};
}

/// Every script call's reply decoder on an arbitrary reply, with
/// arbitrary text in the call's own fields.
pub fn reply(data: &[u8]) {
    let mut input = Input::new(data);
    let reply = input.reply(4);
    let s = input.text();
    let n = input.int().unsigned_abs();
    let i = input.int();
    every_call(&reply, &s, n, i);
}

/// Every script call, its fields made of `s`, `n` and `i`, decoding `reply`.
pub fn every_call(reply: &Reply, s: &str, n: u64, i: i64) {
    let k = QueueKeys::new("emq", "q").expect("a valid queue");
    let k = &k;
    let r = RelayKeys::new("emq", "default").expect("a valid namespace");
    let r = &r;
    let map = Map::new();
    let states = ["wait", "active", s];
    let fields = [(field::FAILED_REASON, s.to_owned())];
    let locks = [(s.to_owned(), s.to_owned())];
    let fetch = || FetchOpts {
        token: s,
        lock_duration: n,
        limiter: None,
        name: Some(s),
    };
    let add_args = || AddArgs {
        prefix_key: k.prefix_key(),
        custom_id: s,
        name: s,
        timestamp: n,
        ..Default::default()
    };
    let add = || AddJob {
        keys: k,
        kind: AddKind::for_job(i, i),
        args: add_args(),
        data: s,
        opts: &map,
    };
    let parent = || AddParentJob {
        keys: k,
        args: add_args(),
        data: s,
        opts: &map,
    };
    let sched = SchedulerOptions {
        name: s.to_owned(),
        every: Some(n),
        ..Default::default()
    };
    let iteration = IterationOptions {
        base: Map::new(),
        repeat: RepeatOptions::default(),
        scheduler_id: s,
        next_millis: Some(n),
        now: n,
    };
    let d = Duration::from_millis(n % 1_000_000);
    drive!(
        reply,
        add(),
        FlowAdd::Leaf(add()),
        FlowAdd::Parent(parent()),
        parent(),
        RemoveJob {
            keys: k,
            id: s,
            remove_children: true
        },
        Promote { keys: k, id: s },
        ReprocessJob {
            keys: k,
            id: s,
            from: FinishTarget::Failed,
            push: PushSide::for_lifo(false),
            reset_attempts_made: true,
            reset_attempts_started: false,
        },
        ChangeDelay {
            keys: k,
            id: s,
            delay: d,
            now_ms: n
        },
        ChangePriority {
            keys: k,
            id: s,
            priority: i,
            lifo: false
        },
        UpdateProgress {
            keys: k,
            id: s,
            progress: s
        },
        UpdateData {
            keys: k,
            id: s,
            data: s
        },
        AddLog {
            keys: k,
            id: s,
            line: s,
            keep_logs: Some(n)
        },
        Pause {
            keys: k,
            action: PauseAction::Pause,
            emit_event: true
        },
        Drain {
            keys: k,
            include_delayed: true
        },
        Obliterate {
            keys: k,
            max_jobs: 10,
            force: false
        },
        MoveJobsToWait {
            keys: k,
            from: BulkSource::Failed,
            count: n,
            until_ms: Some(n)
        },
        CleanJobsInSet {
            keys: k,
            state: s,
            cutoff_ms: n,
            limit: n
        },
        GetState { keys: k, id: s },
        GetCounts {
            keys: k,
            states: &states,
            delayed_before: Some(EpochMs(n))
        },
        GetRanges {
            keys: k,
            start: i,
            end: i,
            order: RangeOrder::Ascending,
            states: &states
        },
        IsFinished { keys: k, id: s },
        AuditHead { keys: k },
        AuditPage {
            keys: k,
            state: s,
            from: n,
            count: n
        },
        AuditKeys {
            keys: k,
            cursor: s,
            count: n
        },
        DrainChunk {
            keys: k,
            target: DrainTarget::Wait,
            spared_before: n,
            budget: n
        },
        GetStateBounded {
            keys: k,
            id: s,
            reach: n
        },
        RemoveDeduplicationKey {
            keys: k,
            dedup_id: s,
            job_id: s
        },
        MoveToWaitingChildren {
            keys: k,
            id: s,
            token: s,
            child_key: Some(s),
            timestamp: n
        },
        GetDependencyCounts { keys: k, id: s },
        Paginate {
            key: s,
            start: n,
            end: Some(n),
            cursor: s,
            offset: n,
            max_iterations: n
        },
        RemoveChildDependency {
            keys: k,
            id: s,
            parent_key: s
        },
        RemoveUnprocessedChildren { keys: k, id: s },
        AuditFlows {
            keys: k,
            parent: n,
            cursor: s,
            budget: n
        },
        GetJobs {
            keys: k,
            start: i,
            end: i,
            order: RangeOrder::Descending,
            states: &states
        },
        SearchJobs {
            keys: k,
            state: s,
            cursor: n,
            count: n,
            order: RangeOrder::Ascending,
            name: Some(s),
            text: Some(s),
        },
        MoveToActive {
            keys: k,
            now: EpochMs(n),
            fetch: fetch()
        },
        MoveToFinished {
            keys: k,
            id: s,
            now: EpochMs(n),
            target: FinishTarget::Completed,
            value: s,
            fetch_next: true,
            opts: FinishOpts {
                token: s,
                name: Some(s),
                keep_jobs: None,
                limiter: None,
                lock_duration: n,
                attempts: i,
                max_metrics_size: MetricsSize::Points(n),
            },
            fields: &fields,
        },
        MoveToDelayed {
            keys: k,
            now: EpochMs(n),
            id: s,
            token: s,
            delay: d,
            kind: DelayKind::Retry,
            fields: &fields,
            fetch_next: Some(fetch()),
        },
        RetryJob {
            keys: k,
            now: EpochMs(n),
            push: PushEnd::Front,
            id: s,
            token: s,
            fields: &fields
        },
        MoveJobFromActiveToWait {
            keys: k,
            id: s,
            token: s
        },
        ExtendLock {
            keys: k,
            id: s,
            token: s,
            duration: d
        },
        ExtendLocks {
            keys: k,
            locks: &locks,
            duration: d
        },
        ReleaseLock {
            keys: k,
            id: s,
            token: s,
            duration: d
        },
        GetRateLimitTtl {
            keys: k,
            max_jobs: Some(n)
        },
        IsMaxed { keys: k },
        GetCountsPerPriority {
            keys: k,
            priorities: &[0, 1, 7]
        },
        GetMetrics {
            keys: k,
            kind: MetricsKind::Completed,
            start: i,
            end: i
        },
        RelayRegisterNode {
            keys: r,
            node: s,
            lease_ms: n,
            info: s,
            layout: s,
            inbox_max: n
        },
        RelayHeartbeat {
            keys: r,
            node: s,
            lease_ms: n
        },
        RelayUnregisterNode { keys: r, node: s },
        RelaySweep { keys: r, limit: n },
        RelaySubscribe {
            keys: r,
            node: s,
            endpoint: s,
            pattern: s
        },
        RelayRemoveEndpoint {
            keys: r,
            node: s,
            endpoint: s
        },
        RelayPublish {
            keys: r,
            topic: s,
            data: s,
            ts_ms: i,
            retain_ms: n,
            max_bytes: n,
            inbox_max: n,
        },
        RelayDeleteRetained { keys: r, topic: s },
        RelayReadInbox {
            keys: r,
            node: s,
            cursor: s,
            count: n
        },
        RelayAckInbox {
            keys: r,
            node: s,
            cursor: s
        },
        RelayTrimInbox {
            keys: r,
            node: s,
            cursor: s,
            max_len: n
        },
        RelayGetCounts { keys: r },
        RelayGetUsed { keys: r },
        RelayGetNodes {
            keys: r,
            start: n,
            end: Some(n)
        },
        RelayGetSubscriptions {
            keys: r,
            filter: SubscriptionFilter::Node(s),
            start: n,
            end: None
        },
        RelayGetPatterns {
            keys: r,
            start: n,
            end: None
        },
        RelayGetRetained {
            keys: r,
            start: n,
            end: Some(n)
        },
        RelayGetNamespaces { registry: s },
        RelayTouchNamespace { keys: r, for_ms: n },
        AddJobScheduler {
            keys: k,
            scheduler: &sched,
            data: s,
            template: &map,
            first: &iteration
        },
        UpdateJobScheduler {
            keys: k,
            producer_id: s,
            next: &iteration
        },
        RemoveJobScheduler { keys: k, id: s },
        GetJobScheduler { keys: k, id: s },
        AdoptLegacyRepeatable {
            keys: k,
            member: s,
            scheduler_id: s,
            millis: n,
            definition: &[],
            iteration_opts: s
        },
        MoveStalledJobsToWait {
            keys: k,
            max_stalled_count: n,
            now: n,
            interval: d
        },
    );
}

/// A scheduler hash and the `repeat` options of an iteration (job options
/// written by any client), read and written back.
pub fn scheduler(data: &[u8]) {
    let mut input = Input::new(data);
    let id = input.text();
    let next = input.int().unsigned_abs();
    let hash = (0..input.below(16))
        .map(|_| (input.text(), input.text()))
        .collect();
    let info = SchedulerInfo::from_hash(&id, next, hash);
    let repeat = info.repeat_options();
    let _ = repeat.to_map();
    let text = input.text();
    if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&text) {
        let r = RepeatOptions::from_map(m);
        let once = RepeatOptions::from_map(r.to_map());
        assert_eq!(
            once,
            RepeatOptions::from_map(once.to_map()),
            "repeat options settle after one write-back"
        );
        let it = IterationOptions {
            base: Map::new(),
            repeat: once,
            scheduler_id: &id,
            next_millis: Some(next),
            now: input.int().unsigned_abs(),
        };
        let _ = it.to_map();
        let _ = it.job_id();
    }
}

/// Relay topics, patterns and ids as a foreign node writes them.
pub fn relay_names(data: &[u8]) {
    let mut input = Input::new(data);
    let a = input.text();
    let b = input.text();
    let topic_ok = relay::check_topic(&a).is_ok();
    let pattern_ok = relay::check_pattern(&b).is_ok();
    let _ = relay::has_wildcard(&b);
    let m = relay::matches(&b, &a);
    if topic_ok {
        assert!(relay::check_pattern(&a).is_ok(), "a topic is a pattern");
        assert!(relay::matches(&a, &a), "a topic selects itself");
        assert!(relay::matches(">", &a), "`>` selects every topic");
    }
    if topic_ok && pattern_ok && !relay::has_wildcard(&b) {
        assert_eq!(m, a == b, "a pattern without wildcards is one topic");
    }
    let _ = relay::check_id("node id", &a);
    let _ = relay::is_relay_key(&a, &b);
    if let Ok(keys) = RelayKeys::new(&b, &a) {
        let _ = keys.inbox(&a);
        let _ = keys.inbox_client_name(&b);
    }
}

/// Key names: a prefix, a queue name and a job id as a foreign client
/// chose them.
pub fn names(data: &[u8]) {
    let mut input = Input::new(data);
    let prefix = input.text();
    let queue = input.text();
    let id = input.text();
    let _ = validate::validate_job_id(&id);
    let _ = validate::validate_prefix(&prefix);
    let _ = validate::validate_queue_name(&queue);
    if let Ok(k) = QueueKeys::new(&prefix, &queue) {
        assert!(k.job(&id).starts_with(k.prefix_key()));
        let _ = k.lock_key(&id);
        let _ = k.scheduler(&id);
        let _ = k.dedup(&id);
        let _ = k.worker_client_name(Some(&id));
    }
    for c in [-13, -12, -11, -1, 0, 1, input.int()] {
        if let Some(code) = echomq_protocol::ScriptErrorCode::from_code(c) {
            assert_eq!(code.code(), c);
        }
    }
}
