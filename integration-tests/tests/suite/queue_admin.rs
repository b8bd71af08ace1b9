//! The admin scripts through the `Queue` API (docs/protocol.md §Scripts): the
//! exact Redis state they leave (docs/protocol.md §Key layout) and the events they append
//! (docs/protocol.md §Events). Jobs reach `active`, `completed` and `failed` through the real
//! worker scripts (moveToActive / moveToFinished) driven by the harness's
//! simulated worker.

use std::time::Duration;

use echomq::protocol::call::admin::{ChangeDelay, Obliterate, ObliterateStep};
use echomq::protocol::call::lifecycle::Verdict;
use echomq::protocol::{FinishTarget, QueueKeys, ScriptErrorCode};
use echomq::{
    queue::Finished, queue::RemoveOutcome, Connection, Error, JobCounts, JobOptions, JobState,
    NewJob, Queue,
};
use echomq_integration_tests::state::{exists, hash, key_type, list, pairs, zset};
use echomq_integration_tests::{event_names, events, simulated, RedisServer};
use fred::prelude::*;
use serde_json::json;

const TOKEN: &str = "5c1d7e2a-8b4f-4a9e-b6d3-0f1e2d3c4b5a";
const T0: u64 = 1_700_000_000_000;
const TWO32: f64 = 4_294_967_296.0;

// ---------------------------------------------------------------- helpers

async fn setup(name: &str) -> (RedisServer, Connection, Client, Queue) {
    let (redis, conn, q) = RedisServer::with_queue(name).await;
    let c = redis.client().await;
    (redis, conn, c, q)
}

async fn add_at(q: &Queue, name: &str, opts: JobOptions) -> String {
    q.add(name, &json!({ "n": name }), opts).await.unwrap()
}

/// moveToActive with the test token; returns the taken id (None when idle).
async fn take(conn: &Connection, k: &QueueKeys, now: u64) -> Option<String> {
    simulated::take_at(conn, k, TOKEN, Duration::from_secs(30), now)
        .await
        .map(|(id, _)| id)
}

/// moveToFinished with the test token, keeping every job, no fetch-next.
async fn finish(
    conn: &Connection,
    k: &QueueKeys,
    id: &str,
    completed: bool,
    value: &str,
    now: u64,
) {
    let target = if completed {
        FinishTarget::Completed
    } else {
        FinishTarget::Failed
    };
    let v = simulated::finish(conn, k, id, TOKEN, target, value, now).await;
    assert_eq!(v, Verdict::Done(None), "moveToFinished {id}: {v:?}");
}

/// One job in every state:
/// 1 completed, 2 failed, 3 prioritized, 4 delayed, 5 active, 6 waiting,
/// `wc` waiting-children.
async fn populate(conn: &Connection, q: &Queue, c: &Client) {
    let k = q.keys().clone();
    for name in ["a", "b"] {
        add_at(q, name, JobOptions::new().timestamp(T0)).await;
    }
    add_at(q, "p", JobOptions::new().priority(1).timestamp(T0)).await;
    add_at(
        q,
        "d",
        JobOptions::new()
            .delay(Duration::from_secs(60))
            .timestamp(T0),
    )
    .await;
    add_at(q, "e", JobOptions::new().timestamp(T0)).await;
    add_at(q, "f", JobOptions::new().timestamp(T0)).await;
    assert_eq!(take(conn, &k, T0 + 1).await.as_deref(), Some("1"));
    finish(conn, &k, "1", true, r#"{"n":1}"#, T0 + 2).await;
    assert_eq!(take(conn, &k, T0 + 3).await.as_deref(), Some("2"));
    finish(conn, &k, "2", false, "boom", T0 + 4).await;
    assert_eq!(take(conn, &k, T0 + 5).await.as_deref(), Some("5"));
    let _: () = c
        .zadd(
            k.waiting_children(),
            None,
            None,
            false,
            false,
            (T0 as f64, "wc"),
        )
        .await
        .unwrap();
}

// ---------------------------------------------------------------- getCounts, getStateV2, isFinished

#[tokio::test]
async fn get_counts_counts_every_state_and_pops_a_legacy_marker() {
    let (_redis, conn, c, q) = setup("gc").await;
    populate(&conn, &q, &c).await;
    assert_eq!(
        q.counts().await.unwrap(),
        JobCounts {
            waiting: 1,
            prioritized: 1,
            delayed: 1,
            active: 1,
            completed: 1,
            failed: 1,
            waiting_children: 1,
        }
    );
    assert_eq!(q.counts().await.unwrap().pending(), 5);
    assert_eq!(
        q.count_states(&[JobState::Failed, JobState::Active, JobState::Waiting])
            .await
            .unwrap(),
        vec![1, 1, 1]
    );

    // A BullMQ <= 4 marker at the tail of wait: popped, never counted.
    let _: () = c.rpush("emq:gc:wait", "0:1700000000000").await.unwrap();
    assert_eq!(q.count_states(&[JobState::Waiting]).await.unwrap(), vec![1]);
    assert_eq!(list(&c, "emq:gc:wait").await, vec!["6"]);

    // A marker alone: reported as 0 and left in place.
    let solo = Queue::new(&conn, "solo").await.unwrap();
    let _: () = c.rpush("emq:solo:wait", "0:0").await.unwrap();
    assert_eq!(
        solo.count_states(&[JobState::Waiting]).await.unwrap(),
        vec![0]
    );
    assert_eq!(list(&c, "emq:solo:wait").await, vec!["0:0"]);
}

#[tokio::test]
async fn get_state_reports_every_state() {
    let (_redis, conn, c, q) = setup("gs").await;
    populate(&conn, &q, &c).await;
    let _: () = c.rpush("emq:gs:paused", "legacy").await.unwrap();
    let cases = [
        ("1", JobState::Completed),
        ("2", JobState::Failed),
        ("3", JobState::Prioritized),
        ("4", JobState::Delayed),
        ("5", JobState::Active),
        ("6", JobState::Waiting),
        ("legacy", JobState::Waiting),
        ("wc", JobState::WaitingChildren),
        ("nope", JobState::Unknown),
    ];
    for (id, state) in cases {
        assert_eq!(q.get_job_state(id).await.unwrap(), state, "job {id}");
    }
}

#[tokio::test]
async fn is_finished_returns_result_reason_or_not_found() {
    let (_redis, conn, c, q) = setup("fin").await;
    populate(&conn, &q, &c).await;
    assert_eq!(
        q.is_finished("1").await.unwrap(),
        Finished::Completed(json!({"n": 1}))
    );
    assert_eq!(
        q.is_finished("2").await.unwrap(),
        Finished::Failed("boom".into())
    );
    assert_eq!(q.is_finished("5").await.unwrap(), Finished::No);
    assert_eq!(q.is_finished("6").await.unwrap(), Finished::No);
    assert!(matches!(q.is_finished("nope").await, Err(Error::JobNotFound(id)) if id == "nope"));
}

// ---------------------------------------------------------------- pause / resume

#[tokio::test]
async fn pause_drops_the_marker_and_resume_rearms_it() {
    let (_redis, _conn, c, q) = setup("pz").await;
    add_at(&q, "a", JobOptions::new()).await;
    assert_eq!(
        zset(&c, "emq:pz:marker").await,
        vec![("0".to_string(), 0.0)]
    );

    q.pause().await.unwrap();
    assert!(q.is_paused().await.unwrap());
    assert_eq!(hash(&c, "emq:pz:meta").await["paused"], "1");
    assert!(!exists(&c, "emq:pz:marker").await);
    assert_eq!(
        list(&c, "emq:pz:wait").await,
        vec!["1"],
        "jobs stay in wait"
    );
    assert!(!exists(&c, "emq:pz:paused").await);

    // Adding while paused writes no marker.
    add_at(&q, "b", JobOptions::new()).await;
    assert!(!exists(&c, "emq:pz:marker").await);

    q.resume().await.unwrap();
    assert!(!q.is_paused().await.unwrap());
    assert!(!hash(&c, "emq:pz:meta").await.contains_key("paused"));
    assert_eq!(
        zset(&c, "emq:pz:marker").await,
        vec![("0".to_string(), 0.0)]
    );
    assert_eq!(list(&c, "emq:pz:wait").await, vec!["2", "1"]);

    let ev = events(&c, "emq:pz:events").await;
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        vec!["added", "waiting", "paused", "added", "waiting", "resumed"]
    );
    assert!(ev[2].1.is_empty(), "paused has no fields");
    assert!(ev[5].1.is_empty(), "resumed has no fields");
}

#[tokio::test]
async fn resume_with_only_delayed_jobs_sets_the_delay_marker() {
    let (_redis, _conn, c, q) = setup("pd").await;
    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_millis(1000))
            .timestamp(T0),
    )
    .await;
    q.pause().await.unwrap();
    assert!(!exists(&c, "emq:pd:marker").await);
    q.resume().await.unwrap();
    assert_eq!(
        zset(&c, "emq:pd:marker").await,
        vec![("1".to_string(), (T0 + 1000) as f64)]
    );
}

#[tokio::test]
async fn resume_migrates_a_legacy_paused_list() {
    let (_redis, _conn, c, q) = setup("lg").await;
    // BullMQ <= 5 parked waiting jobs in `paused`; no wait list exists: RENAME.
    let _: () = c.rpush("emq:lg:paused", vec!["a", "b", "c"]).await.unwrap();
    let _: () = c.hset("emq:lg:meta", ("paused", "1")).await.unwrap();
    q.resume().await.unwrap();
    assert_eq!(list(&c, "emq:lg:wait").await, vec!["a", "b", "c"]);
    assert!(!exists(&c, "emq:lg:paused").await);
    assert_eq!(
        zset(&c, "emq:lg:marker").await,
        vec![("0".to_string(), 0.0)]
    );

    // With a wait list: appended behind it, 7000 per call, one event in all.
    let big = Queue::new(q.connection(), "big").await.unwrap();
    add_at(&big, "x", JobOptions::new()).await;
    big.pause().await.unwrap();
    let legacy: Vec<String> = (0..7500).map(|i| format!("L{i}")).collect();
    for chunk in legacy.chunks(1000) {
        let _: () = c.rpush("emq:big:paused", chunk.to_vec()).await.unwrap();
    }
    big.resume().await.unwrap();
    let wait = list(&c, "emq:big:wait").await;
    assert_eq!(wait.len(), 7501);
    assert_eq!(wait[0], "1");
    assert_eq!(wait[1], "L0");
    assert_eq!(wait[7000], "L6999");
    assert_eq!(wait[7500], "L7499");
    assert!(!exists(&c, "emq:big:paused").await);
    let names = event_names(&c, "emq:big:events").await;
    assert_eq!(names, vec!["added", "waiting", "paused", "resumed"]);
    assert!(!big.is_paused().await.unwrap());
}

// ---------------------------------------------------------------- drain

#[tokio::test]
async fn drain_spares_active_finished_and_scheduler_iterations() {
    let (_redis, conn, c, q) = setup("dr").await;
    let k = q.keys().clone();
    add_at(&q, "active", JobOptions::new().timestamp(T0)).await; // 1
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));

    // Scheduler "sch": its current iteration sits in wait (at the tail, see
    // the drain quirk); scheduler "sch2": its current iteration is delayed.
    let it1 = format!("repeat:sch:{}", T0 + 60_000);
    let it2 = format!("repeat:sch2:{}", T0 + 5_000);
    let _: () = c
        .zadd(
            "emq:dr:repeat",
            None,
            None,
            false,
            false,
            ((T0 + 60_000) as f64, "sch"),
        )
        .await
        .unwrap();
    let _: () = c
        .zadd(
            "emq:dr:repeat",
            None,
            None,
            false,
            false,
            ((T0 + 5_000) as f64, "sch2"),
        )
        .await
        .unwrap();
    for (id, rjk) in [(&it1, "sch"), (&it2, "sch2")] {
        let fields = [
            ("name", "tick"),
            ("data", "{}"),
            ("opts", "{}"),
            ("timestamp", "1700000000000"),
            ("rjk", rjk),
        ];
        let _: () = c
            .hset(format!("emq:dr:{id}"), fields.to_vec())
            .await
            .unwrap();
    }
    let _: () = c.lpush("emq:dr:wait", it1.as_str()).await.unwrap();
    let _: () = c
        .zadd(
            "emq:dr:delayed",
            None,
            None,
            false,
            false,
            (((T0 + 5_000) * 4096) as f64, it2.as_str()),
        )
        .await
        .unwrap();

    add_at(&q, "w1", JobOptions::new().timestamp(T0)).await; // 2
    add_at(&q, "w2", JobOptions::new().timestamp(T0)).await; // 3
    add_at(&q, "p", JobOptions::new().priority(2).timestamp(T0)).await; // 4
    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_secs(1))
            .timestamp(T0),
    )
    .await; // 5
    q.add_log("2", "line", None).await.unwrap();
    let marker_before = zset(&c, "emq:dr:marker").await;
    let events_before = events(&c, "emq:dr:events").await.len();

    q.drain(false).await.unwrap();
    assert_eq!(list(&c, "emq:dr:wait").await, vec![it1.clone()]);
    assert!(!exists(&c, "emq:dr:prioritized").await);
    let delayed: Vec<String> = zset(&c, "emq:dr:delayed")
        .await
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(delayed, vec!["5".to_string(), it2.clone()]);
    for gone in ["2", "3", "4", "2:logs"] {
        assert!(
            !exists(&c, &format!("emq:dr:{gone}")).await,
            "{gone} should be deleted"
        );
    }
    for kept in ["1", "5", it1.as_str(), it2.as_str()] {
        assert!(
            exists(&c, &format!("emq:dr:{kept}")).await,
            "{kept} should be kept"
        );
    }
    assert_eq!(list(&c, "emq:dr:active").await, vec!["1"]);
    assert_eq!(
        events(&c, "emq:dr:events").await.len(),
        events_before,
        "drain emits nothing"
    );
    assert_eq!(
        zset(&c, "emq:dr:marker").await,
        marker_before,
        "marker untouched"
    );

    q.drain(true).await.unwrap();
    let delayed: Vec<String> = zset(&c, "emq:dr:delayed")
        .await
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(delayed, vec![it2.clone()]);
    assert!(!exists(&c, "emq:dr:5").await);
    assert!(exists(&c, &format!("emq:dr:{it2}")).await);
    assert_eq!(list(&c, "emq:dr:wait").await, vec![it1]);
    assert_eq!(zset(&c, "emq:dr:repeat").await.len(), 2);
}

// ---------------------------------------------------------------- obliterate

#[tokio::test]
async fn obliterate_refuses_active_jobs_without_force_then_removes_everything() {
    let (_redis, conn, c, q) = setup("ob").await;
    let k = q.keys().clone();
    add_at(&q, "a", JobOptions::new().timestamp(T0)).await; // 1
    add_at(&q, "b", JobOptions::new().timestamp(T0)).await; // 2
    add_at(&q, "c", JobOptions::new().timestamp(T0)).await; // 3
    add_at(&q, "p", JobOptions::new().priority(3).timestamp(T0)).await; // 4
    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_secs(9))
            .timestamp(T0),
    )
    .await; // 5
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    finish(&conn, &k, "1", true, "1", T0 + 1).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("2"));
    finish(&conn, &k, "2", false, "x", T0 + 1).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("3")); // active, locked
    q.add_log("4", "hello", None).await.unwrap();
    let _: () = c
        .zadd(
            "emq:ob:repeat",
            None,
            None,
            false,
            false,
            (T0 as f64, "sch"),
        )
        .await
        .unwrap();
    let _: () = c.hset("emq:ob:repeat:sch", ("name", "tick")).await.unwrap();
    let before = echomq_integration_tests::keys(&c, "emq:ob:*").await;

    assert!(matches!(q.obliterate(false).await, Err(Error::ActiveJobs)));
    // Paused first, nothing deleted.
    assert_eq!(hash(&c, "emq:ob:meta").await["paused"], "1");
    let mut after = echomq_integration_tests::keys(&c, "emq:ob:*").await;
    after.retain(|k| k != "emq:ob:marker");
    let mut expected = before.clone();
    expected.retain(|k| k != "emq:ob:marker");
    assert_eq!(after, expected);
    assert!(exists(&c, "emq:ob:3:lock").await);

    q.obliterate(true).await.unwrap();
    assert_eq!(
        echomq_integration_tests::keys(&c, "emq:ob:*").await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn obliterate_works_in_chunks_and_requires_a_paused_queue() {
    let (_redis, conn, c, q) = setup("oc").await;
    let jobs: Vec<NewJob> = (0..2500)
        .map(|i| NewJob {
            name: "n".into(),
            data: json!(i),
            options: JobOptions::new(),
        })
        .collect();
    q.add_bulk(jobs).await.unwrap();
    let k = q.keys().clone();
    let run = |max_jobs: u32| {
        let conn = conn.clone();
        let k = k.clone();
        async move {
            let call = Obliterate {
                keys: &k,
                max_jobs,
                force: false,
            };
            conn.call(&call).await.unwrap()
        }
    };
    assert_eq!(run(1000).await, ObliterateStep::NotPaused, "not paused");
    assert_eq!(c.llen::<i64, _>("emq:oc:wait").await.unwrap(), 2500);
    q.pause().await.unwrap();
    assert_eq!(
        run(1000).await,
        ObliterateStep::Again,
        "budget exhausted: call again"
    );
    assert_eq!(c.llen::<i64, _>("emq:oc:wait").await.unwrap(), 1500);
    assert!(exists(&c, "emq:oc:meta").await);
    // A chunk takes the head of wait: the 1000 newest jobs.
    assert!(!exists(&c, "emq:oc:2500").await);
    assert!(exists(&c, "emq:oc:1").await);
    q.obliterate(false).await.unwrap();
    assert_eq!(
        echomq_integration_tests::keys(&c, "emq:oc:*").await,
        Vec::<String>::new()
    );
}

// ---------------------------------------------------------------- removeJob

#[tokio::test]
async fn remove_deletes_the_job_and_emits_removed_with_prev() {
    let (_redis, conn, c, q) = setup("rm").await;
    let k = q.keys().clone();
    add_at(&q, "w", JobOptions::new().timestamp(T0)).await; // 1
    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_secs(5))
            .timestamp(T0),
    )
    .await; // 2
    add_at(&q, "p", JobOptions::new().priority(2).timestamp(T0)).await; // 3
    add_at(&q, "c", JobOptions::new().timestamp(T0)).await; // 4
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    finish(&conn, &k, "1", true, "null", T0 + 1).await;
    q.add_log("4", "l1", None).await.unwrap();

    for (id, prev) in [
        ("4", "wait"),
        ("2", "delayed"),
        ("3", "prioritized"),
        ("1", "completed"),
    ] {
        assert_eq!(q.remove(id, true).await.unwrap(), RemoveOutcome::Removed);
        let ev = events(&c, "emq:rm:events").await;
        let last = ev.last().unwrap();
        assert_eq!(last.0, "removed");
        assert_eq!(last.1, pairs(&[("jobId", id), ("prev", prev)]));
        assert!(!exists(&c, &format!("emq:rm:{id}")).await);
    }
    assert!(!exists(&c, "emq:rm:4:logs").await);
    assert!(!exists(&c, "emq:rm:wait").await);
    assert!(!exists(&c, "emq:rm:delayed").await);
    assert!(!exists(&c, "emq:rm:prioritized").await);
    assert!(!exists(&c, "emq:rm:completed").await);

    // A job nobody has: nothing to delete, no event.
    let n = events(&c, "emq:rm:events").await.len();
    assert_eq!(
        q.remove("nope", true).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert_eq!(events(&c, "emq:rm:events").await.len(), n);
}

#[tokio::test]
async fn remove_leaves_locked_jobs_and_refuses_current_scheduler_iterations() {
    let (_redis, conn, c, q) = setup("rl").await;
    let k = q.keys().clone();
    add_at(&q, "a", JobOptions::new().timestamp(T0)).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    let n = events(&c, "emq:rl:events").await.len();
    assert_eq!(q.remove("1", true).await.unwrap(), RemoveOutcome::Locked);
    assert!(exists(&c, "emq:rl:1").await);
    assert_eq!(list(&c, "emq:rl:active").await, vec!["1"]);
    assert_eq!(events(&c, "emq:rl:events").await.len(), n);

    let current = format!("repeat:sch:{T0}");
    let old = format!("repeat:sch:{}", T0 - 1000);
    let _: () = c
        .zadd(
            "emq:rl:repeat",
            None,
            None,
            false,
            false,
            (T0 as f64, "sch"),
        )
        .await
        .unwrap();
    for id in [&current, &old] {
        let _: () = c
            .hset(
                format!("emq:rl:{id}"),
                vec![("name", "tick"), ("rjk", "sch")],
            )
            .await
            .unwrap();
    }
    let _: () = c
        .zadd(
            "emq:rl:delayed",
            None,
            None,
            false,
            false,
            ((T0 * 4096) as f64, current.as_str()),
        )
        .await
        .unwrap();
    let _: () = c
        .zadd(
            "emq:rl:completed",
            None,
            None,
            false,
            false,
            ((T0 - 1000) as f64, old.as_str()),
        )
        .await
        .unwrap();

    let r = q.remove(&current, true).await;
    assert!(
        matches!(
            r,
            Err(Error::Script {
                code: ScriptErrorCode::JobBelongsToJobScheduler,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(exists(&c, &format!("emq:rl:{current}")).await);
    // A past iteration is an ordinary job.
    assert_eq!(q.remove(&old, true).await.unwrap(), RemoveOutcome::Removed);
    let ev = events(&c, "emq:rl:events").await;
    assert_eq!(
        ev.last().unwrap().1,
        pairs(&[("jobId", old.as_str()), ("prev", "completed")])
    );
}

// ---------------------------------------------------------------- promote

#[tokio::test]
async fn promote_moves_a_delayed_job_to_wait_or_prioritized() {
    let (_redis, _conn, c, q) = setup("pr").await;
    add_at(&q, "w", JobOptions::new().timestamp(T0)).await; // 1
    let r = q.promote("1").await;
    assert!(
        matches!(
            r,
            Err(Error::Script {
                code: ScriptErrorCode::JobNotInState,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(matches!(
        q.promote("nope").await,
        Err(Error::Script {
            code: ScriptErrorCode::JobNotInState,
            ..
        })
    ));

    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_secs(5))
            .timestamp(T0),
    )
    .await; // 2
    assert_eq!(hash(&c, "emq:pr:2").await["delay"], "5000");
    // A legacy marker at the head of wait is dropped by promote.
    let _: () = c.lpush("emq:pr:wait", "0:0").await.unwrap();
    q.promote("2").await.unwrap();
    assert_eq!(list(&c, "emq:pr:wait").await, vec!["2", "1"]);
    assert!(!exists(&c, "emq:pr:delayed").await);
    assert_eq!(hash(&c, "emq:pr:2").await["delay"], "0");
    assert_eq!(q.get_job_state("2").await.unwrap(), JobState::Waiting);
    assert_eq!(
        zset(&c, "emq:pr:marker").await,
        vec![
            ("0".to_string(), 0.0),
            ("1".to_string(), (T0 + 5000) as f64)
        ]
    );
    let ev = events(&c, "emq:pr:events").await;
    assert_eq!(ev.last().unwrap().0, "waiting");
    assert_eq!(
        ev.last().unwrap().1,
        pairs(&[("jobId", "2"), ("prev", "delayed")])
    );

    // Priority path: a fresh priority counter.
    add_at(
        &q,
        "dp",
        JobOptions::new()
            .delay(Duration::from_secs(5))
            .priority(4)
            .timestamp(T0),
    )
    .await; // 3
    q.promote("3").await.unwrap();
    assert_eq!(
        zset(&c, "emq:pr:prioritized").await,
        vec![("3".to_string(), 4.0 * TWO32 + 1.0)]
    );
    assert_eq!(c.get::<String, _>("emq:pr:pc").await.unwrap(), "1");
    assert_eq!(hash(&c, "emq:pr:3").await["delay"], "0");
    assert_eq!(list(&c, "emq:pr:wait").await, vec!["2", "1"]);

    // promote_all: Node's promoteJobs. `count` is the batch of one script
    // call, the calls repeat until delayed is empty; every job is LPUSHed in
    // score order (priority ignored, `delay` kept).
    for _ in 0..3 {
        add_at(
            &q,
            "x",
            JobOptions::new()
                .delay(Duration::from_secs(5))
                .timestamp(T0),
        )
        .await; // 4, 5, 6
    }
    assert_eq!(q.chunked(2).promote_all().await.unwrap(), 3);
    assert_eq!(list(&c, "emq:pr:wait").await, vec!["6", "5", "4", "2", "1"]);
    assert!(!exists(&c, "emq:pr:delayed").await);
    assert_eq!(hash(&c, "emq:pr:4").await["delay"], "5000");
    assert_eq!(q.chunked(10).promote_all().await.unwrap(), 0);
}

// ---------------------------------------------------------------- reprocessJob (retry_job)

#[tokio::test]
async fn retry_job_requeues_completed_and_failed_jobs() {
    let (_redis, conn, c, q) = setup("rt").await;
    let k = q.keys().clone();
    add_at(&q, "a", JobOptions::new().attempts(3).timestamp(T0)).await; // 1
    add_at(&q, "b", JobOptions::new().lifo(true).timestamp(T0)).await; // 2 (tail)
    add_at(&q, "c", JobOptions::new().timestamp(T0)).await; // 3
    assert_eq!(list(&c, "emq:rt:wait").await, vec!["3", "1", "2"]);
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("2"));
    finish(&conn, &k, "2", true, "42", T0 + 1).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    let _: () = c
        .hset("emq:rt:1", ("stacktrace", r#"["Error: boom"]"#))
        .await
        .unwrap();
    finish(&conn, &k, "1", false, "boom", T0 + 2).await;

    q.retry_job("1", false).await.unwrap();
    assert!(!exists(&c, "emq:rt:failed").await);
    assert_eq!(list(&c, "emq:rt:wait").await, vec!["1", "3"]);
    let h = hash(&c, "emq:rt:1").await;
    for gone in ["finishedOn", "processedOn", "failedReason"] {
        assert!(!h.contains_key(gone), "{gone} should be removed");
    }
    assert_eq!(h["atm"], "1");
    assert_eq!(h["ats"], "1");
    assert_eq!(h["stacktrace"], r#"["Error: boom"]"#);
    let ev = events(&c, "emq:rt:events").await;
    assert_eq!(ev.last().unwrap().0, "waiting");
    assert_eq!(
        ev.last().unwrap().1,
        pairs(&[("jobId", "1"), ("prev", "failed")])
    );
    assert_eq!(
        zset(&c, "emq:rt:marker").await,
        vec![("0".to_string(), 0.0)]
    );

    // Completed, lifo (RPUSH: runs next), attempts reset.
    q.retry_job("2", true).await.unwrap();
    assert!(!exists(&c, "emq:rt:completed").await);
    assert_eq!(list(&c, "emq:rt:wait").await, vec!["1", "3", "2"]);
    let h = hash(&c, "emq:rt:2").await;
    for gone in ["finishedOn", "processedOn", "returnvalue", "atm", "ats"] {
        assert!(!h.contains_key(gone), "{gone} should be removed");
    }
    let ev = events(&c, "emq:rt:events").await;
    assert_eq!(
        ev.last().unwrap().1,
        pairs(&[("jobId", "2"), ("prev", "completed")])
    );

    let r = q.retry_job("3", false).await;
    assert!(
        matches!(
            r,
            Err(Error::Script {
                code: ScriptErrorCode::JobNotInState,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(matches!(
        q.retry_job("nope", false).await,
        Err(Error::JobNotFound(_))
    ));

    // retry_failed: Node's retryJobs: every failed job, oldest first, each
    // LPUSHed (lifo ignored).
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("2"));
    finish(&conn, &k, "2", false, "x", T0 + 5).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("3"));
    finish(&conn, &k, "3", false, "y", T0 + 6).await;
    assert_eq!(
        q.chunked(10)
            .retry_jobs(FinishTarget::Failed, None)
            .await
            .unwrap(),
        2
    );
    assert_eq!(list(&c, "emq:rt:wait").await, vec!["3", "2", "1"]);
}

// ---------------------------------------------------------------- cleanJobsInSet

#[tokio::test]
async fn clean_deletes_old_jobs_per_state_with_limit_and_cleaned_event() {
    let (_redis, conn, c, q) = setup("cl").await;
    let k = q.keys().clone();
    let later = echomq::clock::now_ms() + 3_600_000;
    for name in ["c1", "c2", "f3", "c4"] {
        add_at(&q, name, JobOptions::new().timestamp(T0)).await;
    }
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    finish(&conn, &k, "1", true, "1", T0 + 1).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("2"));
    finish(&conn, &k, "2", true, "2", T0 + 2).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("3"));
    finish(&conn, &k, "3", false, "3", T0 + 3).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("4"));
    finish(&conn, &k, "4", true, "4", later).await;
    add_at(&q, "old-wait", JobOptions::new().timestamp(T0)).await; // 5
    add_at(&q, "new-wait", JobOptions::new()).await; // 6
    add_at(
        &q,
        "old-delayed",
        JobOptions::new()
            .delay(Duration::from_secs(1))
            .timestamp(T0),
    )
    .await; // 7
    add_at(
        &q,
        "new-delayed",
        JobOptions::new().delay(Duration::from_secs(60)),
    )
    .await; // 8
    add_at(&q, "old-prio", JobOptions::new().priority(1).timestamp(T0)).await; // 9
    q.add_log("1", "x", None).await.unwrap();

    // Completed by finishedOn, lowest score first, limit 1.
    assert_eq!(
        q.clean(Duration::ZERO, 1, JobState::Completed)
            .await
            .unwrap(),
        vec!["1"]
    );
    assert!(!exists(&c, "emq:cl:1").await);
    assert!(!exists(&c, "emq:cl:1:logs").await);
    assert_eq!(
        zset(&c, "emq:cl:completed").await,
        vec![
            ("2".to_string(), (T0 + 2) as f64),
            ("4".to_string(), later as f64)
        ]
    );
    assert_eq!(
        q.clean(Duration::ZERO, 0, JobState::Completed)
            .await
            .unwrap(),
        vec!["2"]
    );
    assert_eq!(
        q.clean(Duration::ZERO, 0, JobState::Failed).await.unwrap(),
        vec!["3"]
    );
    assert!(!exists(&c, "emq:cl:failed").await);

    let grace = Duration::from_secs(60);
    assert_eq!(
        q.clean(grace, 0, JobState::Waiting).await.unwrap(),
        vec!["5"]
    );
    assert_eq!(list(&c, "emq:cl:wait").await, vec!["6"]);
    assert_eq!(
        q.clean(grace, 0, JobState::Delayed).await.unwrap(),
        vec!["7"]
    );
    let delayed: Vec<String> = zset(&c, "emq:cl:delayed")
        .await
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(delayed, vec!["8"]);
    assert_eq!(
        q.clean(grace, 0, JobState::Prioritized).await.unwrap(),
        vec!["9"]
    );
    assert!(!exists(&c, "emq:cl:9").await);
    // Nothing old left: still a cleaned event, with count 0.
    assert_eq!(
        q.clean(grace, 0, JobState::Waiting).await.unwrap(),
        Vec::<String>::new()
    );
    assert!(exists(&c, "emq:cl:6").await);
    assert!(exists(&c, "emq:cl:8").await);

    let cleaned: Vec<Vec<(String, String)>> = events(&c, "emq:cl:events")
        .await
        .into_iter()
        .filter(|(n, _)| n == "cleaned")
        .map(|(_, f)| f)
        .collect();
    let counts: Vec<&str> = cleaned.iter().map(|f| f[0].1.as_str()).collect();
    assert_eq!(counts, vec!["1", "1", "1", "1", "1", "1", "0"]);
    assert_eq!(cleaned[0], pairs(&[("count", "1")]));
    // clean emits no `removed`.
    assert!(!event_names(&c, "emq:cl:events")
        .await
        .contains(&"removed".to_string()));

    assert!(matches!(
        q.clean(grace, 0, JobState::Unknown).await,
        Err(Error::Validation(_))
    ));
}

#[tokio::test]
async fn clean_waiting_with_limit_takes_the_oldest() {
    let (_redis, _conn, c, q) = setup("cw").await;
    for _ in 0..4 {
        add_at(&q, "old", JobOptions::new().timestamp(T0)).await;
    }
    // Limit 2: the two oldest (tail of wait).
    let mut cleaned = q.clean(Duration::ZERO, 2, JobState::Waiting).await.unwrap();
    cleaned.sort();
    assert_eq!(cleaned, vec!["1", "2"]);
    assert_eq!(list(&c, "emq:cw:wait").await, vec!["4", "3"]);
}

// ---------------------------------------------------------------- getRanges / get_jobs

#[tokio::test]
async fn get_ranges_orders_lists_and_sorted_sets() {
    let (_redis, conn, c, q) = setup("gr").await;
    let k = q.keys().clone();
    add_at(&q, "a", JobOptions::new().timestamp(T0)).await; // 1
    add_at(&q, "b", JobOptions::new().timestamp(T0)).await; // 2
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    finish(&conn, &k, "1", true, "1", T0 + 10).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("2"));
    finish(&conn, &k, "2", true, "2", T0 + 20).await;
    for name in ["c", "d", "e"] {
        add_at(&q, name, JobOptions::new().timestamp(T0)).await; // 3, 4, 5
    }
    assert_eq!(list(&c, "emq:gr:wait").await, vec!["5", "4", "3"]);

    let w = [JobState::Waiting];
    assert_eq!(
        q.get_ranges(&w, 0, -1, echomq::RangeOrder::Descending)
            .await
            .unwrap(),
        vec!["5", "4", "3"]
    );
    assert_eq!(
        q.get_ranges(&w, 0, -1, echomq::RangeOrder::Ascending)
            .await
            .unwrap(),
        vec!["3", "4", "5"]
    );
    assert_eq!(
        q.get_ranges(&w, 0, 1, echomq::RangeOrder::Ascending)
            .await
            .unwrap(),
        vec!["3", "4"]
    );
    assert_eq!(
        q.get_ranges(&w, 0, 1, echomq::RangeOrder::Descending)
            .await
            .unwrap(),
        vec!["5", "4"]
    );
    assert_eq!(
        q.get_ranges(&w, 1, 1, echomq::RangeOrder::Ascending)
            .await
            .unwrap(),
        vec!["4"]
    );

    let done = [JobState::Completed];
    assert_eq!(
        q.get_ranges(&done, 0, -1, echomq::RangeOrder::Ascending)
            .await
            .unwrap(),
        vec!["1", "2"]
    );
    assert_eq!(
        q.get_ranges(&done, 0, -1, echomq::RangeOrder::Descending)
            .await
            .unwrap(),
        vec!["2", "1"]
    );
    assert_eq!(
        q.get_ranges(&done, 0, 0, echomq::RangeOrder::Descending)
            .await
            .unwrap(),
        vec!["2"]
    );
    assert_eq!(
        q.get_ranges(
            &[JobState::Waiting, JobState::Completed],
            0,
            -1,
            echomq::RangeOrder::Ascending
        )
        .await
        .unwrap(),
        vec!["3", "4", "5", "1", "2"]
    );
    // The same state twice yields each id once.
    assert_eq!(
        q.get_ranges(
            &[JobState::Completed, JobState::Completed],
            0,
            -1,
            echomq::RangeOrder::Ascending
        )
        .await
        .unwrap(),
        vec!["1", "2"]
    );

    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("3"));
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("4"));
    assert_eq!(
        q.get_ranges(&[JobState::Active], 0, -1, echomq::RangeOrder::Descending)
            .await
            .unwrap(),
        vec!["4", "3"]
    );
    assert_eq!(
        q.get_ranges(&[JobState::Active], 0, -1, echomq::RangeOrder::Ascending)
            .await
            .unwrap(),
        vec!["3", "4"]
    );

    let jobs = q
        .get_jobs(&done, 0, -1, echomq::RangeOrder::Descending)
        .await
        .unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, vec!["2", "1"]);
    assert_eq!(jobs[0].name, "b");
    assert_eq!(jobs[0].finished_on, Some(T0 + 20));
    assert_eq!(jobs[0].return_value, Some(json!(2)));
    // An id whose hash is gone is skipped.
    let _: () = c.del("emq:gr:1").await.unwrap();
    assert_eq!(
        q.get_jobs(&done, 0, -1, echomq::RangeOrder::Ascending)
            .await
            .unwrap()
            .len(),
        1
    );
}

// ---------------------------------------------------------------- changeDelay

#[tokio::test]
async fn change_delay_rescores_the_job_and_emits_delayed() {
    let (_redis, _conn, c, q) = setup("cd").await;
    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_secs(1))
            .timestamp(T0),
    )
    .await; // 1
    let before = echomq::clock::now_ms();
    q.change_delay("1", Duration::from_secs(5)).await.unwrap();
    let after = echomq::clock::now_ms();
    let z = zset(&c, "emq:cd:delayed").await;
    assert_eq!(z.len(), 1);
    let score = z[0].1 as u64;
    assert_eq!(score % 4096, 0);
    let due = score / 4096;
    assert!((before + 5000..=after + 5000).contains(&due), "due {due}");
    assert_eq!(hash(&c, "emq:cd:1").await["delay"], "5000");
    let ev = events(&c, "emq:cd:events").await;
    assert_eq!(ev.last().unwrap().0, "delayed");
    assert_eq!(
        ev.last().unwrap().1,
        pairs(&[("jobId", "1"), ("delay", &due.to_string())])
    );
    assert_eq!(
        zset(&c, "emq:cd:marker").await,
        vec![("1".to_string(), due as f64)]
    );

    add_at(&q, "w", JobOptions::new()).await; // 2
    let r = q.change_delay("2", Duration::from_secs(5)).await;
    assert!(
        matches!(
            r,
            Err(Error::Script {
                code: ScriptErrorCode::JobNotInState,
                ..
            })
        ),
        "{r:?}"
    );
    let r = q.change_delay("nope", Duration::from_secs(5)).await;
    assert!(
        matches!(r, Err(Error::JobNotFound(ref id)) if id == "nope"),
        "{r:?}"
    );
}

// ---------------------------------------------------------------- changePriority

#[tokio::test]
async fn change_priority_moves_jobs_between_wait_and_prioritized() {
    let (_redis, conn, c, q) = setup("cp").await;
    let k = q.keys().clone();
    for name in ["a", "b", "c"] {
        add_at(&q, name, JobOptions::new().timestamp(T0)).await;
    }
    assert_eq!(list(&c, "emq:cp:wait").await, vec!["3", "2", "1"]);

    let _: () = c.del("emq:cp:marker").await.unwrap();
    q.change_priority("2", 5, false).await.unwrap();
    assert_eq!(list(&c, "emq:cp:wait").await, vec!["3", "1"]);
    assert_eq!(
        zset(&c, "emq:cp:prioritized").await,
        vec![("2".to_string(), 5.0 * TWO32 + 1.0)]
    );
    assert_eq!(hash(&c, "emq:cp:2").await["priority"], "5");
    assert_eq!(
        zset(&c, "emq:cp:marker").await,
        vec![("0".to_string(), 0.0)]
    );
    assert_eq!(q.get_job_state("2").await.unwrap(), JobState::Prioritized);

    // Back to priority 0: LPUSH (fifo) into wait.
    q.change_priority("2", 0, false).await.unwrap();
    assert!(!exists(&c, "emq:cp:prioritized").await);
    assert_eq!(list(&c, "emq:cp:wait").await, vec!["2", "3", "1"]);
    assert_eq!(hash(&c, "emq:cp:2").await["priority"], "0");

    // lifo with priority 0: RPUSH, runs next.
    q.change_priority("3", 0, true).await.unwrap();
    assert_eq!(list(&c, "emq:cp:wait").await, vec!["2", "1", "3"]);

    // lifo with a priority: counter 0 (front of its priority), no marker.
    let _: () = c.del("emq:cp:marker").await.unwrap();
    q.change_priority("1", 7, true).await.unwrap();
    assert_eq!(
        zset(&c, "emq:cp:prioritized").await,
        vec![("1".to_string(), 7.0 * TWO32)]
    );
    assert!(!exists(&c, "emq:cp:marker").await);
    assert_eq!(list(&c, "emq:cp:wait").await, vec!["2", "3"]);

    // Prioritized to another priority: new counter.
    q.change_priority("1", 2, false).await.unwrap();
    assert_eq!(
        zset(&c, "emq:cp:prioritized").await,
        vec![("1".to_string(), 2.0 * TWO32 + 2.0)]
    );
    assert_eq!(c.get::<String, _>("emq:cp:pc").await.unwrap(), "2");

    // An active job only gets its field.
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("3"));
    q.change_priority("3", 9, false).await.unwrap();
    assert_eq!(hash(&c, "emq:cp:3").await["priority"], "9");
    assert_eq!(list(&c, "emq:cp:active").await, vec!["3"]);
    assert_eq!(zset(&c, "emq:cp:prioritized").await.len(), 1);

    let r = q.change_priority("nope", 1, false).await;
    assert!(
        matches!(r, Err(Error::JobNotFound(ref id)) if id == "nope"),
        "{r:?}"
    );
    assert!(!exists(&c, "emq:cp:nope").await);
    assert!(matches!(
        q.change_priority("2", -1, false).await,
        Err(Error::Validation(_))
    ));
    // No events from changePriority.
    let names = event_names(&c, "emq:cp:events").await;
    assert!(
        names
            .iter()
            .all(|n| ["added", "waiting", "active"].contains(&n.as_str())),
        "{names:?}"
    );
}

// ---------------------------------------------------------------- updateProgress, updateData, addLog

#[tokio::test]
async fn update_progress_data_and_logs() {
    let (_redis, _conn, c, q) = setup("up").await;
    add_at(&q, "a", JobOptions::new().timestamp(T0)).await;

    q.update_progress("1", &json!({"pct": 50})).await.unwrap();
    assert_eq!(hash(&c, "emq:up:1").await["progress"], r#"{"pct":50}"#);
    q.update_progress("1", &75).await.unwrap();
    assert_eq!(hash(&c, "emq:up:1").await["progress"], "75");
    let ev = events(&c, "emq:up:events").await;
    let progress: Vec<_> = ev
        .iter()
        .filter(|(n, _)| n == "progress")
        .map(|(_, f)| f.clone())
        .collect();
    assert_eq!(
        progress,
        vec![
            pairs(&[("jobId", "1"), ("data", r#"{"pct":50}"#)]),
            pairs(&[("jobId", "1"), ("data", "75")])
        ]
    );
    assert_eq!(q.get_job("1").await.unwrap().unwrap().progress, json!(75));

    let n = ev.len();
    q.update_data("1", &json!({"x": 2})).await.unwrap();
    assert_eq!(hash(&c, "emq:up:1").await["data"], r#"{"x":2}"#);
    assert_eq!(q.get_job("1").await.unwrap().unwrap().data, json!({"x": 2}));

    assert_eq!(q.add_log("1", "a", None).await.unwrap(), 1);
    assert_eq!(q.add_log("1", "b", None).await.unwrap(), 2);
    assert_eq!(q.add_log("1", "c", Some(2)).await.unwrap(), 2);
    assert_eq!(list(&c, "emq:up:1:logs").await, vec!["b", "c"]);
    assert_eq!(q.add_log("1", "d", Some(5)).await.unwrap(), 3);
    assert_eq!(
        q.get_job_logs("1", 0, -1, echomq::RangeOrder::Ascending)
            .await
            .unwrap()
            .logs,
        vec!["b", "c", "d"]
    );
    assert_eq!(
        q.get_job_logs("1", -1, -1, echomq::RangeOrder::Ascending)
            .await
            .unwrap()
            .logs,
        vec!["d"]
    );
    assert_eq!(key_type(&c, "emq:up:1:logs").await, "list");
    assert_eq!(
        events(&c, "emq:up:events").await.len(),
        n,
        "updateData and addLog emit nothing"
    );

    assert!(matches!(
        q.update_progress("nope", &1).await,
        Err(Error::JobNotFound(_))
    ));
    assert!(matches!(
        q.update_data("nope", &1).await,
        Err(Error::JobNotFound(_))
    ));
    assert!(matches!(
        q.add_log("nope", "x", None).await,
        Err(Error::JobNotFound(_))
    ));
    assert_eq!(
        echomq_integration_tests::keys(&c, "emq:up:nope*").await,
        Vec::<String>::new()
    );
    assert_eq!(events(&c, "emq:up:events").await.len(), n);
}

#[tokio::test]
async fn clean_active_skips_locked_jobs_and_scheduler_iterations() {
    let (_redis, conn, c, q) = setup("ca").await;
    let k = q.keys().clone();
    for name in ["a", "b", "c"] {
        add_at(&q, name, JobOptions::new().timestamp(T0)).await;
    }
    for id in ["1", "2", "3"] {
        assert_eq!(take(&conn, &k, T0).await.as_deref(), Some(id));
    }
    // 1 keeps its lock (a live worker); 2 and 3 lost theirs; 3 is the
    // current iteration of scheduler "sch".
    let _: () = c.del(vec![k.lock("2"), k.lock("3")]).await.unwrap();
    let _: () = c.hset(k.job("3"), ("rjk", "sch")).await.unwrap();
    let _: () = c
        .rename(k.job("3"), format!("emq:ca:repeat:sch:{T0}"))
        .await
        .unwrap();
    let _: () = c.lrem(k.active(), 1, "3").await.unwrap();
    let _: () = c
        .lpush(k.active(), format!("repeat:sch:{T0}"))
        .await
        .unwrap();
    let _: () = c
        .zadd(k.repeat(), None, None, false, false, (T0 as f64, "sch"))
        .await
        .unwrap();

    assert_eq!(
        q.clean(Duration::ZERO, 0, JobState::Active).await.unwrap(),
        vec!["2"]
    );
    assert_eq!(
        list(&c, "emq:ca:active").await,
        vec![format!("repeat:sch:{T0}"), "1".to_string()]
    );
    assert!(exists(&c, "emq:ca:1").await);
    assert!(!exists(&c, "emq:ca:2").await);
    let ev = events(&c, "emq:ca:events").await;
    assert_eq!(
        ev.last().unwrap(),
        &("cleaned".to_string(), pairs(&[("count", "1")]))
    );
}

#[tokio::test]
async fn change_delay_within_the_same_millisecond_takes_the_next_slot() {
    // BullMQ scores the new position while the job is still in the set.
    let (_redis, conn, c, q) = setup("cs").await;
    let k = q.keys().clone();
    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_millis(1000))
            .timestamp(T0),
    )
    .await;
    let base = ((T0 + 1000) * 4096) as f64;
    assert_eq!(
        zset(&c, "emq:cs:delayed").await,
        vec![("1".to_string(), base)]
    );
    let call = ChangeDelay {
        keys: &k,
        id: "1",
        delay: Duration::from_millis(1000),
        now_ms: T0,
    };
    // Success is the reply 0; any other reply is an error.
    conn.call(&call).await.unwrap();
    assert_eq!(
        zset(&c, "emq:cs:delayed").await,
        vec![("1".to_string(), base + 1.0)]
    );
    assert_eq!(
        zset(&c, "emq:cs:marker").await,
        vec![("1".to_string(), (T0 + 1000) as f64 + 1.0 / 4096.0)]
    );
}

#[tokio::test]
async fn retry_job_of_a_prioritized_job_goes_to_prioritized() {
    // BullMQ 6.7.0's reprocessJob-9 (6.2.0's went to wait; docs/protocol.md §Scripts).
    let (_redis, conn, c, q) = setup("rp").await;
    let k = q.keys().clone();
    add_at(&q, "p", JobOptions::new().priority(5).timestamp(T0)).await;
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    finish(&conn, &k, "1", true, "1", T0 + 1).await;
    q.retry_job("1", false).await.unwrap();
    assert!(!exists(&c, "emq:rp:wait").await);
    let prioritized = zset(&c, "emq:rp:prioritized").await;
    assert_eq!(prioritized.len(), 1);
    assert_eq!(prioritized[0].0, "1");
    assert_eq!(prioritized[0].1 as u64 >> 32, 5, "in its priority band");
    assert_eq!(q.get_job_state("1").await.unwrap(), JobState::Prioritized);
}

#[tokio::test]
async fn bulk_retry_and_promote_with_count_zero_move_nothing() {
    let (_redis, conn, c, q) = setup("bz").await;
    let k = q.keys().clone();
    add_at(&q, "a", JobOptions::new().timestamp(T0)).await; // 1
    add_at(
        &q,
        "d",
        JobOptions::new()
            .delay(Duration::from_secs(5))
            .timestamp(T0),
    )
    .await; // 2
    assert_eq!(take(&conn, &k, T0).await.as_deref(), Some("1"));
    finish(&conn, &k, "1", false, "x", T0 + 1).await;
    assert_eq!(
        q.chunked(0)
            .retry_jobs(FinishTarget::Failed, None)
            .await
            .unwrap(),
        0
    );
    assert_eq!(q.chunked(0).promote_all().await.unwrap(), 0);
    assert_eq!(zset(&c, "emq:bz:failed").await.len(), 1);
    assert_eq!(zset(&c, "emq:bz:delayed").await.len(), 1);
    assert!(!exists(&c, "emq:bz:wait").await);
    assert_eq!(
        q.chunked(1)
            .retry_jobs(FinishTarget::Failed, None)
            .await
            .unwrap(),
        1
    );
    assert_eq!(q.chunked(1).promote_all().await.unwrap(), 1);
    assert_eq!(list(&c, "emq:bz:wait").await, vec!["2", "1"]);
}
