//! F27–F30: scale and contention: many held jobs, racing stalled checkers,
//! racing scheduler upserts, a scheduler iteration's worker killed.

use std::time::{Duration, Instant};

use echomq::{JobSchedulers, SchedulerSpec};
use fred::prelude::*;
use serde_json::json;

use super::fleet::{InProc, Proc, SetOptions};
use super::input_faults::LiveAudit;
use super::redis_faults::raw;
use super::server::Persistence;
use super::{expect, sleep_job, Bed, Ctx, Row};

/// Slowlog entries (the server was started with a 10 ms threshold).
async fn slowlog(bed: &Bed) -> (usize, u64) {
    let v: Value = raw(&bed.client, "SLOWLOG", vec!["GET".into(), "1000".into()])
        .await
        .unwrap_or(Value::Null);
    let Value::Array(entries) = v else {
        return (0, 0);
    };
    let worst = entries
        .iter()
        .filter_map(|e| match e {
            Value::Array(parts) => parts.get(2).and_then(|d| d.as_u64()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    (entries.len(), worst)
}

/// F27: 1000 jobs held at once by one worker (concurrency 1000, lock 2 s)
/// for 6 s: no stall; script times from SLOWLOG.
pub async fn f27(_ctx: Ctx) -> Row {
    let mut bed = Bed::new(
        "F27",
        Persistence::None,
        &["--slowlog-log-slower-than", "10000"],
    )
    .await;
    bed.max_lock = Duration::from_secs(2);
    let jobs: Vec<echomq::NewJob> = (0..1000)
        .map(|i| echomq::NewJob {
            name: "chaos".into(),
            data: sleep_job(6000),
            options: echomq::JobOptions::new().job_id(format!("j-{i:06}")),
        })
        .collect();
    for chunk in jobs.chunks(200) {
        if let Ok(ids) = bed.queue.add_bulk(chunk.to_vec()).await {
            for id in ids {
                bed.ledger.acked(id);
            }
        }
    }
    let w = InProc::start(
        &bed.queue,
        SetOptions {
            concurrency: 1000,
            lock: Duration::from_secs(2),
            stalled_interval: Duration::from_millis(500),
            ..Default::default()
        },
    )
    .await;
    let mut f = Vec::new();
    let t0 = Instant::now();
    let all_active = bed.wait_active(1000, Duration::from_secs(60)).await;
    let ramp = t0.elapsed();
    expect(&mut f, all_active, "1000 jobs never active at once");
    let drained = bed
        .drained(Duration::from_secs(120))
        .await
        .map(|_| t0.elapsed());
    w.close().await;
    expect(&mut f, drained.is_some(), "not drained within 120 s");
    let (slow, worst_us) = slowlog(&bed).await;
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 0,
        format!("{} stalls among 1000 held jobs", acc.stalled_events),
    );
    f.extend(acc.broken());
    bed.row_from(
        "1000 jobs of 6 s held at once by one worker (lock 2 s)",
        &acc,
        drained,
        f,
        Some(format!(
            "all active after {:.1} s; {slow} commands over 10 ms, worst {:.1} ms",
            ramp.as_secs_f64(),
            worst_us as f64 / 1000.0
        )),
    )
}

/// F28: 10 worker sets with stalled checkers every 50 ms race over 200
/// jobs whose locks vanish at once (holder SIGKILLed, locks deleted).
pub async fn f28(ctx: Ctx) -> Row {
    let mut bed = Bed::new("F28", Persistence::None, &[]).await;
    bed.max_lock = Duration::from_secs(5);
    bed.add_n(200, |_| sleep_job(20)).await;
    let o = json!({"concurrency": 200, "lockDuration": 5000, "stalledChecker": false, "hang": true, "verbose": true});
    let mut holder = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.wait_active(200, Duration::from_secs(30)).await,
        "200 jobs never held",
    );
    holder.kill();
    let live = LiveAudit::start(&bed).await;
    let mut sets = Vec::new();
    for _ in 0..10 {
        sets.push(
            InProc::start(
                &bed.queue,
                SetOptions {
                    concurrency: 20,
                    lock: Duration::from_secs(5),
                    stalled_interval: Duration::from_millis(50),
                    ..Default::default()
                },
            )
            .await,
        );
    }
    for l in crate::keys(
        &bed.client,
        &format!("{}*:lock", bed.queue.keys().prefix_key()),
    )
    .await
    {
        let _: i64 = bed.client.del(&l).await.unwrap_or(0);
    }
    let drained = bed.drained(Duration::from_secs(60)).await;
    for s in sets {
        s.close().await;
    }
    let seen = live.stop().await;
    expect(&mut f, drained.is_some(), "not drained within 60 s");
    expect(&mut f, seen.is_empty(), format!("live audit saw {seen:?}"));
    let ids = bed.ledger.acked_ids();
    let mut bad_stc = 0;
    for id in &ids {
        let n: Option<u64> = bed
            .client
            .hget(bed.queue.keys().job(id), "stc")
            .await
            .ok()
            .flatten();
        if n != Some(1) {
            bad_stc += 1;
        }
    }
    expect(&mut f, bad_stc == 0, format!("{bad_stc} jobs with stc ≠ 1"));
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.stalled_events == 200,
        format!("{} stalled events, expected 200", acc.stalled_events),
    );
    f.extend(acc.broken());
    bed.row_from(
        "10 stalled checkers every 50 ms race over 200 orphaned jobs",
        &acc,
        drained,
        f,
        None,
    )
}

/// F29: 5 producers upsert one scheduler id (alternating every 300/400 ms)
/// in a loop for 5 s while 3 worker sets run its iterations.
pub async fn f29(_ctx: Ctx) -> Row {
    let bed = Bed::new("F29", Persistence::None, &[]).await;
    let mut sets = Vec::new();
    for _ in 0..3 {
        sets.push(InProc::start(&bed.queue, SetOptions::default()).await);
    }
    let mut producers = Vec::new();
    for p in 0..5u64 {
        let s = JobSchedulers::new(&bed.conn, &bed.name()).expect("schedulers");
        producers.push(tokio::spawn(async move {
            let t = Instant::now();
            let mut n = 0u64;
            let mut errors = 0u64;
            while t.elapsed() < Duration::from_secs(5) {
                let every = if (n + p) % 2 == 0 { 300 } else { 400 };
                if s.upsert(&SchedulerSpec::every("race", Duration::from_millis(every)))
                    .await
                    .is_err()
                {
                    errors += 1;
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (n, errors)
        }));
    }
    let mut upserts = 0;
    let mut errors = 0;
    for p in producers {
        let (n, e) = p.await.unwrap_or((0, 0));
        upserts += n;
        errors += e;
    }
    let k = bed.queue.keys();
    let mut f = Vec::new();
    let in_index: i64 = bed.client.zcard(k.repeat()).await.unwrap_or(-1);
    let hashes = crate::keys(&bed.client, &format!("{}repeat:*", k.prefix_key())).await;
    let hashes: Vec<&String> = hashes
        .iter()
        .filter(|h| h.matches(':').count() == 3)
        .collect();
    expect(
        &mut f,
        in_index == 1,
        format!("{in_index} schedulers in the repeat index, expected 1"),
    );
    expect(
        &mut f,
        hashes.len() == 1,
        format!("scheduler hashes {hashes:?}"),
    );
    let at = super::accounting::locate(&bed.client, &bed.queue).await;
    let pending = at
        .iter()
        .filter(|(id, s)| {
            id.starts_with("repeat:race:")
                && s.iter()
                    .any(|s| ["wait", "delayed", "prioritized", "paused"].contains(s))
        })
        .count();
    expect(
        &mut f,
        pending <= 1,
        format!("{pending} pending iterations, expected ≤ 1"),
    );
    let s = JobSchedulers::new(&bed.conn, &bed.name()).expect("schedulers");
    let _ = s.remove("race").await;
    // Closing waits for the iterations running: nothing runs after this.
    for w in sets {
        w.close().await;
    }
    let mut acc = bed.account().await;
    // An iteration of the removed scheduler may stay pending (A12d warns).
    acc.audit_hard.retain(|v| !v.starts_with("A12"));
    let iterations = acc
        .completions
        .keys()
        .filter(|id| id.starts_with("repeat:race:"))
        .count();
    f.extend(acc.broken());
    bed.row_from(
        "5 producers upsert one scheduler id (300/400 ms) for 5 s, 3 workers",
        &acc,
        None,
        f,
        Some(format!(
            "{upserts} upserts ({errors} refused), {iterations} iterations completed in 5 s (a steady schedule gives ~15: upserts that change `every` re-time the next slot), none twice"
        )),
    )
}

/// F30: the worker running a scheduler iteration is SIGKILLed: the
/// iteration is recovered, the schedule goes on.
pub async fn f30(ctx: Ctx) -> Row {
    let bed = Bed::new("F30", Persistence::None, &[]).await;
    let o = json!({"concurrency": 2, "lockDuration": 1000, "stalledInterval": 300, "verbose": true, "drainDelay": 200});
    let mut a = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o.clone()).await;
    let s = JobSchedulers::new(&bed.conn, &bed.name()).expect("schedulers");
    let mut spec = SchedulerSpec::every("tick", Duration::from_millis(700));
    spec.template.data = json!({"mode": "sleep", "ms": 1500});
    let mut f = Vec::new();
    expect(&mut f, s.upsert(&spec).await.is_ok(), "upsert failed");
    let victim = a
        .wait_line(Duration::from_secs(20), |v| {
            v["ev"] == "start" && v["id"].as_str().is_some_and(|i| i.starts_with("repeat:"))
        })
        .await
        .and_then(|v| v["id"].as_str().map(str::to_owned));
    expect(&mut f, victim.is_some(), "no iteration started");
    expect(
        &mut f,
        a.sigkill(),
        "the worker process was not killed by the SIGKILL",
    );
    let b = Proc::rust(&ctx.worker_bin, &bed.url(), &bed.name(), o).await;
    let victim = victim.unwrap_or_default();
    let slot = |id: &str| {
        id.rsplit(':')
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // The schedule goes on: until the victim is finished (recovered and
    // run again) and two later iterations completed.
    let went_on = super::poll(Duration::from_secs(30), || async {
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
        let failed: Vec<String> = bed
            .client
            .zrange(bed.queue.keys().failed(), 0, -1, None, false, None, false)
            .await
            .unwrap_or_default();
        let later = done.iter().filter(|id| slot(id) > slot(&victim)).count();
        later >= 2 && (done.contains(&victim) || failed.contains(&victim))
    })
    .await;
    expect(&mut f, went_on, "the schedule did not go on within 30 s");
    let _ = s.remove("tick").await;
    // Its orderly close waits for the iteration it runs.
    b.close(Duration::from_secs(10)).await;
    let mut acc = bed.account().await;
    acc.audit_hard.retain(|v| !v.starts_with("A12"));
    let later = acc
        .completions
        .keys()
        .filter(|id| id.starts_with("repeat:") && slot(id) > slot(&victim))
        .count();
    let victim_state = bed.queue.get_job_state(&victim).await.ok();
    expect(
        &mut f,
        later >= 2,
        format!("only {later} later iterations completed: the schedule stopped"),
    );
    expect(
        &mut f,
        matches!(
            victim_state,
            Some(echomq::JobState::Completed) | Some(echomq::JobState::Failed)
        ),
        format!("the killed iteration ends {victim_state:?}"),
    );
    f.extend(acc.broken());
    bed.row_from(
        "SIGKILL the worker running a scheduler iteration (every 700 ms)",
        &acc,
        None,
        f,
        Some(format!(
            "killed iteration {victim_state:?}; {later} later iterations completed"
        )),
    )
}
