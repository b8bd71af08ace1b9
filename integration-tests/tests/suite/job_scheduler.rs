//! Job schedulers (docs/protocol.md §Job schedulers, §Scripts) against a real
//! Redis: every and cron schedulers, limits, removal, racing workers, the
//! reconciliation sweep, cron equivalence with npm cron-parser and state
//! equivalence with BullMQ Node's `upsertJobScheduler`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::protocol::call::lifecycle::Verdict;
use echomq::protocol::{Job, QueueKeys};
use echomq::scheduler::create_next_iteration;
use echomq::scheduler::{CronSchedule, SchedulerError};
use echomq::{
    Connection, Error, JobOptions, JobScheduler, JobSchedulerArgs, JobSchedulerMsg, JobSchedulers,
    SchedulerSpec,
};
use echomq_integration_tests::{
    bullmq, bullmq_work_until, events, keys, simulated, timeline, RedisServer,
};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

// ---------------------------------------------------------------- helpers

fn now_ms() -> u64 {
    echomq::clock::now_ms()
}

async fn setup(queue: &str) -> (RedisServer, Connection, Client, JobSchedulers) {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let client = redis.client().await;
    let schedulers = JobSchedulers::new(&conn, queue).unwrap();
    (redis, conn, client, schedulers)
}

/// A simulated worker's moveToActive: the taken job, if any.
async fn take(conn: &Connection, k: &QueueKeys, token: &str) -> Option<Job> {
    let (id, hash) = simulated::take(conn, k, token, Duration::from_secs(30)).await?;
    Some(Job::from_hash(&id, hash).unwrap())
}

/// A simulated worker's moveToFinished (completed, kept).
async fn complete(conn: &Connection, k: &QueueKeys, id: &str, token: &str) {
    let v = simulated::complete(conn, k, id, token).await;
    assert_eq!(v, Verdict::Done(None), "moveToFinished {id}: {v:?}");
}

/// Ids of the scheduler's iterations that are not finished yet.
async fn pending(c: &Client, k: &QueueKeys) -> Vec<String> {
    let mut ids: Vec<String> = c.lrange(k.wait(), 0, -1).await.unwrap();
    let delayed: Vec<String> = c
        .zrange(k.delayed(), 0, -1, None, false, None, false)
        .await
        .unwrap();
    let prioritized: Vec<String> = c
        .zrange(k.prioritized(), 0, -1, None, false, None, false)
        .await
        .unwrap();
    ids.extend(delayed);
    ids.extend(prioritized);
    ids.sort();
    ids
}

fn millis_of(job_id: &str) -> u64 {
    job_id.rsplit(':').next().unwrap().parse().unwrap()
}

/// One simulated worker: takes iterations, creates the successor at pick-up
/// (as a Worker must), completes them; records (job id, time taken).
async fn worker_loop(
    conn: Connection,
    k: QueueKeys,
    token: String,
    taken: Arc<Mutex<Vec<(String, u64)>>>,
    until: usize,
    deadline: Instant,
) {
    while taken.lock().unwrap().len() < until && Instant::now() < deadline {
        match take(&conn, &k, &token).await {
            Some(job) => {
                let at = now_ms();
                create_next_iteration(&conn, &k, &job).await.unwrap();
                taken.lock().unwrap().push((job.id.clone(), at));
                complete(&conn, &k, &job.id, &token).await;
            }
            None => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

// ------------------------------------------------------------ schedulers

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_200ms_with_three_racing_workers_is_on_time_without_gaps_or_duplicates() {
    let (_redis, conn, c, schedulers) = setup("race").await;
    let k = schedulers.keys().clone();
    let first = schedulers
        .upsert(
            &SchedulerSpec::every("tick", Duration::from_millis(200)).template(
                "tick",
                json!({"n": 1}),
                JobOptions::new(),
            ),
        )
        .await
        .unwrap()
        .expect("an iteration");
    assert_eq!(first.delay, 0, "the first every iteration runs at once");
    let first_millis = millis_of(&first.job_id);

    let taken = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let workers: Vec<_> = (0..3)
        .map(|i| {
            tokio::spawn(worker_loop(
                conn.clone(),
                k.clone(),
                format!("00000000-0000-4000-8000-00000000000{i}"),
                taken.clone(),
                20,
                deadline,
            ))
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    schedulers.remove("tick").await.unwrap();

    let taken = taken.lock().unwrap().clone();
    assert!(taken.len() >= 20, "only {} iterations ran", taken.len());
    let ids: Vec<&str> = taken.iter().map(|(id, _)| id.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an iteration ran twice: {ids:?}");
    let mut millis: Vec<u64> = ids.iter().map(|id| millis_of(id)).collect();
    millis.sort();
    for (i, m) in millis.iter().enumerate() {
        assert_eq!(
            *m,
            first_millis + 200 * i as u64,
            "gap or shift at {i}: {millis:?}"
        );
    }
    for (id, at) in &taken {
        let due = millis_of(id);
        assert!(*at >= due, "{id} ran before its time ({at})");
        assert!(*at < due + 1_000, "{id} ran {} ms late", at - due);
    }
    // Every iteration is a proper scheduler job.
    let stored: HashMap<String, String> = c.hgetall(k.job(ids[3])).await.unwrap();
    assert_eq!(stored["rjk"], "tick");
    assert_eq!(stored["name"], "tick");
    assert_eq!(stored["data"], r#"{"n":1}"#);
}

#[tokio::test]
async fn cron_in_a_zone_produces_its_occurrences() {
    let (_redis, conn, c, schedulers) = setup("cron").await;
    let k = schedulers.keys().clone();
    let pattern = "*/2 * * * * *";
    let spec = SchedulerSpec::cron("even", pattern, Some("America/New_York"));
    let before = now_ms();
    let first = schedulers.upsert(&spec).await.unwrap().unwrap();
    let m1 = millis_of(&first.job_id);
    let expected = CronSchedule::new(pattern, Some("America/New_York"))
        .unwrap()
        .next_after(before as i64, None, None)
        .unwrap() as u64;
    assert!(
        m1 == expected || m1 == expected + 2_000,
        "{m1} vs {expected}"
    );
    assert_eq!(m1 % 2_000, 0);

    let hash: HashMap<String, String> = c.hgetall(k.scheduler("even")).await.unwrap();
    assert_eq!(hash["pattern"], pattern);
    assert_eq!(hash["tz"], "America/New_York");
    assert_eq!(hash["name"], "even", "the name defaults to the id");
    assert_eq!(hash["ic"], "1");
    assert_eq!(hash["offset"], "0");

    // Take three iterations in turn: each produces the next occurrence.
    let mut current = first.job_id.clone();
    for _ in 0..3 {
        let job = loop {
            if let Some(j) = take(&conn, &k, "00000000-0000-4000-8000-000000000001").await {
                break j;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(job.id, current);
        let opts = job.opts.to_stored();
        assert_eq!(opts["prevMillis"], json!(millis_of(&current)));
        assert_eq!(opts["repeat"]["pattern"], json!(pattern));
        assert_eq!(opts["repeat"]["tz"], json!("America/New_York"));
        let next = create_next_iteration(&conn, &k, &job)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(millis_of(&next), millis_of(&current) + 2_000);
        complete(&conn, &k, &job.id, "00000000-0000-4000-8000-000000000001").await;
        current = next;
    }
    let info = schedulers.get("even").await.unwrap().unwrap();
    assert_eq!(info.iteration_count, 4);
    assert_eq!(info.next, millis_of(&current));
    assert_eq!(info.tz.as_deref(), Some("America/New_York"));
}

/// Runs a simulated worker until the schedule is over: nothing of it is
/// pending (an iteration not due yet is pending too), so nothing more can
/// come. Panics after 10 s.
async fn drain_iterations(conn: &Connection, c: &Client, k: &QueueKeys) -> Vec<String> {
    let mut ran = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        match take(conn, k, "00000000-0000-4000-8000-000000000009").await {
            Some(job) => {
                create_next_iteration(conn, k, &job).await.unwrap();
                complete(conn, k, &job.id, "00000000-0000-4000-8000-000000000009").await;
                ran.push(job.id);
            }
            None if pending(c, k).await.is_empty() => return ran,
            None => {
                assert!(
                    Instant::now() < give_up,
                    "still pending after 10 s: {ran:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Runs a simulated worker until it ran `n` iterations; panics after `limit`.
async fn run_worker(conn: &Connection, k: &QueueKeys, n: usize, limit: Duration) -> Vec<String> {
    let mut ran = Vec::new();
    let give_up = Instant::now() + limit;
    while ran.len() < n {
        match take(conn, k, "00000000-0000-4000-8000-000000000009").await {
            Some(job) => {
                create_next_iteration(conn, k, &job).await.unwrap();
                complete(conn, k, &job.id, "00000000-0000-4000-8000-000000000009").await;
                ran.push(job.id);
            }
            None => {
                assert!(Instant::now() < give_up, "{ran:?} after {limit:?}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    ran
}

#[tokio::test]
async fn limit_stops_a_scheduler_after_exactly_n_iterations() {
    let (_redis, conn, c, schedulers) = setup("limit").await;
    let k = schedulers.keys().clone();
    schedulers
        .upsert(&SchedulerSpec::every("three", Duration::from_millis(100)).limit(3))
        .await
        .unwrap()
        .unwrap();
    let ran = drain_iterations(&conn, &c, &k).await;
    assert_eq!(ran.len(), 3, "{ran:?}");
    assert!(pending(&c, &k).await.is_empty());
    let info = schedulers.get("three").await.unwrap().unwrap();
    assert_eq!(info.limit, Some(3));
    assert_eq!(info.iteration_count, 3);
}

#[tokio::test]
async fn end_date_stops_a_scheduler() {
    let (_redis, conn, c, schedulers) = setup("end").await;
    let k = schedulers.keys().clone();
    let end = now_ms() + 450;
    schedulers
        .upsert(&SchedulerSpec::every("short", Duration::from_millis(100)).end_date(end))
        .await
        .unwrap()
        .unwrap();
    let ran = drain_iterations(&conn, &c, &k).await;
    // At most one per 100 ms slot up to the end; a late worker skips slots
    // (its next is computed from now), so only the first is certain.
    assert!((1..=6).contains(&ran.len()), "{ran:?}");
    assert!(ran.iter().all(|id| millis_of(id) <= end + 100), "{ran:?}");
    assert!(
        pending(&c, &k)
            .await
            .iter()
            .all(|id| millis_of(id) <= end + 100),
        "nothing is scheduled for after the end date"
    );
    // Over: nothing is pending any more, and the scheduler makes nothing.
    assert!(pending(&c, &k).await.is_empty());
    assert!(take(&conn, &k, "00000000-0000-4000-8000-000000000009")
        .await
        .is_none());
}

#[tokio::test]
async fn remove_stops_a_scheduler() {
    let (_redis, conn, c, schedulers) = setup("remove").await;
    let k = schedulers.keys().clone();
    let first = schedulers
        .upsert(&SchedulerSpec::every("gone", Duration::from_millis(100)))
        .await
        .unwrap()
        .unwrap();
    // The first iteration is taken; its successor is delayed.
    let job = take(&conn, &k, "00000000-0000-4000-8000-000000000001")
        .await
        .unwrap();
    assert_eq!(job.id, first.job_id);
    let next = create_next_iteration(&conn, &k, &job)
        .await
        .unwrap()
        .unwrap();

    assert!(schedulers.remove("gone").await.unwrap());
    assert!(
        !schedulers.remove("gone").await.unwrap(),
        "a second remove finds nothing"
    );
    assert!(schedulers.get("gone").await.unwrap().is_none());
    assert!(
        pending(&c, &k).await.is_empty(),
        "the delayed iteration is deleted"
    );
    let ev = events(&c, &k.events()).await;
    assert!(ev
        .iter()
        .any(|(name, f)| name == "removed" && f.contains(&("jobId".into(), next.clone()))));
    // A worker still holding an iteration produces nothing more.
    assert_eq!(create_next_iteration(&conn, &k, &job).await.unwrap(), None);
    assert!(drain_iterations(&conn, &c, &k).await.is_empty());
    // Only the iteration that was already taken is left: it runs to completion.
    assert_eq!(
        keys(&c, "emq:remove:repeat*").await,
        vec![k.job(&first.job_id), k.lock(&first.job_id)]
    );
}

#[tokio::test]
async fn invalid_definitions_are_refused_and_write_nothing() {
    let (_redis, _conn, c, schedulers) = setup("invalid").await;
    let now = now_ms();
    let cases = vec![
        SchedulerSpec::cron("bad", "61 * * * *", Some("UTC")),
        SchedulerSpec::cron("bad", "* * * * *", Some("Nowhere/Special")),
        SchedulerSpec::every("bad", Duration::ZERO),
        SchedulerSpec::every("bad", Duration::from_secs(1))
            .start_date(now + 10_000)
            .end_date(now + 5_000),
        SchedulerSpec::every("bad", Duration::from_secs(1)).end_date(now - 1),
        SchedulerSpec::every("bad", Duration::from_secs(1)).limit(0),
    ];
    for spec in cases {
        match schedulers.upsert(&spec).await {
            Err(Error::Scheduler(e)) => {
                let _: SchedulerError = e;
            }
            other => panic!("{spec:?} gave {other:?}"),
        }
    }
    assert!(keys(&c, "emq:invalid:*").await.is_empty());
}

#[tokio::test]
async fn two_quick_upserts_through_the_actor_leave_one_pending_iteration() {
    let (_redis, conn, c, _schedulers) = setup("upsert").await;
    let k = QueueKeys::new("emq", "upsert").unwrap();
    let mut args = JobSchedulerArgs::new(conn.clone(), "upsert");
    args.sweep_interval = Duration::ZERO;
    let (actor, handle) = Actor::spawn(None, JobScheduler, args).await.unwrap();

    let start = now_ms() + 60_000;
    let a = SchedulerSpec::every("s", Duration::from_secs(10)).start_date(start);
    let b = SchedulerSpec::cron("s", "0 0 1 1 *", Some("Europe/London")).template(
        "second",
        json!({"v": 2}),
        JobOptions::new().attempts(2),
    );
    let (ra, rb) = tokio::join!(
        async { call_t!(actor, JobSchedulerMsg::Upsert, 5_000, Box::new(a.clone())) },
        async { call_t!(actor, JobSchedulerMsg::Upsert, 5_000, Box::new(b.clone())) },
    );
    ra.unwrap().unwrap().unwrap();
    let second = rb.unwrap().unwrap().unwrap();

    assert_eq!(pending(&c, &k).await, vec![second.job_id.clone()]);
    let all_iterations = keys(&c, "emq:upsert:repeat:s:*").await;
    assert_eq!(all_iterations, vec![k.job(&second.job_id)]);
    let info = call_t!(actor, JobSchedulerMsg::Get, 5_000, "s".to_string())
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(info.name, "second");
    assert_eq!(info.pattern.as_deref(), Some("0 0 1 1 *"));
    assert_eq!(info.every, None);
    assert_eq!(info.data, Some(json!({"v": 2})));
    assert_eq!(
        info.options,
        Some(json!({"attempts": 2}).as_object().unwrap().clone())
    );
    let list = call_t!(actor, JobSchedulerMsg::List, 5_000)
        .unwrap()
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, "s");
    actor.stop(None);
    handle.await.unwrap();
}

#[tokio::test]
async fn the_sweep_restores_a_deleted_iteration() {
    let (_redis, conn, c, schedulers) = setup("sweep").await;
    let k = schedulers.keys().clone();
    let first = schedulers
        .upsert(&SchedulerSpec::every("keep", Duration::from_millis(300)))
        .await
        .unwrap()
        .unwrap();
    // The iteration is lost: gone from wait and its hash deleted.
    let _: i64 = c.lrem(k.wait(), 0, first.job_id.as_str()).await.unwrap();
    let _: i64 = c.del(k.job(&first.job_id)).await.unwrap();
    assert!(pending(&c, &k).await.is_empty());

    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    let mut args = JobSchedulerArgs::new(conn.clone(), "sweep");
    args.sweep_interval = Duration::from_millis(100);
    args.sweep_grace = Duration::from_millis(50);
    args.on_restored = Some(Arc::new(move |n| sink.lock().unwrap().push(n)));
    let (actor, handle) = Actor::spawn(None, JobScheduler, args).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(5);
    while notices.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let notice = notices
        .lock()
        .unwrap()
        .first()
        .cloned()
        .expect("a restore notice");
    assert_eq!(notice.scheduler_id, "keep");
    assert_eq!(notice.missing_job_id, first.job_id);
    assert_eq!(pending(&c, &k).await, vec![notice.new_job_id.clone()]);
    assert!(millis_of(&notice.new_job_id) > millis_of(&first.job_id));
    assert_eq!(
        millis_of(&notice.new_job_id) % 300,
        millis_of(&first.job_id) % 300,
        "same phase"
    );
    let score: f64 = c.zscore(k.repeat(), "keep").await.unwrap();
    assert_eq!(score as u64, millis_of(&notice.new_job_id));

    // A healthy scheduler is left alone, and the restored one runs normally.
    let report = call_t!(actor, JobSchedulerMsg::SweepNow, 5_000)
        .unwrap()
        .unwrap();
    assert!(report.restored.is_empty(), "{report:?}");
    let ran = run_worker(&conn, &k, 2, Duration::from_secs(10)).await;
    assert_eq!(ran.len(), 2, "{ran:?}");
    assert_eq!(ran[0], notice.new_job_id);
    actor.stop(None);
    handle.await.unwrap();
}

// ------------------------------------------------------------ interop

/// Hash fields that depend on the moment of the call.
fn comparable(mut h: HashMap<String, String>) -> HashMap<String, Json> {
    h.remove("timestamp");
    h.remove("delay");
    h.into_iter()
        .map(|(k, v)| {
            let v = if k == "opts" || k == "data" {
                let mut j: Json = serde_json::from_str(&v).unwrap();
                if let Some(o) = j.as_object_mut() {
                    o.remove("timestamp");
                    o.remove("delay");
                }
                j
            } else {
                Json::String(v)
            };
            (k, v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn node_upsert_and_ours_write_the_same_state() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    let start = now_ms() + 3_600_000;
    let end = start + 400 * 86_400_000;
    let day = 86_400_000u64;
    let offset = 5 * 3_600_000 + 17;

    // (Node repeat options, our spec) pairs describing the same scheduler.
    let cases = vec![
        (
            json!({"pattern": "15 4 * * 1", "tz": "Asia/Kolkata", "startDate": start, "endDate": end, "limit": 10}),
            SchedulerSpec::cron("weekly", "15 4 * * 1", Some("Asia/Kolkata"))
                .start_date(start)
                .end_date(end)
                .limit(10),
        ),
        (
            json!({"every": day, "offset": offset}),
            SchedulerSpec::every_with_offset(
                "daily",
                Duration::from_millis(day),
                Duration::from_millis(offset),
            ),
        ),
        (
            json!({"every": day, "startDate": start}),
            SchedulerSpec::every("later", Duration::from_millis(day)).start_date(start),
        ),
    ];
    for (node_repeat, spec) in cases {
        let spec = spec.template(
            "report",
            json!({"to": "ops", "n": [1, 2]}),
            JobOptions::new()
                .attempts(3)
                .remove_on_complete(echomq::KeepJobs::Count(5)),
        );
        let id = spec.id.clone();
        let node = bullmq(
            "upsert-scheduler",
            &redis.url(),
            "node-q",
            json!({
                "id": id,
                "repeat": node_repeat,
                "template": {"name": "report", "data": {"to": "ops", "n": [1, 2]},
                             "opts": {"attempts": 3, "removeOnComplete": 5}},
            }),
        );
        let ours = JobSchedulers::new(&conn, "rust-q")
            .unwrap()
            .upsert(&spec)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            node["id"].as_str(),
            Some(ours.job_id.as_str()),
            "iteration id of {id}"
        );

        let nk = QueueKeys::new("emq", "node-q").unwrap();
        let rk = QueueKeys::new("emq", "rust-q").unwrap();
        let nh: HashMap<String, String> = c.hgetall(nk.scheduler(&id)).await.unwrap();
        let rh: HashMap<String, String> = c.hgetall(rk.scheduler(&id)).await.unwrap();
        assert_eq!(comparable(rh), comparable(nh), "scheduler hash of {id}");
        let ns: f64 = c.zscore(nk.repeat(), id.as_str()).await.unwrap();
        let rs: f64 = c.zscore(rk.repeat(), id.as_str()).await.unwrap();
        assert_eq!(ns, rs);
        let nj: HashMap<String, String> = c.hgetall(nk.job(&ours.job_id)).await.unwrap();
        let rj: HashMap<String, String> = c.hgetall(rk.job(&ours.job_id)).await.unwrap();
        assert_eq!(comparable(rj), comparable(nj), "iteration hash of {id}");

        // Node reads our scheduler as it reads its own.
        let mut seen_by_node = bullmq("get-scheduler", &redis.url(), "rust-q", json!({"id": id}));
        let mut node_own = bullmq("get-scheduler", &redis.url(), "node-q", json!({"id": id}));
        seen_by_node.as_object_mut().unwrap().remove("key");
        node_own.as_object_mut().unwrap().remove("key");
        assert_eq!(seen_by_node, node_own);
    }
}

// ------------------------------------------------------------ cron table

fn interop_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
}

/// Runs `interop/cron.js` (cron-parser as BullMQ Node uses it) on `cases`.
fn cron_parser(cases: &[Json]) -> Vec<Json> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("node")
        .current_dir(interop_dir())
        .arg("cron.js")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node is installed");
    let input = Json::Array(cases.to_vec()).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "node cron.js failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cron.js prints JSON")
}

fn ours(case: &Json) -> Json {
    let pattern = case["pattern"].as_str().unwrap();
    let tz = case["tz"].as_str();
    match CronSchedule::new(pattern, tz) {
        Err(e) => json!({ "error": e.to_string() }),
        Ok(s) => match s.next_after(
            case["from"].as_i64().unwrap(),
            case["startDate"].as_i64(),
            case["endDate"].as_i64(),
        ) {
            Some(n) => json!(n),
            None => Json::Null,
        },
    }
}

const PATTERNS: &[&str] = &[
    "0 2 * * *",
    "30 2 * * *",
    "0 1 * * *",
    "30 1 * * *",
    "59 1 * * *",
    "0 3 * * *",
    "*/15 * * * *",
    "0 * * * *",
    "0 0 * * *",
    "15 3 * * 0",
    "15 3 * * 7",
    "0 9 1,15 * 1",
    "0 12 13 * 5",
    "*/20 * * * * *",
    "30 15 10 * * *",
    "0 0 29 2 *",
    "0 0 L * *",
    "0 9 * * 1-5",
    "0 9 * * mon-fri",
    "45 23 * * 6",
    "0 0 ? * 1",
    "0 1-3 * * *",
    "0 0 * * 5#2",
    "0 */2 * * *",
    "5 4 * * sun",
    "0 0 1 */3 *",
    "0/10 * * * *",
    "5/20 * * * * *",
    "0 9 * * MON-FRI",
    "0 12 * JAN,jul *",
    "0 0 * * 5L",
    "0 0 15W * *",
    "@weekly",
];

const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/London",
    "Asia/Kolkata",
    "Australia/Sydney",
];

/// Reference times around the 2024 DST transitions of the zones above, plus
/// ordinary moments, some with a millisecond part.
fn references() -> Vec<i64> {
    let transitions: &[i64] = &[
        1_710_054_000_000, // 2024-03-10T07:00Z New York springs forward
        1_730_613_600_000, // 2024-11-03T06:00Z New York falls back
        1_711_846_800_000, // 2024-03-31T01:00Z London springs forward
        1_729_990_800_000, // 2024-10-27T01:00Z London falls back
        1_712_419_200_000, // 2024-04-06T16:00Z Sydney falls back
        1_728_144_000_000, // 2024-10-05T16:00Z Sydney springs forward
    ];
    let offsets: &[i64] = &[
        -3 * 3_600_000,
        -2 * 3_600_000,
        -90 * 60_000,
        -3_600_001,
        -3_600_000,
        -30 * 60_000,
        -1,
        0,
        1,
        30 * 60_000,
        3_600_000,
        90 * 60_000,
    ];
    let mut refs: Vec<i64> = transitions
        .iter()
        .flat_map(|t| offsets.iter().map(move |o| t + o))
        .collect();
    refs.extend([
        1_704_067_200_000, // 2024-01-01T00:00Z
        1_709_164_800_123, // 2024-02-29T00:00:00.123Z
        1_718_236_799_999, // 2024-06-12T23:59:59.999Z
        1_735_689_599_500, // 2024-12-31T23:59:59.500Z
    ]);
    refs
}

#[test]
fn cron_matches_cron_parser() {
    let mut cases = Vec::new();
    for p in PATTERNS {
        for z in ZONES {
            for r in references() {
                cases.push(json!({ "pattern": p, "tz": z, "from": r }));
            }
        }
    }
    // No `tz`: both sides use the process's local zone (docs/decisions.md §7 Cron).
    for p in PATTERNS {
        for r in references().iter().step_by(7) {
            cases.push(json!({ "pattern": p, "from": r }));
        }
    }
    // Start and end dates bound the search as in BullMQ.
    let t: i64 = 1_710_054_000_000;
    cases.push(
        json!({"pattern": "0 * * * *", "tz": "UTC", "from": t, "startDate": t + 5 * 3_600_000 + 1}),
    );
    cases.push(json!({"pattern": "0 * * * *", "tz": "UTC", "from": t, "endDate": t + 1_800_000}));
    cases.push(json!({"pattern": "0 * * * *", "tz": "UTC", "from": t, "endDate": t + 3_600_000}));
    cases.push(json!({"pattern": "0 * * * *", "tz": "UTC", "from": t + 7_200_000, "endDate": t + 3_600_000}));

    let expected = cron_parser(&cases);
    let mut mismatches = Vec::new();
    for (case, want) in cases.iter().zip(&expected) {
        let got = ours(case);
        let agree = match (want, &got) {
            // Both refuse the pattern: the messages differ by design.
            (Json::Object(a), Json::Object(b)) => {
                a.contains_key("error") && b.contains_key("error")
            }
            _ => want == &got,
        };
        if !agree {
            mismatches.push(format!("{case} cron-parser={want} echomq={got}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_and_rust_workers_share_one_scheduler_without_duplicates() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let schedulers = JobSchedulers::new(&conn, "mixed").unwrap();
    let k = schedulers.keys().clone();
    let first = schedulers
        .upsert(&SchedulerSpec::cron(
            "mix",
            "* * * * * *",
            Some("Europe/London"),
        ))
        .await
        .unwrap()
        .unwrap();

    // Each side creates successors with its own cron computation: a
    // simulated Rust worker alone takes one iteration, then a Node Worker
    // alone (until it took one), then both side by side until the next three
    // iterations are done, whoever takes them.
    let url = redis.url();
    let taken = Arc::new(Mutex::new(Vec::new()));
    let token = "00000000-0000-4000-8000-00000000000a".to_owned();
    worker_loop(
        conn.clone(),
        k.clone(),
        token.clone(),
        taken.clone(),
        1,
        Instant::now() + Duration::from_secs(20),
    )
    .await;
    assert_eq!(taken.lock().unwrap().len(), 1, "Rust took one alone");
    let solo = bullmq_work_until(&url, "mixed", json!({"jobs": 1, "deadlineMs": 30_000}));
    assert!(solo.done, "Node took one alone: {solo:?}");
    let c = redis.client().await;
    let next = pending(&c, &k).await;
    assert_eq!(next.len(), 1, "one next iteration: {next:?}");
    let from = millis_of(&next[0]);
    let shared: Vec<String> = (0..3)
        .map(|i| format!("repeat:mix:{}", from + 1000 * i))
        .collect();
    let (u, ids) = (url.clone(), shared.clone());
    let node = tokio::task::spawn_blocking(move || {
        bullmq_work_until(&u, "mixed", json!({"finished": ids, "deadlineMs": 30_000}))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut done = true;
        for id in &shared {
            let state: Option<String> = c.hget(k.job(id), "finishedOn").await.unwrap();
            done &= state.is_some();
        }
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "{shared:?} not all finished");
        match take(&conn, &k, &token).await {
            Some(job) => {
                let at = now_ms();
                create_next_iteration(&conn, &k, &job).await.unwrap();
                taken.lock().unwrap().push((job.id.clone(), at));
                complete(&conn, &k, &job.id, &token).await;
            }
            None => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    let both = node.await.unwrap();
    assert!(both.done, "{both:?}");
    schedulers.remove("mix").await.unwrap();

    let mut ids: Vec<String> = taken
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    let mut node_ids = solo.ids();
    node_ids.extend(both.ids());
    ids.extend(node_ids);
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "an iteration ran twice: {ids:?}");
    let mut millis: Vec<u64> = ids.iter().map(|id| millis_of(id)).collect();
    millis.sort();
    assert_eq!(millis[0], millis_of(&first.job_id));
    // A slot is skipped only where the clock says so: an iteration taken
    // (its `active` event, Redis's clock) after its successor's slot passed
    // makes the next at the first occurrence after that moment, on either
    // side; any other gap is a fault.
    let stamps = timeline::stamps(&c, &k.events()).await;
    for pair in millis.windows(2) {
        let gap = pair[1] - pair[0];
        if gap == 1_000 {
            continue;
        }
        let id = format!("repeat:mix:{}", pair[0]);
        let at = stamps
            .iter()
            .find(|s| s.name == "active" && s.job_id == id)
            .map(|s| s.at_ms)
            .unwrap_or_else(|| panic!("no active event for {id}"));
        assert!(
            gap % 1_000 == 0 && at + 1 >= pair[0] + 1_000 && pair[1] + 1 >= at,
            "gap or foreign id: {millis:?}: {id} taken at {at}"
        );
    }
}
