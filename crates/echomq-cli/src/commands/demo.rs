//! `echomq demo`: the tour a newcomer watches in about a minute. Everything it
//! shows is real: a producer, a supervised worker tree, the LockManager's one
//! renewal call per tick, a worker *process* killed mid-job and its jobs
//! recovered by the StalledChecker, schedulers, and the live events feed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::protocol::{Event, EventKind};
use echomq::worker::{processor_fn, ProcessError};
use echomq::{
    host::WorkerHandle, Backoff, Connection, Delivery, Host, JobOptions, JobSchedulers, NewJob,
    Queue, QueueEventsArgs, Subscribers, WorkerArgs, WorkerOptions,
};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::Res;
use crate::style::{self, paint};
use crate::target::Target;

mod flow;

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

impl Tally {
    /// Counts one event of the feed; true when the feed shows it.
    fn record(&mut self, kind: &EventKind) -> bool {
        self.events += 1;
        match kind {
            EventKind::Completed { job_id, .. } => {
                self.completed.insert(job_id.clone());
                self.completed.len() % 250 == 0
            }
            EventKind::Failed { job_id, .. } => {
                self.failed.insert(job_id.clone());
                true
            }
            EventKind::Stalled { job_id } => {
                self.stalled.insert(job_id.clone());
                true
            }
            EventKind::Active { job_id, .. } => {
                // Every activation after a job's first is a re-run.
                if !self.activated.insert(job_id.clone()) {
                    self.reruns += 1;
                }
                false
            }
            EventKind::Delayed { .. }
            | EventKind::Added { .. }
            | EventKind::Waiting { .. }
            | EventKind::RetriesExhausted { .. } => false,
            _ => true,
        }
    }
}

/// What the phases of the tour share.
struct Tour {
    conn: Connection,
    url: String,
    queue_name: String,
    q: Queue,
    mp: MultiProgress,
    /// The shipped one-for-one supervisor every actor of the tour lives under.
    host: Host,
    /// What the live feed has seen.
    tally: Arc<Mutex<Tally>>,
    /// Ids of the scheduler iterations run so far, in order.
    ran: Arc<Mutex<Vec<String>>>,
}

pub(crate) async fn run(t: &Target) -> Res {
    let conn = Connection::connect(t.config.clone()).await?;
    let r = demo(conn.clone(), &t.url).await;
    conn.close().await;
    r
}

async fn demo(conn: Connection, url: &str) -> Res {
    // Set-up: the queue, the supervisor, the live feed.
    let flow_conn = conn.clone();
    let tour = Tour::start(conn, url).await?;
    let feed = tour.start_feed().await?;
    // 1. The producer.
    let all_ids = tour.produce().await?;
    // 2. A worker *process* takes jobs, then dies with them in hand.
    let orphaned = tour.kill_a_worker_process().await?;
    // 3. The supervised worker tree and the schedulers, watched until the
    //    producer's jobs are done, then the ordered shutdown.
    let worker = tour.start_worker_tree().await?;
    let schedulers = tour.start_schedulers().await?;
    tour.watch(&worker).await;
    tour.shut_down(&schedulers, feed).await?;
    // 4. A small flow (fan-out/fan-in), then the summary.
    flow::demo_flow(&flow_conn).await?;
    tour.summary(&all_ids, &orphaned).await
}

impl Tour {
    async fn start(conn: Connection, url: &str) -> Res<Tour> {
        let queue_name = format!("demo-{}", echomq::clock::now_ms() % 100_000);
        let q = Queue::new(&conn, &queue_name).await?;
        let mp = MultiProgress::new();
        print_line(
            &mp,
            format!(
                "{} queue {} on {url}",
                paint(style::BOLD, "EchoMQ demo —"),
                paint(style::INFO, &queue_name)
            ),
        );
        let host = Host::start().await?;
        let tour = Tour {
            conn,
            url: url.to_owned(),
            queue_name,
            q,
            mp,
            host,
            tally: Arc::default(),
            ran: Arc::default(),
        };
        Ok(tour)
    }

    fn say(&self, s: String) {
        print_line(&self.mp, s);
    }

    /// A progress bar over the producer's jobs.
    fn bar(&self, prefix: &'static str) -> ProgressBar {
        let style = ProgressStyle::with_template(
            "  {prefix:<10} [{bar:40.cyan/blue}] {pos:>5}/{len} {msg}",
        )
        .unwrap()
        .progress_chars("=> ");
        self.mp
            .add(ProgressBar::new(JOBS).with_style(style).with_prefix(prefix))
    }

    /// The live feed: QueueEvents → a bounded subscription, held in a registry
    /// that survives a restart of the QueueEvents actor.
    async fn start_feed(&self) -> Res<JoinHandle<()>> {
        let subscribers = Subscribers::new();
        let mut sub = subscribers.subscribe(50_000);
        let qe_args = QueueEventsArgs::new(self.conn.clone(), &self.queue_name)
            .block(Duration::from_millis(500))
            .subscribers(subscribers);
        self.host.add_queue_events(qe_args).await?;
        let tally = self.tally.clone();
        let mp = self.mp.clone();
        Ok(tokio::spawn(async move {
            while let Some(d) = sub.recv().await {
                let Delivery::Event(e) = d else { continue };
                let show = tally.lock().unwrap().record(&e.kind);
                if show {
                    print_line(&mp, feed_line(&e));
                }
            }
        }))
    }

    /// Phase 1, the producer: [`JOBS`] jobs in batches of 100.
    async fn produce(&self) -> Res<Vec<String>> {
        self.say(paint(style::BOLD, "1. a producer adds a mix of jobs"));
        let mut all_ids: Vec<String> = Vec::with_capacity(JOBS as usize);
        let added = self.bar("added");
        for start in (0..JOBS).step_by(100) {
            let batch: Vec<NewJob> = (start..(start + 100).min(JOBS)).map(demo_job).collect();
            all_ids.extend(self.q.add_bulk(batch).await?);
            added.inc(100.min(JOBS - start));
        }
        added.finish_with_message("(5% prioritized, 5% delayed, 5% flaky, some doomed)");
        Ok(all_ids)
    }

    /// Phase 2: a worker process takes 4 jobs and is killed holding them;
    /// returns the orphaned jobs' ids.
    async fn kill_a_worker_process(&self) -> Res<Vec<String>> {
        self.say(paint(
            style::BOLD,
            "2. a separate worker process takes 4 jobs… and is killed (SIGKILL)",
        ));
        let mut child = self.spawn_worker_process()?;
        let t0 = Instant::now();
        while self.q.counts().await?.active < 4 && t0.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        child.kill()?;
        let _ = child.wait();
        let orphaned = self
            .q
            .get_ranges(
                &[echomq::JobState::Active],
                0,
                -1,
                echomq::RangeOrder::Ascending,
            )
            .await?;
        self.say(format!(
            "  killed pid {} holding jobs {:?}; their locks expire in 3 s",
            child.id(),
            orphaned
        ));
        Ok(orphaned)
    }

    /// `echomq work` in a child process: 4 jobs at a time that never finish,
    /// under locks short enough to expire soon after the kill.
    fn spawn_worker_process(&self) -> Res<std::process::Child> {
        let exe = std::env::current_exe()?;
        let child = std::process::Command::new(exe)
            .args([
                "--url",
                &self.url,
                "work",
                &self.queue_name,
                "--concurrency",
                "4",
                "--processor",
                "sleep:600000",
                "--lock-duration",
                "3000",
                // The stalled-check throttle is fleet-wide: the child's first
                // sweep would otherwise hold every checker off for 30 s.
                "--stalled-interval",
                "1000",
                "--quiet",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        Ok(child)
    }

    /// Phase 3, the supervised worker tree: Worker + LockManager + StalledChecker.
    async fn start_worker_tree(&self) -> Res<WorkerHandle> {
        self.say(paint(
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
        let mut wargs = WorkerArgs::new(self.q.clone(), processor);
        wargs.options = WorkerOptions::default()
            .concurrency(CONCURRENCY)
            // Short on purpose, so renewals show: a tick every 300 ms.
            .lock_duration(Duration::from_millis(1200))
            .stalled_interval(Duration::from_millis(1000))
            .name("demo");
        Ok(self.host.add_worker(wargs).await?)
    }

    /// Two schedulers on their own queue and worker tree (so they are not
    /// stuck behind the backlog); each iteration's worker creates the next one,
    /// under a deterministic id (BullMQ's scheme).
    async fn start_schedulers(&self) -> Res<JobSchedulers> {
        let sched_queue = format!("{}-schedules", self.queue_name);
        let sq = Queue::new(&self.conn, &sched_queue).await?;
        let ran = self.ran.clone();
        let sched_processor = processor_fn(move |ctx| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(ctx.job().id.clone());
                Ok(Value::Null)
            }
        });
        let mut sargs = WorkerArgs::new(sq.clone(), sched_processor);
        sargs.options.concurrency = 2;
        self.host.add_worker(sargs).await?;
        let schedulers = JobSchedulers::new(&self.conn, &sched_queue)?;
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
        self.say(format!(
            "  {} `heartbeat` every 3 s and `report` on cron `*/5 * * * * *` (UTC), on queue {sched_queue}",
            paint(style::INFO, "schedulers")
        ));
        Ok(schedulers)
    }

    /// Until the producer's jobs are all finished (or 120 s have passed):
    /// progress, the LockManager's batched renewals, scheduler iterations.
    async fn watch(&self, worker: &WorkerHandle) {
        let done_bar = self.bar("finished");
        let mut shown = 0;
        let mut last_ticks = 0;
        let started = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let (completed, failed) = {
                let t = self.tally.lock().unwrap();
                (t.completed.len() as u64, t.failed.len() as u64)
            };
            done_bar.set_position(completed + failed);
            done_bar.set_message(format!("{completed} completed, {failed} failed"));
            last_ticks = self.show_lock_renewals(worker, last_ticks).await;
            shown = self.show_scheduler_runs(shown);
            // Scheduler iterations keep coming: the producer's jobs decide the end.
            if completed + failed >= JOBS {
                break;
            }
            if started.elapsed() > Duration::from_secs(120) {
                self.say(paint(style::BAD, "  gave up waiting after 120 s"));
                break;
            }
        }
        done_bar.finish();
    }

    /// Shows the LockManager's latest batch every 8th tick; returns the
    /// tick count to compare with next time.
    async fn show_lock_renewals(&self, worker: &WorkerHandle, last_ticks: u64) -> u64 {
        // The handle resolves the current set: a restarted LockManager has a
        // new ref.
        let Ok(stats) = worker.lock_stats().await else {
            return last_ticks;
        };
        // Every 8th tick is enough to see the point: N locks, one call.
        if stats.ticks / 8 > last_ticks / 8 && stats.last_batch > 0 {
            self.say(format!(
                "  {} tick {}: {} held locks renewed in {} call (extendLocks-1)",
                paint(style::INFO, "LockManager"),
                stats.ticks,
                stats.last_batch,
                paint(style::BOLD, "1")
            ));
        }
        stats.ticks
    }

    /// Shows the scheduler iterations run since the first `shown`; returns
    /// how many have been shown.
    fn show_scheduler_runs(&self, shown: usize) -> usize {
        let new: Vec<String> = self.ran.lock().unwrap()[shown..].to_vec();
        for id in &new {
            self.say(format!(
                "  {} ran iteration {}",
                paint(style::INFO, "scheduler"),
                paint(style::BOLD, id)
            ));
        }
        shown + new.len()
    }

    /// The ordered shutdown: both worker sets (jobs finish or go back to wait
    /// while their locks are renewed), then QueueEvents, whose close ends the
    /// feed's subscription.
    async fn shut_down(&self, schedulers: &JobSchedulers, feed: JoinHandle<()>) -> Res {
        schedulers.remove("heartbeat").await?;
        schedulers.remove("report").await?;
        // Let the feed read the last events before it is closed.
        tokio::time::sleep(Duration::from_millis(700)).await;
        // Returns once the host has stopped.
        self.host.close(Duration::from_secs(5)).await?;
        let _ = feed.await;
        Ok(())
    }

    /// Phase 4, the summary; an error when a job was lost or the audit failed.
    async fn summary(&self, all_ids: &[String], orphaned: &[String]) -> Res {
        let counts = self.q.counts().await?;
        let lost = self.count_lost(all_ids).await?;
        let audit = echomq::audit::Audit::new(&self.conn, &self.queue_name)
            .run()
            .await?;
        self.print_summary(counts.failed, lost, audit.violations.len(), orphaned);
        if lost != 0 || !audit.is_consistent() {
            return Err("the demo lost jobs or found an inconsistency".into());
        }
        Ok(())
    }

    /// Lost = an id the producer got back that is in no state at all.
    async fn count_lost(&self, all_ids: &[String]) -> Res<usize> {
        let mut found: HashSet<String> = HashSet::new();
        for state in [
            echomq::JobState::Completed,
            echomq::JobState::Failed,
            echomq::JobState::Waiting,
            echomq::JobState::Prioritized,
            echomq::JobState::Delayed,
            echomq::JobState::Active,
        ] {
            found.extend(
                self.q
                    .get_ranges(&[state], 0, -1, echomq::RangeOrder::Ascending)
                    .await?,
            );
        }
        Ok(all_ids.iter().filter(|id| !found.contains(*id)).count())
    }

    fn print_summary(&self, failed: u64, lost: usize, violations: usize, orphaned: &[String]) {
        let t = self.tally.lock().unwrap();
        anstream::println!();
        anstream::println!("{}", paint(style::BOLD, "summary"));
        anstream::println!("  {:<30}{JOBS}", "added");
        anstream::println!("  {:<30}{}", "completed", t.completed.len());
        anstream::println!("  {:<30}{}", "failed (after retries)", failed);
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
            self.ran.lock().unwrap().len()
        );
        anstream::println!("  {:<30}{}", "events seen (QueueEvents)", t.events);
        anstream::println!(
            "  {:<30}{}",
            "lost",
            paint(if lost == 0 { style::GOOD } else { style::BAD }, lost)
        );
        anstream::println!("  {:<30}{} violations", "consistency audit", violations);
    }
}

/// Job `i` of the producer's mix: 5% prioritized, 5% delayed, 5% flaky (one
/// retry), and every 60th doomed (fails all its attempts).
fn demo_job(i: u64) -> NewJob {
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
}

/// One line of the live feed.
fn feed_line(e: &Event) -> String {
    let detail = match &e.kind {
        EventKind::Failed { failed_reason, .. } => format!(" {failed_reason}"),
        _ => String::new(),
    };
    format!(
        "  {} {:<10} {}{}",
        paint(style::DIM, &e.id),
        paint(style::for_event(e.kind.name()), e.kind.name()),
        e.kind.job_id().unwrap_or(""),
        paint(style::DIM, detail)
    )
}

/// Prints above the progress bars; a hidden progress target (not a
/// terminal) drops `println`, so then print directly.
fn print_line(mp: &MultiProgress, s: String) {
    if mp.is_hidden() {
        anstream::println!("{s}");
    } else {
        let _ = mp.println(s);
    }
}
