//! F31–F36: bad input (foreign data, huge payloads, invalid schedulers and
//! queue names) and admin operations racing a worker.

use std::time::{Duration, Instant};

use echomq::{Backoff, JobOptions, JobSchedulers, Queue, SchedulerSpec};
use fred::prelude::*;
use serde_json::json;

use super::fleet::{InProc, SetOptions};
use super::server::Persistence;
use super::{expect, poll, sleep_job, Bed, Ctx, Row};

fn opts(lock_ms: u64) -> SetOptions {
    SetOptions {
        concurrency: 4,
        lock: Duration::from_millis(lock_ms),
        stalled_interval: Duration::from_millis(300),
        ..Default::default()
    }
}

/// Writes a foreign job hash `id` with `fields` and pushes it onto `wait`.
async fn foreign(bed: &Bed, id: &str, fields: &[(&str, &str)], push_times: usize) {
    let k = bed.queue.keys();
    if !fields.is_empty() {
        let _: () = bed
            .client
            .hset(
                k.job(id),
                fields
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect::<Vec<_>>(),
            )
            .await
            .unwrap_or(());
    }
    for _ in 0..push_times {
        let _: i64 = bed.client.lpush(k.wait(), id).await.unwrap_or(0);
    }
    let _: i64 = bed
        .client
        .zadd(k.marker(), None, None, false, false, (0.0, "0"))
        .await
        .unwrap_or(0);
}

/// F31: malformed jobs written by a foreign client: each fails with a
/// clear reason, the worker lives on and takes the good jobs.
pub async fn f31(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F31", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(1);
    let now = echomq::clock::now_ms().to_string();
    let ok_opts = r#"{"attempts":1}"#;
    foreign(
        &bed,
        "bad-data",
        &[
            ("name", "x"),
            ("data", "{"),
            ("opts", ok_opts),
            ("timestamp", &now),
        ],
        1,
    )
    .await;
    foreign(
        &bed,
        "bad-opts",
        &[
            ("name", "x"),
            ("data", "{}"),
            ("opts", "not-json"),
            ("timestamp", &now),
        ],
        1,
    )
    .await;
    foreign(&bed, "no-name", &[("data", "{}")], 1).await;
    foreign(
        &bed,
        "bad-atm",
        &[
            ("name", "x"),
            ("data", "{}"),
            ("opts", ok_opts),
            ("timestamp", &now),
            ("atm", "abc"),
        ],
        1,
    )
    .await;
    foreign(&bed, "no-hash", &[], 1).await;
    foreign(
        &bed,
        "twice",
        &[
            ("name", "x"),
            ("data", "{}"),
            ("opts", ok_opts),
            ("timestamp", &now),
        ],
        2,
    )
    .await;
    let before = bed.account().await;
    let flagged = |c: &str| before.audit_all.iter().any(|v| v.starts_with(c));
    let mut f = Vec::new();
    expect(
        &mut f,
        flagged("A3"),
        "the audit did not flag the id without a hash (A3)",
    );
    expect(
        &mut f,
        flagged("A1"),
        "the audit did not flag the id pushed twice (A1)",
    );
    bed.add_n(20, |_| sleep_job(10)).await;
    let w = InProc::start(&bed.queue, opts(1000)).await;
    let drained = bed.drained(Duration::from_secs(60)).await;
    expect(
        &mut f,
        drained.is_some(),
        "good jobs not drained: the worker died or looped",
    );
    // The bad jobs settle too (failed with a reason, or gone).
    let bad = ["bad-data", "bad-opts", "no-name", "bad-atm"];
    let settled = poll(Duration::from_secs(30), || async {
        let mut all = true;
        for id in bad {
            let s = bed.queue.get_job_state(id).await.ok();
            all &= s == Some(echomq::JobState::Failed);
        }
        all
    })
    .await;
    let mut reasons = Vec::new();
    for id in bad {
        let r: Option<String> = bed
            .client
            .hget(bed.queue.keys().job(id), "failedReason")
            .await
            .ok()
            .flatten();
        let clear = r
            .as_deref()
            .is_some_and(|r| !r.contains("stalled more than"));
        expect(&mut f, clear, format!("{id}: failedReason {r:?}"));
        reasons.push(format!(
            "{id}: {}",
            r.unwrap_or_default().chars().take(60).collect::<String>()
        ));
    }
    expect(&mut f, settled, "a malformed job did not end in failed");
    // The orderly close waits for whatever still runs.
    w.close().await;
    let mut acc = bed.account().await;
    // The foreign ids are this scenario's own writes, judged above.
    acc.ghosts.retain(|id| {
        ![
            "bad-data", "bad-opts", "no-name", "bad-atm", "no-hash", "twice",
        ]
        .contains(&id.as_str())
    });
    // The id pushed twice onto wait runs twice: foreign corruption that the
    // audit flagged (A1) before any worker ran; no runtime can undo it.
    acc.completed_twice.retain(|id| id != "twice");
    // Taken twice, it has two entries in `active`; one outlives the finish,
    // so the id ends in active and completed (the audit's A2 after, as its
    // A1 before): the same corruption, left to the audit and to the stalled
    // checker, which moves the leftover entry once its lock is gone.
    acc.multi_state.retain(|id| id != "twice");
    // The foreign corruption itself (no hash; a second wait entry) is the
    // audit's to report, not a runtime failure.
    f.extend(acc.broken().into_iter().filter(|r| !r.starts_with("audit")));
    tracing_note(&reasons);
    bed.row_from(
        "foreign job hashes: data not JSON, opts not JSON, no name, atm \"abc\"; an id without hash; an id pushed twice",
        &acc,
        drained,
        f,
        Some(format!(
            "bad jobs failed at once with the decode error; the audit flags A1/A3 before; the id without a hash ends {:?}; final A3: the two foreign hashes without `timestamp` are no job hashes by the audit's grammar",
            bed.queue.get_job_state("no-hash").await.ok(),
        )),
    )
}

fn tracing_note(reasons: &[String]) {
    eprintln!("chaos F31 reasons: {}", reasons.join(" | "));
}

/// F32: 10 MB payloads and a 10 MB return value while jobs with 1 s locks
/// need renewing: no stall.
pub async fn f32(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F32", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(2);
    bed.add_n(4, |_| sleep_job(4000)).await;
    let w = InProc::start(
        &bed.queue,
        SetOptions {
            concurrency: 8,
            ..opts(2000)
        },
    )
    .await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.wait_active(4, Duration::from_secs(20)).await,
        "long jobs never active",
    );
    let big = "x".repeat(10 * 1024 * 1024);
    for i in 0..3 {
        bed.add(
            &format!("big-{i}"),
            json!({"mode": "sleep", "ms": 100, "pad": big}),
            JobOptions::new(),
        )
        .await;
    }
    bed.add(
        "big-ret",
        json!({"mode": "sleep", "ms": 100, "ret": big}),
        JobOptions::new(),
    )
    .await;
    let drained = bed.drained(Duration::from_secs(90)).await;
    w.close().await;
    expect(&mut f, drained.is_some(), "not drained within 90 s");
    let mem: String = super::redis_faults::raw(&bed.client, "INFO", vec!["memory".into()])
        .await
        .ok()
        .and_then(|v| v.as_string())
        .unwrap_or_default();
    let used = mem
        .lines()
        .find_map(|l| l.strip_prefix("used_memory_human:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 0,
        format!(
            "{} stalls: renewal starved by big payloads",
            acc.stalled_events
        ),
    );
    f.extend(acc.broken());
    bed.row_from(
        "3 jobs of 10 MB data and one 10 MB return value beside 4 jobs renewing 2 s locks",
        &acc,
        drained,
        f,
        Some(format!(
            "used_memory {used} after (the return value is kept in the job and its event)"
        )),
    )
}

/// F33: invalid scheduler specifications are refused with a typed error
/// and write nothing; a scheduler hash corrupted by a foreign client does
/// not stop the worker.
pub async fn f33(_ctx: Ctx) -> Row {
    let bed = Bed::new("F33", Persistence::None, &[]).await;
    let s = JobSchedulers::new(&bed.conn, &bed.name()).expect("schedulers");
    let now = echomq::clock::now_ms();
    let mut specs: Vec<(&str, SchedulerSpec)> = vec![
        ("every 0", SchedulerSpec::every("e0", Duration::ZERO)),
        (
            "cron 61 * * * *",
            SchedulerSpec::cron("c61", "61 * * * *", None),
        ),
        (
            "cron of 7 fields",
            SchedulerSpec::cron("c7", "0 0 0 1 1 * 2099 extra", None),
        ),
        (
            "bad tz",
            SchedulerSpec::cron("tz", "* * * * *", Some("Mars/Olympus")),
        ),
    ];
    let mut past = SchedulerSpec::every("past", Duration::from_secs(1));
    past.end_date = Some(now - 60_000);
    specs.push(("endDate in the past", past));
    let mut inverted = SchedulerSpec::every("inv", Duration::from_secs(1));
    inverted.start_date = Some(now + 120_000);
    inverted.end_date = Some(now + 60_000);
    specs.push(("startDate > endDate", inverted));
    let mut limit0 = SchedulerSpec::every("l0", Duration::from_secs(1));
    limit0.limit = Some(0);
    specs.push(("limit 0", limit0));
    specs.push((
        "cron that never fires (30 Feb)",
        SchedulerSpec::cron("feb30", "0 0 30 2 *", None),
    ));
    let mut f = Vec::new();
    let mut accepted = Vec::new();
    let must_refuse = [
        "every 0",
        "cron 61 * * * *",
        "cron of 7 fields",
        "bad tz",
        "startDate > endDate",
    ];
    for (what, spec) in &specs {
        let r = s.upsert(spec).await;
        let keys_after = crate::keys(
            &bed.client,
            &format!("{}*", bed.queue.keys().scheduler(&spec.id)),
        )
        .await;
        match r {
            Err(_) => expect(
                &mut f,
                keys_after.is_empty(),
                format!("{what}: refused but wrote {keys_after:?}"),
            ),
            Ok(_) => {
                accepted.push(*what);
                expect(
                    &mut f,
                    !must_refuse.contains(what),
                    format!("{what}: accepted"),
                );
                let _ = s.remove(&spec.id).await;
            }
        }
    }
    // A foreign client corrupts a live scheduler; the worker must live on.
    let w = InProc::start(&bed.queue, opts(1000)).await;
    let _ = s
        .upsert(&SchedulerSpec::every("live", Duration::from_millis(300)))
        .await;
    let _: () = bed
        .client
        .hset(bed.queue.keys().scheduler("live"), ("every", "garbage"))
        .await
        .unwrap_or(());
    let corrupted_at = crate::timeline::now_ms(&bed.client).await;
    bed.add_n(20, |_| sleep_job(10)).await;
    let drained = bed.drained(Duration::from_secs(60)).await;
    // The worker met the corrupted scheduler: it took one of its iterations
    // after the corruption (on Redis's clock).
    let met = poll(Duration::from_secs(30), || async {
        super::accounting::read_events(&bed.client, &bed.queue)
            .await
            .iter()
            .any(|e| {
                e.name == "active"
                    && e.job_id.starts_with("repeat:live:")
                    && e.at_ms >= corrupted_at
            })
    })
    .await;
    expect(
        &mut f,
        met,
        "no iteration of the corrupted scheduler was taken",
    );
    let _ = s.remove("live").await;
    // The orderly close waits for whatever still runs.
    w.close().await;
    expect(
        &mut f,
        drained.is_some(),
        "the worker stopped after meeting a corrupted scheduler",
    );
    let mut acc = bed.account().await;
    // Iterations of the removed corrupted scheduler may be left pending.
    acc.audit_hard.retain(|v| !v.starts_with("A12"));
    f.extend(acc.broken());
    bed.row_from(
        "invalid every/cron/tz/dates/limit refused, no partial keys; a foreign-corrupted scheduler",
        &acc,
        drained,
        f,
        Some(if accepted.is_empty() {
            "all refused".into()
        } else {
            format!("accepted as BullMQ does: {}", accepted.join(", "))
        }),
    )
}

/// F34: invalid queue names are refused and create no keys.
pub async fn f34(_ctx: Ctx) -> Row {
    let bed = Bed::new("F34", Persistence::None, &[]).await;
    let long = "q".repeat(100 * 1024);
    let names: Vec<(&str, &str)> = vec![
        ("empty", ""),
        ("a:b", "a:b"),
        ("{", "{"),
        ("}", "}"),
        ("{x}", "{x}"),
        ("a}b{c", "a}b{c"),
        ("whitespace", "   "),
        ("100 KB", &long),
        ("non-ASCII", "очередь"),
    ];
    let must_refuse = ["empty", "a:b"];
    let mut f = Vec::new();
    let mut accepted = Vec::new();
    for (what, name) in &names {
        let before = crate::keys(&bed.client, "*").await;
        let conn = bed.conn.clone();
        let r = Queue::new(&conn, name).await;
        let after = crate::keys(&bed.client, "*").await;
        match r {
            Err(_) => expect(
                &mut f,
                after == before,
                format!("{what}: refused but keys were written"),
            ),
            Ok(_) => {
                accepted.push(*what);
                expect(
                    &mut f,
                    !must_refuse.contains(what),
                    format!("{what}: accepted"),
                );
            }
        }
    }
    let acc = bed.account().await;
    f.extend(acc.broken());
    bed.row_from(
        "queue names \"\", a:b, braces, whitespace, 100 KB, non-ASCII",
        &acc,
        None,
        f,
        Some(if accepted.is_empty() {
            "all refused".into()
        } else {
            format!("accepted: {}", accepted.join(", "))
        }),
    )
}

/// F35: remove while active (refused: locked), obliterate (forced) while
/// active, the same id re-added at once: the old worker's finish is fenced,
/// the new job runs once.
pub async fn f35(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F35", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(2);
    bed.add("r1", sleep_job(1500), JobOptions::new()).await;
    let w = InProc::start(&bed.queue, opts(2000)).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.wait_active(1, Duration::from_secs(20)).await,
        "r1 never active",
    );
    let removed = bed.queue.remove("r1", false).await;
    expect(
        &mut f,
        matches!(removed, Ok(echomq::queue::RemoveOutcome::Locked)),
        format!("remove of an active job answered {removed:?}"),
    );
    let refused = bed.queue.obliterate(false).await;
    expect(
        &mut f,
        matches!(refused, Err(echomq::Error::ActiveJobs)),
        format!("obliterate without force: {refused:?}"),
    );
    let forced = bed.queue.obliterate(true).await;
    expect(
        &mut f,
        forced.is_ok(),
        format!("forced obliterate: {forced:?}"),
    );
    let _ = bed.queue.resume().await;
    bed.ledger = super::accounting::Ledger::default();
    bed.add("r1", sleep_job(50), JobOptions::new()).await;
    let drained = bed.drained(Duration::from_secs(30)).await;
    // The old processor ends at 1.5 s and tries to finish: once the worker
    // holds nothing, that attempt was made.
    let let_go = poll(Duration::from_secs(10), || async { w.held().await == 0 }).await;
    expect(&mut f, let_go, "the old run never ended");
    w.close().await;
    expect(
        &mut f,
        drained.is_some(),
        "the re-added job did not complete",
    );
    let ats: Option<u64> = bed
        .client
        .hget(bed.queue.keys().job("r1"), "ats")
        .await
        .ok()
        .flatten();
    expect(
        &mut f,
        ats == Some(1),
        format!("re-added r1 has ats {ats:?}, expected 1"),
    );
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.completions.get("r1") == Some(&1),
        format!("r1 completed {:?} times", acc.completions.get("r1")),
    );
    f.extend(acc.broken());
    bed.row_from(
        "remove (refused: locked) and forced obliterate of an active job, id re-added while the old run goes on",
        &acc,
        drained,
        f,
        None,
    )
}

/// F36: retries with backoff racing the stalled checker: the lock of a job
/// is deleted while its attempt is about to fail.
pub async fn f36(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F36", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(5);
    let o = JobOptions::new().attempts(4).backoff(Backoff::Fixed {
        delay: 100,
        jitter: None,
    });
    for i in 0..10u64 {
        let data = json!({"mode": "fail-until", "n": 1, "reason": "first attempt fails"});
        bed.add(&format!("r-{i:02}"), data, o.clone()).await;
    }
    // Attempts that sleep before failing, so deletions land at every phase.
    for i in 0..10u64 {
        bed.add(
            &format!("s-{i:02}"),
            json!({"mode": "sleep-fail", "ms": 100 + i * 60, "reason": "fails after a sleep"}),
            o.clone(),
        )
        .await;
    }
    let live = LiveAudit::start(&bed).await;
    let w = InProc::start(
        &bed.queue,
        SetOptions {
            concurrency: 20,
            ..opts(5000)
        },
    )
    .await;
    // Delete locks while attempts are running, repeatedly.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        for l in crate::keys(
            &bed.client,
            &format!("{}*:lock", bed.queue.keys().prefix_key()),
        )
        .await
        {
            let _: i64 = bed.client.del(&l).await.unwrap_or(0);
        }
        // The fault's cadence.
        tokio::time::sleep(Duration::from_millis(90)).await;
    }
    let drained = bed.drained(Duration::from_secs(60)).await;
    w.close().await;
    let seen = live.stop().await;
    let mut f = Vec::new();
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    expect(&mut f, seen.is_empty(), format!("live audit saw {seen:?}"));
    let acc = bed.account().await;
    f.extend(acc.broken());
    bed.row_from(
        "locks deleted every 90 ms while attempts fail with backoff 100 ms (retry vs stall)",
        &acc,
        drained,
        f,
        Some(format!(
            "{} stalls; {} jobs failed as stalled more than allowed (the fault repeats); the live atomic audit never saw a job in two states",
            acc.stalled_events, acc.failed
        )),
    )
}

/// A background auditor: atomic snapshots every 50 ms, recording every
/// hard violation seen while the scenario runs.
pub struct LiveAudit {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl LiveAudit {
    /// Starts auditing `bed`'s queue.
    pub async fn start(bed: &Bed) -> LiveAudit {
        let (stop, mut rx) = tokio::sync::watch::channel(false);
        let conn = bed.conn.clone();
        let queue = bed.name();
        let max_lock = bed.max_lock;
        let task = tokio::spawn(async move {
            let mut seen = std::collections::BTreeSet::new();
            let opts = echomq::audit::AuditOptions {
                quiescent: false,
                max_lock_duration: max_lock,
            };
            while !*rx.borrow() {
                if let Ok(r) = echomq::audit::Audit::new(&conn, &queue)
                    .options(opts.clone())
                    .run()
                    .await
                {
                    for v in r.violations.iter().filter(|v| v.hard) {
                        seen.insert(format!("{}: {}", v.check, v.detail));
                    }
                }
                let _ = tokio::time::timeout(Duration::from_millis(50), rx.changed()).await;
            }
            seen.into_iter().collect()
        });
        LiveAudit { stop, task }
    }

    /// Stops and returns what was seen.
    pub async fn stop(self) -> Vec<String> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}
