//! Foreign job hashes against a real Redis (issue 27 §4, chaos F31 in
//! breadth): a proptest-made set of corrupt hashes — data or opts that are
//! not JSON or of the wrong shape, numbers beyond every range, bytes that
//! are not UTF-8, missing fields, JSON nested past the parser's limit —
//! written with a raw HSET beside good jobs. Each hash the worker cannot
//! decode is failed at once with a reason naming the field; every other job
//! completes; added = completed + failed, and the worker lives on.
//!
//! The set is fixed by a seed (ECHOMQ_FOREIGN_SEED, default 27), so a run is
//! repeatable; which hashes are undecodable is asked of the decoder itself
//! (the worker's own next-job path, `JobFields::to_job`), so the test checks
//! that what the worker does matches what the decoder says.
//!
//! Packed (msgpack) arguments are not among the shapes: EchoMQ never decodes
//! msgpack; it only packs its own arguments for the scripts.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use echomq::protocol::call::lifecycle::{EpochMs, MoveToActive, NextJob};
use echomq::protocol::call::{Reply, ScriptCall};
use echomq::protocol::packing::FetchOpts;
use echomq::protocol::DecodeError;
use echomq::worker::{processor_fn, JobContext, ProcessError, WorkerStatus};
use echomq::{JobOptions, JobState, WorkerArgs, WorkerMsg, WorkerOptions};
use echomq_integration_tests::{wait_until, NullSupervisor, RedisServer};
use fred::prelude::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use ractor::{call_t, Actor};
use serde_json::json;

/// A value a foreign writer may leave in a field.
fn corrupt_value() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"{",
        b"not json",
        b"\xff\xfe",
        b"\xc3",
        b"1e400",
        b"99999999999999999999999",
        b"-1",
        b"abc",
        b"",
        b"[]",
        b"[1]",
        b"\"text\"",
        b"null",
        b"5",
        br#"{"attempts":"many","backoff":[],"lifo":"yes"}"#,
        br#"{"delay":1e308,"jobId":7,"priority":"high","timestamp":-5}"#,
        br#"{"de":{"id":5},"parent":"x","kl":-1,"backoff":{"type":9}}"#,
    ];
    prop_oneof![
        4 => prop::sample::select(fixed).prop_map(<[u8]>::to_vec),
        1 => (100usize..200).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..12),
        1 => "[\\PC]{0,10}".prop_map(String::into_bytes),
    ]
}

/// What a foreign writer did to an otherwise good hash.
#[derive(Clone, Debug)]
enum Change {
    Set(&'static str, Vec<u8>),
    Remove(&'static str),
}

const TOUCHED: &[&str] = &[
    "name",
    "data",
    "opts",
    "timestamp",
    "delay",
    "priority",
    "atm",
    "ats",
    "stc",
    "processedOn",
    "progress",
    "stacktrace",
    "returnvalue",
    "x-foreign",
];

fn corrupt_hash() -> impl Strategy<Value = Vec<Change>> {
    let change = prop_oneof![
        4 => (prop::sample::select(TOUCHED), corrupt_value()).prop_map(|(f, v)| Change::Set(f, v)),
        1 => prop::sample::select(&["name", "data", "opts", "timestamp"][..]).prop_map(Change::Remove),
    ];
    prop::collection::vec(change, 1..4)
}

/// The hash of job `i` after the changes, as raw bytes.
fn hash_of(i: usize, now: u64, changes: &[Change]) -> BTreeMap<&'static str, Vec<u8>> {
    let mut h: BTreeMap<&'static str, Vec<u8>> = BTreeMap::new();
    h.insert("name", b"foreign".to_vec());
    h.insert("data", format!("{{\"i\":{i}}}").into_bytes());
    h.insert("opts", br#"{"attempts":1}"#.to_vec());
    h.insert("timestamp", now.to_string().into_bytes());
    for c in changes {
        match c {
            Change::Set(f, v) => {
                h.insert(f, v.clone());
            }
            Change::Remove(f) => {
                h.remove(f);
            }
        }
    }
    h
}

/// What the worker's own decoding path says of a hash taken as it is
/// (after moveToActive's writes, which only add `processedOn`, `ats`, `pb`).
fn verdict(id: &str, hash: &BTreeMap<&'static str, Vec<u8>>) -> Result<(), DecodeError> {
    let keys = echomq::protocol::QueueKeys::new("emq", "q").unwrap();
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
    let mut items = Vec::new();
    for (k, v) in hash {
        if matches!(*k, "processedOn" | "ats") {
            continue;
        }
        items.push(Reply::Bulk(Bytes::from_static(k.as_bytes())));
        items.push(Reply::Bulk(Bytes::from(v.clone())));
    }
    for (k, v) in [("processedOn", "1"), ("ats", "1")] {
        items.push(Reply::text(k));
        items.push(Reply::text(v));
    }
    let reply = Reply::Array(vec![Reply::Array(items), Reply::text(id)]);
    match call.decode(reply) {
        Ok(NextJob::Job { id, fields }) => fields.to_job(&id).map(drop),
        other => panic!("not a job reply: {other:?}"),
    }
}

/// The kind of decoding error, for the coverage of the set.
fn kind_of(e: &DecodeError) -> &'static str {
    match e {
        DecodeError::MissingField { .. } => "missing field",
        DecodeError::InvalidField { reason, .. } if reason.contains("UTF-8") => "not UTF-8",
        DecodeError::InvalidField { reason, .. } if reason.contains("integer") => "not an integer",
        DecodeError::InvalidField { reason, .. } if reason.contains("recursion") => {
            "nested too deep"
        }
        DecodeError::InvalidField { .. } => "not JSON",
        _ => "other",
    }
}

fn field_of(e: &DecodeError) -> &'static str {
    match e {
        DecodeError::MissingField { field, .. } | DecodeError::InvalidField { field, .. } => field,
        _ => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_hashes_fail_with_a_reason_and_the_queue_flows_on() {
    let seed: u8 = std::env::var("ECHOMQ_FOREIGN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(27);
    let mut runner = TestRunner::new_with_rng(
        ProptestConfig::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    );
    // One of each shape for certain, then the generated ones.
    let mut sets: Vec<Vec<Change>> = vec![
        vec![Change::Set("data", b"{".to_vec())],
        vec![Change::Set("opts", b"not-json".to_vec())],
        vec![Change::Set("opts", b"[1]".to_vec())],
        vec![Change::Remove("name")],
        vec![Change::Set("data", b"{\"a\":\"\xff\"}".to_vec())],
        vec![Change::Set("timestamp", b"1e400".to_vec())],
        vec![Change::Set(
            "data",
            format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes(),
        )],
        // Decodable: a foreign binary field, numbers past i64, opts of odd types.
        vec![Change::Set("x-foreign", b"\xff\xfe".to_vec())],
        vec![Change::Set("delay", b"99999999999999999999999".to_vec())],
        vec![Change::Set(
            "opts",
            br#"{"attempts":"many","backoff":[],"lifo":"yes"}"#.to_vec(),
        )],
    ];
    sets.extend((0..40).map(|_| corrupt_hash().new_tree(&mut runner).unwrap().current()));

    let (redis, _conn, q) = RedisServer::with_queue("foreign").await;
    let c = redis.client().await;
    let keys = q.keys().clone();
    let now = echomq::clock::now_ms();

    // Good jobs and foreign hashes interleaved on `wait`.
    let mut expected: BTreeMap<String, Result<(), DecodeError>> = BTreeMap::new();
    for (i, changes) in sets.iter().enumerate() {
        let good = q
            .add("good", &json!({ "i": i }), JobOptions::new())
            .await
            .unwrap();
        expected.insert(good, Ok(()));
        let id = format!("foreign-{i}");
        let hash = hash_of(i, now, changes);
        let fields: Vec<(String, Bytes)> = hash
            .iter()
            .map(|(k, v)| (k.to_string(), Bytes::from(v.clone())))
            .collect();
        let _: () = c.hset(keys.job(&id), fields).await.unwrap();
        let _: i64 = c.lpush(keys.wait(), id.as_str()).await.unwrap();
        expected.insert(id.clone(), verdict(&id, &hash));
    }
    let _: i64 = c
        .zadd(keys.marker(), None, None, false, false, (0.0, "0"))
        .await
        .unwrap();
    let undecodable = expected.values().filter(|v| v.is_err()).count();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for e in expected.values().filter_map(|v| v.as_ref().err()) {
        *kinds.entry(kind_of(e)).or_default() += 1;
    }
    eprintln!(
        "seed {seed}: {} jobs, {undecodable} undecodable by the decoder: {kinds:?}",
        expected.len()
    );
    assert!(
        undecodable < sets.len(),
        "some foreign hashes decode (and must run)"
    );
    for kind in [
        "missing field",
        "not JSON",
        "not an integer",
        "not UTF-8",
        "nested too deep",
    ] {
        assert!(
            kinds.contains_key(kind),
            "the set has no hash {kind}: {kinds:?}"
        );
    }

    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(|job: JobContext| async move {
        Ok::<_, ProcessError>(json!({ "done": job.id() }))
    });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default()
        .concurrency(4)
        .lock_duration(Duration::from_secs(2))
        .stalled_interval(Duration::from_millis(500))
        .drain_delay(Duration::from_millis(200));
    let (worker, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();

    let total = expected.len() as u64;
    let settled = async || {
        let done: u64 = c.zcard(keys.completed()).await.unwrap();
        let failed: u64 = c.zcard(keys.failed()).await.unwrap();
        done + failed
    };
    wait_until(
        "every job completed or failed",
        Duration::from_secs(60),
        async || settled().await == total,
    )
    .await;

    for (id, verdict) in &expected {
        let state = q.get_job_state(id).await.unwrap();
        let reason: Option<String> = c.hget(keys.job(id), "failedReason").await.unwrap();
        match verdict {
            Ok(()) => assert_eq!(state, JobState::Completed, "{id}: {reason:?}"),
            Err(e) => {
                assert_eq!(state, JobState::Failed, "{id} ({e})");
                let reason = reason.unwrap_or_default();
                assert!(
                    reason.contains("cannot be decoded") && reason.contains(field_of(e)),
                    "{id}: failedReason {reason:?} for {e}"
                );
            }
        }
    }
    let completed: u64 = c.zcard(keys.completed()).await.unwrap();
    let failed: u64 = c.zcard(keys.failed()).await.unwrap();
    assert_eq!(completed + failed, total, "added = completed + failed");
    assert_eq!(failed as usize, undecodable);
    for list in [keys.wait(), keys.active()] {
        let left: u64 = c.llen(&list).await.unwrap();
        assert_eq!(left, 0, "{list} is empty");
    }

    // The worker lives on: a job added now runs.
    let last = q.add("after", &json!({}), JobOptions::new()).await.unwrap();
    wait_until(
        "the job added last completed",
        Duration::from_secs(20),
        async || q.get_job_state(&last).await.unwrap() == JobState::Completed,
    )
    .await;
    let status: WorkerStatus = call_t!(worker, WorkerMsg::GetStatus, 2000).unwrap();
    assert!(
        !status.closing && status.active_jobs.is_empty(),
        "{status:?}"
    );
    worker.stop(None);
    host.stop(None);
}
