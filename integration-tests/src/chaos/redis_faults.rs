//! F16–F26: faults of the redis-server: SIGSTOP, DEBUG SLEEP, CLIENT PAUSE,
//! CLIENT KILL, restarts under each persistence mode, eviction and
//! maxmemory.

use std::time::{Duration, Instant};

use echomq::JobOptions;
use fred::prelude::*;
use serde_json::json;

use super::fleet::{InProc, SetOptions};
use super::server::Persistence;
use super::{expect, poll, sleep_job, Bed, Ctx, Row};

fn fleet_opts() -> SetOptions {
    SetOptions {
        concurrency: 4,
        lock: Duration::from_secs(2),
        stalled_interval: Duration::from_millis(500),
        ..Default::default()
    }
}

/// Two worker sets of 4 slots on `jobs` jobs of 300 ms, started and both
/// busy: every slot of both holds a job. Panics when they never are (the
/// fault would hit no running job).
async fn busy(bed: &Bed, jobs: usize) -> (InProc, InProc) {
    bed.add_n(jobs, |_| sleep_job(300)).await;
    let a = InProc::start(&bed.queue, fleet_opts()).await;
    let b = InProc::start(&bed.queue, fleet_opts()).await;
    let full = poll(Duration::from_secs(20), || async {
        a.held().await == 4 && b.held().await == 4
    })
    .await;
    assert!(full, "the two worker sets never both held 4 jobs");
    (a, b)
}

async fn finish(
    bed: &Bed,
    sets: (InProc, InProc),
    t0: Instant,
    scenario: &str,
    mut f: Vec<String>,
    zero_stalls: bool,
    measured: Option<String>,
) -> Row {
    let drained = bed
        .drained(Duration::from_secs(90))
        .await
        .map(|_| t0.elapsed());
    sets.0.close().await;
    sets.1.close().await;
    expect(
        &mut f,
        drained.is_some(),
        "not drained within 90 s (a deaf worker?)",
    );
    let acc = bed.account().await;
    if zero_stalls {
        expect(
            &mut f,
            acc.stalled_events == 0,
            format!("{} stalls", acc.stalled_events),
        );
    }
    f.extend(acc.broken());
    bed.row_from(scenario, &acc, drained, f, measured)
}

/// A second plain client for commands that block the server or its caller.
async fn side_client(bed: &Bed) -> Client {
    bed.redis.client().await
}

/// F16: redis-server SIGSTOPped 4 s (2 × lockDuration).
pub async fn f16(_ctx: Ctx) -> Row {
    let bed = Bed::new("F16", Persistence::None, &[]).await;
    let sets = busy(&bed, 60).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.redis.freeze(),
        "redis-server did not stop on SIGSTOP",
    );
    // The fault's length: 2 × lockDuration, so every lock expires meanwhile.
    tokio::time::sleep(Duration::from_secs(4)).await;
    expect(
        &mut f,
        bed.redis.thaw(),
        "redis-server did not resume on SIGCONT",
    );
    let t0 = Instant::now();
    finish(
        &bed,
        sets,
        t0,
        "redis-server SIGSTOP 4 s (2 × lockDuration) under load",
        f,
        false,
        None,
    )
    .await
}

/// F17: redis-server SIGSTOPped 0.6 s (0.3 × lockDuration): no stall.
pub async fn f17(_ctx: Ctx) -> Row {
    let bed = Bed::new("F17", Persistence::None, &[]).await;
    let sets = busy(&bed, 60).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.redis.freeze(),
        "redis-server did not stop on SIGSTOP",
    );
    // The fault's length: well inside a lock's life.
    tokio::time::sleep(Duration::from_millis(600)).await;
    expect(
        &mut f,
        bed.redis.thaw(),
        "redis-server did not resume on SIGCONT",
    );
    let t0 = Instant::now();
    finish(
        &bed,
        sets,
        t0,
        "redis-server SIGSTOP 0.6 s (0.3 × lockDuration): no stall",
        f,
        true,
        None,
    )
    .await
}

/// F18: `DEBUG SLEEP 0.5` then `DEBUG SLEEP 4`.
pub async fn f18(_ctx: Ctx) -> Row {
    let bed = Bed::new("F18", Persistence::None, &[]).await;
    let sets = busy(&bed, 80).await;
    let side = side_client(&bed).await;
    let mut f = Vec::new();
    for secs in ["0.5", "4"] {
        let r: Result<Value, _> = raw(&side, "DEBUG", vec!["SLEEP".into(), secs.into()]).await;
        expect(&mut f, r.is_ok(), format!("DEBUG SLEEP {secs}: {r:?}"));
        // The faults' spacing.
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    let t0 = Instant::now();
    finish(
        &bed,
        sets,
        t0,
        "DEBUG SLEEP 0.5 s, then DEBUG SLEEP 4 s (2 × lockDuration)",
        f,
        false,
        None,
    )
    .await
}

/// F19: `CLIENT PAUSE 4000 WRITE`.
pub async fn f19(_ctx: Ctx) -> Row {
    let bed = Bed::new("F19", Persistence::None, &[]).await;
    let sets = busy(&bed, 60).await;
    let side = side_client(&bed).await;
    let mut f = Vec::new();
    let r = raw(
        &side,
        "CLIENT",
        vec!["PAUSE".into(), "4000".into(), "WRITE".into()],
    )
    .await;
    expect(&mut f, r.is_ok(), format!("CLIENT PAUSE: {r:?}"));
    // The fault's length (the pause ends by itself).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let t0 = Instant::now();
    finish(
        &bed,
        sets,
        t0,
        "CLIENT PAUSE 4 s WRITE (2 × lockDuration)",
        f,
        false,
        None,
    )
    .await
}

/// F20: `CLIENT KILL TYPE normal` every 200 ms for 5 s while a producer adds.
pub async fn f20(_ctx: Ctx) -> Row {
    let bed = Bed::new("F20", Persistence::None, &[]).await;
    let sets = busy(&bed, 40).await;
    let side = side_client(&bed).await;
    let producer = async {
        for i in 0..150 {
            bed.add(&format!("p-{i:04}"), sleep_job(50), JobOptions::new())
                .await;
            // The producer's pace.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    };
    let killer = async {
        let t = Instant::now();
        let mut kills = 0;
        while t.elapsed() < Duration::from_secs(5) {
            if raw(
                &side,
                "CLIENT",
                vec!["KILL".into(), "TYPE".into(), "normal".into()],
            )
            .await
            .is_ok()
            {
                kills += 1;
            }
            // The fault's cadence.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        kills
    };
    let ((), kills) = tokio::join!(producer, killer);
    let drained = bed.drained(Duration::from_secs(90)).await;
    sets.0.close().await;
    sets.1.close().await;
    let mut f = Vec::new();
    expect(&mut f, drained.is_some(), "not drained within 90 s");
    let acc = bed.account().await;
    expect(
        &mut f,
        acc.ghosts.is_empty(),
        format!("ghost ids {:?}", acc.ghosts),
    );
    f.extend(acc.broken());
    bed.row_from(
        format!("CLIENT KILL TYPE normal every 200 ms for 5 s ({kills} rounds) while adding"),
        &acc,
        drained,
        f,
        Some(format!("{} ambiguous adds, 0 ghosts", acc.ambiguous)),
    )
}

/// F21: only the blocking connections (BZPOPMIN) killed, every 300 ms for
/// 5 s, while jobs keep arriving: idle workers still take new jobs.
pub async fn f21(_ctx: Ctx) -> Row {
    let bed = Bed::new("F21", Persistence::None, &[]).await;
    let a = InProc::start(&bed.queue, fleet_opts()).await;
    let b = InProc::start(&bed.queue, fleet_opts()).await;
    let side = side_client(&bed).await;
    // Until both idle sets block on the marker.
    let blocking = poll(Duration::from_secs(20), || async {
        blocked(&side).await >= 2
    })
    .await;
    assert!(blocking, "the two sets never blocked on the marker");
    let mut killed = 0;
    let t = Instant::now();
    let mut i = 0;
    while t.elapsed() < Duration::from_secs(5) {
        killed += kill_blocking(&side).await;
        if i % 2 == 0 {
            bed.add(&format!("j-{i:04}"), sleep_job(10), JobOptions::new())
                .await;
        }
        i += 1;
        // The fault's cadence.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // After the flapping, the idle fleet blocks again (on fresh
    // connections) and must still hear a new job.
    let reblocked = poll(Duration::from_secs(30), || async {
        bed.drained(Duration::ZERO).await.is_some() && blocked(&side).await >= 2
    })
    .await;
    let t0 = Instant::now();
    bed.add("probe", sleep_job(0), JobOptions::new()).await;
    let heard = poll(Duration::from_secs(30), || async {
        bed.queue.get_job_state("probe").await.ok() == Some(echomq::JobState::Completed)
    })
    .await;
    let pickup = t0.elapsed();
    let drained = bed
        .drained(Duration::from_secs(60))
        .await
        .map(|_| t0.elapsed());
    a.close().await;
    b.close().await;
    let mut f = Vec::new();
    expect(&mut f, killed > 0, "no blocking connection found to kill");
    expect(
        &mut f,
        reblocked,
        "the fleet did not block on the marker again after the kills",
    );
    expect(
        &mut f,
        heard,
        "a new job was not taken within 30 s: a deaf worker",
    );
    expect(&mut f, drained.is_some(), "not drained");
    bed.row(
        format!("CLIENT KILL of the blocking connections ({killed} kills over 5 s)"),
        drained,
        f,
        Some(format!(
            "probe job completed {:.2} s after its add",
            pickup.as_secs_f64()
        )),
    )
    .await
}

/// How many connections are blocked in BZPOPMIN now.
async fn blocked(c: &Client) -> usize {
    let list: String = raw(c, "CLIENT", vec!["LIST".into()])
        .await
        .ok()
        .and_then(|v: Value| v.as_string())
        .unwrap_or_default();
    list.lines()
        .filter(|l| l.contains("cmd=bzpopmin") && l.contains(" flags=b "))
        .count()
}

/// Kills every connection blocked in BZPOPMIN; how many.
async fn kill_blocking(c: &Client) -> usize {
    let list: String = raw(c, "CLIENT", vec!["LIST".into()])
        .await
        .ok()
        .and_then(|v: Value| v.as_string())
        .unwrap_or_default();
    let mut n = 0;
    for line in list.lines() {
        if line.contains("cmd=bzpopmin") {
            if let Some(id) = line.split(' ').find_map(|kv| kv.strip_prefix("id=")) {
                if raw(c, "CLIENT", vec!["KILL".into(), "ID".into(), id.into()])
                    .await
                    .is_ok()
                {
                    n += 1;
                }
            }
        }
    }
    n
}

/// Any command, with its error.
pub async fn raw(
    c: &Client,
    name: &'static str,
    args: Vec<String>,
) -> Result<Value, fred::error::Error> {
    use fred::types::{ClusterHash, CustomCommand};
    c.custom(
        CustomCommand::new_static(name, ClusterHash::FirstKey, false),
        args,
    )
    .await
}

/// Restarts (SIGKILL, `down`, start on the same data) under load.
async fn restart(bed: &mut Bed, down: Duration) {
    bed.redis.kill9();
    // The outage's length.
    tokio::time::sleep(down).await;
    // A short blocking start (until PING answers), off the async workers.
    tokio::task::block_in_place(|| bed.redis.boot());
}

/// F22: AOF always, SIGKILL and restart within 0.5 s (locks of 3 s valid
/// across): nothing lost, no stall.
pub async fn f22(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F22", Persistence::AofAlways, &[]).await;
    let mut o = fleet_opts();
    o.lock = Duration::from_secs(3);
    bed.add_n(100, |_| sleep_job(200)).await;
    let a = InProc::start(&bed.queue, o.clone()).await;
    let b = InProc::start(&bed.queue, o).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        poll(Duration::from_secs(20), || async {
            a.held().await == 4 && b.held().await == 4
        })
        .await,
        "the two worker sets never both held 4 jobs",
    );
    let killed_at = Instant::now();
    restart(&mut bed, Duration::from_millis(300)).await;
    let down = killed_at.elapsed();
    // The claim holds for a restart well inside the locks' remaining life (a
    // lock renewed every 1.5 s has at least 1.5 s left when the server dies).
    expect(
        &mut f,
        down < Duration::from_millis(1200),
        format!("the restart took {down:?}: not the fault this row is about"),
    );
    let t0 = Instant::now();
    finish(
        &bed,
        (a, b),
        t0,
        "AOF always: SIGKILL redis, restart within 0.3 × lockDuration: no stall",
        f,
        true,
        Some(format!(
            "server back {:.2} s after the kill",
            down.as_secs_f64()
        )),
    )
    .await
}

/// F23: AOF always, restart after 4 s (2 × lockDuration): every lock has
/// expired, a stall burst, nothing lost.
pub async fn f23(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F23", Persistence::AofAlways, &[]).await;
    let sets = busy(&bed, 60).await;
    restart(&mut bed, Duration::from_secs(4)).await;
    let t0 = Instant::now();
    finish(
        &bed,
        sets,
        t0,
        "AOF always: SIGKILL redis, restart after 2 × lockDuration",
        Vec::new(),
        false,
        None,
    )
    .await
}

/// F24: AOF everysec, SIGKILL during heavy adds and finishes: the loss
/// window is measured; the audit must still pass.
pub async fn f24(_ctx: Ctx) -> Row {
    /// A process kill keeps what reached the kernel; with everysec an AOF
    /// write may be postponed while a background fsync runs, by up to 2 s.
    const WINDOW: Duration = Duration::from_secs(2);
    let mut bed = Bed::new("F24", Persistence::AofEverysec, &[]).await;
    let sets = busy(&bed, 20).await;
    let acked_at: std::sync::Arc<std::sync::Mutex<Vec<(String, Instant)>>> = Default::default();
    let producer = {
        let queue = bed.queue.clone();
        let ledger = bed.ledger.clone();
        let acked_at = acked_at.clone();
        tokio::spawn(async move {
            for i in 0..100_000 {
                let id = format!("p-{i:06}");
                match queue
                    .add("chaos", &sleep_job(5), JobOptions::new().job_id(&id))
                    .await
                {
                    Ok(id) => {
                        acked_at.lock().unwrap().push((id.clone(), Instant::now()));
                        ledger.acked(id);
                    }
                    Err(_) => {
                        ledger.ambiguous(id);
                        break;
                    }
                }
            }
        })
    };
    // Heavy adds for a while (their number is the load, not a sync point).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed_at = Instant::now();
    bed.redis.kill9();
    let _ = producer.await;
    restart(&mut bed, Duration::from_millis(300)).await;
    let mut f = Vec::new();
    expect(
        &mut f,
        bed.ledger.ambiguous_count() == 1,
        "the kill did not interrupt the producer",
    );
    let drained = bed.drained_or_lost(Duration::from_secs(120)).await;
    sets.0.close().await;
    sets.1.close().await;
    expect(
        &mut f,
        drained.is_some(),
        "what survived did not drain within 120 s",
    );
    let mut acc = bed.account().await;
    // Acknowledged adds lost in the window before the kill are the measured
    // loss; any other lost id is a failure.
    let times: std::collections::HashMap<String, Instant> =
        acked_at.lock().unwrap().iter().cloned().collect();
    let (in_window, outside): (Vec<String>, Vec<String>) =
        acc.lost.iter().cloned().partition(|id| {
            times
                .get(id)
                .is_some_and(|t| killed_at.duration_since(*t) <= WINDOW)
        });
    let lost = in_window.len();
    acc.lost = outside;
    f.extend(acc.broken());
    bed.row_from(
        "AOF everysec: SIGKILL redis during heavy adds and finishes",
        &acc,
        drained,
        f,
        Some(format!(
            "{lost} of {} acked adds lost, all acked within {WINDOW:?} of the kill: a process kill keeps what reached the kernel; the ≤ 1 s window is a machine crash's",
            acc.acked
        )),
    )
}

/// F25: no persistence: a restart is a reset. Measured: what is left and
/// whether a stale worker can finish anything in the new incarnation.
pub async fn f25(_ctx: Ctx) -> Row {
    let mut bed = Bed::new("F25", Persistence::None, &[]).await;
    let sets = busy(&bed, 40).await;
    restart(&mut bed, Duration::from_millis(300)).await;
    // The same ids again in the new incarnation: stale workers still hold
    // the old ones' tokens.
    let before = bed.ledger.acked_count();
    let fresh = super::accounting::Ledger::default();
    for i in 0..40 {
        let id = format!("j-{i:06}");
        if bed
            .queue
            .add("chaos", &sleep_job(50), JobOptions::new().job_id(&id))
            .await
            .is_ok()
        {
            fresh.acked(id);
        }
    }
    bed.ledger = fresh;
    let drained = bed.drained(Duration::from_secs(60)).await;
    sets.0.close().await;
    sets.1.close().await;
    let mut f = Vec::new();
    expect(&mut f, drained.is_some(), "re-added jobs not drained");
    let acc = bed.account().await;
    f.extend(acc.broken());
    bed.row_from(
        "no persistence: restart = reset; the same 40 ids re-added",
        &acc,
        drained,
        f,
        Some(format!(
            "all {before} earlier jobs gone (documented); reset not signalled by the runtime; re-added ids finished once (D2 = 0 across incarnations)"
        )),
    )
}

/// F26: an eviction policy other than `noeviction` is refused by the
/// startup check; with `noeviction` and a full `maxmemory`, adds fail with
/// a typed error, nothing is half-written, workers keep finishing.
pub async fn f26(_ctx: Ctx) -> Row {
    let mut f = Vec::new();
    for policy in ["allkeys-lru", "volatile-lru"] {
        let r = super::server::ChaosRedis::start(
            Persistence::None,
            &["--maxmemory", "64mb", "--maxmemory-policy", policy],
        );
        let conn = super::connect(&r.url()).await;
        let checked = echomq::connection::check_server(&conn, &["chaos-f26"]).await;
        expect(
            &mut f,
            matches!(checked, Err(echomq::Error::Server(_))),
            format!("{policy}: startup check answered {checked:?}"),
        );
    }
    let bed = Bed::new("F26", Persistence::None, &["--maxmemory", "4mb"]).await;
    let w = InProc::start(&bed.queue, fleet_opts()).await;
    let mut refused = None;
    let pad = "x".repeat(20_000);
    for i in 0..2000 {
        let id = format!("m-{i:05}");
        match bed
            .queue
            .add(
                "chaos",
                &json!({"mode": "sleep", "ms": 50, "pad": pad}),
                JobOptions::new().job_id(&id),
            )
            .await
        {
            Ok(id) => bed.ledger.acked(id),
            Err(e) => {
                refused = Some((id, e));
                break;
            }
        }
    }
    let (oom_typed, half_written) = match &refused {
        Some((id, e)) => (
            e.is_out_of_memory(),
            bed.client
                .exists::<i64, _>(bed.queue.keys().job(id))
                .await
                .unwrap_or(0)
                == 1,
        ),
        None => (false, false),
    };
    expect(&mut f, refused.is_some(), "maxmemory never reached");
    expect(
        &mut f,
        oom_typed,
        format!(
            "the refused add's error is not typed as out of memory: {:?}",
            refused.as_ref().map(|r| r.1.to_string())
        ),
    );
    expect(&mut f, !half_written, "the refused add left a job hash");
    let drained = bed.drained(Duration::from_secs(90)).await;
    w.close().await;
    expect(
        &mut f,
        drained.is_some(),
        "workers did not finish the accepted jobs at maxmemory",
    );
    bed.row(
        "eviction policy allkeys-lru / volatile-lru refused at startup; noeviction + maxmemory 4 MB: adds refused (OOM), workers finish",
        drained,
        f,
        None,
    )
    .await
}
