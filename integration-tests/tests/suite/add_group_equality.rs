//! The proof of adds in groups (issue 42): on the same scenario, (A) single
//! addStandardJob calls of ours, (B) the same adds cut into addStandardJobs
//! calls of random sizes 1–100, and (C) BullMQ 6.7.6's own addStandardJob
//! (its Lua text from the interop package, same KEYS and ARGV) leave the
//! same whole keyspace and give the same answer per add: the id, the
//! existing id of a duplicate, the owner of a deduplicated add, a code
//! (missing parent), or a refusal by Redis (foreign data under a custom id).
//!
//! A scenario: adds with custom ids drawn from a small set (duplicates),
//! deduplication ids (some with a TTL), LIFO, a parent that exists or not,
//! payloads of random size; a paused or maxed queue, a short events stream.
//! Normalised as in `group_commit_equality`, and only that: stream ids
//! become their order, TTLs are rounded to 10 s, hash fields are compared
//! sorted. `ECHOMQ_ADD_GROUP_CASES` sets the number of scenarios (default 128).

use echomq::protocol::call::add::{AddJob, AddKind};
use echomq::protocol::call::add_group::{AddAnswer, AddStandardJobs};
use echomq::protocol::call::ScriptCall;
use echomq::protocol::packing::AddArgs;
use echomq::protocol::QueueKeys;
use echomq::Connection;
use fred::prelude::*;
use proptest::prelude::*;
use serde_json::{json, Map, Value as Json};

use crate::group_commit_equality::{bullmq_script, dump, first_difference, one_server, T0};

const QUEUE: &str = "ag";

fn cases() -> u32 {
    crate::group_commit_equality::cases_from("ECHOMQ_ADD_GROUP_CASES", 128)
}

#[derive(Clone, Copy, Debug)]
enum Parent {
    None,
    Existing,
    Missing,
}

#[derive(Clone, Debug)]
struct AddSpec {
    custom_id: Option<u8>,
    lifo: bool,
    dedup: Option<(u8, Option<u64>)>,
    parent: Parent,
    data_len: usize,
}

#[derive(Clone, Debug)]
struct Scenario {
    adds: Vec<AddSpec>,
    cuts: Vec<usize>,
    paused: bool,
    maxed: bool,
    max_events: Option<u64>,
    /// Custom ids whose key holds a string (foreign data) before the adds.
    foreign: Vec<u8>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let add = (
        prop::option::weighted(0.4, 0u8..12),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.2, (0u8..3, prop::option::of(Just(60_000u64)))),
        prop_oneof![6 => Just(Parent::None), 1 => Just(Parent::Existing), 1 => Just(Parent::Missing)],
        prop_oneof![3 => 0usize..20, 1 => 100usize..2000],
    )
        .prop_map(|(custom_id, lifo, dedup, parent, data_len)| AddSpec {
            custom_id,
            lifo,
            dedup,
            parent,
            data_len,
        });
    (
        prop::collection::vec(add, 1..120),
        prop::collection::vec(prop_oneof![1usize..8, 8usize..=100], 1..8),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.3, prop::sample::select(vec![3u64, 8, 20])),
        prop::collection::vec(0u8..12, 0..2),
    )
        .prop_map(
            |(adds, cuts, paused, maxed, max_events, foreign)| Scenario {
                adds,
                cuts,
                paused,
                maxed,
                max_events,
                foreign,
            },
        )
}

async fn setup(c: &Client, s: &Scenario) {
    let _: i64 = c
        .hset(
            format!("emq:{QUEUE}:p"),
            vec![("name", "parent"), ("data", "{}"), ("opts", "{}")],
        )
        .await
        .unwrap();
    let mut meta: Vec<(String, String)> = Vec::new();
    if s.paused {
        meta.push(("paused".into(), "1".into()));
    }
    if s.maxed {
        meta.push(("concurrency".into(), "1".into()));
        let _: i64 = c
            .lpush(format!("emq:{QUEUE}:active"), "busy")
            .await
            .unwrap();
    }
    if let Some(n) = s.max_events {
        meta.push(("opts.maxLenEvents".into(), n.to_string()));
    }
    if !meta.is_empty() {
        let _: i64 = c.hset(format!("emq:{QUEUE}:meta"), meta).await.unwrap();
    }
    for id in &s.foreign {
        let _: () = c
            .set(format!("emq:{QUEUE}:c{id}"), "foreign", None, None, false)
            .await
            .unwrap();
    }
}

/// Everything an add borrows, owned.
struct Owned {
    custom_id: String,
    name: String,
    data: String,
    opts: Map<String, Json>,
    parent: Option<(String, String, Json)>,
    /// `{P}de:<id>`, as `Queue::add` sends it (BullMQ's script needs it).
    dedup_key: Option<String>,
    timestamp: u64,
}

fn owned(s: &Scenario) -> Vec<Owned> {
    s.adds
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut opts = Map::new();
            opts.insert("attempts".into(), json!(1));
            if a.lifo {
                opts.insert("lifo".into(), json!(true));
            }
            if let Some((d, ttl)) = a.dedup {
                let mut de = Map::new();
                de.insert("id".into(), json!(format!("d{d}")));
                if let Some(ttl) = ttl {
                    de.insert("ttl".into(), json!(ttl));
                }
                opts.insert("de".into(), Json::Object(de));
            }
            let parent = match a.parent {
                Parent::None => None,
                Parent::Existing | Parent::Missing => {
                    let id = if matches!(a.parent, Parent::Existing) {
                        "p"
                    } else {
                        "nope"
                    };
                    let key = format!("emq:{QUEUE}:{id}");
                    Some((
                        key.clone(),
                        format!("{key}:dependencies"),
                        json!({ "id": id, "queueKey": format!("emq:{QUEUE}") }),
                    ))
                }
            };
            Owned {
                custom_id: a.custom_id.map(|c| format!("c{c}")).unwrap_or_default(),
                name: format!("n{}", i % 3),
                data: json!({ "i": i, "pad": "x".repeat(a.data_len) }).to_string(),
                opts,
                parent,
                dedup_key: a.dedup.map(|(d, _)| format!("emq:{QUEUE}:de:d{d}")),
                timestamp: T0 + i as u64,
            }
        })
        .collect()
}

fn call<'a>(keys: &'a QueueKeys, o: &'a Owned) -> AddJob<'a> {
    AddJob {
        keys,
        kind: AddKind::Standard,
        args: AddArgs {
            prefix_key: keys.prefix_key(),
            custom_id: &o.custom_id,
            name: &o.name,
            timestamp: o.timestamp,
            parent_key: o.parent.as_ref().map(|p| p.0.as_str()),
            parent_dependencies_key: o.parent.as_ref().map(|p| p.1.as_str()),
            parent: o.parent.as_ref().map(|p| &p.2),
            deduplication_key: o.dedup_key.as_deref(),
            ..Default::default()
        },
        data: &o.data,
        opts: &o.opts,
    }
}

fn shown(r: Result<String, String>) -> Json {
    match r {
        Ok(id) => json!({ "id": id }),
        Err(e) => json!({ "refused": e }),
    }
}

/// (A) and (C): one call per add; a Redis error is a refusal.
async fn run_single(
    conn: &Connection,
    c: &Client,
    bullmq_sha: Option<&str>,
    s: &Scenario,
) -> Vec<Json> {
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    let adds = owned(s);
    let mut out = Vec::new();
    for o in &adds {
        let call = call(&keys, o);
        let r = match bullmq_sha {
            None => conn.call(&call).await.map_err(|e| match e.script_code() {
                Some(code) => format!("code {}", code.code()),
                None => "redis".to_owned(),
            }),
            Some(sha) => {
                let keys: Vec<String> = call
                    .keys()
                    .iter()
                    .map(|k| String::from_utf8(k.as_bytes().to_vec()).unwrap())
                    .collect();
                let args: Vec<Value> = call
                    .args()
                    .iter()
                    .map(|a| Value::Bytes(fred::bytes::Bytes::copy_from_slice(a.as_bytes())))
                    .collect();
                match c.evalsha::<Value, _, _, _>(sha, keys, args).await {
                    Ok(v) => {
                        let reply = crate::group_commit_equality::to_reply(v);
                        call.decode(reply).map_err(|e| match e.code() {
                            Some(code) => format!("code {}", code.code()),
                            None => "shape".to_owned(),
                        })
                    }
                    Err(_) => Err("redis".to_owned()),
                }
            }
        };
        out.push(shown(r));
    }
    out
}

/// (B) the adds cut into groups of the scenario's sizes.
async fn run_grouped(conn: &Connection, s: &Scenario) -> (Vec<Json>, usize) {
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    let adds = owned(s);
    let calls: Vec<AddJob<'_>> = adds.iter().map(|o| call(&keys, o)).collect();
    let mut out = Vec::new();
    let (mut i, mut cut, mut groups) = (0, 0, 0);
    while i < calls.len() {
        let size = s.cuts[cut % s.cuts.len()].min(calls.len() - i);
        cut += 1;
        let group = AddStandardJobs::new(&keys, &calls[i..i + size]).unwrap();
        groups += 1;
        for answer in conn.call(&group).await.unwrap() {
            out.push(shown(match answer {
                AddAnswer::Script(r) => r.map_err(|e| match e.code() {
                    Some(code) => format!("code {}", code.code()),
                    None => "shape".to_owned(),
                }),
                AddAnswer::Refused(_) => Err("redis".to_owned()),
            }));
        }
        i += size;
    }
    (out, groups)
}

async fn check(s: Scenario) -> Result<(), TestCaseError> {
    let (_ra, conn_a, ca) = one_server().await;
    let (_rb, conn_b, cb) = one_server().await;
    let (_rc, conn_c, cc) = one_server().await;
    for c in [&ca, &cb, &cc] {
        setup(c, &s).await;
    }
    let sha: String = cc
        .script_load(bullmq_script("addStandardJob-9"))
        .await
        .unwrap();
    let a = run_single(&conn_a, &ca, None, &s).await;
    let (b, groups) = run_grouped(&conn_b, &s).await;
    let c = run_single(&conn_c, &cc, Some(&sha), &s).await;
    prop_assert_eq!(&a, &b, "answers: single (left) vs grouped (right)");
    prop_assert_eq!(&a, &c, "answers: ours (left) vs BullMQ 6.7.6 (right)");
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
    let count = |f: &dyn Fn(&Json) -> bool| a.iter().filter(|r| f(r)).count();
    eprintln!(
        "{} adds in {groups} groups: {} ids, {} refused {:?}",
        a.len(),
        count(&|r| r.get("id").is_some()),
        count(&|r| r.get("refused").is_some()),
        a.iter()
            .filter_map(|r| r.get("refused").and_then(Json::as_str))
            .collect::<std::collections::BTreeSet<_>>(),
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
    fn grouped_adds_leave_the_keyspace_of_single_ones_and_of_bullmq(s in scenario()) {
        crate::group_commit_equality::run_case(check(s))?;
    }
}

/// A malformed group is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_add_group_is_refused_whole() {
    let (_r, _conn, c) = one_server().await;
    let _: () = c
        .set(format!("emq:{QUEUE}:x"), "1", None, None, false)
        .await
        .unwrap();
    let before = dump(&c).await;
    let def = echomq::protocol::ScriptId::AddStandardJobs.def().unwrap();
    let _: String = c.script_load(def.source).await.unwrap();
    let keys: Vec<String> = (0..9).map(|i| format!("emq:{QUEUE}:k{i}")).collect();
    let good = vec!["a".to_owned(), "{}".to_owned(), "b".to_owned()];
    let many: Vec<Vec<String>> = (0..101).map(|_| good.clone()).collect();
    for entries in [
        json!([]),
        json!("x"),
        json!([good, ["a", "b"]]),
        json!([good, ["a", "b", 5]]),
        serde_json::to_value(&many).unwrap(),
    ] {
        let packed = rmp_serde::to_vec(&entries).unwrap();
        let r: Result<Value, _> = c
            .evalsha(
                def.sha1,
                keys.clone(),
                vec![Value::Bytes(fred::bytes::Bytes::from(packed))],
            )
            .await;
        let e = r.expect_err("refused");
        assert!(e.to_string().contains("addStandardJobs"), "{e}");
    }
    assert_eq!(dump(&c).await, before, "nothing written");
}

/// `add_bulk` (runs of standard adds grouped, the others alone) leaves the
/// keyspace and the ids of the same jobs added one by one with `add`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_bulk_leaves_the_keyspace_of_single_adds() {
    use echomq::{Deduplication, JobOptions, NewJob, Queue};
    const N: usize = 700;
    let jobs: Vec<NewJob> = (0..N)
        .map(|i| {
            let mut o = JobOptions::new().timestamp(T0 + i as u64);
            if i % 7 == 0 {
                o = o.job_id(format!("c{}", i % 50));
            }
            if i % 11 == 0 {
                o = o.priority(1 + (i % 3) as i64);
            }
            if i % 13 == 0 {
                o = o.delay(std::time::Duration::from_millis(5000));
            }
            if i % 17 == 0 {
                o = o.deduplication(Deduplication::new(format!("d{}", i % 4)));
            }
            if i % 19 == 0 {
                o = o.lifo(true);
            }
            NewJob {
                name: format!("n{}", i % 3),
                data: json!({ "i": i }),
                options: o,
            }
        })
        .collect();
    let (_ra, conn_a, ca) = one_server().await;
    let (_rb, conn_b, cb) = one_server().await;
    let qa = Queue::new(&conn_a, QUEUE).await.unwrap();
    let qb = Queue::new(&conn_b, QUEUE).await.unwrap();
    let mut singles = Vec::new();
    for j in &jobs {
        singles.push(qa.add(&j.name, &j.data, j.options.clone()).await.unwrap());
    }
    echomq_integration_tests::timeline::log_every_command(&cb).await;
    let bulk = qb.add_bulk(jobs).await.unwrap();
    assert_eq!(singles, bulk, "the same ids");
    let (da, db) = (dump(&ca).await, dump(&cb).await);
    assert!(
        da == db,
        "keyspace: add vs add_bulk: {}",
        first_difference(&da, &db)
    );
    let groups =
        crate::group_commit::calls_of(&cb, echomq::protocol::ScriptId::AddStandardJobs).await;
    let standard =
        crate::group_commit::calls_of(&cb, echomq::protocol::ScriptId::AddStandardJob).await;
    assert!(
        groups > 0,
        "no add was grouped ({standard} single standard adds)"
    );
    eprintln!("add_bulk of {N}: {groups} addStandardJobs + {standard} addStandardJob calls");
}
