//! `echomq demo`: the tour a newcomer watches in about a minute. Everything it
//! shows is real: a producer, a supervised worker tree, the LockManager's one
//! renewal call per tick, a worker *process* killed mid-job and its jobs
//! recovered by the StalledChecker, schedulers, and the live events feed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::protocol::EventKind;
use echomq::worker::{processor_fn, ProcessError};
use echomq::{
    Backoff, Connection, Delivery, HostSupervisor, HostSupervisorMsg, JobOptions, LockManagerMsg,
    NewJob, Queue, QueueEventsArgs, RestartIntensity, Subscribers, WorkerArgs, WorkerOptions,
    WorkerSetSpec,
};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use ractor::{call_t, Actor};
use serde_json::{json, Value};

use crate::style::{self, paint};

type Res<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const JOBS: u64 = 1500;
const CONCURRENCY: usize = 32;

#[derive(Default)]
struct Tally {
    completed: HashSet<String>,
    failed: HashSet<String>,
    stalled: HashSet<String>,
    activated: HashSet<String>,
    reruns: u64,
    events: u64,
}

pub async fn demo(conn: Connection, url: &str) -> Res {
    let queue_name = format!("demo-{}", echomq::clock::now_ms() % 100_000);
    let q = Queue::new(&conn, &queue_name).await?;
    let mp = MultiProgress::new();
    // A hidden progress target (not a terminal) drops println: print directly.
    let say = |s: String| {
        if mp.is_hidden() {
            anstream::println!("{s}");
        } else {
            let _ = mp.println(s);
        }
    };
    say(format!(
        "{} queue {} on {url}",
        paint(style::BOLD, "EchoMQ demo —"),
        paint(style::INFO, &queue_name)
    ));

    // Every actor of the tour lives under the shipped one-for-one supervisor.
    let (host, host_handle) = Actor::spawn(None, HostSupervisor, RestartIntensity::default())
        .await
        .map_err(|e| e.to_string())?;

    // The live feed: QueueEvents → a bounded subscription, held in a registry
    // that survives a restart of the QueueEvents actor.
    let subscribers = Subscribers::new();
    let mut sub = subscribers.subscribe(50_000);
    let qe_args = QueueEventsArgs::new(conn.clone(), &queue_name)
        .block(Duration::from_millis(500))
        .subscribers(subscribers);
    call_t!(
        host,
        HostSupervisorMsg::AddQueueEvents,
        5000,
        Box::new(qe_args)
    )
    .map_err(|e| e.to_string())??;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let feed = {
        let tally = tally.clone();
        let mp = mp.clone();
        tokio::spawn(async move {
            while let Some(d) = sub.recv().await {
                let Delivery::Event(e) = d else { continue };
                let mut t = tally.lock().unwrap();
                t.events += 1;
                let show = match &e.kind {
                    EventKind::Completed { job_id, .. } => {
                        t.completed.insert(job_id.clone());
                        t.completed.len() % 250 == 0
                    }
                    EventKind::Failed { job_id, .. } => {
                        t.failed.insert(job_id.clone());
                        true
                    }
                    EventKind::Stalled { job_id } => {
                        t.stalled.insert(job_id.clone());
                        true
                    }
                    EventKind::Active { job_id, .. } => {
                        // Every activation after a job's first is a re-run.
                        if !t.activated.insert(job_id.clone()) {
                            t.reruns += 1;
                        }
                        false
                    }
                    EventKind::Delayed { .. }
                    | EventKind::Added { .. }
                    | EventKind::Waiting { .. }
                    | EventKind::RetriesExhausted { .. } => false,
                    _ => true,
                };
                if show {
                    let detail = match &e.kind {
                        EventKind::Failed { failed_reason, .. } => format!(" {failed_reason}"),
                        _ => String::new(),
                    };
                    let line = format!(
                        "  {} {:<10} {}{}",
                        paint(style::DIM, &e.id),
                        paint(style::for_event(e.kind.name()), e.kind.name()),
                        e.kind.job_id().unwrap_or(""),
                        paint(style::DIM, detail)
                    );
                    if mp.is_hidden() {
                        anstream::println!("{line}");
                    } else {
                        let _ = mp.println(line);
                    }
                }
            }
        })
    };

    // 1. The producer.
    say(paint(style::BOLD, "1. a producer adds a mix of jobs"));
    let bar_style =
        ProgressStyle::with_template("  {prefix:<10} [{bar:40.cyan/blue}] {pos:>5}/{len} {msg}")
            .unwrap()
            .progress_chars("=> ");
    let mut all_ids: Vec<String> = Vec::with_capacity(JOBS as usize);
    let added = mp.add(
        ProgressBar::new(JOBS)
            .with_style(bar_style.clone())
            .with_prefix("added"),
    );
    for start in (0..JOBS).step_by(100) {
        let batch: Vec<NewJob> = (start..(start + 100).min(JOBS))
            .map(|i| {
                let options = match i % 20 {
                    0 => JobOptions::new().priority(1),
                    1 => JobOptions::new().delay(Duration::from_millis(2000 + (i % 7) * 500)),
                    2 => JobOptions::new().attempts(3).backoff(Backoff::Fixed {
                        delay: 300,
                        jitter: None,
                    }),
                    3 if i % 60 == 3 => JobOptions::new().attempts(2),
                    _ => JobOptions::new(),
                };
                let flaky = i % 20 == 2;
                let doomed = i % 60 == 3;
                NewJob {
                    name: "render".into(),
                    data: json!({ "page": i, "flaky": flaky, "doomed": doomed }),
                    options,
                }
            })
            .collect();
        all_ids.extend(q.add_bulk(batch).await?);
        added.inc(100.min(JOBS - start));
    }
    added.finish_with_message("(5% prioritized, 5% delayed, 5% flaky, some doomed)");

    // 2. A worker *process* takes jobs, then dies with them in hand.
    say(paint(
        style::BOLD,
        "2. a separate worker process takes 4 jobs… and is killed (SIGKILL)",
    ));
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new(exe)
        .args([
            "--url",
            url,
            "work",
            &queue_name,
            "--concurrency",
            "4",
            "--processor",
            "sleep:600000",
            "--lock-duration",
            "3000",
            "--quiet",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let t0 = Instant::now();
    while q.counts().await?.active < 4 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill()?;
    let _ = child.wait();
    let orphaned = q
        .get_ranges(&[echomq::JobState::Active], 0, -1, true)
        .await?;
    say(format!(
        "  killed pid {} holding jobs {:?}; their locks expire in 3 s",
        child.id(),
        orphaned
    ));

    // 3. The supervised worker tree: Worker + LockManager + StalledChecker.
    say(paint(
        style::BOLD,
        format!("3. a supervised worker tree processes them at concurrency {CONCURRENCY}"),
    ));
    let processor = processor_fn(|ctx| async move {
        let data = &ctx.job().data;
        // Long enough that locks need renewing while jobs run.
        tokio::time::sleep(Duration::from_millis(450 + (ctx.job().timestamp % 250))).await;
        if data["doomed"] == Value::Bool(true) {
            return Err(ProcessError::failed("page is corrupt"));
        }
        if data["flaky"] == Value::Bool(true) && ctx.job().attempts_made == 0 {
            return Err(ProcessError::failed("renderer busy, retrying"));
        }
        Ok(json!({ "rendered": data["page"] }))
    });
    let mut wargs = WorkerArgs::new(q.clone(), processor);
    wargs.options = WorkerOptions::default()
        .concurrency(CONCURRENCY)
        // Short on purpose, so renewals show: a tick every 300 ms.
        .lock_duration(Duration::from_millis(1200))
        .stalled_interval(Duration::from_millis(1000))
        .name("demo");
    let (set_id, _) = call_t!(
        host,
        HostSupervisorMsg::AddWorkerSet,
        5000,
        Box::new(WorkerSetSpec::new(wargs))
    )
    .map_err(|e| e.to_string())??;

    // Two schedulers on their own queue and worker tree (so they are not
    // stuck behind the backlog); each iteration's worker creates the next one,
    // under a deterministic id (BullMQ's scheme).
    let sched_queue = format!("{queue_name}-schedules");
    let sq = Queue::new(&conn, &sched_queue).await?;
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let ran2 = ran.clone();
    let sched_processor = processor_fn(move |ctx| {
        let ran = ran2.clone();
        async move {
            ran.lock().unwrap().push(ctx.job().id.clone());
            Ok(Value::Null)
        }
    });
    let mut sargs = WorkerArgs::new(sq.clone(), sched_processor);
    sargs.options.concurrency = 2;
    call_t!(
        host,
        HostSupervisorMsg::AddWorkerSet,
        5000,
        Box::new(WorkerSetSpec::new(sargs))
    )
    .map_err(|e| e.to_string())??;
    let schedulers = echomq::JobSchedulers::new(&conn, &sched_queue)?;
    schedulers
        .upsert(&echomq::SchedulerSpec::every(
            "heartbeat",
            Duration::from_secs(3),
        ))
        .await?;
    schedulers
        .upsert(&echomq::SchedulerSpec::cron(
            "report",
            "*/5 * * * * *",
            Some("UTC"),
        ))
        .await?;
    say(format!(
        "  {} `heartbeat` every 3 s and `report` on cron `*/5 * * * * *` (UTC), on queue {sched_queue}",
        paint(style::INFO, "schedulers")
    ));
    let mut shown = 0;
    let done_bar = mp.add(
        ProgressBar::new(JOBS)
            .with_style(bar_style)
            .with_prefix("finished"),
    );
    let mut last_ticks = 0;
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (completed, failed) = {
            let t = tally.lock().unwrap();
            (t.completed.len() as u64, t.failed.len() as u64)
        };
        done_bar.set_position(completed + failed);
        done_bar.set_message(format!("{completed} completed, {failed} failed"));
        // The current set: a restarted LockManager has a new ref.
        let set = call_t!(host, HostSupervisorMsg::GetWorkerSet, 1000, set_id)
            .ok()
            .flatten();
        let stats = match &set {
            Some(set) => call_t!(set.lock_manager, LockManagerMsg::GetStats, 1000).ok(),
            None => None,
        };
        if let Some(stats) = stats {
            // Every 8th tick is enough to see the point: N locks, one call.
            if stats.ticks / 8 > last_ticks / 8 && stats.last_batch > 0 {
                say(format!(
                    "  {} tick {}: {} held locks renewed in {} call (extendLocks-1)",
                    paint(style::INFO, "LockManager"),
                    stats.ticks,
                    stats.last_batch,
                    paint(style::BOLD, "1")
                ));
            }
            last_ticks = stats.ticks;
        }
        let new: Vec<String> = ran.lock().unwrap()[shown..].to_vec();
        for id in new {
            shown += 1;
            say(format!(
                "  {} ran iteration {}",
                paint(style::INFO, "scheduler"),
                paint(style::BOLD, id)
            ));
        }
        // Scheduler iterations keep coming: the producer's jobs decide the end.
        if completed + failed >= JOBS {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            say(paint(style::BAD, "  gave up waiting after 120 s"));
            break;
        }
    }
    done_bar.finish();
    schedulers.remove("heartbeat").await?;
    schedulers.remove("report").await?;
    // Let the feed read the last events before it is closed.
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The ordered shutdown: both worker sets (jobs finish or go back to wait
    // while their locks are renewed), then QueueEvents, whose close ends the
    // feed's subscription.
    call_t!(
        host,
        HostSupervisorMsg::Close,
        20_000,
        Duration::from_secs(5)
    )
    .map_err(|e| e.to_string())?;
    let _ = host_handle.await;
    let _ = feed.await;

    // 4. The summary.
    let counts = q.counts().await?;
    // Lost = an id the producer got back that is in no state at all.
    let mut found: HashSet<String> = HashSet::new();
    for state in [
        echomq::JobState::Completed,
        echomq::JobState::Failed,
        echomq::JobState::Waiting,
        echomq::JobState::Prioritized,
        echomq::JobState::Delayed,
        echomq::JobState::Active,
    ] {
        found.extend(q.get_ranges(&[state], 0, -1, true).await?);
    }
    let lost = all_ids.iter().filter(|id| !found.contains(*id)).count();
    let audit = echomq::audit::audit(&conn, &queue_name).await?;
    let t = tally.lock().unwrap();
    anstream::println!();
    anstream::println!("{}", paint(style::BOLD, "summary"));
    anstream::println!("  {:<30}{JOBS}", "added");
    anstream::println!("  {:<30}{}", "completed", t.completed.len());
    anstream::println!("  {:<30}{}", "failed (after retries)", counts.failed);
    anstream::println!("  {:<30}{}", "re-runs (retries, recoveries)", t.reruns);
    anstream::println!(
        "  {:<30}{} {:?}",
        "recovered from dead worker",
        t.stalled.len(),
        orphaned
    );
    anstream::println!(
        "  {:<30}{}",
        "scheduler iterations run",
        ran.lock().unwrap().len()
    );
    anstream::println!("  {:<30}{}", "events seen (QueueEvents)", t.events);
    anstream::println!(
        "  {:<30}{}",
        "lost",
        paint(if lost == 0 { style::GOOD } else { style::BAD }, lost)
    );
    anstream::println!(
        "  {:<30}{} violations",
        "consistency audit",
        audit.violations.len()
    );
    if lost != 0 || !audit.is_consistent() {
        return Err("the demo lost jobs or found an inconsistency".into());
    }
    Ok(())
}
