//! F11–F15: lock tampering by a foreign client, and clock effects.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use echomq::{JobOptions, JobSchedulers, SchedulerSpec};
use fred::prelude::*;
use fred::types::Expiration;
use serde_json::json;

use super::fleet::{InProc, Proc, SetOptions};
use super::server::Persistence;
use super::{expect, poll, sleep_job, Bed, Ctx, Row};

/// Every job lock of the queue now.
async fn locks(bed: &Bed) -> Vec<String> {
    crate::keys(
        &bed.client,
        &format!("{}*:lock", bed.queue.keys().prefix_key()),
    )
    .await
}

async fn stc_all(bed: &Bed, ids: &[String], want: u64, f: &mut Vec<String>) {
    for id in ids {
        let n: u64 = bed
            .client
            .hget::<Option<u64>, _, _>(bed.queue.keys().job(id), "stc")
            .await
            .ok()
            .flatten()
            .unwrap_or(0);
        expect(f, n == want, format!("{id}: stc {n}, expected {want}"));
    }
}

fn sets(lock_s: u64) -> SetOptions {
    SetOptions {
        concurrency: 10,
        lock: Duration::from_secs(lock_s),
        stalled_interval: Duration::from_millis(300),
        ..Default::default()
    }
}

/// F11: `DEL` of the locks of 10 active jobs.
pub async fn f11(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F11", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(5);
    bed.add_n(10, |_| sleep_job(2500)).await;
    let a = InProc::start(&bed.queue, sets(5)).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.wait_active(10, Duration::from_secs(20)).await,
        "10 jobs never active",
    );
    let b = InProc::start(&bed.queue, sets(5)).await;
    let ids: Vec<String> = bed.ledger.acked_ids();
    for l in locks(&bed).await {
        let _: i64 = bed.client.del(&l).await.unwrap_or(0);
    }
    let drained = bed.drained(Duration::from_secs(60)).await;
    a.close().await;
    b.close().await;
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    stc_all(&bed, &ids, 1, &mut f).await;
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 10,
        format!("{} stalled events, expected 10", acc.stalled_events),
    );
    f.extend(acc.broken());
    bed.row_from(
        "DEL the locks of 10 active jobs: each moved back once (stc 1)",
        &acc,
        drained,
        f,
        None,
    )
}

/// F12: an active job's lock overwritten with a foreign token for 3 s: no
/// stall while the foreign lock lives; recovered and completed once after.
pub async fn f12(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F12", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(5);
    bed.add("victim", sleep_job(1500), JobOptions::new()).await;
    let a = InProc::start(&bed.queue, sets(2)).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.wait_active(1, Duration::from_secs(20)).await,
        "victim never active",
    );
    let key = bed.queue.keys().lock("victim");
    let _: Option<String> = bed
        .client
        .set(
            &key,
            "foreign-token",
            Some(Expiration::PX(5000)),
            None,
            false,
        )
        .await
        .ok()
        .flatten();
    let t0 = Instant::now();
    // The observation window is the claim: past a whole lock duration (2 s)
    // the foreign lock still stands, and nothing stalls meanwhile.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mid = bed.account().await;
    let state = bed.queue.get_job_state("victim").await.ok();
    // Read after the checks: the foreign lock lived through them.
    let left: i64 = bed.client.pttl(&key).await.unwrap_or(-2);
    expect(
        &mut f,
        left > 0,
        format!("the foreign lock was gone before the checks (PTTL {left})"),
    );
    expect(
        &mut f,
        mid.stalled_events == 0,
        format!(
            "{} stalls while the foreign lock was held",
            mid.stalled_events
        ),
    );
    expect(
        &mut f,
        state == Some(echomq::JobState::Active),
        format!("victim {state:?} while the foreign lock was held"),
    );
    let drained = bed
        .drained(Duration::from_secs(60))
        .await
        .map(|_| t0.elapsed());
    a.close().await;
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.completions.get("victim") == Some(&1),
        "victim not completed exactly once",
    );
    f.extend(acc.broken());
    bed.row_from(
        "lock overwritten with a foreign token (PX 5 s): no stall while held, one completion after",
        &acc,
        drained,
        f,
        Some(format!(
            "stuck {:.1} s ≈ the foreign TTL",
            drained.unwrap_or_default().as_secs_f64()
        )),
    )
}

/// F13: `PEXPIRE <lock> 1` on every active lock at once.
pub async fn f13(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F13", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(5);
    bed.add_n(8, |_| sleep_job(2500)).await;
    let a = InProc::start(&bed.queue, sets(5)).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.wait_active(8, Duration::from_secs(20)).await,
        "8 jobs never active",
    );
    let b = InProc::start(&bed.queue, sets(5)).await;
    let ids = bed.ledger.acked_ids();
    for l in locks(&bed).await {
        let _: i64 = bed.client.pexpire(&l, 1, None).await.unwrap_or(0);
    }
    let drained = bed.drained(Duration::from_secs(60)).await;
    a.close().await;
    b.close().await;
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    stc_all(&bed, &ids, 1, &mut f).await;
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 8,
        format!("{} stalled events, expected 8", acc.stalled_events),
    );
    f.extend(acc.broken());
    bed.row_from(
        "PEXPIRE 1 ms on all 8 active locks (a Redis clock jump): mass recovery",
        &acc,
        drained,
        f,
        None,
    )
}

/// F14: `PERSIST` on a lock, then SIGKILL of its worker: the lock never
/// expires. The audit's A6b must see it.
pub async fn f14(ctx: Ctx) -> Row {
    let mut bed = Bed::new("F14", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(1);
    bed.add("pinned", sleep_job(10_000), JobOptions::new())
        .await;
    let o =
        json!({"concurrency": 1, "lockDuration": 1000, "stalledInterval": 300, "verbose": true});
    let mut a = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        a.wait_line(Duration::from_secs(20), |v| v["ev"] == "start")
            .await
            .is_some(),
        "pinned job never started",
    );
    let key = bed.queue.keys().lock("pinned");
    let pinned: bool = bed.client.persist(&key).await.unwrap_or(false);
    expect(&mut f, pinned, "the lock was not there to PERSIST");
    expect(
        &mut f,
        a.sigkill(),
        "the worker process was not killed by the SIGKILL",
    );
    let w = InProc::start(
        &bed.queue,
        SetOptions {
            lock: Duration::from_secs(1),
            stalled_interval: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await;
    // Until the new set's StalledChecker has swept 6 times (past the old
    // lock's duration): had the lock expired, it would have been recovered.
    let checker = w.set.stalled_checker.clone().expect("a stalled checker");
    let sweeps = || async {
        ractor::call_t!(checker, echomq::StalledCheckerMsg::GetStats, 5000)
            .map(|s| s.sweeps)
            .unwrap_or(0)
    };
    let swept = poll(Duration::from_secs(20), || async { sweeps().await >= 6 }).await;
    expect(&mut f, swept, "the StalledChecker did not sweep");
    let during = bed.account().await;
    let detected = during.audit_all.iter().any(|v| v.starts_with("A6b"));
    let still_active =
        bed.queue.get_job_state("pinned").await.ok() == Some(echomq::JobState::Active);
    expect(
        &mut f,
        detected || !still_active,
        "a lock without TTL was neither repaired nor reported (A6b)",
    );
    // The operator's repair: delete the pinned lock; the checker does the rest.
    let _: i64 = bed.client.del(&key).await.unwrap_or(0);
    let drained = bed.drained(Duration::from_secs(60)).await;
    w.close().await;
    expect(&mut f, drained.is_some(), "not drained after the repair");
    let acc = bed.account().await;
    f.extend(acc.broken());
    let how = if still_active {
        "not repaired by the runtime; audit A6b reports it; DEL of the lock recovers it"
    } else {
        "repaired by the runtime"
    };
    bed.row_from(
        "PERSIST a lock, SIGKILL its worker (lock without TTL)",
        &acc,
        drained,
        f,
        Some(how.into()),
    )
}

/// F15: client clock skew: worker processes 2 s ahead and 2 s behind;
/// delayed jobs (1.5 s) and an every-500 ms scheduler.
pub async fn f15(ctx: Ctx) -> Row {
    let bed = Bed::new("F15", Persistence::None, &[]).await;
    let mut procs = Vec::new();
    for skew in [2000, -2000] {
        let o = json!({"concurrency": 4, "lockDuration": 2000, "stalledInterval": 500, "skewMs": skew, "drainDelay": 300});
        procs.push(Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o).await);
    }
    let scheds = JobSchedulers::new(&bed.conn, &bed.name()).expect("schedulers");
    let mut f = Vec::new();
    expect(
        &mut f,
        scheds
            .upsert(&SchedulerSpec::every("tick", Duration::from_millis(500)))
            .await
            .is_ok(),
        "scheduler upsert failed",
    );
    let delay = Duration::from_millis(1500);
    for i in 0..20 {
        bed.add(
            &format!("d-{i:03}"),
            sleep_job(10),
            JobOptions::new().delay(delay),
        )
        .await;
        // The adds' spacing is the load's shape (due times 100 ms apart).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Until the scheduler ran 6 iterations (3 s of its schedule).
    let ran = poll(Duration::from_secs(30), || async {
        let done: Vec<String> = bed
            .client
            .zrange(
                bed.queue.keys().completed(),
                0,
                -1,
                None,
                false,
                None,
                false,
            )
            .await
            .unwrap_or_default();
        done.iter().filter(|id| id.starts_with("repeat:")).count() >= 6
    })
    .await;
    expect(
        &mut f,
        ran,
        "the scheduler did not run 6 iterations within 30 s",
    );
    let _ = scheds.remove("tick").await;
    let drained = bed.drained(Duration::from_secs(60)).await;
    // An iteration of the removed scheduler may be running: the orderly
    // closes wait for it.
    for p in procs {
        p.close(Duration::from_secs(10)).await;
    }
    expect(
        &mut f,
        drained.is_some(),
        "delayed jobs not drained within 60 s",
    );
    // Promotion error on the server's clock: the first `active` event's
    // stream id against the add time + delay.
    let events = super::accounting::read_events(&bed.client, &bed.queue).await;
    let mut first_active: HashMap<String, i64> = HashMap::new();
    for e in &events {
        if e.name == "active" {
            first_active
                .entry(e.job_id.clone())
                .or_insert(e.at_ms as i64);
        }
    }
    let mut errs = Vec::new();
    for i in 0..20 {
        let id = format!("d-{i:03}");
        let ts: Option<i64> = bed
            .client
            .hget(bed.queue.keys().job(&id), "timestamp")
            .await
            .ok()
            .flatten();
        if let (Some(ts), Some(a)) = (ts, first_active.get(&id)) {
            errs.push(a - ts - delay.as_millis() as i64);
        }
    }
    errs.sort();
    let iterations = events
        .iter()
        .filter(|e| e.name == "completed" && e.job_id.starts_with("repeat:"))
        .count();
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 0,
        format!("{} stalls (lock expiry is server-side)", acc.stalled_events),
    );
    f.extend(acc.broken());
    let measured = match (errs.first(), errs.last()) {
        (Some(lo), Some(hi)) => {
            format!("promotion error {lo}…{hi} ms; {iterations} scheduler iterations, none twice")
        }
        _ => "no promotion measured".into(),
    };
    bed.row_from(
        "workers' clocks +2 s and −2 s; delayed jobs and an every-500 ms scheduler",
        &acc,
        None,
        f,
        Some(measured),
    )
}

/// Waits until `id` is in `state`.
pub async fn wait_state(bed: &Bed, id: &str, state: echomq::JobState, limit: Duration) -> bool {
    poll(limit, || async {
        bed.queue.get_job_state(id).await.ok() == Some(state)
    })
    .await
}
