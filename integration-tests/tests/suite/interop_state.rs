//! Redis-state parity: the same list of operations (adds with every option,
//! admin calls, a worker run) is executed by BullMQ Node on one fresh Redis
//! and by EchoMQ on another; the two keyspaces must be the same, key by key
//! (values parsed, stream entries compared without their ids, clock-made
//! values masked). Each test's comment names the checklist items it proves.

use std::time::Duration;

use echomq::protocol::FinishTarget;
use echomq::worker::{processor_fn, JobContext};
use echomq::{Backoff, JobOptions, JobState, KeepJobs, Queue, WorkerArgs, WorkerMsg};
use echomq_integration_tests::keyspace::{snapshot as keyspace, Mask};
use echomq_integration_tests::NullSupervisor;
use echomq_integration_tests::{bullmq, wait_until, RedisServer};
use ractor::{call_t, Actor};
use serde_json::{json, Map, Value as Json};

const Q: &str = "q";

/// The Rust producer's spelling of Node job options.
fn rust_opts(node: &Json) -> JobOptions {
    let mut o = JobOptions::new();
    let Some(m) = node.as_object() else { return o };
    for (k, v) in m {
        o = match k.as_str() {
            "delay" => o.delay(Duration::from_millis(v.as_u64().unwrap())),
            "priority" => o.priority(v.as_i64().unwrap()),
            "lifo" => o.lifo(v.as_bool().unwrap()),
            "jobId" => o.job_id(v.as_str().unwrap()),
            "attempts" => o.attempts(v.as_i64().unwrap()),
            "timestamp" => o.timestamp(v.as_u64().unwrap()),
            "keepLogs" => o.keep_logs(v.as_u64().unwrap()),
            "backoff" => o.backoff(match v {
                Json::Number(n) => Backoff::Fixed {
                    delay: n.as_u64().unwrap(),
                    jitter: None,
                },
                _ if v["type"] == "fixed" => Backoff::Fixed {
                    delay: v["delay"].as_u64().unwrap(),
                    jitter: None,
                },
                _ => Backoff::Exponential {
                    delay: v["delay"].as_u64().unwrap(),
                    jitter: None,
                },
            }),
            "removeOnComplete" | "removeOnFail" => {
                let keep = match v {
                    Json::Bool(b) => KeepJobs::Remove(*b),
                    Json::Number(n) => KeepJobs::Count(n.as_u64().unwrap()),
                    _ => KeepJobs::Policy {
                        age: v["age"].as_u64(),
                        count: v["count"].as_u64(),
                        limit: None,
                    },
                };
                if k == "removeOnComplete" {
                    o.remove_on_complete(keep)
                } else {
                    o.remove_on_fail(keep)
                }
            }
            // Node stores `deduplication` as `de`; EchoMQ carries it in `extra`.
            "deduplication" => {
                o.extra.insert("de".into(), v.clone());
                o
            }
            other => panic!("option {other} has no Rust spelling in this test"),
        };
    }
    o
}

fn state_of(s: &str) -> JobState {
    match s {
        "completed" => JobState::Completed,
        "failed" => JobState::Failed,
        "wait" | "waiting" => JobState::Waiting,
        "delayed" => JobState::Delayed,
        "prioritized" => JobState::Prioritized,
        other => panic!("state {other}"),
    }
}

/// EchoMQ's twin of driver.js `runOp`.
async fn run_rust(q: &Queue, ops: &[Json]) -> Vec<Json> {
    let mut results = Vec::new();
    for op in ops {
        let a = op.as_array().unwrap();
        let s = |i: usize| a[i].as_str().unwrap().to_owned();
        let r: Result<Json, echomq::Error> = match a[0].as_str().unwrap() {
            "add" => q
                .add(&s(1), &a[2], rust_opts(&a[3]))
                .await
                .map(Json::String),
            "promote" => q.promote(&s(1)).await.map(|_| Json::Null),
            "change-priority" => q
                .change_priority(&s(1), a[2].as_i64().unwrap(), a[3].as_bool().unwrap())
                .await
                .map(|_| Json::Null),
            "change-delay" => q
                .change_delay(&s(1), Duration::from_millis(a[2].as_u64().unwrap()))
                .await
                .map(|_| Json::Null),
            "remove" => q.remove(&s(1), false).await.map(|o| {
                json!(match o {
                    echomq::queue::RemoveOutcome::Removed => 1,
                    echomq::queue::RemoveOutcome::Locked => 0,
                })
            }),
            "drain" => q.drain(a[1].as_bool().unwrap()).await.map(|_| Json::Null),
            "pause" => q.pause().await.map(|_| Json::Null),
            "resume" => q.resume().await.map(|_| Json::Null),
            "progress" => q.update_progress(&s(1), &a[2]).await.map(|_| Json::Null),
            "log" => q
                .add_log(&s(1), &s(2), a[3].as_u64())
                .await
                .map(|n| json!(n)),
            "update-data" => q.update_data(&s(1), &a[2]).await.map(|_| Json::Null),
            "retry" => q.retry_job(&s(1), false).await.map(|_| Json::Null),
            "clean" => q
                .clean(
                    Duration::from_millis(a[1].as_u64().unwrap()),
                    a[2].as_u64().unwrap(),
                    state_of(a[3].as_str().unwrap()),
                )
                .await
                .map(|ids| json!(ids)),
            "obliterate" => q
                .obliterate(a[1].as_bool().unwrap())
                .await
                .map(|_| Json::Null),
            "retry-jobs" => {
                let state = match a[2].as_str().unwrap() {
                    "completed" => FinishTarget::Completed,
                    _ => FinishTarget::Failed,
                };
                q.chunked(a[1].as_u64().unwrap())
                    .retry_jobs(state, a[3].as_u64())
                    .await
                    .map(|_| Json::Null)
            }
            "promote-jobs" => q
                .chunked(a[1].as_u64().unwrap())
                .promote_all()
                .await
                .map(|_| Json::Null),
            "work" => {
                work(q).await;
                Ok(Json::Null)
            }
            other => panic!("op {other}"),
        };
        results.push(r.unwrap_or_else(|_| json!("error")));
    }
    results
}

async fn work(q: &Queue) {
    let p =
        processor_fn(|job: JobContext| async move { echomq_integration_tests::behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), p);
    args.options.drain_delay = Duration::from_millis(200);
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (w, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    wait_until(
        "nothing ready or running",
        Duration::from_secs(30),
        async || {
            let c = q.counts().await.unwrap();
            c.waiting + c.active + c.prioritized == 0
        },
    )
    .await;
    call_t!(w, WorkerMsg::Close, 10_000, Duration::from_secs(2)).unwrap();
}

/// Runs `stages` of ops one after the other on both sides and compares the
/// results and the whole keyspace after every stage (what a later stage
/// erases is proven where it stood); answers each stage's results and state.
async fn same_states(stages: Vec<Vec<Json>>, mask: Mask) -> Vec<(Vec<Json>, Map<String, Json>)> {
    let node_redis = RedisServer::start();
    let node_client = node_redis.client().await;
    let rust_redis = RedisServer::start();
    let rust_client = rust_redis.client().await;
    let conn = rust_redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let mut out = Vec::new();
    for (i, ops) in stages.into_iter().enumerate() {
        let node_results = bullmq("ops", &node_redis.url(), Q, json!({ "ops": ops }));
        let node_state = keyspace(&node_client, Q, mask).await;
        let rust_results = run_rust(&q, &ops).await;
        let rust_state = keyspace(&rust_client, Q, mask).await;
        assert_eq!(
            json!(rust_results),
            node_results,
            "stage {i}: results of {ops:?}"
        );
        echomq_integration_tests::keyspace::assert_same(
            &format!("stage {i} ({ops:?})"),
            &node_state,
            &rust_state,
        );
        out.push((rust_results, rust_state));
    }
    out
}

/// Runs `ops` on both sides and compares results and keyspaces.
async fn same_state(ops: Vec<Json>, mask: Mask) -> (Vec<Json>, Map<String, Json>) {
    let node_redis = RedisServer::start();
    let node_results = bullmq("ops", &node_redis.url(), Q, json!({ "ops": ops }));
    let node_state = keyspace(&node_redis.client().await, Q, mask).await;

    let rust_redis = RedisServer::start();
    let conn = rust_redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    let rust_results = run_rust(&q, &ops).await;
    let rust_state = keyspace(&rust_redis.client().await, Q, mask).await;

    assert_eq!(json!(rust_results), node_results, "results of {ops:?}");
    let keys = |m: &Map<String, Json>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&rust_state), keys(&node_state), "key sets differ");
    for (k, v) in &node_state {
        assert_eq!(
            &rust_state[k], v,
            "key emq:{Q}:{k} differs (left Rust, right Node)"
        );
    }
    (rust_results, rust_state)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Items 1–10, 13 (the add part), 14: every add path, fixed timestamp so that
/// delayed scores are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_of_every_kind_leave_the_same_keyspace() {
    let t = now_ms();
    let add = |name: &str, data: Json, mut opts: Json| {
        opts["timestamp"] = json!(t);
        json!(["add", name, data, opts])
    };
    let ops = vec![
        add("n", json!({"a": 1}), json!({})),
        add("n", json!({"b": [1, 2]}), json!({})),
        add("l", json!({}), json!({"lifo": true})),
        add("c", json!({}), json!({"jobId": "abc"})),
        add("c", json!({"other": true}), json!({"jobId": "abc"})),
        add("d", json!({}), json!({"delay": 500})),
        add("d3", json!({}), json!({"delay": 1000})),
        add("d3", json!({}), json!({"delay": 1000})),
        add("d3", json!({}), json!({"delay": 1000})),
        add("p", json!({}), json!({"priority": 5})),
        add("p", json!({}), json!({"priority": 1})),
        add("dp", json!({}), json!({"delay": 700, "priority": 2})),
        add(
            "r",
            json!({}),
            json!({"attempts": 3, "backoff": 1000, "removeOnComplete": 2,
                   "removeOnFail": {"age": 10, "count": 5}, "keepLogs": 4}),
        ),
        add(
            "u",
            json!({"text": "héllo wörld ✓ 日本", "nested": {"deep": [{"x": null}, 1.5, "\"q\""]}}),
            json!({}),
        ),
    ];
    let (results, state) = same_state(ops, Mask::default()).await;
    // A duplicate custom id answers the existing id and still uses up a
    // number of the counter (items 6, 7).
    assert_eq!(
        json!(results),
        json!(["1", "2", "3", "abc", "abc", "6", "7", "8", "9", "10", "11", "12", "13", "14"])
    );
    // A few values spelled out, beyond "same as Node".
    assert_eq!(state["id"], json!(["string", ["14", false]]));
    assert_eq!(state["meta"][1]["opts.maxLenEvents"], json!("10000"));
    assert_eq!(state["meta"][1]["version"], json!("bullmq:6.7.6"));
    // Head first: LPUSHed adds, the lifo job at the tail (items 4, 5).
    assert_eq!(state["wait"][1], json!(["14", "13", "abc", "2", "1", "3"]));
    let delayed = state["delayed"][1].as_array().unwrap();
    let score = |id: &str| -> u64 {
        delayed.iter().find(|p| p[0] == id).unwrap()[1]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    // The first job due in a millisecond gets the bare score, later ones +1.
    assert_eq!(score("6"), (t + 500) * 4096);
    assert_eq!(score("7"), (t + 1000) * 4096);
    assert_eq!(score("8"), score("7") + 1);
    assert_eq!(score("9"), score("7") + 2);
    assert_eq!(state["pc"], json!(["string", ["2", false]]));
    assert_eq!(
        state["13"][1]["opts"]["backoff"],
        json!({"type": "fixed", "delay": 1000})
    );
}

/// Items 68, 69 (state), 70, 71 (waiting job), 73, 50, 51, 44 (hash + event),
/// 76, 77: admin calls on a mixed queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_leave_the_same_keyspace() {
    let t = now_ms();
    let add = |name: &str, mut opts: Json| {
        opts["timestamp"] = json!(t);
        json!(["add", name, {"k": name}, opts])
    };
    let made = vec![
        add("a", json!({"keepLogs": 2})),
        add("b", json!({"delay": 60000})),
        add("c", json!({"delay": 60000, "priority": 3})),
        add("d", json!({"priority": 4})),
        add("e", json!({})),
        add("f", json!({"delay": 90000})),
        json!(["promote", "2"]),
        json!(["promote", "3"]),
        json!(["promote", "1"]),
        json!(["change-priority", "4", 0, false]),
        json!(["progress", "1", {"p": 50}]),
        json!(["log", "1", "one", 2]),
        json!(["log", "1", "two", 2]),
        json!(["log", "1", "three", 2]),
        json!(["update-data", "5", {"new": "dätä"}]),
    ];
    let paused = vec![
        json!(["pause"]),
        add("g", json!({})),
        json!(["resume"]),
        json!(["remove", "5"]),
    ];
    let drained = vec![json!(["drain", false])];
    let stages = same_states(vec![made, paused, drained], Mask::default()).await;
    let (results, state) = &stages[0];
    assert_eq!(results[8], json!("error"), "promote of a waiting job fails");
    assert_eq!(results[13], json!(2), "addLog answers the kept count");
    // Item 76: the two newest of three logs kept.
    assert_eq!(state["1:logs"], json!(["list", ["two", "three"]]));
    // Item 44: progress in the hash (JSON) and as an event.
    assert_eq!(state["1"][1]["progress"], json!({"p": 50}));
    let events = state["events"][1].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["event"] == "progress"
            && e["jobId"] == "1"
            && e["data"] == json!({"p": 50})),
        "{events:?}"
    );
    // Item 70: priority 0 moves job 4 from prioritized to wait.
    assert_eq!(state["4"][1]["priority"], json!("0"));
    let wait = state["wait"][1].as_array().unwrap();
    assert!(wait.contains(&json!("4")), "{wait:?}");
    let prioritized: Vec<&Json> = state["prioritized"][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p[0])
        .collect();
    assert_eq!(
        prioritized,
        [&json!("3")],
        "only the promoted job 3 is prioritized"
    );
    // Items 50, 51, 71: paused and resumed, 5 removed, g added meanwhile.
    let (_, state) = &stages[1];
    assert!(state.get("5").is_none());
    assert!(state["wait"][1].as_array().unwrap().contains(&json!("7")));
    // Item 73: drain(false) deleted the waiting jobs with their logs, kept
    // the delayed.
    let (_, state) = &stages[2];
    assert!(state.get("1").is_none() && state.get("1:logs").is_none());
    assert_eq!(state["delayed"][1].as_array().unwrap().len(), 1);
}

/// Item 69: changeDelay (the clock decides the score: masked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_delay_leaves_the_same_keyspace() {
    let ops = vec![
        json!(["add", "b", {}, {"delay": 60000, "timestamp": now_ms()}]),
        json!(["change-delay", "1", 5000]),
    ];
    let mask = Mask {
        delayed_scores: true,
        ..Default::default()
    };
    let (_, state) = same_state(ops, mask).await;
    assert_eq!(state["1"][1]["delay"], json!("5000"));
}

/// Items 18–21, 22, 25, 28, 29, 75, 72, 71 (completed job), 74 as each side's
/// own worker leaves them: a worker run, then retry, clean, remove, and
/// obliterate refused on a running queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_runs_and_finished_job_admin_leave_the_same_keyspace() {
    let t = now_ms();
    let add = |name: &str, data: Json, mut opts: Json| {
        opts["timestamp"] = json!(t);
        json!(["add", name, data, opts])
    };
    let ops = vec![
        add("ok", json!({"mode": "ok", "ret": {"ok": true}}), json!({})),
        add("none", json!({"mode": "ok"}), json!({})),
        add("fail", json!({"mode": "fail", "reason": "bad"}), json!({})),
        add(
            "again",
            json!({"mode": "fail-until", "n": 1, "reason": "once", "ret": 2}),
            json!({"attempts": 2}),
        ),
        add(
            "unrec",
            json!({"mode": "unrecoverable", "reason": "fatal"}),
            json!({"attempts": 5}),
        ),
        add(
            "keep2",
            json!({"mode": "ok"}),
            json!({"removeOnComplete": 2}),
        ),
        add(
            "keep2",
            json!({"mode": "ok"}),
            json!({"removeOnComplete": 2}),
        ),
        add(
            "keep2",
            json!({"mode": "ok"}),
            json!({"removeOnComplete": 2}),
        ),
        add(
            "gone",
            json!({"mode": "ok"}),
            json!({"removeOnComplete": true}),
        ),
        json!(["work"]),
        json!(["retry", "3"]),
        json!(["remove", "1"]),
    ];
    let mask = Mask {
        worked: true,
        ..Default::default()
    };
    let (results, state) = same_state(ops, mask).await;
    assert_eq!(results.len(), 12);
    // removeOnComplete: 2 trims the whole completed set to the two newest
    // when 7 and 8 finish; 4 finishes later (retried) and trims nothing.
    assert_eq!(
        state["completed"][1],
        json!([["4", "<masked>"], ["7", "<masked>"], ["8", "<masked>"]])
    );
    assert_eq!(state["4"][1]["returnvalue"], json!("2"));
    assert!(state.get("9").is_none() && state.get("6").is_none());
    assert_eq!(state["wait"], json!(["list", ["3"]]));
}

/// Item 72: clean of completed jobs, after a worker run on each side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_leaves_the_same_keyspace() {
    let t = now_ms();
    let ops = vec![
        json!(["add", "a", {"mode": "ok"}, {"timestamp": t}]),
        json!(["add", "b", {"mode": "ok"}, {"timestamp": t}]),
        json!(["add", "c", {"mode": "fail", "reason": "x"}, {"timestamp": t}]),
        json!(["work"]),
        json!(["clean", 0, 0, "completed"]),
    ];
    let mask = Mask {
        worked: true,
        ..Default::default()
    };
    let (results, state) = same_state(ops, mask).await;
    let mut cleaned: Vec<String> = serde_json::from_value(results[4].clone()).unwrap();
    cleaned.sort();
    assert_eq!(cleaned, ["1", "2"]);
    assert!(state.get("completed").is_none());
}

/// Item 74 (client level): obliterate pauses first, so it succeeds on a
/// running queue and leaves the same (nearly empty) keyspace on both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obliterate_leaves_the_same_keyspace() {
    let t = now_ms();
    let ops = vec![
        json!(["add", "a", {"mode": "ok"}, {"timestamp": t}]),
        json!(["add", "b", {"mode": "fail", "reason": "x"}, {"timestamp": t}]),
        json!(["add", "c", {}, {"delay": 60000, "timestamp": t}]),
        json!(["work"]),
        json!(["obliterate", false]),
    ];
    let mask = Mask {
        worked: true,
        ..Default::default()
    };
    let (results, state) = same_state(ops, mask).await;
    assert_eq!(results[4], Json::Null);
    assert!(
        state.get("1").is_none() && state.get("3").is_none(),
        "{state:?}"
    );
}

/// Items 65–67: deduplication, simple mode and with a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplication_leaves_the_same_keyspace() {
    let t = now_ms();
    let add = |name: &str, de: Json| json!(["add", name, {"mode": "ok"}, {"timestamp": t, "deduplication": de}]);
    let ops = vec![
        add("a", json!({"id": "D"})),
        add("b", json!({"id": "D"})),
        add("t", json!({"id": "T", "ttl": 5000})),
        add("t", json!({"id": "T", "ttl": 5000})),
        json!(["work"]),
        add("c", json!({"id": "D"})),
    ];
    let mask = Mask {
        worked: true,
        ..Default::default()
    };
    let (results, state) = same_state(ops, mask).await;
    assert_eq!(json!(results), json!(["1", "1", "3", "3", null, "5"]));
    // Completion freed D (a new job 5 owns it); T keeps its TTL.
    assert_eq!(state["de:D"], json!(["string", ["5", false]]));
    assert_eq!(state["de:T"], json!(["string", ["3", true]]));
    assert_eq!(state["1"][1]["deid"], json!("D"));
}

/// Node's `queue.retryJobs` and `queue.promoteJobs` (moveJobsToWait-8): every
/// job goes to the head of wait with LPUSH, in batches of `count`, whatever its
/// `lifo` or priority; promoted jobs keep their `delay` field and get a capped
/// `waiting` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_retry_and_promote_leave_the_same_keyspace() {
    let t = now_ms();
    let add = |name: &str, data: Json, mut opts: Json| {
        opts["timestamp"] = json!(t);
        json!(["add", name, data, opts])
    };
    let ops = vec![
        add(
            "f",
            json!({"mode": "fail", "reason": "x"}),
            json!({"lifo": true}),
        ),
        add("ok", json!({"mode": "ok", "ret": 7}), json!({})),
        json!(["work"]),
        add("w", json!({}), json!({})),
        add("d1", json!({}), json!({"delay": 60000})),
        add("d2", json!({}), json!({"delay": 50000, "priority": 3})),
        add("d3", json!({}), json!({"delay": 70000, "lifo": true})),
        json!(["retry-jobs", 1, "failed", t + 3_600_000]),
        json!(["retry-jobs", 5, "completed", t + 3_600_000]),
        json!(["promote-jobs", 2]),
    ];
    let mask = Mask {
        worked: true,
        ..Default::default()
    };
    let (results, state) = same_state(ops, mask).await;
    assert_eq!(results[7..], [Json::Null, Json::Null, Json::Null]);
    // Promoted by score (d2, d1, d3), then nothing more: each LPUSHed.
    assert_eq!(state["wait"][1], json!(["6", "4", "5", "2", "1", "3"]));
    assert!(state.get("delayed").is_none() && state.get("prioritized").is_none());
    assert_eq!(state["5"][1]["delay"], json!("50000"));
    assert!(state["1"][1].get("failedReason").is_none());
    assert!(state["2"][1].get("returnvalue").is_none());
}

/// A hard removal (drain, clean, obliterate) of the last child of a parent
/// in the same queue removes the parent too and frees the **parent's** own
/// deduplication id the way any removal does — only while the parent owns
/// it, with its `dn:` — as BullMQ 6.7.6 does. A `deid` on the child, whoever
/// owns its key, is no longer touched by the cascade (6.7.0 deleted it).
/// Both keyspaces are built by Node; only the removal differs, and the two
/// are compared whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_removal_of_a_last_child_removes_its_parent_and_dedup_keys_as_node_6_7_6() {
    // The parent's id owned by the parent: both of its keys go.
    let owned = hard_removal_of_the_last_child(["drain", "owned"]).await;
    assert!(
        owned.get("de:X").is_none() && owned.get("dn:X").is_none(),
        "{owned:?}"
    );
    assert_eq!(owned["de:D"], json!(["string", ["someone-else", false]]));
    // Owned by another job: kept, as its pending `dn:`.
    for op in ["drain", "clean", "obliterate"] {
        let state = hard_removal_of_the_last_child([op, "other"]).await;
        if op != "obliterate" {
            assert_eq!(state["de:X"], json!(["string", ["another", false]]), "{op}");
            assert!(state.contains_key("dn:X"), "{op}: {state:?}");
        }
    }
    hard_removal_of_the_last_child(["clean", "owned"]).await;
}

/// Flow P → C (C waiting), C's `deid` D owned by `someone-else`, P's `deid`
/// X owned by P or by `another`, then `op`, by Node on one server and by
/// EchoMQ on another; asserts the whole keyspaces equal and answers EchoMQ's.
async fn hard_removal_of_the_last_child([op, owner]: [&str; 2]) -> Map<String, Json> {
    // Node refuses deduplication on a child and a flow parent, so the
    // `deid`s and their keys are written by hand.
    let x_owner = if owner == "owned" { "P" } else { "another" };
    let setup = json!({ "ops": [
        ["flow", "parent", {"p": 1}, [{"name": "child", "data": {"c": 1}, "opts": {"jobId": "C"}}],
         {"jobId": "P"}],
        ["redis", "HSET", format!("emq:{Q}:C"), "deid", "D"],
        ["redis", "SET", format!("emq:{Q}:de:D"), "someone-else"],
        ["redis", "HSET", format!("emq:{Q}:P"), "deid", "X"],
        ["redis", "SET", format!("emq:{Q}:de:X"), x_owner],
        ["redis", "SET", format!("emq:{Q}:dn:X"), "next"],
        ["redis", "SET", format!("emq:{Q}:de:E"), "kept"],
    ]});
    let node_op = match op {
        "drain" => json!(["drain", false]),
        "clean" => json!(["clean", 0, 0, "wait"]),
        _ => json!(["obliterate", true]),
    };
    let node_redis = RedisServer::start();
    let made = bullmq("ops", &node_redis.url(), Q, setup.clone());
    assert_eq!(made[0], json!("P"));
    bullmq("ops", &node_redis.url(), Q, json!({ "ops": [node_op] }));
    let node_state = keyspace(&node_redis.client().await, Q, Mask::default()).await;

    let rust_redis = RedisServer::start();
    bullmq("ops", &rust_redis.url(), Q, setup);
    let before = keyspace(&rust_redis.client().await, Q, Mask::default()).await;
    assert!(before.contains_key("waiting-children") && before.contains_key("de:X"));
    let conn = rust_redis.connect().await;
    let q = Queue::new(&conn, Q).await.unwrap();
    match op {
        "drain" => q.drain(false).await.unwrap(),
        "clean" => {
            q.clean(Duration::ZERO, 0, JobState::Waiting).await.unwrap();
        }
        _ => q.obliterate(true).await.unwrap(),
    }
    let rust_state = keyspace(&rust_redis.client().await, Q, Mask::default()).await;
    conn.close().await;

    assert_eq!(
        rust_state.keys().collect::<Vec<_>>(),
        node_state.keys().collect::<Vec<_>>(),
        "{op} ({owner}): key sets differ"
    );
    for (k, v) in &node_state {
        assert_eq!(
            &rust_state[k], v,
            "{op} ({owner}): key emq:{Q}:{k} differs (left Rust, right Node)"
        );
    }
    if op != "obliterate" {
        assert!(rust_state.get("waiting-children").is_none());
        assert!(rust_state.get("P").is_none() && rust_state.get("C").is_none());
        assert_eq!(rust_state["de:E"], json!(["string", ["kept", false]]));
    }
    rust_state
}
