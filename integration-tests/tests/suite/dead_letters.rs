//! Dead letters (issue 45, docs/operations.md §Dead letters): a job that
//! fails for good moves to the dead-letter queue in the script that fails
//! it, exactly once and with every field; BullMQ Node's final failures follow
//! through the follower, and Node reads the dead-letter queue; replay by
//! filter, limit and rate puts jobs back one atomic call each; SIGKILL of a
//! worker mid-burst loses and doubles nothing; bad input moves nothing.

use std::collections::HashSet;
use std::time::Duration;

use echomq::dead_letter::{
    DeadLetterError, DeadLetterFilter, DeadLetterFollower, DeadLetterQueue, ReplayOptions,
};
use echomq::worker::{processor_fn, JobContext};
use echomq::{Connection, Error, JobOptions, Queue, WorkerArgs, WorkerMsg, WorkerOptions};
use echomq_integration_tests::{
    assert_consistent, behave, bullmq, wait_until, NodeChild, NullSupervisor, RedisServer,
};
use ractor::{Actor, ActorRef};
use serde_json::{json, Value};

const Q: &str = "dlsrc";
const DLQ: &str = "dlsrc-dead";

async fn dead_letter_worker(q: &Queue, options: WorkerOptions) -> ActorRef<WorkerMsg> {
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(|job: JobContext| async move { behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = options;
    let (worker, _lm) = echomq_integration_tests::spawn_worker(sup.get_cell(), args)
        .await
        .unwrap();
    worker
}

fn dlq_options() -> WorkerOptions {
    WorkerOptions::default()
        .concurrency(4)
        .drain_delay(Duration::from_millis(200))
        .dead_letter(DeadLetterQueue::new(DLQ))
}

async fn dlq_queue(conn: &Connection) -> Queue {
    Queue::new(conn, DLQ).await.unwrap()
}

fn fail(reason: &str) -> Value {
    json!({"mode": "fail", "reason": reason})
}

async fn zcard(conn: &Connection, key: String) -> u64 {
    use fred::prelude::SortedSetsInterface;
    conn.pool().zcard(key).await.unwrap()
}

async fn redis_ms(redis: &RedisServer) -> u64 {
    let c = redis.client().await;
    let t: Vec<u64> = echomq_integration_tests::state::cmd(&c, "TIME", vec![]).await;
    t[0] * 1000 + t[1] / 1000
}

/// A job failing its last attempt, and one failing unrecoverably on its
/// first, each land in the dead-letter queue once with their data, options,
/// name, reason, stack, attempts and origin; nothing of them stays in the
/// source queue; BullMQ's fail effects (the `failed` and
/// `retries-exhausted` events) are kept. Checked to fail without the
/// feature: with `Finishing::dead_letter` answering `None` the DLQ stays
/// empty and the jobs stay in `failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_failure_lands_in_the_dead_letter_queue_once_with_every_field() {
    let (redis, conn, q) = RedisServer::with_queue(Q).await;
    let dlq = dlq_queue(&conn).await;
    let retried = q
        .add("mail", &fail("smtp refused"), JobOptions::new().attempts(2))
        .await
        .unwrap();
    let unrecoverable = q
        .add(
            "mail",
            &json!({"mode": "unrecoverable", "reason": "bad address"}),
            JobOptions::new().attempts(5),
        )
        .await
        .unwrap();
    let ok = q.add("mail", &json!({}), JobOptions::new()).await.unwrap();
    let worker = dead_letter_worker(&q, dlq_options()).await;
    wait_until(
        "2 dead letters and 1 completed",
        Duration::from_secs(20),
        async || {
            dlq.dead_letters().count().await.unwrap() == 2
                && q.counts().await.unwrap().completed == 1
        },
    )
    .await;
    worker.stop(None);

    let counts = q.counts().await.unwrap();
    assert_eq!(counts.failed, 0, "nothing stays in the source's failed set");
    assert!(!q.job_exists(&retried).await.unwrap());
    assert!(!q.job_exists(&unrecoverable).await.unwrap());
    assert!(q.job_exists(&ok).await.unwrap());

    let letters = dlq
        .dead_letters()
        .list(&DeadLetterFilter::all(), 10)
        .await
        .unwrap();
    assert_eq!(letters.len(), 2);
    let by_source = |id: &str| letters.iter().find(|l| l.source_id == id).unwrap();
    let a = by_source(&retried);
    assert_eq!(a.source_queue, Q);
    assert_eq!(a.job.name, "mail");
    assert_eq!(a.job.data, fail("smtp refused"));
    assert_eq!(a.job.opts.attempts, Some(2));
    assert_eq!(a.job.failed_reason.as_deref(), Some("smtp refused"));
    assert_eq!(a.job.attempts_made, 2);
    assert_eq!(a.job.stacktrace.len(), 2, "one stack entry per attempt");
    assert_eq!(a.class, "error");
    assert!(a.dead_lettered_at > 0);
    let b = by_source(&unrecoverable);
    assert_eq!(b.class, "unrecoverable");
    assert_eq!(b.job.attempts_made, 1);
    assert_eq!(b.job.failed_reason.as_deref(), Some("bad address"));

    // BullMQ's effects of the failure are there, on the source's stream.
    let client = redis.client().await;
    let names = echomq_integration_tests::event_names(&client, &format!("emq:{Q}:events")).await;
    assert_eq!(names.iter().filter(|n| *n == "failed").count(), 2);
    // Only the job that used its attempts up exhausted them (BullMQ's rule).
    assert_eq!(
        names.iter().filter(|n| *n == "retries-exhausted").count(),
        1
    );

    let counts = dlq.dead_letters().counts().await.unwrap();
    assert_eq!(
        counts,
        vec![
            ((Q.to_owned(), "error".to_owned()), 1),
            ((Q.to_owned(), "unrecoverable".to_owned()), 1)
        ]
    );
    assert_consistent(&conn, Q).await;
    assert_consistent(&conn, DLQ).await;
}

/// BullMQ Node 6.7.6 workers fail jobs for good (a last attempt, an
/// UnrecoverableError); the follower an EchoMQ process runs moves them to
/// the dead-letter queue — one failed before it started (its sweep), the
/// others as their `failed` events pass — and BullMQ Node's `getJobs` reads
/// the dead-letter queue as any queue. Checked to fail without the feature:
/// with the follower not started the DLQ stays empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_node_final_failures_land_in_the_dead_letter_queue_with_the_follower() {
    let (redis, conn, q) = RedisServer::with_queue(Q).await;
    let url = redis.url();
    let dlq = dlq_queue(&conn).await;
    let node = NodeChild::spawn("worker.js", &url, Q, json!({"name": "nodey"}));
    let early = q
        .add("early", &fail("before the follower"), JobOptions::new())
        .await
        .unwrap();
    wait_until(
        "the early job failed",
        Duration::from_secs(20),
        async || q.counts().await.unwrap().failed == 1,
    )
    .await;
    let follower = DeadLetterFollower::start(&conn, Q, DeadLetterQueue::new(DLQ))
        .await
        .unwrap();
    let mut ids = vec![early.clone()];
    for i in 0..3 {
        let id = q
            .add(
                &format!("n{i}"),
                &fail("node says no"),
                JobOptions::new().attempts(2),
            )
            .await
            .unwrap();
        ids.push(id);
    }
    let unrecoverable = q
        .add(
            "u",
            &json!({"mode": "unrecoverable", "reason": "never"}),
            JobOptions::new().attempts(3),
        )
        .await
        .unwrap();
    ids.push(unrecoverable.clone());
    q.add("fine", &json!({}), JobOptions::new()).await.unwrap();
    wait_until(
        "5 dead letters and 1 completed",
        Duration::from_secs(30),
        async || {
            dlq.dead_letters().count().await.unwrap() == 5
                && q.counts().await.unwrap().completed == 1
        },
    )
    .await;
    drop(node);
    assert_eq!(q.counts().await.unwrap().failed, 0);
    assert_eq!(follower.stats().moved, 5);
    follower.close().await;

    let letters = dlq
        .dead_letters()
        .list(&DeadLetterFilter::all(), 10)
        .await
        .unwrap();
    let sources: HashSet<&str> = letters.iter().map(|l| l.source_id.as_str()).collect();
    assert_eq!(sources, ids.iter().map(String::as_str).collect());
    let u = letters
        .iter()
        .find(|l| l.source_id == unrecoverable)
        .unwrap();
    assert_eq!(
        u.class, "unrecoverable",
        "Node's UnrecoverableError names its class"
    );
    assert_eq!(u.job.attempts_made, 1);
    let n0 = letters.iter().find(|l| l.job.name == "n0").unwrap();
    assert_eq!(n0.job.attempts_made, 2);
    assert_eq!(n0.job.failed_reason.as_deref(), Some("node says no"));
    assert_eq!(n0.class, "error");

    // BullMQ Node reads the dead-letter queue as any queue.
    let got = bullmq(
        "get-jobs",
        &url,
        DLQ,
        json!({"types": ["failed"], "start": 0, "end": -1, "asc": true}),
    );
    let node_ids: HashSet<String> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let ours: HashSet<String> = letters.iter().map(|l| l.id.clone()).collect();
    assert_eq!(node_ids, ours);
    let read = bullmq("read-jobs", &url, DLQ, json!({"ids": [n0.id.clone()]}));
    let j = &read[&n0.id];
    assert_eq!(j["name"], "n0");
    assert_eq!(j["data"], fail("node says no"));
    assert_eq!(j["failedReason"], "node says no");
    assert_eq!(j["attemptsMade"], 2);
    assert_eq!(j["state"], "failed");
    assert_consistent(&conn, Q).await;
    assert_consistent(&conn, DLQ).await;
}

/// Dead letters of two names and reasons: the filters (name, reason text,
/// source, class, since/before) list what they say; a replay with a limit
/// puts that many back as fresh jobs (same id, data and options, no attempt
/// made) and out of the dead-letter queue; a replay at a rate spreads the
/// jobs' timestamps (written by Redis) over at least (n - 1) / rate.
/// Checked to fail without the feature: with replayDeadLetter's add left
/// out, the source stays empty; with the pacing removed, the span is ~0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_by_filter_limit_and_rate() {
    let (redis, conn, q) = RedisServer::with_queue(Q).await;
    let dlq = dlq_queue(&conn).await;
    let t0 = redis_ms(&redis).await;
    let mut a_ids = Vec::new();
    for i in 0..3 {
        let opts = JobOptions::new().attempts(1);
        a_ids.push(
            q.add(
                "a",
                &json!({"mode": "fail", "reason": "smtp timeout", "i": i}),
                opts,
            )
            .await
            .unwrap(),
        );
    }
    for i in 0..6 {
        q.add(
            "b",
            &json!({"mode": "fail", "reason": "bad address", "i": i}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    }
    let worker = dead_letter_worker(&q, dlq_options()).await;
    wait_until("9 dead letters", Duration::from_secs(20), async || {
        dlq.dead_letters().count().await.unwrap() == 9
    })
    .await;
    worker.stop(None);
    let t1 = redis_ms(&redis).await + 1;
    let d = dlq.dead_letters();
    let n = async |f: DeadLetterFilter| d.list(&f, 100).await.unwrap().len();
    assert_eq!(n(DeadLetterFilter::all().name("a")).await, 3);
    assert_eq!(n(DeadLetterFilter::all().reason("address")).await, 6);
    assert_eq!(n(DeadLetterFilter::all().source(Q)).await, 9);
    assert_eq!(n(DeadLetterFilter::all().source("elsewhere")).await, 0);
    assert_eq!(n(DeadLetterFilter::all().class("error")).await, 9);
    assert_eq!(n(DeadLetterFilter::all().since(t0).before(t1)).await, 9);
    assert_eq!(n(DeadLetterFilter::all().before(t0)).await, 0);
    assert_eq!(n(DeadLetterFilter::all().since(t1)).await, 0);
    assert_eq!(d.list(&DeadLetterFilter::all(), 4).await.unwrap().len(), 4);

    // Limit: two of the "a" letters back, oldest first.
    let report = d
        .replay(
            &DeadLetterFilter::all().name("a"),
            ReplayOptions::default().limit(2),
        )
        .await
        .unwrap();
    assert_eq!(report.replayed.len(), 2);
    assert_eq!(d.count().await.unwrap(), 7);
    assert_eq!(q.counts().await.unwrap().waiting, 2);
    for (_, source, id) in &report.replayed {
        assert_eq!(source, Q);
        assert!(a_ids.contains(id), "replayed under its source id");
        let job = q.get_job(id).await.unwrap().unwrap();
        assert_eq!(job.name, "a");
        assert_eq!(job.attempts_made, 0, "a fresh job");
        assert_eq!(job.opts.attempts, Some(1));
        assert!(job.failed_reason.is_none());
        assert_eq!(job.data["reason"], "smtp timeout");
    }

    // Rate: five at 10/s take at least 400 ms on Redis's clock.
    let report = d
        .replay(
            &DeadLetterFilter::all().name("b"),
            ReplayOptions::default().limit(5).rate(10.0),
        )
        .await
        .unwrap();
    assert_eq!(report.replayed.len(), 5);
    let mut stamps = Vec::new();
    for (_, _, id) in &report.replayed {
        stamps.push(q.get_job(id).await.unwrap().unwrap().timestamp);
    }
    let span = stamps.iter().max().unwrap() - stamps.iter().min().unwrap();
    eprintln!("replay of 5 at 10/s: spread over {span} ms on Redis's clock");
    assert!(span >= 398, "5 jobs at 10/s spread over {span} ms");
    assert_eq!(d.count().await.unwrap(), 2);
    assert_eq!(q.counts().await.unwrap().waiting, 7);
    let c = d.counts().await.unwrap();
    assert_eq!(c, vec![((Q.to_owned(), "error".to_owned()), 2)]);
    assert_consistent(&conn, Q).await;
    assert_consistent(&conn, DLQ).await;
}

/// Bad input moves nothing, with a clear error: a worker or follower whose
/// dead-letter queue is its own queue; a replay filter matching nothing; a
/// filter naming a source queue that does not exist; dead letters whose
/// source queue was obliterated are left in place and reported; a source
/// queue already holding the id. Checked to fail without the checks: the
/// same-queue worker starts, the no-match replay answers Ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_moves_nothing() {
    let (_redis, conn, q) = RedisServer::with_queue(Q).await;
    let dlq = dlq_queue(&conn).await;

    // Its own dead-letter queue.
    let e = DeadLetterFollower::start(&conn, Q, DeadLetterQueue::new(Q))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::DeadLetter(DeadLetterError::SameQueue { .. })),
        "{e}"
    );
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(|job: JobContext| async move { behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = WorkerOptions::default().dead_letter(DeadLetterQueue::new(Q));
    let refused = echomq_integration_tests::spawn_worker(sup.get_cell(), args).await;
    assert!(
        refused.is_err(),
        "a worker dead-lettering into its own queue starts"
    );

    let id = q.add("x", &fail("nope"), JobOptions::new()).await.unwrap();
    let keep = q.add("y", &fail("nope"), JobOptions::new()).await.unwrap();
    let worker = dead_letter_worker(&q, dlq_options()).await;
    wait_until("2 dead letters", Duration::from_secs(20), async || {
        dlq.dead_letters().count().await.unwrap() == 2
    })
    .await;
    worker.stop(None);
    let d = dlq.dead_letters();

    let e = d
        .replay(
            &DeadLetterFilter::all().name("nothing"),
            ReplayOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::DeadLetter(DeadLetterError::NoMatch { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("matches"), "{e}");
    let e = d
        .replay(
            &DeadLetterFilter::all().source("gone"),
            ReplayOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::DeadLetter(DeadLetterError::NoSource { .. })),
        "{e}"
    );
    assert_eq!(d.count().await.unwrap(), 2);

    // The source holds a job with the id already: left in place.
    {
        use fred::prelude::HashesInterface;
        let _: () = conn
            .pool()
            .hset(
                q.keys().job(&keep),
                [("name", "squatter"), ("timestamp", "1")],
            )
            .await
            .unwrap();
    }
    let report = d
        .replay(&DeadLetterFilter::all().name("y"), ReplayOptions::default())
        .await
        .unwrap();
    assert!(report.replayed.is_empty());
    assert_eq!(report.skipped.len(), 1);
    assert!(
        report.skipped[0].reason.contains("holds a job"),
        "{:?}",
        report.skipped
    );
    {
        use fred::prelude::KeysInterface;
        let _: () = conn.pool().del(q.keys().job(&keep)).await.unwrap();
    }

    // The source queue is gone: left in place and reported.
    q.obliterate(true).await.unwrap();
    let report = d
        .replay(&DeadLetterFilter::all().name("x"), ReplayOptions::default())
        .await
        .unwrap();
    assert!(report.replayed.is_empty());
    assert_eq!(report.skipped.len(), 1);
    assert!(report.skipped[0].reason.contains("does not exist"));
    let one = d.list(&DeadLetterFilter::all().name("x"), 1).await.unwrap();
    let e = d.replay_one(&one[0].id).await.unwrap_err();
    assert!(
        matches!(e, Error::DeadLetter(DeadLetterError::NoSource { .. })),
        "{e}"
    );
    assert_eq!(d.count().await.unwrap(), 2, "nothing moved");
    assert!(!q.job_exists(&id).await.unwrap());
    assert_consistent(&conn, DLQ).await;
}

/// SIGKILL of a worker process mid-burst of finishes, half of them
/// dead-lettering: a fresh worker (its stalled checker recovers what the
/// dead one held) finishes the rest, and every job is in exactly one place
/// — source completed + dead letters = added, none in `failed`, no source id
/// twice in the dead-letter queue — with both audits clean. Fails if the
/// kill came before any dead letter or after the last job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_dead_lettering_burst_loses_and_doubles_nothing() {
    const N: usize = 600;
    let (redis, conn, q) = RedisServer::with_queue(Q).await;
    let dlq = dlq_queue(&conn).await;
    let mut jobs = Vec::new();
    for i in 0..N {
        let data = if i % 2 == 0 {
            json!({"mode": "fail", "reason": format!("r{i}")})
        } else {
            json!({"mode": "sleep", "ms": 5})
        };
        jobs.push(echomq::NewJob {
            name: "burst".into(),
            data,
            options: JobOptions::new(),
        });
    }
    q.add_bulk(jobs).await.unwrap();
    let t0 = std::time::Instant::now();
    let mut child = NodeChild::spawn_rust_worker(
        env!("CARGO_BIN_EXE_worker_process"),
        &redis.url(),
        Q,
        // Its stalled check's throttle key (shared, BullMQ's) must not
        // outlive the recovery below by 30 s.
        json!({"concurrency": 8, "lockDuration": 1000, "stalledInterval": 300, "deadLetter": DLQ}),
    );
    wait_until("20 dead letters", Duration::from_secs(30), async || {
        dlq.dead_letters().count().await.unwrap() >= 20
    })
    .await;
    child.kill();
    let at_kill_dead = dlq.dead_letters().count().await.unwrap();
    let at_kill_done = q.counts().await.unwrap().completed;
    eprintln!(
        "at the kill ({:?} in): {at_kill_dead} dead letters, {at_kill_done} completed of {N}",
        t0.elapsed()
    );
    assert!(at_kill_dead > 0);
    assert!(
        (at_kill_dead + at_kill_done) < N as u64,
        "the kill came after the last job"
    );

    let options = dlq_options()
        .lock_duration(Duration::from_millis(1000))
        .stalled_interval(Duration::from_millis(300));
    let (sup, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(|job: JobContext| async move { behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = options;
    let spec = echomq::WorkerSetSpec::new(args);
    let set = spec.spawn_linked(sup.get_cell()).await.unwrap();
    wait_until("every job finished", Duration::from_secs(60), async || {
        let c = q.counts().await.unwrap();
        let dead = dlq.dead_letters().count().await.unwrap();
        c.completed + dead == N as u64 && c.active == 0 && c.waiting == 0
    })
    .await;
    set.worker.stop(None);
    eprintln!("all finished {:?} in", t0.elapsed());
    let c = q.counts().await.unwrap();
    assert_eq!(c.failed, 0);
    assert_eq!(c.completed, (N / 2) as u64);
    let letters = dlq
        .dead_letters()
        .list(&DeadLetterFilter::all(), N as u64)
        .await
        .unwrap();
    assert_eq!(letters.len(), N / 2);
    let sources: HashSet<&str> = letters.iter().map(|l| l.source_id.as_str()).collect();
    assert_eq!(sources.len(), N / 2, "a source id dead-lettered twice");
    assert_eq!(zcard(&conn, q.keys().failed()).await, 0);
    assert_consistent(&conn, Q).await;
    assert_consistent(&conn, DLQ).await;
}

/// A queue handle that names a dead-letter queue gives it to the workers
/// made on it that name none. Checked to fail without the feature: with the
/// worker ignoring `QueueOptions::dead_letter` the job stays in `failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_names_the_dead_letter_queue_of_its_workers() {
    let (_redis, conn, _) = RedisServer::with_queue(Q).await;
    let options = echomq::QueueOptions::default().dead_letter(DeadLetterQueue::new(DLQ));
    let q = Queue::with_options(&conn, Q, options).await.unwrap();
    let dlq = dlq_queue(&conn).await;
    let id = q.add("x", &fail("no"), JobOptions::new()).await.unwrap();
    let worker = dead_letter_worker(&q, WorkerOptions::default()).await;
    wait_until("the dead letter", Duration::from_secs(20), async || {
        dlq.dead_letters().count().await.unwrap() == 1
    })
    .await;
    worker.stop(None);
    assert!(!q.job_exists(&id).await.unwrap());
    assert_eq!(q.counts().await.unwrap().failed, 0);
}

/// A dead-letter queue bounded by `max_len` keeps the newest dead letters,
/// and its counts by class follow what it drops. Checked to fail without the
/// bound: with the trim left out of deadLetter.lua it holds all five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_dead_letter_queue_keeps_the_newest() {
    let (_redis, conn, q) = RedisServer::with_queue(Q).await;
    let dlq = dlq_queue(&conn).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            q.add("x", &fail(&format!("r{i}")), JobOptions::new())
                .await
                .unwrap(),
        );
    }
    let options = WorkerOptions::default()
        .drain_delay(Duration::from_millis(200))
        .dead_letter(DeadLetterQueue::new(DLQ).max_len(2));
    let worker = dead_letter_worker(&q, options).await;
    wait_until("5 failed for good", Duration::from_secs(20), async || {
        q.counts().await.unwrap().failed == 0
            && q.counts().await.unwrap().waiting == 0
            && q.counts().await.unwrap().active == 0
            && !q.job_exists(&ids[4]).await.unwrap()
    })
    .await;
    worker.stop(None);
    let d = dlq.dead_letters();
    assert_eq!(d.count().await.unwrap(), 2);
    let kept: HashSet<String> = d
        .list(&DeadLetterFilter::all(), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.source_id)
        .collect();
    assert_eq!(kept, ids[3..].iter().cloned().collect(), "the newest kept");
    assert_eq!(
        d.counts().await.unwrap(),
        vec![((Q.to_owned(), "error".to_owned()), 2)]
    );
    assert_consistent(&conn, DLQ).await;
}

/// On Redis Cluster the scripts touch both queues, so the dead-letter queue
/// must carry the source's hash tag: `{orders}-dead` works (a worker
/// dead-letters, a replay puts the job back), another slot is refused with
/// `CrossSlot` at start, nothing moved. Checked to fail without the check:
/// the follower starts, and a worker's final failure errors with CROSSSLOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_dead_letter_queue_shares_the_hash_tag() {
    let cluster = echomq_integration_tests::cluster::RedisCluster::start();
    let conn = Connection::connect(echomq::ConnectionConfig::with_url(cluster.url()))
        .await
        .unwrap();
    let q = Queue::new(&conn, "{orders}").await.unwrap();
    let e = DeadLetterFollower::start(&conn, "{orders}", DeadLetterQueue::new("{other}-dead"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::DeadLetter(DeadLetterError::CrossSlot { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("hash tag"), "{e}");

    let dlq = Queue::new(&conn, "{orders}-dead").await.unwrap();
    let id = q.add("x", &fail("no"), JobOptions::new()).await.unwrap();
    let options = WorkerOptions::default()
        .drain_delay(Duration::from_millis(200))
        .dead_letter(DeadLetterQueue::new("{orders}-dead"));
    let worker = dead_letter_worker(&q, options).await;
    wait_until("the dead letter", Duration::from_secs(30), async || {
        dlq.dead_letters().count().await.unwrap() == 1
    })
    .await;
    worker.stop(None);
    let report = dlq
        .dead_letters()
        .replay(&DeadLetterFilter::all(), ReplayOptions::default())
        .await
        .unwrap();
    assert_eq!(
        report.replayed,
        vec![("1".to_owned(), "{orders}".to_owned(), id)]
    );
    assert_eq!(q.counts().await.unwrap().waiting, 1);
    assert_eq!(dlq.dead_letters().count().await.unwrap(), 0);
}
