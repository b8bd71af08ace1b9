//! The proof of group commit (docs/decisions.md §16): on the same scenario,
//! (A) the finishes as single moveToFinished calls of ours, (B) the same cut
//! into moveJobsToFinished calls of random sizes 1–32, and (C) BullMQ 6.7.6's
//! own moveToFinished (its Lua text from the interop package, called with
//! the same KEYS and ARGV) leave the same whole keyspace, and every entry
//! gets the same reply (refusal code, or the job its fetch-next took).
//!
//! Each scenario runs on three fresh redis-servers. A scenario: jobs with
//! random options (priority, delay, attempts, retention by count and age,
//! deduplication), a parent whose children fail it or are ignored on
//! failure, a worker rate limit or a global one, a paused or maxed queue, a
//! short events stream; a random number of them taken (fixed tokens); then
//! per finish a random outcome — complete, fail (final or with attempts
//! left), retry (retryJob, sent singly in every run: group commit batches
//! finishes only), a wrong token — on jobs some of which were made refusals
//! (hash removed, lock gone, not in active, pending children). Timestamps are
//! fixed ARGV.
//!
//! What is normalised, and only that: stream entry ids become their order
//! (they are the server's clock); TTLs are rounded to 10 s (locks, the
//! limiter: set from ARGV durations but read against the clock), and so is
//! a rate-limit delay in a reply; hash fields are compared as a sorted map
//! (HGETALL order follows the encoding). Streams are trimmed by entry count
//! alone (`stream-node-max-bytes 0`): with a byte bound, where a node ends
//! would depend on the bytes of the clock's ids.
//!
//! `ECHOMQ_GROUP_COMMIT_CASES` sets the number of scenarios (default 256;
//! `just prove` runs 10,000, its last run recorded in docs/decisions.md §16).

use std::collections::BTreeMap;

use bytes::Bytes;
use echomq::protocol::call::group_commit::MoveJobsToFinished;
use echomq::protocol::call::lifecycle::{
    EpochMs, FinishTarget, MoveToActive, MoveToFinished, NextJob, PushEnd, RetryJob, Verdict,
};
use echomq::protocol::call::{Reply, ScriptCall};
use echomq::protocol::packing::{FetchOpts, FinishOpts, Limiter, MetricsSize};
use echomq::protocol::QueueKeys;
use echomq::{Connection, Deduplication, FlowJob, FlowProducer, JobOptions, KeepJobs, Queue};
use echomq_integration_tests::RedisServer;
use fred::prelude::*;
use proptest::prelude::*;
use serde_json::{json, Value as Json};

const QUEUE: &str = "gc";
pub(crate) const T0: u64 = 1_700_000_000_000;
pub(crate) const SERVER_ARGS: [&str; 4] = [
    "--stream-node-max-bytes",
    "0",
    "--stream-node-max-entries",
    "4",
];

fn cases() -> u32 {
    cases_from("ECHOMQ_GROUP_COMMIT_CASES", 256)
}

/// The cases a proof runs: `var` when set (`just prove`), else `default`.
pub(crate) fn cases_from(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs one proptest case's async check on its own runtime (each case
/// starts its own servers).
pub(crate) fn run_case(
    check: impl std::future::Future<Output = Result<(), TestCaseError>>,
) -> Result<(), TestCaseError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(check)
}

// ------------------------------------------------------------- scenario

#[derive(Clone, Debug)]
enum Keep {
    All,
    Remove,
    Count(u64),
    Policy {
        age: Option<u64>,
        count: Option<u64>,
        limit: Option<u64>,
    },
}

impl Keep {
    fn option(&self) -> Option<KeepJobs> {
        match self {
            Keep::All => None,
            Keep::Remove => Some(KeepJobs::Remove(true)),
            Keep::Count(n) => Some(KeepJobs::Count(*n)),
            Keep::Policy { age, count, limit } => Some(KeepJobs::Policy {
                age: *age,
                count: *count,
                limit: *limit,
            }),
        }
    }
}

fn keep() -> impl Strategy<Value = Keep> {
    prop_oneof![
        3 => Just(Keep::All),
        1 => Just(Keep::Remove),
        2 => (0u64..4).prop_map(Keep::Count),
        2 => (
            prop::option::of(0u64..150),
            prop::option::of(0u64..4),
            prop::option::of(1u64..3)
        )
            .prop_map(|(age, count, limit)| Keep::Policy { age, count, limit }),
    ]
}

#[derive(Clone, Debug)]
struct JobSpec {
    priority: i64,
    /// Due at T0 + this (0: not delayed); finishes run from T0 + 2000.
    delay: u64,
    attempts: i64,
    remove_on_complete: Keep,
    remove_on_fail: Keep,
    dedup: bool,
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        prop_oneof![3 => Just(0i64), 1 => 1i64..4],
        prop_oneof![4 => Just(0u64), 1 => prop::sample::select(vec![1500u64, 5000, 400_000])],
        0i64..4,
        keep(),
        keep(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(priority, delay, attempts, remove_on_complete, remove_on_fail, dedup)| JobSpec {
                priority,
                delay,
                attempts,
                remove_on_complete,
                remove_on_fail,
                dedup,
            },
        )
}

#[derive(Clone, Copy, Debug)]
enum ChildRule {
    Plain,
    FailParent,
    IgnoreDependency,
}

/// What is done to a taken job before the finishes, to make its finish a refusal.
#[derive(Clone, Copy, Debug)]
enum Spoil {
    None,
    /// The hash is gone (-1).
    Removed,
    /// The lock expired (-2).
    LockGone,
    /// Not in `active` any more (-3).
    NotActive,
    /// A child still pending (-4 on completion).
    PendingChild,
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Complete,
    Fail,
    Retry,
    WrongToken,
}

#[derive(Clone, Debug)]
struct Entry {
    /// `None`: the next held job not finished yet; `Some(k)`: held job `k`
    /// again (a second finish of one job, refused or not).
    slot: Option<usize>,
    outcome: Outcome,
    fetch_next: bool,
    /// Ms after the previous finish.
    step: u64,
}

#[derive(Clone, Debug)]
struct Scenario {
    jobs: Vec<JobSpec>,
    children: Vec<ChildRule>,
    taken: usize,
    spoils: Vec<Spoil>,
    entries: Vec<Entry>,
    cuts: Vec<usize>,
    paused: bool,
    concurrency: Option<u64>,
    worker_limit: Option<(u64, u64)>,
    global_limit: Option<(u64, u64)>,
    max_events: Option<u64>,
    metrics: bool,
    lifo: bool,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let spoil = prop_oneof![
        24 => Just(Spoil::None),
        1 => Just(Spoil::Removed),
        1 => Just(Spoil::LockGone),
        1 => Just(Spoil::NotActive),
        1 => Just(Spoil::PendingChild),
    ];
    let outcome = prop_oneof![
        5 => Just(Outcome::Complete),
        3 => Just(Outcome::Fail),
        1 => Just(Outcome::Retry),
        1 => Just(Outcome::WrongToken),
    ];
    let entry = (
        prop_oneof![5 => Just(None), 1 => (0usize..64).prop_map(Some)],
        outcome,
        prop::bool::weighted(0.6),
        prop_oneof![2 => Just(0u64), 2 => 1u64..2000, 1 => 20_000u64..90_000],
    )
        .prop_map(|(slot, outcome, fetch_next, step)| Entry {
            slot,
            outcome,
            fetch_next,
            step,
        });
    let child = prop_oneof![
        Just(ChildRule::Plain),
        Just(ChildRule::FailParent),
        Just(ChildRule::IgnoreDependency)
    ];
    (
        (
            prop::collection::vec(job_spec(), 1..24),
            prop::collection::vec(child, 0..4),
            1usize..32,
            prop::collection::vec(spoil, 32),
            prop::collection::vec(entry, 1..64),
            prop::collection::vec(1usize..=32, 1..8),
        ),
        (
            prop::bool::weighted(0.15),
            prop::option::weighted(0.15, 2u64..6),
            prop::option::weighted(
                0.2,
                (1u64..4, prop::sample::select(vec![30_000u64, 60_000])),
            ),
            prop::option::weighted(0.1, (1u64..4, Just(60_000u64))),
            prop::option::weighted(0.3, prop::sample::select(vec![3u64, 8, 20])),
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.2),
        ),
    )
        .prop_map(
            |(
                (jobs, children, taken, spoils, entries, cuts),
                (paused, concurrency, worker_limit, global_limit, max_events, metrics, lifo),
            )| Scenario {
                jobs,
                children,
                taken,
                spoils,
                entries,
                cuts,
                paused,
                concurrency,
                worker_limit,
                global_limit,
                max_events,
                metrics,
                lifo,
            },
        )
}

// ------------------------------------------------------------- setup

fn token(slot: usize) -> String {
    format!("tok-{slot:02}")
}

/// The same jobs, taken the same way, on one server: the held jobs
/// `(id, token)` in the order they were taken.
async fn setup(conn: &Connection, c: &Client, s: &Scenario) -> Vec<(String, String)> {
    let q = Queue::new(conn, QUEUE).await.unwrap();
    for (i, j) in s.jobs.iter().enumerate() {
        let mut o = JobOptions::new()
            .job_id(format!("j{i:02}"))
            .timestamp(T0)
            .attempts(j.attempts)
            .lifo(s.lifo);
        if j.priority > 0 {
            o = o.priority(j.priority);
        }
        if j.delay > 0 {
            o = o.delay(std::time::Duration::from_millis(j.delay));
        }
        if let Some(k) = j.remove_on_complete.option() {
            o = o.remove_on_complete(k);
        }
        if let Some(k) = j.remove_on_fail.option() {
            o = o.remove_on_fail(k);
        }
        if j.dedup {
            o = o.deduplication(Deduplication::new(format!("d{}", i % 3)));
        }
        q.add("job", &json!({ "i": i }), o).await.unwrap();
    }
    if !s.children.is_empty() {
        let mut parent = FlowJob::new("parent", QUEUE, json!({}))
            .options(JobOptions::new().job_id("p").timestamp(T0));
        for (i, rule) in s.children.iter().enumerate() {
            let mut o = JobOptions::new().job_id(format!("c{i}")).timestamp(T0);
            o = match rule {
                ChildRule::Plain => o,
                ChildRule::FailParent => {
                    o.on_failure(echomq::flow_producer::OnChildFailure::FailParent)
                }
                ChildRule::IgnoreDependency => {
                    o.on_failure(echomq::flow_producer::OnChildFailure::IgnoreDependency)
                }
            };
            parent = parent.child(FlowJob::new("child", QUEUE, json!({ "c": i })).options(o));
        }
        FlowProducer::new(conn).add(parent).await.unwrap();
    }
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    let mut held = Vec::new();
    for slot in 0..s.taken {
        let tok = token(slot);
        let next = conn
            .call(&MoveToActive {
                keys: &keys,
                now: EpochMs(T0 + 1000),
                fetch: FetchOpts {
                    token: &tok,
                    lock_duration: 30_000,
                    limiter: None,
                    name: Some("w"),
                },
            })
            .await
            .unwrap();
        if let NextJob::Job { id, .. } = next {
            held.push((id, tok));
        }
    }
    for (i, (id, _)) in held.iter().enumerate() {
        let job_key = format!("emq:{QUEUE}:{id}");
        match s.spoils[i % s.spoils.len()] {
            Spoil::None => {}
            Spoil::Removed => {
                let _: i64 = c.del(&job_key).await.unwrap();
            }
            Spoil::LockGone => {
                let _: i64 = c.del(format!("{job_key}:lock")).await.unwrap();
            }
            Spoil::NotActive => {
                let _: i64 = c
                    .lrem(format!("emq:{QUEUE}:active"), 0, id.as_str())
                    .await
                    .unwrap();
            }
            Spoil::PendingChild => {
                let _: i64 = c
                    .sadd(format!("{job_key}:dependencies"), "emq:other:x")
                    .await
                    .unwrap();
            }
        }
    }
    let meta = format!("emq:{QUEUE}:meta");
    let mut fields: Vec<(String, String)> = Vec::new();
    if s.paused {
        fields.push(("paused".into(), "1".into()));
    }
    if let Some(n) = s.concurrency {
        fields.push(("concurrency".into(), n.to_string()));
    }
    if let Some((max, duration)) = s.global_limit {
        fields.push(("max".into(), max.to_string()));
        fields.push(("duration".into(), duration.to_string()));
    }
    if let Some(n) = s.max_events {
        fields.push(("opts.maxLenEvents".into(), n.to_string()));
    }
    if !fields.is_empty() {
        let _: i64 = c.hset(&meta, fields).await.unwrap();
    }
    held
}

// ------------------------------------------------------------- the finishes

/// One step of a scenario, resolved against the held jobs.
struct Step {
    id: String,
    token: String,
    now: u64,
    kind: StepKind,
    fetch_next: bool,
    attempts: i64,
    keep: Option<KeepJobs>,
}

enum StepKind {
    Finish(FinishTarget, String, Vec<(&'static str, String)>),
    Retry(Vec<(&'static str, String)>),
}

fn job_spec_of<'a>(s: &'a Scenario, id: &str) -> Option<&'a JobSpec> {
    id.strip_prefix('j')
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| s.jobs.get(n))
}

/// The steps of `entries` on the jobs `held`, from `now` on.
fn steps(s: &Scenario, entries: &[Entry], held: &[(String, String)], now: &mut u64) -> Vec<Step> {
    let mut next = 0;
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            *now += e.step;
            let slot = match e.slot {
                Some(k) => k % held.len(),
                // Every held job has had its first finish.
                None if next == held.len() => return None,
                None => {
                    next += 1;
                    next - 1
                }
            };
            let (id, tok) = &held[slot];
            let spec = job_spec_of(s, id);
            let failure = |n: usize| {
                vec![
                    ("failedReason", format!("boom {n}")),
                    ("stacktrace", format!("[\"Error: boom {n}\"]")),
                ]
            };
            let (kind, keep) = match e.outcome {
                Outcome::Complete | Outcome::WrongToken => (
                    StepKind::Finish(
                        FinishTarget::Completed,
                        json!({ "v": i }).to_string(),
                        Vec::new(),
                    ),
                    spec.and_then(|j| j.remove_on_complete.option()),
                ),
                Outcome::Fail => (
                    StepKind::Finish(FinishTarget::Failed, format!("boom {i}"), failure(i)),
                    spec.and_then(|j| j.remove_on_fail.option()),
                ),
                Outcome::Retry => (StepKind::Retry(failure(i)), None),
            };
            Some(Step {
                id: id.clone(),
                token: if matches!(e.outcome, Outcome::WrongToken) {
                    "not-the-token".into()
                } else {
                    tok.clone()
                },
                now: *now,
                kind,
                fetch_next: e.fetch_next,
                attempts: spec.map_or(0, |j| j.attempts),
                keep,
            })
        })
        .collect()
}

fn finish_call<'a>(
    keys: &'a QueueKeys,
    s: &Scenario,
    step: &'a Step,
    target: FinishTarget,
    value: &'a str,
    fields: &'a [(&'static str, String)],
) -> MoveToFinished<'a> {
    MoveToFinished {
        keys,
        id: &step.id,
        now: EpochMs(step.now),
        target,
        value,
        fetch_next: step.fetch_next,
        opts: FinishOpts {
            token: &step.token,
            name: Some("w"),
            keep_jobs: KeepJobs::to_finish_keep_jobs(step.keep.as_ref()),
            limiter: s
                .worker_limit
                .map(|(max, duration)| Limiter { max, duration }),
            lock_duration: 30_000,
            attempts: step.attempts,
            max_metrics_size: if s.metrics {
                MetricsSize::Points(5)
            } else {
                MetricsSize::Off
            },
        },
        fields,
    }
}

fn retry_call<'a>(
    keys: &'a QueueKeys,
    s: &Scenario,
    step: &'a Step,
    fields: &'a [(&'static str, String)],
) -> RetryJob<'a> {
    RetryJob {
        keys,
        now: EpochMs(step.now),
        push: if s.lifo {
            PushEnd::Front
        } else {
            PushEnd::Back
        },
        id: &step.id,
        token: &step.token,
        fields,
    }
}

/// A reply as compared: a rate-limit delay rounded as TTLs are.
fn shown(v: Verdict<Option<NextJob>>) -> Json {
    match v {
        Verdict::Refused(r) => json!({ "refused": r.code().code() }),
        Verdict::Done(None) => json!("done"),
        Verdict::Done(Some(NextJob::Job { id, fields })) => {
            let fields: BTreeMap<String, String> = fields.into_iter().collect();
            json!({ "took": id, "fields": fields })
        }
        Verdict::Done(Some(NextJob::RateLimited(d))) => {
            json!({ "limited": round_ttl(d.as_millis() as i64) })
        }
        Verdict::Done(Some(NextJob::DelayedUntil(t))) => json!({ "delayed_until": t.0 }),
        Verdict::Done(Some(NextJob::Nothing)) => json!("nothing"),
    }
}

pub(crate) fn round_ttl(ms: i64) -> i64 {
    if ms < 0 {
        ms
    } else {
        (ms + 5000) / 10_000
    }
}

/// (A) every step its own call.
async fn run_single(conn: &Connection, s: &Scenario, steps: &[Step]) -> Vec<Json> {
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    let mut out = Vec::new();
    for step in steps {
        out.push(match &step.kind {
            StepKind::Finish(target, value, fields) => {
                let call = finish_call(&keys, s, step, *target, value, fields);
                shown(conn.call(&call).await.unwrap())
            }
            StepKind::Retry(fields) => {
                let v = conn
                    .call(&retry_call(&keys, s, step, fields))
                    .await
                    .unwrap();
                shown(v.map(|()| None))
            }
        });
    }
    out
}

/// (B) the finishes cut into groups of the scenario's sizes; a retry goes
/// alone, between groups, as the worker sends it.
async fn run_grouped(conn: &Connection, s: &Scenario, steps: &[Step]) -> (Vec<Json>, usize) {
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    let mut out = Vec::new();
    let mut groups = 0;
    let mut cut = 0;
    let mut i = 0;
    while i < steps.len() {
        if let StepKind::Retry(fields) = &steps[i].kind {
            let v = conn
                .call(&retry_call(&keys, s, &steps[i], fields))
                .await
                .unwrap();
            out.push(shown(v.map(|()| None)));
            i += 1;
            continue;
        }
        let size = s.cuts[cut % s.cuts.len()];
        cut += 1;
        let mut group = Vec::new();
        while i < steps.len() && group.len() < size {
            match &steps[i].kind {
                StepKind::Finish(target, value, fields) => {
                    group.push(finish_call(&keys, s, &steps[i], *target, value, fields));
                    i += 1;
                }
                StepKind::Retry(_) => break,
            }
        }
        let call = MoveJobsToFinished::new(&keys, &group).unwrap();
        groups += 1;
        out.extend(conn.call(&call).await.unwrap().into_iter().map(shown));
    }
    (out, groups)
}

/// BullMQ's scripts, by name, as the pinned reference package ships them —
/// after checking that the installed package is that version (a stale
/// `node_modules` would prove the equality against another release).
pub(crate) fn bullmq_script(name: &str) -> String {
    let reference = echomq_integration_tests::NodeBullmq::V6_7;
    let package = reference.packages_dir().join("node_modules/bullmq");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(package.join("package.json"))
            .unwrap_or_else(|e| panic!("{}: {e} (run npm ci)", package.display())),
    )
    .unwrap();
    assert_eq!(
        manifest["version"],
        json!(reference.version()),
        "the BullMQ package in {} is not the pinned reference: run npm ci there",
        package.display()
    );
    let path = package.join(format!("dist/cjs/scripts/{name}.js"));
    let js = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run npm ci in integration-tests/interop)",
            path.display()
        );
    });
    let start = js.find("const content = `").expect("the script's content") + 17;
    let end = start + js[start..].find("`;\n").expect("the end of the content");
    // A template literal: the Lua text has its backslashes and backquotes escaped.
    js[start..end]
        .replace("\\`", "`")
        .replace("\\$", "$")
        .replace("\\\\", "\\")
}

/// FinishOpts as BullMQ Node packs them: its script reads `keepJobs`,
/// `attempts` and `maxMetricsSize` unconditionally.
fn bullmq_opts(o: &FinishOpts) -> Vec<u8> {
    let mut m = serde_json::to_value(o).unwrap();
    let map = m.as_object_mut().unwrap();
    map.entry("keepJobs").or_insert(json!({ "count": -1 }));
    map.entry("attempts").or_insert(json!(0));
    map.entry("maxMetricsSize").or_insert(json!(""));
    rmp_serde::to_vec_named(&m).unwrap()
}

pub(crate) fn to_reply(v: Value) -> Reply {
    match v {
        Value::Null => Reply::Nil,
        Value::Integer(n) => Reply::Int(n),
        Value::Double(d) => Reply::Double(d),
        Value::Boolean(b) => Reply::Int(b as i64),
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(s.as_bytes())),
        Value::Bytes(b) => Reply::Bulk(Bytes::copy_from_slice(&b)),
        Value::Array(a) => Reply::Array(a.into_iter().map(to_reply).collect()),
        other => panic!("unexpected reply {other:?}"),
    }
}

pub(crate) async fn evalsha_raw<C: ScriptCall>(
    c: &Client,
    sha: &str,
    call: &C,
    args: Vec<Vec<u8>>,
) -> Reply {
    let keys: Vec<String> = call
        .keys()
        .iter()
        .map(|k| String::from_utf8(k.as_bytes().to_vec()).unwrap())
        .collect();
    let args: Vec<Value> = args
        .into_iter()
        .map(|a| Value::Bytes(fred::bytes::Bytes::from(a)))
        .collect();
    to_reply(c.evalsha::<Value, _, _, _>(sha, keys, args).await.unwrap())
}

/// (C) BullMQ 6.7.6's moveToFinished and retryJob, each step its own call.
async fn run_bullmq(c: &Client, s: &Scenario, steps: &[Step]) -> Vec<Json> {
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    let finish_sha: String = c
        .script_load(bullmq_script("moveToFinished-14"))
        .await
        .unwrap();
    let retry_sha: String = c.script_load(bullmq_script("retryJob-11")).await.unwrap();
    let mut out = Vec::new();
    for step in steps {
        out.push(match &step.kind {
            StepKind::Finish(target, value, fields) => {
                let call = finish_call(&keys, s, step, *target, value, fields);
                let mut args: Vec<Vec<u8>> =
                    call.args().iter().map(|a| a.as_bytes().to_vec()).collect();
                args[7] = bullmq_opts(&call.opts);
                let reply = evalsha_raw(c, &finish_sha, &call, args).await;
                shown(call.decode(reply).unwrap())
            }
            StepKind::Retry(fields) => {
                let call = retry_call(&keys, s, step, fields);
                let args = call.args().iter().map(|a| a.as_bytes().to_vec()).collect();
                let reply = evalsha_raw(c, &retry_sha, &call, args).await;
                shown(call.decode(reply).unwrap().map(|()| None))
            }
        });
    }
    out
}

// ------------------------------------------------------------- the dump

/// Every key: type, TTL rounded to 10 s, and value — hash fields sorted,
/// zset members with scores in order, lists in order, sets sorted, stream
/// entries' fields in order (the entry's place stands for its id).
const DUMP: &str = r#"
local keys = redis.call('KEYS', '*')
table.sort(keys)
local out = {}
for _, k in ipairs(keys) do
  local t = redis.call('TYPE', k).ok
  local pttl = redis.call('PTTL', k)
  if pttl >= 0 then pttl = math.floor((pttl + 5000) / 10000) end
  local v
  if t == 'hash' then
    local flat = redis.call('HGETALL', k)
    local pairs = {}
    for i = 1, #flat, 2 do table.insert(pairs, {flat[i], flat[i + 1]}) end
    table.sort(pairs, function(a, b) return a[1] < b[1] end)
    v = pairs
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'set' then v = redis.call('SMEMBERS', k); table.sort(v)
  elseif t == 'string' then v = redis.call('GET', k)
  elseif t == 'stream' then
    v = {}
    for _, e in ipairs(redis.call('XRANGE', k, '-', '+')) do table.insert(v, e[2]) end
  end
  table.insert(out, {k, t, pttl, v})
end
return cjson.encode(out)
"#;

pub(crate) async fn dump(c: &Client) -> Vec<Json> {
    let raw: String = c
        .eval(DUMP, Vec::<String>::new(), Vec::<String>::new())
        .await
        .unwrap();
    serde_json::from_str(&raw).unwrap()
}

pub(crate) fn first_difference(a: &[Json], b: &[Json]) -> String {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return format!("\n  {x}\n  {y}");
        }
    }
    format!("lengths {} and {}", a.len(), b.len())
}

pub(crate) async fn one_server() -> (RedisServer, Connection, Client) {
    let redis = RedisServer::start_with(&SERVER_ARGS);
    let conn = redis.connect().await;
    let c = redis.client().await;
    (redis, conn, c)
}

async fn check(s: Scenario) -> Result<(), TestCaseError> {
    let (_ra, conn_a, ca) = one_server().await;
    let (_rb, conn_b, cb) = one_server().await;
    let (_rc, conn_c, cc) = one_server().await;
    let held = setup(&conn_a, &ca, &s).await;
    let held_b = setup(&conn_b, &cb, &s).await;
    let held_c = setup(&conn_c, &cc, &s).await;
    prop_assert_eq!(&held, &held_b);
    prop_assert_eq!(&held, &held_c);
    if held.is_empty() {
        return Ok(());
    }
    let before = dump(&ca).await;
    prop_assert_eq!(&before, &dump(&cb).await, "setups differ");
    // Rounds: the jobs a round's fetch-next took (with the token of the
    // finish that took them) are the held jobs of the next one.
    let (mut a, mut groups, mut held, mut now) = (Vec::new(), 0, held, T0 + 2000);
    let per_round = s.entries.len().div_ceil(3);
    for entries in s.entries.chunks(per_round) {
        if held.is_empty() {
            break;
        }
        let steps = steps(&s, entries, &held, &mut now);
        let ra = run_single(&conn_a, &s, &steps).await;
        let (rb, g) = run_grouped(&conn_b, &s, &steps).await;
        let rc = run_bullmq(&cc, &s, &steps).await;
        prop_assert_eq!(&ra, &rb, "replies: single (left) vs grouped (right)");
        prop_assert_eq!(&ra, &rc, "replies: ours (left) vs BullMQ 6.7.6 (right)");
        held = steps
            .iter()
            .zip(&ra)
            .filter_map(|(step, r)| {
                r.get("took")
                    .and_then(Json::as_str)
                    .map(|id| (id.to_owned(), step.token.clone()))
            })
            .collect();
        groups += g;
        a.extend(ra);
    }
    let (da, db, dc) = (dump(&ca).await, dump(&cb).await, dump(&cc).await);
    prop_assert!(
        da == db,
        "keyspace: single vs grouped: {}",
        first_difference(&da, &db)
    );
    prop_assert!(
        da == dc,
        "keyspace: ours vs BullMQ 6.7.6: {}",
        first_difference(&da, &dc)
    );
    // A scenario of refusals alone (wrong tokens, pending children) may
    // write nothing; one finish done must show.
    if a.iter().any(|r| r.get("refused").is_none()) {
        prop_assert!(da != before, "the finishes changed nothing");
    }
    // What the scenario exercised, for a reader of --nocapture.
    let count = |f: &dyn Fn(&Json) -> bool| a.iter().filter(|r| f(r)).count();
    let events = da
        .iter()
        .find(|k| k[0] == json!(format!("emq:{QUEUE}:events")))
        .and_then(|k| k[3].as_array().map(Vec::len))
        .unwrap_or(0);
    eprintln!(
        "{} steps in {groups} groups: {} done, {} took a job, {} limited, {} refused {:?}; {} events",
        a.len(),
        count(&|r| r == "done"),
        count(&|r| r.get("took").is_some()),
        count(&|r| r.get("limited").is_some()),
        count(&|r| r.get("refused").is_some()),
        a.iter()
            .filter_map(|r| r.get("refused").and_then(Json::as_i64))
            .collect::<std::collections::BTreeSet<_>>(),
        events
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    })]

    #[test]
    fn grouped_finishes_leave_the_keyspace_of_single_ones_and_of_bullmq(s in scenario()) {
        run_case(check(s))?;
    }
}

/// A malformed group is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_group_is_refused_whole() {
    let (_r, conn, c) = one_server().await;
    let s = Scenario {
        jobs: vec![JobSpec {
            priority: 0,
            delay: 0,
            attempts: 0,
            remove_on_complete: Keep::All,
            remove_on_fail: Keep::All,
            dedup: false,
        }],
        children: vec![],
        taken: 1,
        spoils: vec![Spoil::None],
        entries: vec![],
        cuts: vec![1],
        paused: false,
        concurrency: None,
        worker_limit: None,
        global_limit: None,
        max_events: None,
        metrics: false,
        lifo: false,
    };
    let held = setup(&conn, &c, &s).await;
    assert_eq!(held.len(), 1);
    let before = dump(&c).await;
    let sha = echomq::protocol::ScriptId::MoveJobsToFinished
        .def()
        .unwrap()
        .sha1;
    let _: String = c
        .script_load(
            echomq::protocol::ScriptId::MoveJobsToFinished
                .def()
                .unwrap()
                .source,
        )
        .await
        .unwrap();
    let keys: Vec<String> = (0..15).map(|i| format!("emq:{QUEUE}:k{i}")).collect();
    // A good entry, then malformed ones: nothing is applied.
    let good: Vec<String> = vec![
        held[0].0.clone(),
        (T0 + 5).to_string(),
        "1".into(),
        "completed".into(),
        "0".into(),
        "1".into(),
        held[0].1.clone(),
        String::new(),
    ];
    let bad = good[..7].to_vec();
    let mut no_options = good.clone();
    no_options[5] = "2".into();
    let mut no_target = good.clone();
    no_target[3] = "done".into();
    // Eight fields, one of them not a string: the script's one-pass check
    // must catch what its field-by-field checks catch.
    let mut number_field = json!(good.clone());
    number_field[1] = json!(T0 + 5);
    let mut table_field = json!(good.clone());
    table_field[6] = json!(["x"]);
    // ARGV 2 as the worker packs it: an array of one msgpack string whose
    // bytes are the packed options (not UTF-8, so not a JSON string).
    let options = rmp_serde::to_vec_named(&json!({"lockDuration": 30000})).unwrap();
    let mut one = vec![0x91, 0xd9, u8::try_from(options.len()).unwrap()];
    one.extend_from_slice(&options);
    let packed = |v: Json| rmp_serde::to_vec(&v).unwrap();
    let not_strings = "entry 2 is not 8 strings";
    for (shared, entries, refusal) in [
        (one.clone(), json!([good, bad]), not_strings),
        (
            one.clone(),
            json!([good, no_options]),
            "entry 2 names no options",
        ),
        (
            one.clone(),
            json!([good, no_target]),
            "entry 2 has no target",
        ),
        (one.clone(), json!([good, number_field]), not_strings),
        (one.clone(), json!([good, table_field]), not_strings),
        (
            one.clone(),
            json!([number_field, good]),
            "entry 1 is not 8 strings",
        ),
        (one.clone(), json!([]), "must pack 1 to 32 entries"),
        (one.clone(), json!("x"), "must pack 1 to 32 entries"),
        (
            packed(json!([])),
            json!([good]),
            "must pack 1 to 32 options",
        ),
        (
            packed(json!(["not a map"])),
            json!([good]),
            "options 1 is not a msgpack map",
        ),
        (
            one.clone(),
            json!([
                good, good, good, good, good, good, good, good, good, good, good, good, good, good,
                good, good, good, good, good, good, good, good, good, good, good, good, good, good,
                good, good, good, good, good
            ]),
            "must pack 1 to 32 entries",
        ),
    ] {
        let args = vec![
            Value::from(format!("emq:{QUEUE}:")),
            Value::Bytes(fred::bytes::Bytes::from(shared)),
            Value::Bytes(fred::bytes::Bytes::from(
                rmp_serde::to_vec(&entries).unwrap(),
            )),
        ];
        let r: Result<Value, _> = c.evalsha(sha, keys.clone(), args).await;
        let e = r.expect_err("refused");
        assert!(e.to_string().contains("moveJobsToFinished"), "{e}");
        assert!(e.to_string().contains(refusal), "{e}: not {refusal}");
    }
    assert_eq!(dump(&c).await, before, "nothing written");
}
