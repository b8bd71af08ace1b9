//! The worker-side scripts driven directly through their call types
//! (`echomq::protocol::call::lifecycle`; moveStalledJobsToWait-8 still by
//! position):
//! replies, the exact Redis state and the events they append.

use std::collections::HashMap;
use std::time::Duration;

use echomq::protocol::call::lifecycle::{
    DelayKind, EpochMs, ExtendLock, ExtendLocks, FinishTarget, MoveJobFromActiveToWait,
    MoveToActive, MoveToDelayed, MoveToFinished, NextJob, PushEnd, ReleaseLock, RetryJob, Verdict,
};
use echomq::protocol::packing::{FetchOpts, FinishOpts, Limiter, MetricsSize};
use echomq::protocol::QueueKeys;
use echomq::{Connection, JobOptions, Queue};
use echomq_integration_tests::state::{cmd, exists, hash, key_type, list, members, pairs, zset};
use echomq_integration_tests::{events, RedisServer};
use fred::prelude::*;
use serde_json::json;

const TOKEN: &str = "9f0c2d4e-6a8b-4c1d-8e3f-5a7b9c1d3e5f";
const OTHER: &str = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
const T0: u64 = 1_700_000_000_000;
const TWO32: f64 = 4_294_967_296.0;

// ---------------------------------------------------------------- helpers

async fn pttl(c: &Client, key: &str) -> i64 {
    c.pttl(key).await.unwrap()
}

async fn set_lock(c: &Client, key: &str, token: &str, ms: i64) {
    let _: () = c
        .set(key, token, Some(Expiration::PX(ms)), None, false)
        .await
        .unwrap();
}

/// The events appended since `from`.
async fn events_from(c: &Client, key: &str, from: usize) -> Vec<(String, Vec<(String, String)>)> {
    events(c, key).await.into_iter().skip(from).collect()
}

async fn setup(name: &str) -> (RedisServer, Connection, Client, Queue, QueueKeys) {
    let (redis, conn, q) = RedisServer::with_queue(name).await;
    let c = redis.client().await;
    let k = q.keys().clone();
    (redis, conn, c, q, k)
}

async fn add(q: &Queue, name: &str, opts: JobOptions) -> String {
    q.add(name, &json!({ "n": name }), opts.timestamp(T0))
        .await
        .unwrap()
}

/// A next-job reply, flattened back to its four positions for the checks
/// below.
#[derive(Debug)]
struct Next {
    job: Option<HashMap<String, String>>,
    id: Option<String>,
    rate_limit: i64,
    delay_until: i64,
}

impl From<NextJob> for Next {
    fn from(n: NextJob) -> Next {
        let none = Next {
            job: None,
            id: None,
            rate_limit: 0,
            delay_until: 0,
        };
        match n {
            NextJob::Job { id, fields } => Next {
                job: Some(fields.into_iter().collect()),
                id: Some(id),
                ..none
            },
            NextJob::RateLimited(d) => Next {
                rate_limit: d.as_millis() as i64,
                ..none
            },
            NextJob::DelayedUntil(at) => Next {
                delay_until: at.0 as i64,
                ..none
            },
            NextJob::Nothing => none,
        }
    }
}

/// A transition's typed verdict; `as_i64` reads it back as the script's
/// integer reply (0 or the negative code), `None` for a next-job reply.
#[derive(Debug)]
struct Out(Verdict<Option<NextJob>>);

impl Out {
    fn as_i64(&self) -> Option<i64> {
        match &self.0 {
            Verdict::Done(None) => Some(0),
            Verdict::Done(Some(_)) => None,
            Verdict::Refused(r) => Some(r.code().code()),
        }
    }
}

fn next(out: Out) -> Next {
    match out.0 {
        Verdict::Done(Some(n)) => n.into(),
        other => panic!("expected a next-job reply, got {other:?}"),
    }
}

fn fetch(name: Option<&str>, lock_ms: u64, limiter: Option<Limiter>) -> FetchOpts<'_> {
    FetchOpts {
        token: TOKEN,
        lock_duration: lock_ms,
        limiter,
        name,
    }
}

async fn move_to_active(conn: &Connection, k: &QueueKeys, now: u64, opts: FetchOpts<'_>) -> Next {
    let call = MoveToActive {
        keys: k,
        now: EpochMs(now),
        fetch: opts,
    };
    conn.call(&call).await.unwrap().into()
}

async fn take(conn: &Connection, k: &QueueKeys, now: u64) -> String {
    move_to_active(conn, k, now, fetch(None, 30_000, None))
        .await
        .id
        .expect("a job")
}

struct Finish<'a> {
    id: &'a str,
    completed: bool,
    value: &'a str,
    now: u64,
    token: &'a str,
    keep: serde_json::Value,
    attempts: i64,
    fetch_next: bool,
    name: Option<&'a str>,
    fields: Vec<(&'a str, String)>,
    metrics: MetricsSize,
}

impl<'a> Finish<'a> {
    fn new(id: &'a str, completed: bool, value: &'a str, now: u64) -> Self {
        Finish {
            id,
            completed,
            value,
            now,
            token: TOKEN,
            keep: json!({"count": -1}),
            attempts: 0,
            fetch_next: false,
            name: None,
            fields: Vec::new(),
            metrics: MetricsSize::Off,
        }
    }

    async fn run(self, conn: &Connection, k: &QueueKeys) -> Out {
        let opts = FinishOpts {
            token: self.token,
            name: self.name,
            keep_jobs: self.keep.as_object().cloned(),
            limiter: None,
            lock_duration: 20_000,
            attempts: self.attempts,
            max_metrics_size: self.metrics,
        };
        let call = MoveToFinished {
            keys: k,
            id: self.id,
            now: EpochMs(self.now),
            target: if self.completed {
                FinishTarget::Completed
            } else {
                FinishTarget::Failed
            },
            value: self.value,
            fetch_next: self.fetch_next,
            opts,
            fields: &self.fields,
        };
        Out(conn.call(&call).await.unwrap())
    }
}

#[allow(clippy::too_many_arguments)]
async fn move_to_delayed(
    conn: &Connection,
    k: &QueueKeys,
    id: &str,
    token: &str,
    now: u64,
    delay: u64,
    skip_attempt: bool,
    fields: &[(&str, String)],
    fetch_next: Option<FetchOpts<'_>>,
) -> Out {
    let call = MoveToDelayed {
        keys: k,
        now: EpochMs(now),
        id,
        token,
        delay: Duration::from_millis(delay),
        kind: if skip_attempt {
            DelayKind::Requested
        } else {
            DelayKind::Retry
        },
        fields,
        fetch_next,
    };
    Out(conn.call(&call).await.unwrap())
}

async fn retry_job(
    conn: &Connection,
    k: &QueueKeys,
    id: &str,
    token: &str,
    now: u64,
    push: &str,
    fields: &[(&str, String)],
) -> i64 {
    let call = RetryJob {
        keys: k,
        now: EpochMs(now),
        push: match push {
            "RPUSH" => PushEnd::Front,
            _ => PushEnd::Back,
        },
        id,
        token,
        fields,
    };
    match conn.call(&call).await.unwrap() {
        Verdict::Done(()) => 0,
        Verdict::Refused(r) => r.code().code(),
    }
}

async fn stalled_check(
    conn: &Connection,
    k: &QueueKeys,
    max_stalled: u64,
    now: u64,
) -> Vec<String> {
    conn.call(&echomq::protocol::call::stalled::MoveStalledJobsToWait {
        keys: k,
        max_stalled_count: max_stalled,
        now,
        interval: std::time::Duration::from_secs(30),
    })
    .await
    .unwrap()
}

async fn active_to_wait(conn: &Connection, k: &QueueKeys, id: &str, token: &str) -> i64 {
    let call = MoveJobFromActiveToWait { keys: k, id, token };
    match conn.call(&call).await.unwrap() {
        Verdict::Done(window) => window.map_or(0, |d| d.as_millis() as i64),
        Verdict::Refused(r) => r.code().code(),
    }
}

// ---------------------------------------------------------------- moveToActive-11

#[tokio::test]
async fn move_to_active_takes_the_oldest_waiting_job_and_locks_it() {
    let (_redis, conn, c, q, k) = setup("ma").await;
    add(&q, "a", JobOptions::new()).await;
    add(&q, "b", JobOptions::new()).await;
    let _: () = c.del(k.marker()).await.unwrap();
    let n = events(&c, &k.events()).await.len();

    let r = move_to_active(&conn, &k, T0 + 100, fetch(Some("worker-1"), 30_000, None)).await;
    assert_eq!(r.id.as_deref(), Some("1"));
    assert_eq!((r.rate_limit, r.delay_until), (0, 0));
    let job = r.job.unwrap();
    assert_eq!(job["name"], "a");
    assert_eq!(job["processedOn"], (T0 + 100).to_string());
    assert_eq!(job["pb"], "worker-1");
    assert_eq!(job["ats"], "1");
    assert_eq!(
        job,
        hash(&c, &k.job("1")).await,
        "the reply is the full hash"
    );

    assert_eq!(list(&c, &k.active()).await, vec!["1"]);
    assert_eq!(list(&c, &k.wait()).await, vec!["2"]);
    for (key, ty) in [
        (k.wait(), "list"),
        (k.active(), "list"),
        (k.marker(), "zset"),
        (k.events(), "stream"),
        (k.job("1"), "hash"),
        (k.lock("1"), "string"),
    ] {
        assert_eq!(key_type(&c, &key).await, ty, "{key}");
    }
    assert_eq!(c.get::<String, _>(k.lock("1")).await.unwrap(), TOKEN);
    let ttl = pttl(&c, &k.lock("1")).await;
    assert!((29_000..=30_000).contains(&ttl), "lock PTTL {ttl}");
    assert_eq!(
        zset(&c, &k.marker()).await,
        vec![("0".to_string(), 0.0)],
        "marker re-armed"
    );
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![(
            "active".to_string(),
            pairs(&[("jobId", "1"), ("prev", "waiting")])
        )]
    );

    // Without a worker name there is no `pb`; the job goes to the head of active.
    let r = move_to_active(&conn, &k, T0 + 200, fetch(None, 30_000, None)).await;
    assert_eq!(r.id.as_deref(), Some("2"));
    assert!(!r.job.unwrap().contains_key("pb"));
    assert_eq!(list(&c, &k.active()).await, vec!["2", "1"]);

    // Nothing left, nothing delayed.
    let r = move_to_active(&conn, &k, T0 + 300, fetch(None, 30_000, None)).await;
    assert!(r.job.is_none() && r.id.is_none());
    assert_eq!((r.rate_limit, r.delay_until), (0, 0));
}

#[tokio::test]
async fn move_to_active_prefers_wait_then_lowest_priority() {
    let (_redis, conn, c, q, k) = setup("mp").await;
    add(&q, "p2", JobOptions::new().priority(2)).await; // 1
    add(&q, "p1", JobOptions::new().priority(1)).await; // 2
    add(&q, "w", JobOptions::new()).await; // 3
    assert_eq!(take(&conn, &k, T0).await, "3");
    let n = events(&c, &k.events()).await.len();
    assert_eq!(take(&conn, &k, T0).await, "2");
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![(
            "active".to_string(),
            pairs(&[("jobId", "2"), ("prev", "waiting")])
        )]
    );
    assert_eq!(take(&conn, &k, T0).await, "1");
    assert_eq!(list(&c, &k.active()).await, vec!["1", "2", "3"]);
    assert!(exists(&c, &k.pc()).await);
    let r = move_to_active(&conn, &k, T0, fetch(None, 30_000, None)).await;
    assert!(r.id.is_none());
    assert!(
        !exists(&c, &k.pc()).await,
        "an empty prioritized set resets the counter"
    );
}

#[tokio::test]
async fn move_to_active_promotes_due_delayed_jobs() {
    let (_redis, conn, c, q, k) = setup("md").await;
    add(
        &q,
        "d1",
        JobOptions::new().delay(Duration::from_millis(1000)),
    )
    .await; // 1
    add(
        &q,
        "d2",
        JobOptions::new().delay(Duration::from_millis(1000)),
    )
    .await; // 2
    add(
        &q,
        "dp",
        JobOptions::new()
            .delay(Duration::from_millis(2000))
            .priority(3),
    )
    .await; // 3
    let base = ((T0 + 1000) * 4096) as f64;
    assert_eq!(
        zset(&c, &k.delayed()).await,
        vec![
            ("1".to_string(), base),
            ("2".to_string(), base + 1.0),
            ("3".to_string(), ((T0 + 2000) * 4096) as f64)
        ]
    );

    // Only delayed jobs, none due: the earliest due time.
    let n = events(&c, &k.events()).await.len();
    let r = move_to_active(&conn, &k, T0 + 500, fetch(None, 30_000, None)).await;
    assert!(r.id.is_none());
    assert_eq!((r.rate_limit, r.delay_until), (0, (T0 + 1000) as i64));
    assert_eq!(zset(&c, &k.delayed()).await.len(), 3);
    assert_eq!(events(&c, &k.events()).await.len(), n);

    // Both jobs of T0+1000 are promoted in score order; the oldest is taken.
    let r = move_to_active(&conn, &k, T0 + 1000, fetch(None, 30_000, None)).await;
    assert_eq!(r.id.as_deref(), Some("1"));
    assert_eq!(r.job.unwrap()["delay"], "0");
    assert_eq!(hash(&c, &k.job("2")).await["delay"], "0");
    assert_eq!(list(&c, &k.wait()).await, vec!["2"]);
    assert_eq!(list(&c, &k.active()).await, vec!["1"]);
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![
            (
                "waiting".to_string(),
                pairs(&[("jobId", "1"), ("prev", "delayed")])
            ),
            (
                "waiting".to_string(),
                pairs(&[("jobId", "2"), ("prev", "delayed")])
            ),
            (
                "active".to_string(),
                pairs(&[("jobId", "1"), ("prev", "waiting")])
            ),
        ]
    );

    // A prioritized delayed job is promoted into prioritized; wait goes first.
    let r = move_to_active(&conn, &k, T0 + 2000, fetch(None, 30_000, None)).await;
    assert_eq!(r.id.as_deref(), Some("2"));
    assert_eq!(
        zset(&c, &k.prioritized()).await,
        vec![("3".to_string(), 3.0 * TWO32 + 1.0)]
    );
    assert!(!exists(&c, &k.delayed()).await);
    assert_eq!(take(&conn, &k, T0 + 2000).await, "3");
}

#[tokio::test]
async fn move_to_active_when_paused_or_rate_limited() {
    let (_redis, conn, c, q, k) = setup("mz").await;
    add(&q, "a", JobOptions::new()).await; // 1
    add(&q, "d", JobOptions::new().delay(Duration::from_millis(10))).await; // 2
    q.pause().await.unwrap();
    let r = move_to_active(&conn, &k, T0 + 100, fetch(None, 30_000, None)).await;
    assert!(r.job.is_none() && r.id.is_none());
    assert_eq!((r.rate_limit, r.delay_until), (0, 0));
    assert!(!exists(&c, &k.active()).await);
    // Due jobs are still promoted, but no marker is written while paused.
    assert_eq!(list(&c, &k.wait()).await, vec!["2", "1"]);
    assert!(!exists(&c, &k.marker()).await);
    q.resume().await.unwrap();

    let limiter = Some(Limiter {
        max: 1,
        duration: 1000,
    });
    let r = move_to_active(&conn, &k, T0 + 100, fetch(None, 30_000, limiter)).await;
    assert_eq!(r.id.as_deref(), Some("1"));
    assert_eq!(c.get::<String, _>(k.limiter()).await.unwrap(), "1");
    let ttl = pttl(&c, &k.limiter()).await;
    assert!((1..=1000).contains(&ttl), "limiter PTTL {ttl}");
    let r = move_to_active(&conn, &k, T0 + 100, fetch(None, 30_000, limiter)).await;
    assert!(r.id.is_none());
    assert!(
        (1..=1000).contains(&r.rate_limit),
        "rate limit {}",
        r.rate_limit
    );
    assert_eq!(r.delay_until, 0);
    assert_eq!(list(&c, &k.wait()).await, vec!["2"]);

    // Maxed: meta `concurrency` reached by the active list.
    let _: () = c.del(k.limiter()).await.unwrap();
    let _: () = c.hset(k.meta(), ("concurrency", "1")).await.unwrap();
    let r = move_to_active(&conn, &k, T0 + 100, fetch(None, 30_000, None)).await;
    assert!(r.id.is_none());
    assert_eq!((r.rate_limit, r.delay_until), (0, 0));
    assert_eq!(list(&c, &k.wait()).await, vec!["2"]);
    let _: () = c.hset(k.meta(), ("concurrency", "2")).await.unwrap();
    let r = move_to_active(&conn, &k, T0 + 100, fetch(None, 30_000, None)).await;
    assert_eq!(r.id.as_deref(), Some("2"));
}

// ---------------------------------------------------------------- moveToFinished-14

#[tokio::test]
async fn move_to_finished_completes_with_return_value() {
    let (_redis, conn, c, q, k) = setup("fc").await;
    add(&q, "a", JobOptions::new()).await;
    assert_eq!(take(&conn, &k, T0 + 1).await, "1");
    let _: () = c.sadd(k.stalled(), "1").await.unwrap();
    let n = events(&c, &k.events()).await.len();

    let v = Finish::new("1", true, r#"{"sum":3}"#, T0 + 50)
        .run(&conn, &k)
        .await;
    assert_eq!(v.as_i64(), Some(0));
    let h = hash(&c, &k.job("1")).await;
    assert_eq!(h["returnvalue"], r#"{"sum":3}"#);
    assert_eq!(h["finishedOn"], (T0 + 50).to_string());
    assert_eq!(h["processedOn"], (T0 + 1).to_string());
    assert_eq!(h["atm"], "1");
    assert_eq!(key_type(&c, &k.completed()).await, "zset");
    assert_eq!(
        zset(&c, &k.completed()).await,
        vec![("1".to_string(), (T0 + 50) as f64)]
    );
    assert!(!exists(&c, &k.active()).await);
    assert!(!exists(&c, &k.lock("1")).await);
    assert!(
        !exists(&c, &k.stalled()).await,
        "released job leaves the stalled set"
    );
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![
            (
                "completed".to_string(),
                pairs(&[
                    ("jobId", "1"),
                    ("returnvalue", r#"{"sum":3}"#),
                    ("prev", "active")
                ])
            ),
            ("drained".to_string(), vec![]),
        ]
    );
}

#[tokio::test]
async fn move_to_finished_fails_and_reports_exhausted_retries() {
    let (_redis, conn, c, q, k) = setup("ff").await;
    add(&q, "a", JobOptions::new().attempts(3)).await; // 1: third attempt
    add(&q, "b", JobOptions::new().attempts(3)).await; // 2: first attempt
    add(&q, "c", JobOptions::new().attempts(1)).await; // 3
    assert_eq!(take(&conn, &k, T0).await, "1");
    let _: () = c
        .hset(
            k.job("1"),
            vec![
                ("atm", "2"),
                ("defa", "job stalled more than allowable limit"),
            ],
        )
        .await
        .unwrap();
    let n = events(&c, &k.events()).await.len();
    let mut f = Finish::new("1", false, "boom: it broke", T0 + 10);
    f.attempts = 3;
    f.fields = vec![("stacktrace", r#"["Error: boom"]"#.to_owned())];
    assert_eq!(f.run(&conn, &k).await.as_i64(), Some(0));
    let h = hash(&c, &k.job("1")).await;
    assert_eq!(h["failedReason"], "boom: it broke");
    assert_eq!(h["finishedOn"], (T0 + 10).to_string());
    assert_eq!(h["atm"], "3");
    assert_eq!(h["stacktrace"], r#"["Error: boom"]"#);
    assert!(!h.contains_key("defa"), "the deferred failure is consumed");
    assert_eq!(
        zset(&c, &k.failed()).await,
        vec![("1".to_string(), (T0 + 10) as f64)]
    );
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![
            (
                "failed".to_string(),
                pairs(&[
                    ("jobId", "1"),
                    ("failedReason", "boom: it broke"),
                    ("prev", "active")
                ])
            ),
            (
                "retries-exhausted".to_string(),
                pairs(&[("jobId", "1"), ("attemptsMade", "3")])
            ),
        ]
    );

    // atm 1 < attempts 3: no retries-exhausted.
    assert_eq!(take(&conn, &k, T0).await, "2");
    let n = events(&c, &k.events()).await.len();
    let mut f = Finish::new("2", false, "x", T0 + 20);
    f.attempts = 3;
    f.run(&conn, &k).await;
    let names: Vec<String> = events_from(&c, &k.events(), n)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, vec!["failed"]);

    // attempts 1: exhausted at once, then the queue is drained.
    assert_eq!(take(&conn, &k, T0).await, "3");
    let n = events(&c, &k.events()).await.len();
    let mut f = Finish::new("3", false, "y", T0 + 30);
    f.attempts = 1;
    f.run(&conn, &k).await;
    let ev = events_from(&c, &k.events(), n).await;
    let names: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, vec!["failed", "retries-exhausted", "drained"]);
    assert_eq!(ev[1].1, pairs(&[("jobId", "3"), ("attemptsMade", "1")]));
}

#[tokio::test]
async fn move_to_finished_fetches_the_next_job_under_the_same_token() {
    let (_redis, conn, c, q, k) = setup("fn").await;
    add(&q, "a", JobOptions::new()).await;
    add(&q, "b", JobOptions::new()).await;
    assert_eq!(take(&conn, &k, T0).await, "1");
    let n = events(&c, &k.events()).await.len();
    let mut f = Finish::new("1", true, "null", T0 + 10);
    f.fetch_next = true;
    f.name = Some("w-7");
    let r = next(f.run(&conn, &k).await);
    assert_eq!(r.id.as_deref(), Some("2"));
    let job = r.job.unwrap();
    assert_eq!(job["processedOn"], (T0 + 10).to_string());
    assert_eq!(job["pb"], "w-7");
    assert_eq!(c.get::<String, _>(k.lock("2")).await.unwrap(), TOKEN);
    let ttl = pttl(&c, &k.lock("2")).await;
    assert!((19_000..=20_000).contains(&ttl), "lock PTTL {ttl}");
    assert_eq!(list(&c, &k.active()).await, vec!["2"]);
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![
            (
                "completed".to_string(),
                pairs(&[("jobId", "1"), ("returnvalue", "null"), ("prev", "active")])
            ),
            (
                "active".to_string(),
                pairs(&[("jobId", "2"), ("prev", "waiting")])
            ),
        ]
    );

    // Only a delayed job left: the delayed-only reply, no drained event.
    add(
        &q,
        "later",
        JobOptions::new().delay(Duration::from_millis(5000)),
    )
    .await; // 3
    let n = events(&c, &k.events()).await.len();
    let mut f = Finish::new("2", true, "2", T0 + 20);
    f.fetch_next = true;
    let r = next(f.run(&conn, &k).await);
    assert!(r.id.is_none());
    assert_eq!((r.rate_limit, r.delay_until), (0, (T0 + 5000) as i64));
    let names: Vec<String> = events_from(&c, &k.events(), n)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, vec!["completed"]);

    // Nothing at all: 0 and drained.
    let _: () = c.del(k.delayed()).await.unwrap();
    add(&q, "c", JobOptions::new()).await; // 4
    assert_eq!(take(&conn, &k, T0 + 30).await, "4");
    let n = events(&c, &k.events()).await.len();
    let mut f = Finish::new("4", true, "4", T0 + 40);
    f.fetch_next = true;
    assert_eq!(f.run(&conn, &k).await.as_i64(), Some(0));
    let names: Vec<String> = events_from(&c, &k.events(), n)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, vec!["completed", "drained"]);
}

#[tokio::test]
async fn move_to_finished_applies_retention() {
    let (_redis, conn, c, q, k) = setup("fr").await;
    for i in 1..=7 {
        add(&q, &format!("j{i}"), JobOptions::new()).await;
    }
    // count 0: the job is deleted, the event is still emitted.
    assert_eq!(take(&conn, &k, T0).await, "1");
    let _: () = c.rpush(k.logs("1"), "log").await.unwrap();
    let mut f = Finish::new("1", true, "1", T0 + 1);
    f.keep = json!({"count": 0});
    assert_eq!(f.run(&conn, &k).await.as_i64(), Some(0));
    assert!(!exists(&c, &k.job("1")).await);
    assert!(!exists(&c, &k.logs("1")).await);
    assert!(!exists(&c, &k.completed()).await);
    let ev = events(&c, &k.events()).await;
    assert_eq!(ev.last().unwrap().0, "completed");

    // count 2: only the two newest stay.
    for (id, at) in [("2", T0 + 2), ("3", T0 + 3), ("4", T0 + 4)] {
        assert_eq!(take(&conn, &k, T0).await, id);
        let mut f = Finish::new(id, true, id, at);
        f.keep = json!({"count": 2});
        f.run(&conn, &k).await;
    }
    assert_eq!(
        zset(&c, &k.completed()).await,
        vec![
            ("3".to_string(), (T0 + 3) as f64),
            ("4".to_string(), (T0 + 4) as f64)
        ]
    );
    assert!(!exists(&c, &k.job("2")).await);
    assert!(exists(&c, &k.job("3")).await);

    // age (seconds): jobs finished more than 10 s before this one go.
    assert_eq!(take(&conn, &k, T0).await, "5");
    Finish::new("5", false, "x", T0 + 1_000)
        .run(&conn, &k)
        .await;
    assert_eq!(take(&conn, &k, T0).await, "6");
    Finish::new("6", false, "x", T0 + 15_000)
        .run(&conn, &k)
        .await;
    assert_eq!(take(&conn, &k, T0).await, "7");
    let mut f = Finish::new("7", false, "x", T0 + 20_000);
    f.keep = json!({"age": 10});
    f.run(&conn, &k).await;
    assert_eq!(
        zset(&c, &k.failed()).await,
        vec![
            ("6".to_string(), (T0 + 15_000) as f64),
            ("7".to_string(), (T0 + 20_000) as f64)
        ]
    );
    assert!(!exists(&c, &k.job("5")).await);
    // Retention emits no `removed`.
    let names: Vec<String> = events(&c, &k.events())
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(!names.contains(&"removed".to_string()));
}

#[tokio::test]
async fn move_to_finished_checks_job_lock_and_state() {
    let (_redis, conn, c, q, k) = setup("fe").await;
    add(&q, "a", JobOptions::new()).await; // 1
    add(&q, "b", JobOptions::new()).await; // 2
    assert_eq!(take(&conn, &k, T0).await, "1");
    let n = events(&c, &k.events()).await.len();

    // A parent with pending or failed children cannot complete (before the lock check).
    let _: () = c
        .sadd(format!("{}:dependencies", k.job("1")), "emq:other:9")
        .await
        .unwrap();
    assert_eq!(
        Finish::new("1", true, "1", T0 + 1)
            .run(&conn, &k)
            .await
            .as_i64(),
        Some(-4)
    );
    let _: () = c.del(format!("{}:dependencies", k.job("1"))).await.unwrap();
    let _: () = c
        .zadd(
            format!("{}:unsuccessful", k.job("1")),
            None,
            None,
            false,
            false,
            (T0 as f64, "emq:other:9"),
        )
        .await
        .unwrap();
    assert_eq!(
        Finish::new("1", true, "1", T0 + 1)
            .run(&conn, &k)
            .await
            .as_i64(),
        Some(-9)
    );
    let _: () = c.del(format!("{}:unsuccessful", k.job("1"))).await.unwrap();
    assert_eq!(c.get::<String, _>(k.lock("1")).await.unwrap(), TOKEN);

    let mut f = Finish::new("1", true, "1", T0 + 1);
    f.token = OTHER;
    assert_eq!(f.run(&conn, &k).await.as_i64(), Some(-6));
    assert_eq!(c.get::<String, _>(k.lock("1")).await.unwrap(), TOKEN);
    assert_eq!(list(&c, &k.active()).await, vec!["1"]);
    assert!(!exists(&c, &k.completed()).await);

    let _: () = c.del(k.lock("1")).await.unwrap();
    assert_eq!(
        Finish::new("1", true, "1", T0 + 1)
            .run(&conn, &k)
            .await
            .as_i64(),
        Some(-2)
    );
    assert_eq!(list(&c, &k.active()).await, vec!["1"]);

    // Locked but not active: -3, after the lock was released.
    set_lock(&c, &k.lock("2"), TOKEN, 30_000).await;
    assert_eq!(
        Finish::new("2", true, "2", T0 + 1)
            .run(&conn, &k)
            .await
            .as_i64(),
        Some(-3)
    );
    assert!(!exists(&c, &k.lock("2")).await);
    assert_eq!(list(&c, &k.wait()).await, vec!["2"]);

    assert_eq!(
        Finish::new("nope", true, "1", T0 + 1)
            .run(&conn, &k)
            .await
            .as_i64(),
        Some(-1)
    );
    assert_eq!(
        events(&c, &k.events()).await.len(),
        n,
        "no events on refusal"
    );
    assert!(!hash(&c, &k.job("1")).await.contains_key("finishedOn"));
}

// ---------------------------------------------------------------- moveToDelayed-11

#[tokio::test]
async fn move_to_delayed_scores_counts_attempts_and_sets_the_delay_marker() {
    let (_redis, conn, c, q, k) = setup("dl").await;
    for name in ["a", "b", "c", "d"] {
        add(&q, name, JobOptions::new()).await;
    }
    assert_eq!(take(&conn, &k, T0).await, "1");
    let _: () = c.del(k.marker()).await.unwrap();
    let n = events(&c, &k.events()).await.len();
    let v = move_to_delayed(&conn, &k, "1", TOKEN, T0 + 10, 2000, false, &[], None).await;
    assert_eq!(v.as_i64(), Some(0));
    let due = T0 + 2010;
    assert_eq!(
        zset(&c, &k.delayed()).await,
        vec![("1".to_string(), (due * 4096) as f64)]
    );
    let h = hash(&c, &k.job("1")).await;
    assert_eq!(h["atm"], "1");
    assert_eq!(h["delay"], "2000");
    assert!(!exists(&c, &k.lock("1")).await);
    assert!(!exists(&c, &k.active()).await);
    assert_eq!(
        zset(&c, &k.marker()).await,
        vec![("1".to_string(), due as f64)]
    );
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![(
            "delayed".to_string(),
            pairs(&[("jobId", "1"), ("delay", &due.to_string())])
        )]
    );

    // Same due time: next sequence slot. Skip attempt: atm untouched. Fields applied.
    assert_eq!(take(&conn, &k, T0).await, "2");
    let fields = [("tm", "1234".to_owned())];
    let v = move_to_delayed(&conn, &k, "2", TOKEN, T0 + 10, 2000, true, &fields, None).await;
    assert_eq!(v.as_i64(), Some(0));
    assert_eq!(
        zset(&c, &k.delayed()).await,
        vec![
            ("1".to_string(), (due * 4096) as f64),
            ("2".to_string(), (due * 4096 + 1) as f64)
        ]
    );
    let h = hash(&c, &k.job("2")).await;
    assert!(!h.contains_key("atm"));
    assert_eq!(h["tm"], "1234");

    // The 4096 slots of a millisecond are capped at the last one.
    let _: () = c
        .zadd(
            k.delayed(),
            None,
            None,
            false,
            false,
            ((due * 4096 + 4095) as f64, "x"),
        )
        .await
        .unwrap();
    assert_eq!(take(&conn, &k, T0).await, "3");
    let v = move_to_delayed(&conn, &k, "3", TOKEN, T0 + 10, 2000, false, &[], None).await;
    assert_eq!(v.as_i64(), Some(0));
    let score: f64 = c.zscore(k.delayed(), "3").await.unwrap();
    assert_eq!(score, (due * 4096 + 4095) as f64);
    let _: () = c.zrem(k.delayed(), vec!["x", "3"]).await.unwrap();
    let _: () = c.rpush(k.wait(), "3").await.unwrap();

    // Refusals.
    assert_eq!(take(&conn, &k, T0).await, "3");
    let v = move_to_delayed(&conn, &k, "3", OTHER, T0 + 10, 1000, false, &[], None).await;
    assert_eq!(v.as_i64(), Some(-6));
    let v = move_to_delayed(&conn, &k, "nope", TOKEN, T0 + 10, 1000, false, &[], None).await;
    assert_eq!(v.as_i64(), Some(-1));
    set_lock(&c, &k.lock("4"), TOKEN, 30_000).await;
    let v = move_to_delayed(&conn, &k, "4", TOKEN, T0 + 10, 1000, false, &[], None).await;
    assert_eq!(v.as_i64(), Some(-3));

    // Fetch-next: a waiting job is returned, taken under the token.
    let v = move_to_delayed(
        &conn,
        &k,
        "3",
        TOKEN,
        T0 + 20,
        500,
        false,
        &[],
        Some(fetch(None, 30_000, None)),
    )
    .await;
    let r = next(v);
    assert_eq!(r.id.as_deref(), Some("4"));
    assert_eq!(list(&c, &k.active()).await, vec!["4"]);
    assert_eq!(c.get::<String, _>(k.lock("4")).await.unwrap(), TOKEN);
    assert_eq!(
        zset(&c, &k.delayed()).await[0],
        ("3".to_string(), ((T0 + 520) * 4096) as f64)
    );
}

// ---------------------------------------------------------------- retryJob-11

#[tokio::test]
async fn retry_job_moves_an_active_job_back_to_wait() {
    let (_redis, conn, c, q, k) = setup("rj").await;
    for name in ["a", "b", "c"] {
        add(&q, name, JobOptions::new()).await;
    }
    assert_eq!(take(&conn, &k, T0).await, "1");
    let _: () = c.del(k.marker()).await.unwrap();
    let n = events(&c, &k.events()).await.len();
    let fields = [
        ("failedReason", "oops".to_owned()),
        ("stacktrace", r#"["oops"]"#.to_owned()),
    ];
    assert_eq!(
        retry_job(&conn, &k, "1", TOKEN, T0 + 5, "LPUSH", &fields).await,
        0
    );
    assert_eq!(list(&c, &k.wait()).await, vec!["1", "3", "2"]);
    let h = hash(&c, &k.job("1")).await;
    assert_eq!(h["atm"], "1");
    assert_eq!(h["failedReason"], "oops");
    assert_eq!(h["stacktrace"], r#"["oops"]"#);
    assert!(!exists(&c, &k.lock("1")).await);
    assert!(!exists(&c, &k.active()).await);
    assert_eq!(zset(&c, &k.marker()).await, vec![("0".to_string(), 0.0)]);
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![(
            "waiting".to_string(),
            pairs(&[("jobId", "1"), ("prev", "active")])
        )]
    );

    // RPUSH (lifo): back at the tail, runs next.
    assert_eq!(take(&conn, &k, T0).await, "2");
    assert_eq!(
        retry_job(&conn, &k, "2", TOKEN, T0 + 5, "RPUSH", &[]).await,
        0
    );
    assert_eq!(list(&c, &k.wait()).await, vec!["1", "3", "2"]);

    // A job with a priority goes to prioritized with a fresh counter.
    assert_eq!(take(&conn, &k, T0).await, "2");
    let _: () = c.hset(k.job("2"), ("priority", "2")).await.unwrap();
    assert_eq!(
        retry_job(&conn, &k, "2", TOKEN, T0 + 5, "LPUSH", &[]).await,
        0
    );
    assert_eq!(
        zset(&c, &k.prioritized()).await,
        vec![("2".to_string(), 2.0 * TWO32 + 1.0)]
    );
    assert_eq!(hash(&c, &k.job("2")).await["atm"], "2");

    // Refused (wrong token), but due delayed jobs are promoted anyway.
    add(&q, "d", JobOptions::new().delay(Duration::from_millis(1))).await; // 4
    assert_eq!(take(&conn, &k, T0).await, "3");
    let n = events(&c, &k.events()).await.len();
    assert_eq!(
        retry_job(&conn, &k, "3", OTHER, T0 + 5, "LPUSH", &[]).await,
        -6
    );
    assert_eq!(list(&c, &k.wait()).await, vec!["4", "1"]);
    assert_eq!(list(&c, &k.active()).await, vec!["3"]);
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![(
            "waiting".to_string(),
            pairs(&[("jobId", "4"), ("prev", "delayed")])
        )]
    );
    let _: () = c.del(k.lock("3")).await.unwrap();
    assert_eq!(
        retry_job(&conn, &k, "3", TOKEN, T0 + 5, "LPUSH", &[]).await,
        -2
    );
    assert_eq!(
        retry_job(&conn, &k, "nope", TOKEN, T0 + 5, "LPUSH", &[]).await,
        -1
    );
}

// ---------------------------------------------------------------- extendLock-2, extendLocks-1, releaseLock-1

#[tokio::test]
async fn extend_lock_renews_only_for_the_owner() {
    let (_redis, conn, c, _q, k) = setup("el").await;
    set_lock(&c, &k.lock("1"), TOKEN, 1000).await;
    let _: () = c.sadd(k.stalled(), vec!["1", "2"]).await.unwrap();
    let run = |token: &'static str| {
        let conn = conn.clone();
        let k = k.clone();
        async move {
            let call = ExtendLock {
                keys: &k,
                id: "1",
                token,
                duration: Duration::from_millis(60_000),
            };
            conn.call(&call).await.unwrap() as i64
        }
    };
    assert_eq!(run(OTHER).await, 0);
    assert!(pttl(&c, &k.lock("1")).await <= 1000);
    assert_eq!(members(&c, &k.stalled()).await, vec!["1", "2"]);
    assert_eq!(run(TOKEN).await, 1);
    assert!(pttl(&c, &k.lock("1")).await > 59_000);
    assert_eq!(c.get::<String, _>(k.lock("1")).await.unwrap(), TOKEN);
    assert_eq!(members(&c, &k.stalled()).await, vec!["2"]);
    let _: () = c.del(k.lock("1")).await.unwrap();
    assert_eq!(run(TOKEN).await, 0);
    assert!(
        !exists(&c, &k.lock("1")).await,
        "a missing lock is not recreated"
    );
}

#[tokio::test]
async fn extend_locks_returns_the_ids_it_could_not_renew() {
    let (_redis, conn, c, _q, k) = setup("els").await;
    for id in ["1", "2", "3"] {
        set_lock(&c, &k.lock(id), TOKEN, 1000).await;
    }
    let _: () = c.sadd(k.stalled(), vec!["1", "2", "3"]).await.unwrap();
    let locks: Vec<(String, String)> = [("1", TOKEN), ("2", OTHER), ("3", TOKEN)]
        .iter()
        .map(|(id, t)| (id.to_string(), t.to_string()))
        .collect();
    let call = ExtendLocks {
        keys: &k,
        locks: &locks,
        duration: Duration::from_millis(45_000),
    };
    let failed: Vec<String> = conn.call(&call).await.unwrap();
    assert_eq!(failed, vec!["2"]);
    for id in ["1", "3"] {
        let ttl = pttl(&c, &k.lock(id)).await;
        assert!((44_000..=45_000).contains(&ttl), "lock {id} PTTL {ttl}");
    }
    assert!(pttl(&c, &k.lock("2")).await <= 1000);
    assert_eq!(members(&c, &k.stalled()).await, vec!["2"]);

    // All renewed: an empty array.
    let locks = [("1".to_string(), TOKEN.to_string())];
    let call = ExtendLocks {
        keys: &k,
        locks: &locks,
        duration: Duration::from_millis(45_000),
    };
    let v: Vec<String> = conn.call(&call).await.unwrap();
    assert!(v.is_empty(), "{v:?}");
}

#[tokio::test]
async fn release_lock_deletes_only_the_owners_lock() {
    let (_redis, conn, c, _q, k) = setup("rl").await;
    set_lock(&c, &k.lock("1"), TOKEN, 30_000).await;
    let run = |token: &'static str| {
        let conn = conn.clone();
        let k = k.clone();
        async move {
            let call = ReleaseLock {
                keys: &k,
                id: "1",
                token,
                duration: Duration::from_millis(30_000),
            };
            conn.call(&call).await.unwrap() as i64
        }
    };
    assert_eq!(run(OTHER).await, 0);
    assert!(exists(&c, &k.lock("1")).await);
    assert_eq!(run(TOKEN).await, 1);
    assert!(!exists(&c, &k.lock("1")).await);
    assert_eq!(run(TOKEN).await, 0);
}

// ---------------------------------------------------------------- moveStalledJobsToWait-8

#[tokio::test]
async fn stalled_check_marks_then_recovers_lockless_jobs() {
    let (_redis, conn, c, q, k) = setup("st").await;
    for name in ["a", "b", "c"] {
        add(&q, name, JobOptions::new()).await;
    }
    assert_eq!(take(&conn, &k, T0).await, "1");
    assert_eq!(take(&conn, &k, T0).await, "2");
    assert_eq!(list(&c, &k.active()).await, vec!["2", "1"]);

    // First call: nothing to recover, every active job marked.
    assert_eq!(
        stalled_check(&conn, &k, 1, T0 + 100).await,
        Vec::<String>::new()
    );
    assert_eq!(members(&c, &k.stalled()).await, vec!["1", "2"]);
    assert_eq!(key_type(&c, &k.stalled()).await, "set");
    assert_eq!(
        c.get::<String, _>(k.stalled_check()).await.unwrap(),
        (T0 + 100).to_string()
    );
    let ttl = pttl(&c, &k.stalled_check()).await;
    assert!((29_000..=30_000).contains(&ttl), "stalled-check PTTL {ttl}");

    // Job 1 loses its lock (its worker died); job 2 is alive.
    let _: () = c.del(k.lock("1")).await.unwrap();
    // Throttled while stalled-check lives.
    assert_eq!(
        stalled_check(&conn, &k, 1, T0 + 200).await,
        Vec::<String>::new()
    );
    assert_eq!(list(&c, &k.active()).await, vec!["2", "1"]);

    let _: () = c.del(k.stalled_check()).await.unwrap();
    let _: () = c.del(k.marker()).await.unwrap();
    let n = events(&c, &k.events()).await.len();
    assert_eq!(stalled_check(&conn, &k, 1, T0 + 300).await, vec!["1"]);
    assert_eq!(
        list(&c, &k.wait()).await,
        vec!["3", "1"],
        "RPUSH: runs next"
    );
    assert_eq!(list(&c, &k.active()).await, vec!["2"]);
    let h = hash(&c, &k.job("1")).await;
    assert_eq!(h["stc"], "1");
    assert!(!h.contains_key("defa"));
    assert!(!hash(&c, &k.job("2")).await.contains_key("stc"));
    assert_eq!(
        members(&c, &k.stalled()).await,
        vec!["2"],
        "re-marked: only the active job"
    );
    assert_eq!(zset(&c, &k.marker()).await, vec![("0".to_string(), 0.0)]);
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![
            (
                "waiting".to_string(),
                pairs(&[("jobId", "1"), ("prev", "active")])
            ),
            ("stalled".to_string(), pairs(&[("jobId", "1")])),
        ]
    );
}

#[tokio::test]
async fn stalled_check_defers_failure_past_max_stalled_count_except_for_schedulers() {
    let (_redis, conn, c, q, k) = setup("sd").await;
    for name in ["a", "b", "c"] {
        add(&q, name, JobOptions::new()).await;
    }
    // 2 belongs to a scheduler known by score, 3 to one known by its hash.
    let _: () = c.hset(k.job("2"), ("rjk", "sch")).await.unwrap();
    let _: () = c
        .zadd(k.repeat(), None, None, false, false, (T0 as f64, "sch"))
        .await
        .unwrap();
    let _: () = c.hset(k.job("3"), ("rjk", "sch3")).await.unwrap();
    let _: () = c.hset(k.scheduler("sch3"), ("name", "tick")).await.unwrap();
    for id in ["1", "2", "3"] {
        assert_eq!(take(&conn, &k, T0).await, id);
        let _: () = c.hset(k.job(id), ("stc", "1")).await.unwrap();
        let _: () = c.del(k.lock(id)).await.unwrap();
    }
    let _: () = c.sadd(k.stalled(), vec!["1", "2", "3"]).await.unwrap();
    let mut recovered = stalled_check(&conn, &k, 1, T0).await;
    recovered.sort();
    assert_eq!(recovered, vec!["1", "2", "3"]);
    let h1 = hash(&c, &k.job("1")).await;
    assert_eq!(h1["stc"], "2");
    assert_eq!(h1["defa"], "job stalled more than allowable limit");
    for id in ["2", "3"] {
        let h = hash(&c, &k.job(id)).await;
        assert_eq!(h["stc"], "2");
        assert!(
            !h.contains_key("defa"),
            "scheduler job {id} is never failed for stalling"
        );
    }
    assert!(!exists(&c, &k.active()).await);
    assert!(!exists(&c, &k.stalled()).await);
    assert_eq!(list(&c, &k.wait()).await.len(), 3);

    // The deferred failure is consumed when the job is failed.
    let id = take(&conn, &k, T0).await;
    let mut f = Finish::new(&id, false, "job stalled more than allowable limit", T0 + 1);
    f.attempts = 1;
    f.run(&conn, &k).await;
    assert!(!hash(&c, &k.job(&id)).await.contains_key("defa"));
}

// ---------------------------------------------------------------- moveJobFromActiveToWait-9

#[tokio::test]
async fn active_to_wait_pushes_back_and_reports_the_limiter_ttl() {
    let (_redis, conn, c, q, k) = setup("aw").await;
    add(&q, "a", JobOptions::new()).await; // 1
    add(&q, "b", JobOptions::new()).await; // 2
    assert_eq!(take(&conn, &k, T0).await, "1");
    let _: () = c.del(k.marker()).await.unwrap();
    let n = events(&c, &k.events()).await.len();
    assert_eq!(active_to_wait(&conn, &k, "1", TOKEN).await, 0);
    assert_eq!(
        list(&c, &k.wait()).await,
        vec!["2", "1"],
        "RPUSH: runs next"
    );
    assert!(!exists(&c, &k.active()).await);
    assert!(!exists(&c, &k.lock("1")).await);
    let h = hash(&c, &k.job("1")).await;
    assert!(!h.contains_key("atm"), "no attempt counted");
    assert_eq!(h["ats"], "1");
    assert_eq!(zset(&c, &k.marker()).await, vec![("0".to_string(), 0.0)]);
    let ev = events_from(&c, &k.events(), n).await;
    assert_eq!(
        ev,
        vec![(
            "waiting".to_string(),
            pairs(&[("jobId", "1"), ("prev", "active")])
        )]
    );

    // With a live limiter window its PTTL is returned.
    assert_eq!(take(&conn, &k, T0).await, "1");
    set_lock(&c, &k.limiter(), "5", 5000).await;
    let ttl = active_to_wait(&conn, &k, "1", TOKEN).await;
    assert!((4000..=5000).contains(&ttl), "limiter PTTL {ttl}");

    // A prioritized job goes to the front of its priority, without a marker.
    let _: () = c.hset(k.job("2"), ("priority", "3")).await.unwrap();
    assert_eq!(take(&conn, &k, T0).await, "1");
    assert_eq!(take(&conn, &k, T0).await, "2");
    let _: () = c.del(k.marker()).await.unwrap();
    let _: () = c.del(k.limiter()).await.unwrap();
    assert_eq!(active_to_wait(&conn, &k, "2", TOKEN).await, 0);
    assert_eq!(
        zset(&c, &k.prioritized()).await,
        vec![("2".to_string(), 3.0 * TWO32)]
    );
    assert!(!exists(&c, &k.marker()).await);
    assert_eq!(list(&c, &k.active()).await, vec!["1"]);

    // Refusals.
    assert_eq!(active_to_wait(&conn, &k, "1", OTHER).await, -6);
    let _: () = c.del(k.lock("1")).await.unwrap();
    assert_eq!(active_to_wait(&conn, &k, "1", TOKEN).await, -2);
    assert_eq!(active_to_wait(&conn, &k, "nope", TOKEN).await, -1);
    assert_eq!(list(&c, &k.active()).await, vec!["1"]);
}

#[tokio::test]
async fn move_to_finished_collects_per_minute_metrics() {
    let (_redis, conn, c, q, k) = setup("mx").await;
    for i in 0..4 {
        add(&q, &format!("j{i}"), JobOptions::new()).await;
    }
    let minute = 60_000;
    let start = T0 - T0 % minute; // the start of a minute
    let metrics = k.metrics("completed");
    let data = format!("{metrics}:data");
    let finish_at = |id: &'static str, at: u64| {
        let conn = conn.clone();
        let k = k.clone();
        async move {
            assert_eq!(take(&conn, &k, at).await, id);
            let mut f = Finish::new(id, true, "1", at);
            f.metrics = MetricsSize::Points(10);
            assert_eq!(f.run(&conn, &k).await.as_i64(), Some(0));
        }
    };
    finish_at("1", start + 10).await;
    let h = hash(&c, &metrics).await;
    assert_eq!(h["count"], "1");
    assert_eq!(h["prevTS"], (start + 10).to_string());
    assert_eq!(h["prevCount"], "0");
    assert!(!exists(&c, &data).await);

    // Same minute: only the count moves.
    finish_at("2", start + 20).await;
    assert_eq!(hash(&c, &metrics).await["count"], "2");
    assert!(!exists(&c, &data).await);

    // Next minute: one data point with the jobs of the previous minute.
    finish_at("3", start + minute + 5).await;
    let h = hash(&c, &metrics).await;
    assert_eq!((h["count"].as_str(), h["prevCount"].as_str()), ("3", "2"));
    assert_eq!(h["prevTS"], (start + minute + 5).to_string());
    assert_eq!(list(&c, &data).await, vec!["2"]);

    // Three minutes later: the point, then zeros for the empty minutes, newest first.
    finish_at("4", start + 4 * minute).await;
    assert_eq!(list(&c, &data).await, vec!["0", "0", "1", "2"]);
    assert_eq!(hash(&c, &metrics).await["prevCount"], "3");
    assert!(!exists(&c, &k.metrics("failed")).await);
}

#[tokio::test]
async fn move_to_active_drops_legacy_markers() {
    let (_redis, conn, c, q, k) = setup("lm").await;
    add(&q, "a", JobOptions::new()).await;
    // A BullMQ <= 4 marker at the tail of wait: dropped, never run; the pop is retried.
    let _: () = c.rpush(k.wait(), "0:0").await.unwrap();
    let r = move_to_active(&conn, &k, T0, fetch(None, 30_000, None)).await;
    assert_eq!(r.id.as_deref(), Some("1"));
    assert_eq!(list(&c, &k.active()).await, vec!["1"]);
    assert!(!exists(&c, &k.wait()).await);

    // Only a marker: nothing taken, nothing left behind in active.
    let _: () = c.rpush(k.wait(), "0:123").await.unwrap();
    let r = move_to_active(&conn, &k, T0, fetch(None, 30_000, None)).await;
    assert!(r.id.is_none());
    assert_eq!(list(&c, &k.active()).await, vec!["1"]);
    assert!(!exists(&c, &k.wait()).await);
}

#[tokio::test]
async fn finishing_and_stalled_checks_trim_the_events_stream() {
    let (_redis, conn, c, q, k) = setup("tr").await;
    let _: () = c.hset(k.meta(), ("opts.maxLenEvents", "10")).await.unwrap();
    add(&q, "a", JobOptions::new()).await;
    assert_eq!(take(&conn, &k, T0).await, "1");
    let fill = |n: usize| {
        let c = c.clone();
        let key = k.events();
        async move {
            for i in 0..n {
                let args = vec![
                    key.clone(),
                    "*".into(),
                    "event".into(),
                    "custom".into(),
                    "i".into(),
                    i.to_string(),
                ];
                let _: String = cmd(&c, "XADD", args).await;
            }
        }
    };
    fill(1000).await;
    Finish::new("1", true, "1", T0 + 1).run(&conn, &k).await;
    let len: u64 = c.xlen(k.events()).await.unwrap();
    assert!(len < 200, "approximately trimmed to 10, got {len}");
    let names: Vec<String> = events(&c, &k.events())
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        names[names.len() - 2..],
        ["completed".to_string(), "drained".to_string()]
    );

    fill(1000).await;
    stalled_check(&conn, &k, 1, T0).await;
    let len: u64 = c.xlen(k.events()).await.unwrap();
    assert!(len < 200, "approximately trimmed to 10, got {len}");
}

/// moveToFinished trims the events stream with the completion event itself
/// (`XADD MAXLEN ~ max+1`) instead of a separate `XTRIM MAXLEN ~ max` before
/// it: the stream must keep exactly the entries the separate trim kept, for
/// bounds and lengths on both sides of Redis' node edges (100 entries).
#[tokio::test]
async fn trimming_with_the_completion_event_keeps_what_a_separate_trim_kept() {
    let (_redis, conn, c, q, k) = setup("tw").await;
    let reference = "emq:tw:reference";
    let custom = |key: &str, i: usize| {
        vec![
            key.to_owned(),
            "*".into(),
            "event".into(),
            "custom".into(),
            "i".into(),
            i.to_string(),
        ]
    };
    for max in [1u64, 7, 100, 250] {
        let _: () = c
            .hset(k.meta(), ("opts.maxLenEvents", max.to_string()))
            .await
            .unwrap();
        for pre in [0usize, 1, 50, 99, 100, 101, 150, 199, 200, 201, 350, 1000] {
            add(&q, "a", JobOptions::new()).await;
            let id = take(&conn, &k, T0).await;
            let _: i64 = c.del(vec![k.events(), reference.to_owned()]).await.unwrap();
            for i in 0..pre {
                let _: String = cmd(&c, "XADD", custom(&k.events(), i)).await;
                let _: String = cmd(&c, "XADD", custom(reference, i)).await;
            }
            Finish::new(&id, true, "1", T0 + 1).run(&conn, &k).await;
            // What BullMQ's order leaves: trim, then the event.
            let _: i64 = cmd(
                &c,
                "XTRIM",
                vec![
                    reference.into(),
                    "MAXLEN".into(),
                    "~".into(),
                    max.to_string(),
                ],
            )
            .await;
            let args = vec![
                reference.to_owned(),
                "*".into(),
                "event".into(),
                "completed".into(),
                "jobId".into(),
                id.clone(),
                "returnvalue".into(),
                "1".into(),
                "prev".into(),
                "active".into(),
            ];
            let _: String = cmd(&c, "XADD", args).await;
            let mut ours = events(&c, &k.events()).await;
            if ours.last().is_some_and(|e| e.0 == "drained") {
                ours.pop();
            }
            let theirs = events(&c, reference).await;
            assert_eq!(ours, theirs, "maxLenEvents {max}, {pre} entries before");
        }
    }
}
