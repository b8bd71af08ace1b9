//! Redis work per processed job, as a count of commands (a count, not a time):
//! `INFO commandstats` counts every command, those a script runs included, so
//! a run of N jobs minus a run of M jobs on identical fresh servers gives what
//! one processed job costs in steady state (fetch-next taking the next job in
//! the finishing call), whatever the worker does once at start and at drain.

use std::collections::BTreeMap;
use std::time::Duration;

use echomq::worker::{processor_fn, JobContext, ProcessError};
use echomq::{KeepJobs, LockManagerMsg, NewJob, WorkerArgs, WorkerEvent, WorkerMsg, WorkerOptions};
use echomq_integration_tests::{state, wait_until, NullSupervisor, RedisServer};
use fred::prelude::*;
use ractor::{call_t, Actor};
use serde_json::{json, Value as Json};

/// Commands per processed job, EVALSHA of moveToFinished included, with the
/// job kept in `completed`: the finishing part (HMGET job — also the existence
/// check —, EXISTS of the children sets, GET, DEL, SREM, LREM, HMGET meta, ZADD,
/// HSET, XADD) and the fetch-next part (ZRANGEBYSCORE, RPOPLPUSH, SET, XADD,
/// HGETALL, HMSET, ZADD marker). BullMQ 6.2.0's scripts run 24 for the same
/// job; the scripts before the rewrites described in docs/protocol.md §What
/// changed in the worker scripts and why ran 25.
const KEPT: u64 = 18;
/// With removeOnComplete: DEL of the job's keys instead of ZADD + HSET.
const REMOVED: u64 = 17;

/// Plain jobs `{"i": i}` for each i of `range`.
fn jobs(range: std::ops::Range<u64>) -> Vec<NewJob> {
    range
        .map(|i| NewJob {
            name: "w".into(),
            data: json!({"i": i}),
            options: echomq::JobOptions::new(),
        })
        .collect()
}

/// Every command counted by the server, by name.
async fn command_counts(c: &Client) -> BTreeMap<String, u64> {
    let text: String = c
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|p| p.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Processes `n` pre-added jobs with one slot on a fresh server and returns
/// the commands counted from the worker's start until it is idle again.
async fn commands_for(n: u64, keep: bool) -> BTreeMap<String, u64> {
    let (redis, _conn, q) = RedisServer::with_queue("work").await;
    let c = redis.client().await;
    let jobs = jobs(0..n);
    q.add_bulk(jobs).await.unwrap();
    let _: Value = state::cmd(&c, "CONFIG", vec!["RESETSTAT".into()]).await;

    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(n as usize + 16);
    let mut args = WorkerArgs::new(
        q.clone(),
        processor_fn(|_job: JobContext| async { Ok::<_, ProcessError>(Json::Null) }),
    );
    args.options = WorkerOptions::default()
        .concurrency(1)
        .drain_delay(Duration::from_secs(10));
    args.options.remove_on_complete = (!keep).then_some(KeepJobs::Remove(true));
    args.events = Some(tx);
    let (worker, lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    let mut done = 0;
    while done < n {
        let event = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("jobs complete")
            .expect("worker runs");
        if let WorkerEvent::Completed { .. } = event {
            done += 1;
        }
    }
    // The drained ending happens once per run: counted once the worker sits
    // in its blocking read after it (which lasts the drain delay, 10 s, far
    // longer than this wait).
    wait_until(
        "the worker blocks on the marker",
        Duration::from_secs(8),
        async || {
            let list: String = state::cmd(&c, "CLIENT", vec!["LIST".into()]).await;
            list.lines()
                .any(|l| l.contains("cmd=bzpopmin") && l.contains(" flags=b "))
        },
    )
    .await;
    // The LockManager renews the held set once when the Worker hands it over
    // at start; whether a job is held at that instant, and whether it is
    // finished before the renewal reaches Redis, is a race of the start, not
    // a cost per job. Its commands are taken out by its own counters, read on
    // both sides of the count so that no renewal falls between them.
    let counts = loop {
        let before = lock_stats(&lm).await;
        let counts = command_counts(&c).await;
        if lock_stats(&lm).await == before {
            eprintln!("{n} jobs: renewal calls, renewed, missing taken out: {before:?}");
            break without_renewals(counts, &before);
        }
    };
    let _ = call_t!(worker, WorkerMsg::Close, 10_000, Duration::from_secs(2));
    host.stop(None);
    counts
}

/// The LockManager's counters: renewal calls, locks renewed, and locks that
/// came back missing (lost, or let go while their renewal was on the way).
async fn lock_stats(lm: &ractor::ActorRef<LockManagerMsg>) -> (u64, u64, u64) {
    let stats = call_t!(lm, LockManagerMsg::GetStats, 2_000).expect("lock manager answers");
    (stats.extend_calls, stats.renewed, stats.lost + stats.let_go)
}

/// `counts` less what the LockManager's `extendLocks` calls ran: per call the
/// EVALSHA; per lock the GET; per renewed lock the SET and the SREM of stalled.
fn without_renewals(
    mut counts: BTreeMap<String, u64>,
    &(calls, renewed, missing): &(u64, u64, u64),
) -> BTreeMap<String, u64> {
    for (name, n) in [
        ("evalsha", calls),
        ("get", renewed + missing),
        ("set", renewed),
        ("srem", renewed),
    ] {
        let count = counts.entry(name.to_owned()).or_default();
        *count = count.checked_sub(n).expect("renewals were counted");
    }
    counts
}

fn total(counts: &BTreeMap<String, u64>) -> u64 {
    counts
        .iter()
        // The harness's own reads.
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "config|resetstat" | "client|list"))
        .map(|(_, calls)| *calls)
        .sum()
}

async fn per_job(keep: bool) -> u64 {
    let (small, large) = (50, 250);
    let a = commands_for(small, keep).await;
    let b = commands_for(large, keep).await;
    let diff: BTreeMap<&String, i64> = b
        .iter()
        .map(|(k, v)| (k, *v as i64 - a.get(k).copied().unwrap_or(0) as i64))
        .filter(|(_, d)| *d != 0)
        .collect();
    eprintln!(
        "keep={keep}: per-command difference over {} jobs: {diff:?}",
        large - small
    );
    let extra = total(&b) - total(&a);
    assert_eq!(
        extra % (large - small),
        0,
        "not a whole number of commands per job: {diff:?}"
    );
    extra / (large - small)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_per_processed_job_kept() {
    assert_eq!(per_job(true).await, KEPT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_per_processed_job_removed_on_complete() {
    assert_eq!(per_job(false).await, REMOVED);
}

/// A group's commands: moveJobsToActive taking `n` jobs, then one
/// moveJobsToFinished completing them (kept), each entry taking the next job.
/// Per entry: HMGET job, GET and DEL of the lock, LREM, HSET, XADD; its
/// fetch-next RPOPLPUSH, SET, XADD, HGETALL, HMSET. Once per call, whatever
/// `n`: the EVALSHA, the read of delayed, one EXISTS of every job's children
/// sets and DAG parents, the read of meta, and the writes the entries defer
/// (docs/protocol.md §Extensions): SREM of stalled, ZADD of completed, ZADD
/// of the marker. The same jobs finished one call each cost 18 apiece.
const GROUP_PER_ENTRY: u64 = 11;
const GROUP_PER_CALL: u64 = 7;
/// A take of moveJobsToActive: RPOPLPUSH, SET, XADD, HGETALL, HMSET; once
/// per call the EVALSHA, the reads of meta and delayed, the marker's ZADD.
const TAKE_PER_ENTRY: u64 = 5;
const TAKE_PER_CALL: u64 = 4;

async fn group_commands(n: usize) -> (u64, u64) {
    use echomq::protocol::call::fetch_batch::MoveJobsToActive;
    use echomq::protocol::call::group_commit::MoveJobsToFinished;
    use echomq::protocol::call::lifecycle::{EpochMs, FinishTarget, NextJob};
    use echomq::protocol::packing::FetchOpts;
    use echomq::protocol::QueueKeys;
    use echomq_integration_tests::simulated;

    let (redis, conn, q) = RedisServer::with_queue("grp").await;
    let c = redis.client().await;
    let jobs = jobs(0..2 * n as u64);
    q.add_bulk(jobs).await.unwrap();
    let keys = QueueKeys::new("emq", "grp").unwrap();
    let time: Vec<u64> = state::cmd(&c, "TIME", vec![]).await;
    let now = EpochMs(time[0] * 1000 + time[1] / 1000);
    let tokens: Vec<String> = (0..n).map(|i| format!("token-{i}")).collect();
    let fetch = FetchOpts {
        token: "",
        lock_duration: 30_000,
        limiter: None,
        name: None,
    };
    let _: Value = state::cmd(&c, "CONFIG", vec!["RESETSTAT".into()]).await;
    let take = MoveJobsToActive::new(&keys, now, &fetch, &tokens).unwrap();
    let taken: Vec<String> = conn
        .call(&take)
        .await
        .unwrap()
        .into_iter()
        .map(|next| match next {
            NextJob::Job { id, .. } => id,
            other => panic!("a job was taken: {other:?}"),
        })
        .collect();
    assert_eq!(taken.len(), n);
    let takes = total(&command_counts(&c).await);

    let _: Value = state::cmd(&c, "CONFIG", vec!["RESETSTAT".into()]).await;
    let finishes: Vec<_> = taken
        .iter()
        .zip(&tokens)
        .map(|(id, token)| {
            simulated::finish_call(&keys, id, token, FinishTarget::Completed, "1", now.0, true)
        })
        .collect();
    let group = MoveJobsToFinished::new(&keys, &finishes).unwrap();
    let verdicts = conn.call(&group).await.unwrap();
    assert_eq!(verdicts.len(), n);
    let finished = total(&command_counts(&c).await);
    let done: i64 = c.zcard("emq:grp:completed").await.unwrap();
    let stalled: i64 = c.scard("emq:grp:stalled").await.unwrap();
    let marker: Option<f64> = c.zscore("emq:grp:marker", "0").await.unwrap();
    assert_eq!((done, stalled, marker), (n as i64, 0, Some(0.0)));
    echomq_integration_tests::assert_consistent(&conn, "grp").await;
    (takes, finished)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_per_grouped_job_are_paid_once_per_call_where_they_can_be() {
    for n in [2, 8, 16] {
        let (takes, finishes) = group_commands(n).await;
        let n = n as u64;
        assert_eq!(takes, TAKE_PER_CALL + TAKE_PER_ENTRY * n, "{n} takes");
        assert_eq!(
            finishes,
            GROUP_PER_CALL + GROUP_PER_ENTRY * n,
            "{n} finishes"
        );
    }
}

/// A group of standard adds (`add_bulk`'s addStandardJobs call): per entry
/// INCR of the id, HMSET, XADD `added`, LPUSH, XADD `waiting`; once per call
/// the EVALSHA, the read of meta and the marker's re-arm. Single adds pay
/// all seven each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_per_grouped_add() {
    for n in [2u64, 10, 50] {
        let (redis, _conn, q) = RedisServer::with_queue("adds").await;
        let c = redis.client().await;
        let jobs = jobs(0..n);
        let _: Value = state::cmd(&c, "CONFIG", vec!["RESETSTAT".into()]).await;
        q.add_bulk(jobs).await.unwrap();
        let counts = command_counts(&c).await;
        assert_eq!(counts.get("evalsha"), Some(&1), "one call: {counts:?}");
        assert_eq!(total(&counts), 5 * n + 3, "{n} adds: {counts:?}");
        let waiting: i64 = c.llen("emq:adds:wait").await.unwrap();
        let marker: Option<f64> = c.zscore("emq:adds:marker", "0").await.unwrap();
        assert_eq!((waiting, marker), (n as i64, Some(0.0)));
    }
}
