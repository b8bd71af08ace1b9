//! F01–F10: faults of the worker processes (signals to real processes,
//! panics, crash loops, a starved runtime).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use fred::prelude::*;
use rand::seq::SliceRandom;
use serde_json::{json, Value};

use super::fleet::{InProc, Proc, SetOptions};
use super::server::Persistence;
use super::{expect, sleep_job, Bed, Ctx, Row};

fn wopts(concurrency: u64, lock_ms: u64, stalled_ms: u64) -> Value {
    json!({
        "concurrency": concurrency,
        "lockDuration": lock_ms,
        "stalledInterval": stalled_ms,
        "drainDelay": 300,
        "verbose": true,
    })
}

/// Ids a process reported starting.
fn started(p: &mut Proc) -> Vec<String> {
    p.drain()
        .iter()
        .filter(|v| v["ev"] == "start")
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect()
}

async fn wait_started(p: &mut Proc, n: usize, limit: Duration) -> Vec<String> {
    let mut seen = HashSet::new();
    p.wait_line(limit, |v| {
        if v["ev"] == "start" {
            seen.insert(v["id"].as_str().unwrap_or_default().to_owned());
        }
        seen.len() >= n
    })
    .await;
    started(p)
}

async fn stc(bed: &Bed, id: &str) -> u64 {
    bed.client
        .hget::<Option<u64>, _, _>(bed.queue.keys().job(id), "stc")
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// F01: SIGKILL of a Rust worker process holding 4 jobs; a fresh Rust
/// process and a BullMQ Node worker (the mixed fleet) recover them.
pub async fn f01(ctx: Ctx) -> Row {
    let bed = Bed::new("F01", Persistence::None, &[]).await;
    // Jobs long enough (3 s) that the four A took still run when it dies.
    bed.add_n(24, |_| sleep_job(3000)).await;
    let mut a = Proc::rust(
        &ctx.worker_bin,
        &bed.url(),
        &bed.name(),
        wopts(4, 2000, 500),
    )
    .await;
    let mut held = wait_started(&mut a, 4, Duration::from_secs(30)).await;
    let killed = a.sigkill();
    let t0 = Instant::now();
    // A was the only worker: what is active now is exactly what it held.
    let mut active: Vec<String> = bed
        .client
        .lrange(bed.queue.keys().active(), 0, -1)
        .await
        .unwrap_or_default();
    active.sort();
    held.sort();
    let mut f = Vec::new();
    expect(
        &mut f,
        killed,
        "the worker process was not killed by the SIGKILL",
    );
    expect(
        &mut f,
        held.len() == 4 && active == held,
        format!("killed holding {active:?}, it had started {held:?}: not 4 running jobs"),
    );
    let b = Proc::rust(
        &ctx.worker_bin,
        &bed.url(),
        &bed.name(),
        wopts(4, 2000, 500),
    )
    .await;
    let node = if ctx.node {
        Some(Proc::node(&bed.url(), &bed.name(), wopts(4, 2000, 500)).await)
    } else {
        None
    };
    let drained = bed
        .drained(Duration::from_secs(60))
        .await
        .map(|_| t0.elapsed());
    b.close(Duration::from_secs(10)).await;
    if let Some(n) = node {
        n.close(Duration::from_secs(10)).await;
    }
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    for id in &held {
        let n = stc(&bed, id).await;
        expect(&mut f, n == 1, format!("{id}: stc {n}, expected 1"));
    }
    let a_ = bed.account().await;
    expect(
        &mut f,
        a_.stalled_events == held.len(),
        format!(
            "{} stalled events for {} killed jobs",
            a_.stalled_events,
            held.len()
        ),
    );
    f.extend(a_.broken());
    let fleet = if ctx.node { "Rust + Node" } else { "Rust" };
    bed.row_from(
        format!(
            "SIGKILL a Rust worker process holding {} jobs; fleet {fleet}",
            held.len()
        ),
        &a_,
        drained,
        f,
        None,
    )
}

/// F02: mass crash: 4 processes × 10 slots, 2 random ones SIGKILLed and
/// restarted every 1.5 s for 6 s.
pub async fn f02(ctx: Ctx) -> Row {
    let bed = Bed::new("F02", Persistence::None, &[]).await;
    bed.add_n(300, |i| sleep_job(100 + (i as u64 * 37) % 500))
        .await;
    let o = wopts(10, 1500, 500);
    let mut procs = Vec::new();
    for _ in 0..4 {
        procs.push(Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await);
    }
    let mut kills = 0;
    for _ in 0..4 {
        // The faults' cadence.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut idx: Vec<usize> = (0..procs.len()).collect();
        idx.shuffle(&mut rand::thread_rng());
        for &i in idx.iter().take(2) {
            kills += usize::from(procs[i].sigkill());
            procs[i] = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
        }
    }
    let drained = bed.drained(Duration::from_secs(90)).await;
    for p in procs {
        p.close(Duration::from_secs(10)).await;
    }
    let mut f = Vec::new();
    expect(
        &mut f,
        kills == 8,
        format!("{kills} of 8 SIGKILLs hit a running process"),
    );
    expect(&mut f, drained.is_some(), "not drained within 90 s");
    let acc = bed.account().await;
    f.extend(acc.broken());
    let failed = acc.failed;
    bed.row_from(
        format!("{kills} SIGKILLs of 4 worker processes × 10 slots over 6 s"),
        &acc,
        drained,
        f,
        (failed > 0).then(|| format!("{failed} failed: killed twice, over maxStalledCount 1")),
    )
}

/// F03: SIGKILLs while jobs of 5–20 ms finish all the time, so kills land
/// around finish calls (no failpoint inside the worker: statistical).
pub async fn f03(ctx: Ctx) -> Row {
    let bed = Bed::new("F03", Persistence::None, &[]).await;
    bed.add_n(600, |i| sleep_job(5 + (i as u64 * 7) % 15)).await;
    let o = wopts(8, 1000, 300);
    let mut procs = vec![
        Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await,
        Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await,
    ];
    let mut kills = 0;
    for k in 0..6 {
        // The faults' cadence: kills land at arbitrary points of the jobs.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let i = k % 2;
        kills += usize::from(procs[i].sigkill());
        procs[i] = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
    }
    let drained = bed.drained(Duration::from_secs(60)).await;
    for p in procs {
        p.close(Duration::from_secs(10)).await;
    }
    let mut f = Vec::new();
    expect(
        &mut f,
        kills == 6,
        format!("{kills} of 6 SIGKILLs hit a running process"),
    );
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    // No lock may remain for a finished job.
    let locks = crate::keys(
        &bed.client,
        &format!("{}*:lock", bed.queue.keys().prefix_key()),
    )
    .await;
    expect(
        &mut f,
        locks.is_empty(),
        format!("{} locks left", locks.len()),
    );
    bed.row(
        "6 SIGKILLs while 5–20 ms jobs finish (kill around the finish script)",
        drained,
        f,
        None,
    )
    .await
}

/// F04: a zombie: worker A SIGSTOPped 4 s with lockDuration 1 s; B re-runs
/// its jobs; A's late finishes must be refused.
pub async fn f04(ctx: Ctx) -> Row {
    let bed = Bed::new("F04", Persistence::None, &[]).await;
    bed.add_n(2, |_| sleep_job(1500)).await;
    let o = wopts(2, 1000, 300);
    let mut a = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
    let held = wait_started(&mut a, 2, Duration::from_secs(30)).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        a.freeze(),
        "the worker process did not stop on SIGSTOP",
    );
    let b = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
    // The fault's length: 4 lock durations.
    tokio::time::sleep(Duration::from_secs(4)).await;
    expect(
        &mut f,
        a.thaw(),
        "the worker process did not resume on SIGCONT",
    );
    let drained = bed.drained(Duration::from_secs(60)).await;
    // A wakes up and tries to finish what it no longer owns: its orderly
    // close waits for those jobs, so once it exited its late finishes were
    // all sent (and refused).
    expect(
        &mut f,
        a.close(Duration::from_secs(15)).await,
        "the zombie did not exit after its close",
    );
    b.close(Duration::from_secs(10)).await;
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events >= held.len(),
        format!(
            "{} stalled events, {} held by the zombie",
            acc.stalled_events,
            held.len()
        ),
    );
    f.extend(acc.broken());
    bed.row_from(
        "SIGSTOP a worker 4 s (lockDuration 1 s), SIGCONT: its late finishes are fenced",
        &acc,
        drained,
        f,
        None,
    )
}

/// F05: negative control: SIGSTOP for 0.3 × lockDuration: no stall.
pub async fn f05(ctx: Ctx) -> Row {
    let bed = Bed::new("F05", Persistence::None, &[]).await;
    bed.add_n(4, |_| sleep_job(3000)).await;
    let mut a = Proc::rust(
        &ctx.worker_bin,
        &bed.url(),
        &bed.name(),
        wopts(4, 5000, 500),
    )
    .await;
    let started = wait_started(&mut a, 4, Duration::from_secs(30)).await;
    let mut f = Vec::new();
    expect(&mut f, started.len() == 4, format!("{started:?} started"));
    expect(
        &mut f,
        a.freeze(),
        "the worker process did not stop on SIGSTOP",
    );
    // The fault's length: 0.3 × lockDuration.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    expect(
        &mut f,
        a.thaw(),
        "the worker process did not resume on SIGCONT",
    );
    let drained = bed.drained(Duration::from_secs(60)).await;
    a.close(Duration::from_secs(10)).await;
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 0,
        format!("{} stalls", acc.stalled_events),
    );
    f.extend(acc.broken());
    bed.row_from(
        "SIGSTOP a worker 1.5 s (0.3 × lockDuration 5 s): no stall",
        &acc,
        drained,
        f,
        None,
    )
}

/// F06: a 6 s job with lockDuration 1 s and 3 idle workers checking every
/// 100 ms: renewal keeps it; the lock token never changes.
pub async fn f06(_ctx: Ctx) -> Row {
    let bed = Bed::new("F06", Persistence::None, &[]).await;
    let o = SetOptions {
        concurrency: 1,
        lock: Duration::from_secs(1),
        stalled_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let main = InProc::start(&bed.queue, o.clone()).await;
    bed.add("long", sleep_job(6000), echomq::JobOptions::new())
        .await;
    let lock_key = bed.queue.keys().lock("long");
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.wait_active(1, Duration::from_secs(20)).await,
        "the long job never became active",
    );
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(InProc::start(&bed.queue, o.clone()).await);
    }
    // The observation is the claim: the token read after more than one lock
    // duration and again 3.5 s later, while the 6 s job runs, is the same.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let early: Option<String> = bed.client.get(&lock_key).await.ok().flatten();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let late: Option<String> = bed.client.get(&lock_key).await.ok().flatten();
    let drained = bed.drained(Duration::from_secs(30)).await;
    expect(&mut f, drained.is_some(), "not drained within 30 s");
    main.close().await;
    for w in idle {
        w.close().await;
    }
    expect(
        &mut f,
        early.is_some() && early == late,
        format!("lock token changed: {early:?} → {late:?}"),
    );
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 0,
        format!("{} stalls", acc.stalled_events),
    );
    f.extend(acc.broken());
    bed.row_from(
        "6 s job, lockDuration 1 s, 3 idle checkers at 100 ms: renewal holds",
        &acc,
        None,
        f,
        None,
    )
}

/// F07: the runtime of a worker process starved (one thread, the processor
/// blocks it 3 × lockDuration): the stall is detected, another worker
/// re-runs the job, the late finish is refused.
pub async fn f07(ctx: Ctx) -> Row {
    let bed = Bed::new("F07", Persistence::None, &[]).await;
    let mut o = wopts(1, 1000, 300);
    o["threads"] = json!(1);
    o["stalledChecker"] = json!(false);
    let mut a = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o).await;
    bed.add(
        "starver",
        json!({"mode": "block", "ms": 3000, "first": true}),
        echomq::JobOptions::new(),
    )
    .await;
    let mut f = Vec::new();
    expect(
        &mut f,
        !wait_started(&mut a, 1, Duration::from_secs(20))
            .await
            .is_empty(),
        "the starving job never started",
    );
    let t0 = Instant::now();
    let b = InProc::start(
        &bed.queue,
        SetOptions {
            lock: Duration::from_secs(1),
            stalled_interval: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await;
    bed.add_n(20, |_| sleep_job(20)).await;
    let drained = bed
        .drained(Duration::from_secs(60))
        .await
        .map(|_| t0.elapsed());
    // A's blocked processor returns and A tries to finish the job it lost;
    // its orderly close waits for that.
    expect(
        &mut f,
        a.close(Duration::from_secs(15)).await,
        "the starved worker did not exit after its close",
    );
    b.close().await;
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events >= 1,
        "the starved job was not detected as stalled",
    );
    f.extend(acc.broken());
    bed.row_from(
        "processor blocks its 1-thread runtime 3 s (lockDuration 1 s): stall detected, re-run elsewhere",
        &acc,
        drained,
        f,
        Some("use spawn_blocking for CPU work (docs/reliability.md)".into()),
    )
}

/// F08: one job of 100 panics in the processor: it fails with a panic
/// reason, the worker lives on.
pub async fn f08(_ctx: Ctx) -> Row {
    let bed = Bed::new("F08", Persistence::None, &[]).await;
    bed.add_n(100, |i| {
        if i == 50 {
            json!({"mode": "panic"})
        } else {
            sleep_job(5)
        }
    })
    .await;
    let w = InProc::start(&bed.queue, SetOptions::default()).await;
    let drained = bed.drained(Duration::from_secs(60)).await;
    w.close().await;
    let mut f = Vec::new();
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    let reason: Option<String> = bed
        .client
        .hget(bed.queue.keys().job("j-000050"), "failedReason")
        .await
        .ok()
        .flatten();
    expect(
        &mut f,
        reason.as_deref().is_some_and(|r| r.contains("panic")),
        format!("poison job's failedReason: {reason:?}"),
    );
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.completed == 99 && acc.failed == 1,
        format!("completed {} failed {}", acc.completed, acc.failed),
    );
    f.extend(acc.broken());
    bed.row_from(
        "1 job in 100 panics: failed with the panic, worker lives on",
        &acc,
        None,
        f,
        None,
    )
}

/// F09: a poison job aborts its process; a supervisor (the runner)
/// restarts the process; the job is failed after maxStalledCount + 1
/// crashes, the others flow.
pub async fn f09(ctx: Ctx) -> Row {
    let bed = Bed::new("F09", Persistence::None, &[]).await;
    bed.add_n(30, |i| {
        if i == 5 {
            json!({"mode": "abort"})
        } else {
            sleep_job(30)
        }
    })
    .await;
    let mut o = wopts(2, 1000, 300);
    o["maxStalledCount"] = json!(1);
    let mut p = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
    let mut crashes = 0;
    let t0 = Instant::now();
    let mut drained = None;
    while t0.elapsed() < Duration::from_secs(90) {
        if p.exited() {
            crashes += 1;
            p = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
        }
        if let Ok(c) = bed.queue.counts().await {
            if c.pending() == 0 && (c.completed + c.failed) as usize >= bed.ledger.acked_count() {
                drained = Some(t0.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    p.close(Duration::from_secs(10)).await;
    let mut f = Vec::new();
    expect(&mut f, drained.is_some(), "not drained within 90 s");
    expect(
        &mut f,
        crashes <= 2,
        format!("{crashes} crashes (max maxStalledCount + 1 = 2)"),
    );
    let reason: Option<String> = bed
        .client
        .hget(bed.queue.keys().job("j-000005"), "failedReason")
        .await
        .ok()
        .flatten();
    expect(
        &mut f,
        reason.as_deref().is_some_and(|r| r.contains("stalled")),
        format!("poison job's failedReason: {reason:?}"),
    );
    bed.row(
        format!(
            "a job aborts its process ({crashes} crashes, restarted): failed as stalled too often"
        ),
        drained,
        f,
        None,
    )
    .await
}

/// F10: SIGTERM with a 0.5 s close deadline while 3 jobs of 3 s run: they
/// are moved back at the deadline (no stall) and re-run by another worker.
pub async fn f10(ctx: Ctx) -> Row {
    let bed = Bed::new("F10", Persistence::None, &[]).await;
    bed.add_n(3, |_| sleep_job(3000)).await;
    let mut o = wopts(3, 2000, 500);
    o["closeMs"] = json!(500);
    let mut a = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
    wait_started(&mut a, 3, Duration::from_secs(30)).await;
    a.signal("TERM");
    let t0 = Instant::now();
    let summary = a
        .wait_line(Duration::from_secs(20), |v| v["ev"] == "summary")
        .await;
    let exited = a.wait_exit(Duration::from_secs(10)).await;
    let b = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o).await;
    let drained = bed
        .drained(Duration::from_secs(60))
        .await
        .map(|_| t0.elapsed());
    b.close(Duration::from_secs(10)).await;
    let moved = summary
        .as_ref()
        .and_then(|s| s["movedBack"].as_array().map(|a| a.len()))
        .unwrap_or(0);
    let mut f = Vec::new();
    expect(&mut f, exited, "the worker did not exit after SIGTERM");
    expect(
        &mut f,
        moved == 3,
        format!("{moved} jobs moved back at the deadline, expected 3"),
    );
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 0,
        format!(
            "{} stalls (expected a release, not a stall)",
            acc.stalled_events
        ),
    );
    f.extend(acc.broken());
    bed.row_from(
        "SIGTERM, close deadline 0.5 s, 3 jobs of 3 s: moved back at once, re-run",
        &acc,
        drained,
        f,
        None,
    )
}
