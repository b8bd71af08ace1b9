//! The proof of fetching in batches (issue 42): on the same scenario, (A)
//! single moveToActive calls of ours, (B) the same takes as one
//! moveJobsToActive call per batch, and (C) BullMQ 6.7.6's own moveToActive
//! (its Lua text from the interop package, same KEYS and ARGV) leave the same
//! whole keyspace and give the same replies. A batch of n is n takes, each
//! with its own token, up to and including the first that takes no job: (A)
//! and (C) send single calls until one takes no job, at most n.
//!
//! A scenario: jobs with random priority and delay (some due later), LIFO or
//! not, a paused or maxed queue, a worker rate limit or a global one (60 s
//! windows: the limiter's TTL runs on the server's clock), then rounds of
//! batches of random sizes 1–32 at random later times (promoting delayed
//! jobs), some jobs of the previous round finished in between (freeing the
//! queue's concurrency), and sometimes the queue paused or resumed.
//! Normalised as in `group_commit_equality`, and only that: stream ids
//! become their order, TTLs and a reply's rate-limit delay are rounded to
//! 10 s, hash fields are compared sorted.
//!
//! `ECHOMQ_FETCH_BATCH_CASES` sets the number of scenarios (default 128).

use std::collections::BTreeMap;

use echomq::protocol::call::fetch_batch::MoveJobsToActive;
use echomq::protocol::call::lifecycle::{
    EpochMs, FinishTarget, MoveToActive, MoveToFinished, NextJob,
};
use echomq::protocol::call::ScriptCall;
use echomq::protocol::packing::{FetchOpts, FinishOpts, Limiter, MetricsSize};
use echomq::protocol::QueueKeys;
use echomq::{Connection, JobOptions, Queue};
use fred::prelude::*;
use proptest::prelude::*;
use serde_json::{json, Value as Json};

use crate::group_commit_equality::{
    bullmq_script, dump, evalsha_raw, first_difference, one_server, round_ttl, T0,
};

const QUEUE: &str = "fb";

fn cases() -> u32 {
    crate::group_commit_equality::cases_from("ECHOMQ_FETCH_BATCH_CASES", 128)
}

#[derive(Clone, Debug)]
struct JobSpec {
    priority: i64,
    /// Due at T0 + this (0: not delayed).
    delay: u64,
}

#[derive(Clone, Debug)]
struct Round {
    /// Ms after the previous round.
    step: u64,
    /// Batch sizes, one call each.
    batches: Vec<usize>,
    /// How many of the previous round's jobs are completed first.
    finish: usize,
    /// Pause (Some(true)) or resume (Some(false)) the queue first.
    pause: Option<bool>,
}

#[derive(Clone, Debug)]
struct Scenario {
    jobs: Vec<JobSpec>,
    lifo: bool,
    paused: bool,
    concurrency: Option<u64>,
    worker_limit: Option<u64>,
    global_limit: Option<u64>,
    rounds: Vec<Round>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let job = (
        prop_oneof![3 => Just(0i64), 1 => 1i64..4],
        prop_oneof![4 => Just(0u64), 1 => prop::sample::select(vec![1500u64, 5000, 400_000])],
    )
        .prop_map(|(priority, delay)| JobSpec { priority, delay });
    let round = (
        prop_oneof![2 => Just(0u64), 2 => 1u64..3000, 1 => 4000u64..9000],
        prop::collection::vec(prop_oneof![2 => 1usize..4, 2 => 4usize..=32], 1..4),
        0usize..6,
        prop::option::weighted(0.15, prop::bool::ANY),
    )
        .prop_map(|(step, batches, finish, pause)| Round {
            step,
            batches,
            finish,
            pause,
        });
    (
        prop::collection::vec(job, 0..40),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.1),
        prop::option::weighted(0.2, 1u64..8),
        prop::option::weighted(0.25, 1u64..6),
        prop::option::weighted(0.15, 1u64..6),
        prop::collection::vec(round, 1..4),
    )
        .prop_map(
            |(jobs, lifo, paused, concurrency, worker_limit, global_limit, rounds)| Scenario {
                jobs,
                lifo,
                paused,
                concurrency,
                worker_limit,
                global_limit,
                rounds,
            },
        )
}

async fn setup(conn: &Connection, c: &Client, s: &Scenario) {
    let q = Queue::new(conn, QUEUE).await.unwrap();
    for (i, j) in s.jobs.iter().enumerate() {
        let mut o = JobOptions::new()
            .job_id(format!("j{i:02}"))
            .timestamp(T0)
            .lifo(s.lifo);
        if j.priority > 0 {
            o = o.priority(j.priority);
        }
        if j.delay > 0 {
            o = o.delay(std::time::Duration::from_millis(j.delay));
        }
        q.add("job", &json!({ "i": i }), o).await.unwrap();
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    if s.paused {
        fields.push(("paused".into(), "1".into()));
    }
    if let Some(n) = s.concurrency {
        fields.push(("concurrency".into(), n.to_string()));
    }
    if let Some(max) = s.global_limit {
        fields.push(("max".into(), max.to_string()));
        fields.push(("duration".into(), "60000".into()));
    }
    if !fields.is_empty() {
        let _: i64 = c.hset(format!("emq:{QUEUE}:meta"), fields).await.unwrap();
    }
}

fn fetch_opts<'a>(s: &Scenario, token: &'a str) -> FetchOpts<'a> {
    FetchOpts {
        token,
        lock_duration: 30_000,
        limiter: s.worker_limit.map(|max| Limiter {
            max,
            duration: 60_000,
        }),
        name: Some("w"),
    }
}

fn shown(n: NextJob) -> Json {
    match n {
        NextJob::Job { id, fields } => {
            let fields: BTreeMap<String, String> = fields.into_iter().collect();
            json!({ "took": id, "fields": fields })
        }
        NextJob::RateLimited(d) => json!({ "limited": round_ttl(d.as_millis() as i64) }),
        NextJob::DelayedUntil(t) => json!({ "delayed_until": t.0 }),
        NextJob::Nothing => json!("nothing"),
    }
}

/// How a batch is sent.
#[derive(Clone, Copy)]
enum Way {
    /// (A) moveToActive of ours, one call per take.
    Single,
    /// (B) one moveJobsToActive.
    Batched,
    /// (C) BullMQ 6.7.6's moveToActive, one call per take.
    Bullmq,
}

/// The takes of one batch of `tokens` at `now`.
async fn take(
    conn: &Connection,
    c: &Client,
    bullmq_sha: &str,
    s: &Scenario,
    way: Way,
    now: u64,
    tokens: &[String],
) -> Vec<Json> {
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    if let Way::Batched = way {
        let call =
            MoveJobsToActive::new(&keys, EpochMs(now), &fetch_opts(s, "unused"), tokens).unwrap();
        return conn
            .call(&call)
            .await
            .unwrap()
            .into_iter()
            .map(shown)
            .collect();
    }
    let mut out = Vec::new();
    for tok in tokens {
        let call = MoveToActive {
            keys: &keys,
            now: EpochMs(now),
            fetch: fetch_opts(s, tok),
        };
        let next = match way {
            Way::Single => conn.call(&call).await.unwrap(),
            _ => {
                let args = call.args().iter().map(|a| a.as_bytes().to_vec()).collect();
                call.decode(evalsha_raw(c, bullmq_sha, &call, args).await)
                    .unwrap()
            }
        };
        let took = matches!(next, NextJob::Job { .. });
        out.push(shown(next));
        if !took {
            break;
        }
    }
    out
}

/// One server's run of the scenario: every reply, in order.
async fn run(conn: &Connection, c: &Client, s: &Scenario, way: Way) -> Vec<Json> {
    let bullmq_sha: String = match way {
        Way::Bullmq => c
            .script_load(bullmq_script("moveToActive-11"))
            .await
            .unwrap(),
        _ => String::new(),
    };
    let keys = QueueKeys::new("emq", QUEUE).unwrap();
    let mut out = Vec::new();
    let mut now = T0 + 1000;
    let mut held: Vec<(String, String)> = Vec::new();
    for (r, round) in s.rounds.iter().enumerate() {
        now += round.step;
        // The same finishes on every server, by our moveToFinished (proven
        // equal to BullMQ's by group_commit_equality).
        for (id, tok) in held.drain(..).take(round.finish) {
            let call = MoveToFinished {
                keys: &keys,
                id: &id,
                now: EpochMs(now),
                target: FinishTarget::Completed,
                value: "1",
                fetch_next: false,
                opts: FinishOpts {
                    token: &tok,
                    name: Some("w"),
                    keep_jobs: None,
                    limiter: None,
                    lock_duration: 30_000,
                    attempts: 0,
                    max_metrics_size: MetricsSize::Off,
                },
                fields: &[],
            };
            out.push(json!({ "finished": format!("{:?}", conn.call(&call).await.unwrap()) }));
        }
        held.clear();
        match round.pause {
            Some(true) => {
                let _: i64 = c
                    .hset(format!("emq:{QUEUE}:meta"), ("paused", "1"))
                    .await
                    .unwrap();
            }
            Some(false) => {
                let _: i64 = c.hdel(format!("emq:{QUEUE}:meta"), "paused").await.unwrap();
            }
            None => {}
        }
        for (b, &size) in round.batches.iter().enumerate() {
            let tokens: Vec<String> = (0..size).map(|i| format!("tok-{r}-{b}-{i:02}")).collect();
            let replies = take(conn, c, &bullmq_sha, s, way, now, &tokens).await;
            for (reply, tok) in replies.iter().zip(&tokens) {
                if let Some(id) = reply.get("took").and_then(Json::as_str) {
                    held.push((id.to_owned(), tok.clone()));
                }
            }
            out.push(json!({ "batch": replies }));
        }
    }
    out
}

async fn check(s: Scenario) -> Result<(), TestCaseError> {
    let (_ra, conn_a, ca) = one_server().await;
    let (_rb, conn_b, cb) = one_server().await;
    let (_rc, conn_c, cc) = one_server().await;
    setup(&conn_a, &ca, &s).await;
    setup(&conn_b, &cb, &s).await;
    setup(&conn_c, &cc, &s).await;
    let before = dump(&ca).await;
    prop_assert_eq!(&before, &dump(&cb).await, "setups differ");
    let a = run(&conn_a, &ca, &s, Way::Single).await;
    let b = run(&conn_b, &cb, &s, Way::Batched).await;
    let c = run(&conn_c, &cc, &s, Way::Bullmq).await;
    prop_assert_eq!(&a, &b, "replies: single (left) vs batched (right)");
    prop_assert_eq!(&a, &c, "replies: ours (left) vs BullMQ 6.7.6 (right)");
    let (da, db, dc) = (dump(&ca).await, dump(&cb).await, dump(&cc).await);
    prop_assert!(
        da == db,
        "keyspace: single vs batched: {}",
        first_difference(&da, &db)
    );
    prop_assert!(
        da == dc,
        "keyspace: ours vs BullMQ 6.7.6: {}",
        first_difference(&da, &dc)
    );
    let replies: Vec<&Json> = a
        .iter()
        .filter_map(|r| r.get("batch").and_then(Json::as_array))
        .flatten()
        .collect();
    let count = |f: &dyn Fn(&Json) -> bool| replies.iter().filter(|r| f(r)).count();
    eprintln!(
        "{} batches: {} took a job, {} limited, {} delayed, {} nothing",
        a.iter().filter(|r| r.get("batch").is_some()).count(),
        count(&|r| r.get("took").is_some()),
        count(&|r| r.get("limited").is_some()),
        count(&|r| r.get("delayed_until").is_some()),
        count(&|r| *r == "nothing"),
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
    fn batched_takes_leave_the_keyspace_of_single_ones_and_of_bullmq(s in scenario()) {
        crate::group_commit_equality::run_case(check(s))?;
    }
}

/// A malformed batch is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_batch_is_refused_whole() {
    let (_r, conn, c) = one_server().await;
    let s = Scenario {
        jobs: vec![JobSpec {
            priority: 0,
            delay: 0,
        }],
        lifo: false,
        paused: false,
        concurrency: None,
        worker_limit: None,
        global_limit: None,
        rounds: vec![],
    };
    setup(&conn, &c, &s).await;
    let before = dump(&c).await;
    let def = echomq::protocol::ScriptId::MoveJobsToActive.def().unwrap();
    let _: String = c.script_load(def.source).await.unwrap();
    let keys: Vec<String> = MoveToActive::key_list(&QueueKeys::new("emq", QUEUE).unwrap())
        .iter()
        .map(|k| String::from_utf8(k.as_bytes().to_vec()).unwrap())
        .collect();
    let opts = rmp_serde::to_vec_named(&json!({ "lockDuration": 30000 })).unwrap();
    let many: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
    for (opts, tokens) in [
        (opts.clone(), rmp_serde::to_vec(&json!([])).unwrap()),
        (opts.clone(), rmp_serde::to_vec(&json!("x")).unwrap()),
        (opts.clone(), rmp_serde::to_vec(&json!(["t", 5])).unwrap()),
        (opts.clone(), rmp_serde::to_vec(&many).unwrap()),
        (
            rmp_serde::to_vec(&json!("x")).unwrap(),
            rmp_serde::to_vec(&json!(["t"])).unwrap(),
        ),
    ] {
        let args = vec![
            Value::from(format!("emq:{QUEUE}:")),
            Value::from((T0 + 1000).to_string()),
            Value::Bytes(fred::bytes::Bytes::from(opts)),
            Value::Bytes(fred::bytes::Bytes::from(tokens)),
        ];
        let r: Result<Value, _> = c.evalsha(def.sha1, keys.clone(), args).await;
        let e = r.expect_err("refused");
        assert!(e.to_string().contains("moveJobsToActive"), "{e}");
    }
    assert_eq!(dump(&c).await, before, "nothing written");
}
