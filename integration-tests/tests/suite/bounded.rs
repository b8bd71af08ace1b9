//! Bounded work per Redis call, as counts (docs/scale.md): against queues far
//! larger than a page or a chunk, every command a client sends and every
//! command a script runs inside it is recorded (`MONITOR`), and each call is
//! checked to touch at most a page's worth of elements — whatever the queue
//! holds. Timings live in `just bench-scale`, never here.

use std::time::Duration;

use echomq::audit::{Audit, AuditOptions};
use echomq::queue::{ADD_BULK_CHUNK, ADD_BULK_GROUP, DEFAULT_CHUNK};
use echomq::{JobOptions, JobState, NewJob, Queue};
use echomq_integration_tests::scale::{cost, fill, range_of, Call, Monitor};
use echomq_integration_tests::{state, RedisServer};
use fred::prelude::*;
use serde_json::json;

/// Checks every recorded call: at most `max_inner` commands inside it, and
/// every command — sent or run by a script — of a class the allowlist
/// knows, within `max_range` elements (`scale::cost`). Returns the number of
/// script calls.
fn assert_bounded(what: &str, calls: &[Call], max_inner: usize, max_range: i64) -> usize {
    let mut scripts = 0;
    for call in calls {
        if matches!(call.command.as_str(), "EVALSHA" | "EVAL") {
            scripts += 1;
            assert!(
                call.inner.len() <= max_inner,
                "{what}: one script call ran {} commands (bound {max_inner}): {:?}…",
                call.inner.len(),
                &call.inner[..5.min(call.inner.len())]
            );
        }
        let own = std::iter::once((call.command.clone(), call.args.clone()));
        for (command, args) in own.chain(call.inner.iter().cloned()) {
            if let Err(why) = cost(&command, &args, max_range) {
                panic!("{what}: {command} {:?}: {why}", &args[..6.min(args.len())]);
            }
        }
    }
    scripts
}

async fn big(waiting: u64, completed: u64) -> (RedisServer, echomq::Connection, Client, Queue) {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    fill(&c, "q", waiting, completed, r#"{"n":1}"#).await;
    let q = Queue::new(&conn, "q").await.unwrap();
    (redis, conn, c, q)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_reads_a_page_per_call() {
    let (redis, conn, c, _q) = big(15_000, 15_000).await;
    let m = Monitor::start(redis.port(), &c).await;
    let mut calls_seen = 0;
    let report = Audit::new(&conn, "q")
        .options(AuditOptions {
            quiescent: true,
            ..Default::default()
        })
        .on_progress(|p| calls_seen = p.calls)
        .run()
        .await
        .unwrap();
    let calls = m.take(&c).await;
    assert!(
        report.violations.is_empty(),
        "{:#?}",
        &report.violations[..3.min(report.violations.len())]
    );
    assert_eq!(report.ids, 30_000);
    // A page is ~8 commands per id; a SCAN step a few per key.
    let page = echomq::audit::PAGE as usize;
    let scripts = assert_bounded("audit", &calls, page * 10 + 20, page as i64);
    assert_eq!(
        scripts as u64,
        report.calls - stalled_calls(&calls),
        "every call but SSCAN is a script"
    );
    assert_eq!(calls_seen, report.calls);
    // Paged: at least one call per page of each state.
    assert!(scripts >= 30_000 / page, "{scripts} calls");
    let hmget_max = calls
        .iter()
        .map(|c| c.inner.iter().filter(|(n, _)| n == "HMGET").count())
        .max();
    assert!(
        hmget_max <= Some(page),
        "{hmget_max:?} job hashes in one call"
    );
}

fn stalled_calls(calls: &[Call]) -> u64 {
    calls.iter().filter(|c| c.command == "SSCAN").count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getters_read_large_ranges_in_pages() {
    let (redis, _conn, c, q) = big(20_000, 5_000).await;
    let m = Monitor::start(redis.port(), &c).await;
    let all = q
        .get_jobs(&[JobState::Waiting], 0, -1, echomq::RangeOrder::Ascending)
        .await
        .unwrap();
    assert_eq!(all.len(), 20_000);
    assert_eq!(all[0].id, "5001", "oldest first");
    let ids = q
        .get_ranges(
            &[JobState::Completed],
            0,
            -1,
            echomq::RangeOrder::Descending,
        )
        .await
        .unwrap();
    assert_eq!(ids.len(), 5_000);
    // The oldest waiting job sits at the tail of a 20 000-long wait list.
    assert_eq!(q.get_job_state("5001").await.unwrap(), JobState::Waiting);
    assert_eq!(q.get_job_state("15000").await.unwrap(), JobState::Waiting);
    assert_eq!(q.get_job_state("3").await.unwrap(), JobState::Completed);
    assert_eq!(q.get_job_state("nope").await.unwrap(), JobState::Unknown);
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.waiting, counts.completed), (20_000, 5_000));
    let calls = m.take(&c).await;
    let page = echomq::queue::READ_PAGE as usize;
    assert_bounded("getters", &calls, page * 2 + 20, page as i64);
    for call in &calls {
        for (name, args) in &call.inner {
            if name == "LPOS" {
                assert!(
                    args.iter().any(|a| a == "MAXLEN"),
                    "LPOS {args:?} walks a whole list"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_and_drain_work_a_chunk_per_call() {
    let (redis, _conn, c, q) = big(12_000, 12_000).await;
    let m = Monitor::start(redis.port(), &c).await;
    let mut steps = 0;
    let cleaned = q
        .chunked(DEFAULT_CHUNK)
        .on_progress(|_| steps += 1)
        .clean(Duration::ZERO, JobState::Completed, 0)
        .await
        .unwrap();
    assert_eq!(cleaned, 12_000);
    assert!(steps >= 12, "{steps} calls");
    let drained = q.chunked(DEFAULT_CHUNK).drain(false).await.unwrap();
    assert_eq!(drained, 12_000);
    let calls = m.take(&c).await;
    let chunk = DEFAULT_CHUNK as usize;
    // Removing a job is a handful of commands (its keys, its parent link).
    assert_bounded("clean/drain", &calls, chunk * 8 + 20, chunk as i64);
    let dels: Vec<usize> = calls
        .iter()
        .map(|c| c.inner.iter().filter(|(n, _)| n == "DEL").count())
        .collect();
    assert!(
        dels.iter().all(|n| *n <= chunk * 2),
        "{:?}",
        dels.iter().max()
    );
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.waiting, counts.completed), (0, 0));
    assert_eq!(state::list(&c, "emq:q:wait").await.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_promote_and_obliterate_move_a_chunk_per_call() {
    let (redis, _conn, c, q) = big(0, 0).await;
    // 10 000 failed and 10 000 delayed jobs, written directly.
    let script = r#"
      for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
        local k = KEYS[1] .. i
        redis.call("HSET", k, "name", "j", "data", "{}", "opts", "{}", "timestamp", "1", "delay", "0",
          "priority", "0", "finishedOn", "2", "failedReason", "x", "atm", "1", "ats", "1")
        if i % 2 == 0 then redis.call("ZADD", KEYS[1] .. "failed", 2, i)
        else redis.call("ZADD", KEYS[1] .. "delayed", 4096 * 5, i) end
      end
      redis.call("SET", KEYS[1] .. "id", ARGV[2])
      return 1"#;
    for from in (1..=20_000u64).step_by(5000) {
        let _: i64 = c
            .eval(
                script,
                vec!["emq:q:"],
                vec![from.to_string(), (from + 4999).to_string()],
            )
            .await
            .unwrap();
    }
    let m = Monitor::start(redis.port(), &c).await;
    assert_eq!(
        q.chunked(1000)
            .retry_jobs(echomq::protocol::FinishTarget::Failed, None)
            .await
            .unwrap(),
        10_000
    );
    assert_eq!(q.chunked(1000).promote_all().await.unwrap(), 10_000);
    assert_eq!(q.counts().await.unwrap().waiting, 20_000);
    q.chunked(1000).obliterate(true).await.unwrap();
    let calls = m.take(&c).await;
    assert_bounded("retry/promote/obliterate", &calls, 1000 * 10 + 50, 1000);
    let keys: Vec<String> = state::cmd(&c, "KEYS", vec!["emq:q:*".into()]).await;
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_bulk_goes_in_pipelined_chunks() {
    let (redis, _conn, q) = RedisServer::with_queue("q").await;
    let c = redis.client().await;
    let jobs: Vec<NewJob> = (0..3 * ADD_BULK_CHUNK + 10)
        .map(|i| NewJob {
            name: "j".into(),
            data: json!({ "i": i }),
            options: JobOptions::new(),
        })
        .collect();
    let m = Monitor::start(redis.port(), &c).await;
    let reads_before = reads_processed(&c).await;
    let ids = q.add_bulk(jobs).await.unwrap();
    let reads = reads_processed(&c).await - reads_before;
    assert_eq!(ids.len(), 3 * ADD_BULK_CHUNK + 10);
    let calls = m.take(&c).await;
    // Runs of standard adds go ADD_BULK_GROUP to a call (addStandardJobs,
    // issue 42): at most 40 commands per add, the bound of a lone one.
    assert_bounded("add_bulk", &calls, 40 * ADD_BULK_GROUP, 10);
    assert_eq!(
        calls.iter().filter(|c| c.command == "EVALSHA").count(),
        3 * ADD_BULK_CHUNK.div_ceil(ADD_BULK_GROUP) + 1,
        "each chunk's standard adds in calls of {ADD_BULK_GROUP}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c.command.as_str(), "MULTI" | "EXEC")),
        "add_bulk wrapped its calls in a transaction"
    );
    // One job per round trip would be a read per call; pipelined chunks
    // arrive in a few socket reads each (16 KB a read, a chunk ~250 KB).
    assert!(
        reads * 10 < ids.len() as u64,
        "{reads} socket reads for {} calls: not pipelined",
        ids.len()
    );
}

/// The server's socket reads so far (`INFO stats`), the monitor's included.
async fn reads_processed(c: &Client) -> u64 {
    let stats: String = state::cmd(c, "INFO", vec!["stats".into()]).await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has total_reads_processed")
}

/// A search over 30 000 jobs that matches none reads a page per call, and a
/// caller asking a page of a million ids gets `SEARCH_PAGE_MAX`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_read_a_page_per_call() {
    use echomq::queue::{JobFilter, SEARCH_PAGE_MAX};
    use echomq::RangeOrder;
    let (redis, _conn, c, q) = big(30_000, 0).await;
    let filter = JobFilter {
        name: None,
        data_contains: Some("no job has this".into()),
    };
    let m = Monitor::start(redis.port(), &c).await;
    let found = q
        .find_jobs(JobState::Waiting, &filter, 0, 10, RangeOrder::Ascending)
        .await
        .unwrap();
    assert!(found.is_empty());
    let calls = m.take(&c).await;
    let scripts = assert_bounded("find_jobs", &calls, 2 * 500 + 10, 500);
    // A full last page cannot tell it was the last: one more call finds the end.
    assert_eq!(scripts, 30_000 / 500 + 1, "one call per page of 500 ids");

    let (next, _) = q
        .search_jobs_page(
            JobState::Waiting,
            &JobFilter::default(),
            0,
            1_000_000,
            RangeOrder::Ascending,
        )
        .await
        .unwrap();
    assert_eq!(next, Some(SEARCH_PAGE_MAX));
    let calls = m.take(&c).await;
    let max = SEARCH_PAGE_MAX as usize;
    assert_eq!(
        assert_bounded("search page", &calls, 2 * max + 10, max as i64),
        1
    );
}

/// The allowlist itself: what it refuses and what it lets through.
#[test]
fn the_cost_allowlist_refuses_what_grows_with_the_queue() {
    let a = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<String>>();
    for (command, args) in [
        ("KEYS", "emq:q:*"),
        ("SMEMBERS", "emq:q:stalled"),
        ("HKEYS", "emq:q:1"),
        ("LRANGE", "emq:q:wait 0 -1"),
        ("ZRANGE", "emq:q:completed 0 5000"),
        ("ZRANGEBYSCORE", "emq:q:delayed -inf +inf"),
        ("ZREMRANGEBYSCORE", "emq:q:completed -inf 100"),
        ("LREM", "emq:q:wait 1 42"),
        ("LPOS", "emq:q:wait 42"),
        ("HGETALL", "emq:q:P:processed"),
        ("SCAN", "0 MATCH emq:q:*"),
        ("XRANGE", "emq:q:events - +"),
        ("LTRIM", "emq:q:wait 0 5"),
        ("LINDEX", "emq:q:wait 5000"),
        ("ZUNIONSTORE", "emq:q:x 2 emq:q:a emq:q:b"),
    ] {
        assert!(
            cost(command, &a(args), 1000).is_err(),
            "{command} {args} passed"
        );
    }
    for (command, args) in [
        ("LREM", "emq:q:active -1 42"),
        ("HGETALL", "emq:q:42"),
        ("HGETALL", "emq:q:meta"),
        ("LPOS", "emq:q:wait 42 MAXLEN 1000"),
        ("ZRANGEBYSCORE", "emq:q:delayed 0 100 LIMIT 0 1000"),
        ("SCAN", "0 MATCH emq:q:* COUNT 1000"),
        ("LTRIM", "emq:q:wait 0 -1001"),
        ("LINDEX", "emq:q:wait -1"),
        ("HGET", "emq:q:42 data"),
    ] {
        assert!(
            cost(command, &a(args), 1000).is_ok(),
            "{command} {args} refused"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedulers_are_listed_and_swept_a_page_at_a_time() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let c = redis.client().await;
    // 2 500 schedulers, every one due far in the future.
    let script = r#"
      for i = 1, tonumber(ARGV[1]) do
        redis.call("ZADD", KEYS[1] .. "repeat", 4102444800000, "s" .. i)
        redis.call("HSET", KEYS[1] .. "repeat:s" .. i, "name", "n", "every", "60000", "ic", "1")
      end
      return 1"#;
    let _: i64 = c.eval(script, vec!["emq:q:"], vec!["2500"]).await.unwrap();
    let s = echomq::JobSchedulers::new(&conn, "q").unwrap();
    let m = Monitor::start(redis.port(), &c).await;
    assert_eq!(s.list().await.unwrap().len(), 2500);
    let sweep = s.sweep(Duration::from_secs(1)).await.unwrap();
    assert!(sweep.restored.is_empty());
    assert_eq!(sweep.schedulers, 1, "stops at the first one not overdue");
    let calls = m.take(&c).await;
    let page = echomq::scheduler::SCHEDULER_PAGE as i64;
    assert_bounded("schedulers", &calls, 0, page);
    let ranges = calls.iter().filter(|c| c.command == "ZRANGE").count();
    assert_eq!(ranges, 3 + 1, "three pages for the list, one for the sweep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_with_10000_children_is_read_in_pages() {
    let (redis, conn, q) = RedisServer::with_queue("q").await;
    let c = redis.client().await;
    q.add("p", &json!({}), JobOptions::new().job_id("P"))
        .await
        .unwrap();
    // 10 000 children: 6 000 pending, 4 000 processed, written directly.
    let script = r#"
      for i = 1, 10000 do
        local child = KEYS[1] .. "c" .. i
        redis.call("HSET", child, "name", "c", "data", "{}", "opts", "{}", "timestamp", "1",
          "delay", "0", "priority", "0", "parentKey", KEYS[1] .. "P")
        if i <= 6000 then redis.call("SADD", KEYS[1] .. "P:dependencies", child)
        else redis.call("HSET", KEYS[1] .. "P:processed", child, '"ok"') end
      end
      return 1"#;
    let _: i64 = c
        .eval(script, vec!["emq:q:"], Vec::<String>::new())
        .await
        .unwrap();
    let m = Monitor::start(redis.port(), &c).await;
    let values = q.flows().get_children_values("P").await.unwrap();
    assert_eq!(values.len(), 4000);
    let deep = q.flows().get_dependencies("P", 5900, 100).await.unwrap();
    assert_eq!(deep.unprocessed.len(), 100, "a page deep in the set");
    assert_eq!(deep.counts.unprocessed, 6000);
    let calls = m.take(&c).await;
    // paginate scans at most ten SSCAN rounds of COUNT 100 per call.
    // SSCAN COUNT 100 rounds, and HSCAN COUNT 1000 steps of `processed`.
    assert_bounded("children", &calls, 30, 1000);
    for call in &calls {
        if call.command == "HSCAN" {
            assert!(call.args.iter().any(|a| a == "COUNT"));
        }
        assert_ne!(call.command, "HGETALL", "{:?}", call.args);
    }
    let flows_audit = echomq::audit::Audit::new(&conn, "q").run().await.unwrap();
    assert!(flows_audit.is_consistent(), "{:#?}", flows_audit.violations);
}

/// The stalled check on a crashed fleet's queue: 2 500 jobs active without
/// a lock, 50 000 more waiting or completed. The probe reads `active` in
/// pages; `moveStalledJobsToWait` (BullMQ's script, frozen) walks `stalled`
/// and `active` whole, which hold in-flight jobs only: its work follows the
/// fleet's concurrency, never the backlog (docs/scale.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stalled_check_follows_the_active_jobs_not_the_backlog() {
    const ACTIVE: usize = 2_500;
    let (redis, conn, c, _q) = big(40_000, 10_000).await;
    let _: i64 = c
        .eval(
            "for i = 1, tonumber(ARGV[1]) do redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') end return 1",
            vec!["emq:q:wait", "emq:q:active"],
            vec![ACTIVE.to_string()],
        )
        .await
        .unwrap();
    let m = Monitor::start(redis.port(), &c).await;
    // Its first sweep runs at once and marks every active job; the second,
    // asked for once that mark is seen, finds them still without a lock
    // and moves them back.
    let (checker, _) = ractor::Actor::spawn(
        None,
        echomq::StalledChecker,
        echomq::StalledCheckerArgs::new(conn.clone(), "q"),
    )
    .await
    .unwrap();
    echomq_integration_tests::wait_until(
        "the first sweep marks every active job",
        Duration::from_secs(30),
        async || c.scard::<u64, _>("emq:q:stalled").await.unwrap() == ACTIVE as u64,
    )
    .await;
    // As if the interval had passed (the script throttles itself with this
    // key, PX interval; the actor's own timer is 30 s away).
    let _: i64 = c.del("emq:q:stalled-check").await.unwrap();
    let recover = ractor::call_t!(checker, echomq::StalledCheckerMsg::CheckNow, 30_000)
        .unwrap()
        .unwrap();
    assert_eq!(recover.active, ACTIVE);
    assert_eq!(recover.without_lock.len(), ACTIVE);
    assert_eq!(recover.recovered.len(), ACTIVE, "the fault happened");
    checker.stop(None);
    let calls = m.take(&c).await;
    let page = echomq::stalled_checker::PROBE_PAGE;
    let mut scripts = 0;
    for call in &calls {
        if call.command == "LRANGE" {
            assert!(range_of("LRANGE", &call.args).is_some_and(|n| n <= page));
        }
        if call.command == "EVALSHA" {
            scripts += 1;
            // A handful of commands per in-flight job, whatever waits.
            assert!(
                call.inner.len() <= 10 * ACTIVE + 50,
                "{} commands in one stalled check",
                call.inner.len()
            );
            for (command, args) in &call.inner {
                let backlog = args
                    .first()
                    .is_some_and(|k| k == "emq:q:wait" || k == "emq:q:completed");
                assert!(
                    !(backlog && matches!(command.as_str(), "LRANGE" | "ZRANGE" | "LPOS")),
                    "the stalled check read the backlog: {command} {args:?}"
                );
            }
        }
    }
    assert_eq!(scripts, 2, "one script call per sweep");
    let pipelined = calls.iter().filter(|c| c.command == "EXISTS").count();
    assert_eq!(
        pipelined,
        2 * ACTIVE,
        "one lock probe per active job per sweep"
    );
}

/// BullMQ's Prometheus text for a queue of 50 000 jobs: counts and the last
/// metrics point, a few O(1)/O(log n) commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_export_reads_counts_not_jobs() {
    let (redis, _conn, c, q) = big(30_000, 20_000).await;
    let m = Monitor::start(redis.port(), &c).await;
    let text = q.telemetry().export_prometheus_metrics(&[]).await.unwrap();
    assert!(
        text.contains("bullmq_job_count{queue=\"q\", state=\"waiting\"} 30000"),
        "{text}"
    );
    assert!(
        text.contains("bullmq_job_count{queue=\"q\", state=\"completed\"} 20000"),
        "{text}"
    );
    let calls = m.take(&c).await;
    assert_bounded("metrics export", &calls, 20, 1);
    assert!(calls.len() <= 6, "{} round trips: {calls:?}", calls.len());
}

/// A queue of 10 000 groups, two jobs each: every add, every release and
/// accounting step of the feeder, the groups page and the group audit touch
/// a bounded number of groups and jobs per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_10000_groups_is_fed_a_batch_per_call() {
    use echomq::groups::{GroupFeeder, GroupFeederArgs, GroupFeederMsg, GroupOptions};
    const GROUPS: usize = 10_000;
    let (redis, conn, q) = RedisServer::with_queue("g").await;
    let c = redis.client().await;
    let m = Monitor::start(redis.port(), &c).await;
    for chunk in 0..(2 * GROUPS / 1000) {
        let jobs = (0..1000)
            .map(|i| NewJob {
                name: "j".into(),
                data: json!({}),
                options: JobOptions::new().group(GroupOptions::new(format!(
                    "t{}",
                    (chunk * 1000 + i) % GROUPS
                ))),
            })
            .collect();
        q.add_bulk(jobs).await.unwrap();
    }
    let adds = m.take(&c).await;
    assert_eq!(assert_bounded("group adds", &adds, 40, 1000), 2 * GROUPS);
    let page = q.groups().page(5_000, 100).await.unwrap();
    assert_eq!(page.groups.len(), 100);
    let calls = m.take(&c).await;
    assert_bounded("groups page", &calls, 100 * 12 + 20, 100);

    let batch = 100;
    let (feeder, _) = ractor::Actor::spawn(
        None,
        GroupFeeder,
        GroupFeederArgs::new(conn.clone(), "g")
            .batch(batch)
            .block(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    let mut worker = echomq::WorkerArgs::new(
        q.clone(),
        echomq::worker::processor_fn(|_job| async { Ok(json!(null)) }),
    );
    worker.options.concurrency = 16;
    let (host, _) = ractor::Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    // The stalled check has its own test above (it follows the active jobs).
    let mut spec = echomq::WorkerSetSpec::new(worker);
    spec.stalled_checker = None;
    let set = spec.spawn_linked(host.get_cell()).await.unwrap();
    echomq_integration_tests::wait_until(
        "every group job completes",
        Duration::from_secs(240),
        async || {
            let n: u64 = c.zcard("emq:g:completed").await.unwrap();
            n == 2 * GROUPS as u64
        },
    )
    .await;
    // Quiescent once the feeder has accounted for every finish.
    echomq_integration_tests::wait_until(
        "the feeder frees every slot",
        Duration::from_secs(60),
        async || {
            let stats = ractor::call_t!(feeder, GroupFeederMsg::GetStats, 5_000).unwrap();
            stats.freed == 2 * GROUPS as u64
        },
    )
    .await;
    let _ = set.close(Duration::from_secs(10)).await;
    feeder.cast(GroupFeederMsg::Close).unwrap();
    let run = m.take(&c).await;
    // Each step looks at a batch of groups and jobs, not all 10 000.
    assert_bounded("feeding", &run, 40 * batch as usize + 100, 1000);
    let report = Audit::new(&conn, "g")
        .options(AuditOptions {
            quiescent: true,
            ..Default::default()
        })
        .on_progress(|_| {})
        .run()
        .await
        .unwrap();
    assert!(report.violations.is_empty(), "{:?}", &report.violations);
    let audit = m.take(&c).await;
    assert_bounded(
        "group audit",
        &audit,
        echomq::audit::PAGE as usize * 12 + 50,
        1000,
    );
}
