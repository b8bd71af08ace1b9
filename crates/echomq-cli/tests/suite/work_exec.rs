//! `echomq work --processor exec:… | http:…` as a process: the shipped
//! handlers (Python, Node, sh, and the Python HTTP endpoint) complete jobs
//! BullMQ Node added, with progress and logs Node reads back; handlers that
//! crash, print garbage or hang, and a worker SIGKILLed mid-run, each leave
//! every job accounted for (added = completed + failed + pending, none
//! finished twice).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use echomq::queue::{CancelMode, CancelOutcome};
use echomq::{JobCounts, JobOptions, Queue};
use echomq_integration_tests::{bullmq, events, wait_until, RedisServer};
use serde_json::{json, Value};

/// One deadline for every wait of a test.
const LIMIT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn handler(name: &str) -> String {
    repo()
        .join("examples/handlers")
        .join(name)
        .display()
        .to_string()
}

fn faulty() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/handlers/faulty.py")
        .display()
        .to_string()
}

/// `echomq work` running, its stderr (the log) in a file.
pub(crate) struct Work {
    pub(crate) child: Child,
    log: tempfile::NamedTempFile,
}

impl Work {
    pub(crate) fn start(url: &str, queue: &str, processor: &str, extra: &[&str]) -> Work {
        Self::start_with_env(url, queue, processor, extra, &[])
    }

    pub(crate) fn start_with_env(
        url: &str,
        queue: &str,
        processor: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Work {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = crate::cli::command();
        cmd.args([
            "work",
            queue,
            "--url",
            url,
            "--quiet",
            "--processor",
            processor,
        ])
        .args(extra)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap());
        Work {
            child: cmd.spawn().unwrap(),
            log,
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap()
    }

    pub(crate) async fn wait_exit(&mut self, deadline: Instant) -> ExitStatus {
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "echomq work did not exit; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Every job is completed, failed or pending, and none finished twice: one
/// `completed` or `failed` event at most per job in the events stream (the
/// failed ones counting final failures only, `attemptsMade` = attempts).
async fn accounted(redis: &RedisServer, q: &Queue, added: u64) -> JobCounts {
    let counts = q.counts().await.unwrap();
    assert_eq!(
        counts.completed + counts.failed + counts.pending(),
        added,
        "every job accounted for: {counts:?}"
    );
    let c = redis.client().await;
    let mut finished: HashMap<String, u32> = HashMap::new();
    for (name, fields) in events(&c, &format!("emq:{}:events", q.name())).await {
        if name == "completed" {
            let id = fields.iter().find(|(k, _)| k == "jobId").unwrap().1.clone();
            *finished.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = finished.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "completed twice: {twice:?}");
    assert_eq!(finished.len() as u64, counts.completed);
    counts
}

/// 1,000 jobs added by BullMQ Node, done by `processor`; Node reads back
/// every job's progress, return value and log line.
async fn thousand_node_jobs(processor: &str, log_line: impl Fn(&str) -> String) {
    let redis = RedisServer::start();
    let url = redis.url();
    let ids = bullmq(
        "add-many",
        &url,
        "thousand",
        json!({"n": 1000, "name": "n", "from": 0}),
    );
    let ids: Vec<String> = serde_json::from_value(ids).unwrap();
    assert_eq!(ids.len(), 1000);
    let deadline = Instant::now() + LIMIT;
    let mut work = Work::start(
        &url,
        "thousand",
        processor,
        &["--concurrency", "8", "--max-jobs", "1000"],
    );
    let status = work.wait_exit(deadline).await;
    assert!(status.success(), "{status:?}: {}", work.log());

    let read = bullmq("read-jobs", &url, "thousand", json!({ "ids": ids }));
    let ops: Vec<Value> = ids
        .iter()
        .map(|id| json!(["job-logs", id, 0, -1, true]))
        .collect();
    let logs = bullmq("ops", &url, "thousand", json!({ "ops": ops }));
    for (k, id) in ids.iter().enumerate() {
        let job = &read[id];
        assert_eq!(job["state"], "completed", "job {id}: {job}");
        assert_eq!(job["progress"], 50, "job {id}");
        assert_eq!(
            job["returnvalue"],
            json!({"handled": "n", "echo": {"i": k}}),
            "job {id}"
        );
        assert_eq!(job["attemptsMade"], 1, "job {id}");
        assert_eq!(logs[k]["logs"], json!([log_line(id)]), "job {id}");
    }
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "thousand").await.unwrap();
    assert_eq!(accounted(&redis, &q, 1000).await.completed, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_handler_completes_1000_node_jobs_with_progress_and_logs() {
    let processor = format!("exec:python3 {}", handler("handler.py"));
    thousand_node_jobs(&processor, |id| format!("job {id} attempt 1")).await;
}

/// The example HTTP endpoint, killed on drop.
pub(crate) struct Endpoint {
    child: Child,
    pub(crate) addr: String,
}

impl Endpoint {
    pub(crate) fn start(extra: &[&str]) -> Endpoint {
        let mut child = Command::new("python3")
            .arg(handler("http_handler.py"))
            .arg("0")
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let addr = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_owned();
        Endpoint { child, addr }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_handler_completes_1000_node_jobs_with_progress_and_logs() {
    let endpoint = Endpoint::start(&[]);
    let processor = format!("http:http://{}/jobs", endpoint.addr);
    thousand_node_jobs(&processor, |id| format!("job {id} attempt 1 over HTTP")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_verified_against_the_given_ca() {
    let certs = echomq_integration_tests::tls::Certs::generate();
    let (cert, key) = (certs.path("server.pem"), certs.path("server.key"));
    let endpoint = Endpoint::start(&["--tls", cert.to_str().unwrap(), key.to_str().unwrap()]);
    // The certificate names 127.0.0.1.
    let processor = format!("http:https://{}/jobs", endpoint.addr);
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let deadline = Instant::now() + LIMIT;
    for (queue, ca, trusted) in [
        ("trusted", certs.ca(), true),
        ("untrusted", certs.other_ca(), false),
    ] {
        let q = Queue::new(&conn, queue).await.unwrap();
        q.add("j", &json!({"i": 7}), JobOptions::new())
            .await
            .unwrap();
        let mut work = Work::start(
            &url,
            queue,
            &processor,
            &["--http-ca-file", ca.to_str().unwrap()],
        );
        wait_until("the job finished", left(deadline), async || {
            let c = q.counts().await.unwrap();
            c.completed + c.failed == 1
        })
        .await;
        work.sigterm();
        assert!(work.wait_exit(deadline).await.success());
        let job = q.get_job("1").await.unwrap().unwrap();
        if trusted {
            assert_eq!(
                job.return_value,
                Some(json!({"handled": "j", "echo": {"i": 7}})),
                "{}",
                work.log()
            );
            assert_eq!(
                q.get_job_logs("1", 0, -1, echomq::RangeOrder::Ascending)
                    .await
                    .unwrap()
                    .logs
                    .len(),
                1
            );
        } else {
            let reason = job.failed_reason.unwrap();
            assert!(
                reason.contains("invalid peer certificate: UnknownIssuer"),
                "{reason}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_and_sh_handlers_complete_jobs() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    for (queue, processor) in [
        ("node", format!("exec:node {}", handler("handler.js"))),
        ("sh", format!("exec:sh {}", handler("handler.sh"))),
    ] {
        let q = Queue::new(&conn, queue).await.unwrap();
        for i in 0..20 {
            q.add(
                "j",
                &json!({"i": i, "s": "a\\b \"q\" ✓"}),
                JobOptions::new(),
            )
            .await
            .unwrap();
        }
        q.add(
            "j",
            &json!({"fail": "no such user"}),
            JobOptions::new().attempts(1),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + LIMIT;
        let mut work = Work::start(&url, queue, &processor, &["--concurrency", "2"]);
        wait_until("21 jobs finished", left(deadline), async || {
            let c = q.counts().await.unwrap();
            c.completed + c.failed == 21
        })
        .await;
        work.sigterm();
        assert!(work.wait_exit(deadline).await.success());
        let job = q.get_job("1").await.unwrap().unwrap();
        let value = job.return_value.unwrap();
        if queue == "node" {
            assert_eq!(value, json!({"handled": "j", "echo": job.data}));
            assert_eq!(job.progress, json!(50));
            let failed = q.get_job("21").await.unwrap().unwrap();
            assert_eq!(failed.failed_reason.as_deref(), Some("no such user"));
        } else {
            // sh completes with the job message itself, data byte for byte.
            assert_eq!(value["type"], "job");
            assert_eq!(value["data"], job.data);
            assert_eq!(job.progress, json!(100));
        }
        assert_eq!(
            q.get_job_logs("1", 0, -1, echomq::RangeOrder::Ascending)
                .await
                .unwrap()
                .logs
                .len(),
            1
        );
        assert!(
            work.log().contains("handled") || work.log().contains("one job done"),
            "stderr is logged: {}",
            work.log()
        );
    }
}

/// A state dir for faulty.py.
fn state_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn pid_alive(pid: u32) -> bool {
    // A zombie is as good as gone: it runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

async fn pid_file(dir: &Path, name: &str, deadline: Instant) -> u32 {
    let path = dir.join(name);
    wait_until(&format!("{name} written"), left(deadline), async || {
        path.exists()
    })
    .await;
    std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_that_crash_or_print_garbage_fail_that_job_and_are_replaced() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "faults").await.unwrap();
    let state = state_dir();
    let mut added = 0;
    let mut add = async |mode: &str, attempts: i64| {
        added += 1;
        q.add(
            "f",
            &json!({"mode": mode, "i": added}),
            JobOptions::new().attempts(attempts),
        )
        .await
        .unwrap()
    };
    let mut ok = Vec::new();
    for _ in 0..6 {
        ok.push(add("ok", 1).await);
    }
    let crash_once = [add("crash-once", 2).await, add("crash-once", 2).await];
    let crash = add("crash", 2).await;
    let garbage_once = add("garbage-once", 2).await;
    let garbage = add("garbage", 1).await;
    for _ in 0..6 {
        ok.push(add("ok", 1).await);
    }
    let deadline = Instant::now() + LIMIT;
    let processor = format!("exec:python3 {}", faulty());
    let mut work = Work::start_with_env(
        &url,
        "faults",
        &processor,
        &["--concurrency", "2"],
        &[("HANDLER_STATE", state.path().to_str().unwrap())],
    );
    wait_until("every job finished", left(deadline), async || {
        let c = q.counts().await.unwrap();
        c.completed + c.failed == added
    })
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success());
    let counts = accounted(&redis, &q, added).await;
    assert_eq!((counts.completed, counts.failed), (added - 2, 2));
    for id in ok.iter().chain(&crash_once).chain([&garbage_once]) {
        let job = q.get_job(id).await.unwrap().unwrap();
        assert!(job.return_value.is_some(), "job {id} completed");
    }
    for id in crash_once {
        let job = q.get_job(&id).await.unwrap().unwrap();
        assert_eq!(job.attempts_made, 2, "job {id}: retried once");
        assert!(
            job.stacktrace[0].contains(&format!("crashing on job {id}")),
            "the crash's stderr in the stacktrace: {:?}",
            job.stacktrace
        );
    }
    let job = q.get_job(&crash).await.unwrap().unwrap();
    assert_eq!(
        job.failed_reason.as_deref(),
        Some(
            format!(
                "handler exited before answering (exit code 3); last stderr line: crashing on job {crash}"
            )
            .as_str()
        )
    );
    assert_eq!(job.attempts_made, 2);
    let job = q.get_job(&garbage).await.unwrap().unwrap();
    assert_eq!(
        job.failed_reason.as_deref(),
        Some(format!(
            "handler protocol error: the line \"hello from job {garbage}\" is not JSON; a handler prints only protocol messages on stdout (diagnostics go to stderr)"
        ).as_str())
    );
    // Each fault cost its handler: 4 crashes, 2 garbage lines, each replaced.
    let log = work.log();
    assert_eq!(log.matches("handler replaced").count(), 6, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_handler_is_stopped_at_the_close_deadline_and_its_job_goes_back() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "hang").await.unwrap();
    let state = state_dir();
    let soft = q
        .add("h", &json!({"mode": "hang"}), JobOptions::new())
        .await
        .unwrap();
    let stubborn = q
        .add(
            "h",
            &json!({"mode": "hang", "stubborn": true}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    for i in 0..4 {
        q.add("ok", &json!({"i": i}), JobOptions::new())
            .await
            .unwrap();
    }
    let deadline = Instant::now() + LIMIT;
    let processor = format!("exec:python3 {}", faulty());
    let mut work = Work::start_with_env(
        &url,
        "hang",
        &processor,
        &["--concurrency", "3", "--close-timeout", "300"],
        &[("HANDLER_STATE", state.path().to_str().unwrap())],
    );
    let soft_pid = pid_file(state.path(), &format!("hang-{soft}"), deadline).await;
    let stubborn_pid = pid_file(state.path(), &format!("hang-{stubborn}"), deadline).await;
    wait_until("the other jobs completed", left(deadline), async || {
        q.counts().await.unwrap().completed == 4
    })
    .await;
    assert!(pid_alive(soft_pid) && pid_alive(stubborn_pid), "both hang");
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success(), "{}", work.log());
    wait_until("both handlers gone", left(deadline), async || {
        !pid_alive(soft_pid) && !pid_alive(stubborn_pid)
    })
    .await;
    let counts = accounted(&redis, &q, 6).await;
    assert_eq!((counts.completed, counts.waiting), (4, 2), "{counts:?}");
    let log = work.log();
    assert!(log.contains("2 moved back to wait"), "{log}");
    assert_eq!(log.matches("handler stopped").count(), 2, "{log}");
    // SIGTERM ended one; the other ignores it and took SIGKILL.
    assert!(
        log.contains("exit code") || log.contains("signal 15"),
        "{log}"
    );
    assert!(log.contains("killed by signal 9"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_hanging_past_the_job_timeout_is_stopped_and_the_attempt_fails() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "timeout").await.unwrap();
    let state = state_dir();
    let timeout = Duration::from_millis(2000);
    let deadline = Instant::now() + LIMIT;
    let processor = format!("exec:python3 {}", faulty());
    let mut work = Work::start_with_env(
        &url,
        "timeout",
        &processor,
        &["--concurrency", "3"],
        &[("HANDLER_STATE", state.path().to_str().unwrap())],
    );
    // The clock of a timeout starts when the job is taken: the handlers must
    // be up first, or a slow interpreter start would be what times out.
    wait_until("3 handlers ready", left(deadline), async || {
        std::fs::read_dir(state.path())
            .unwrap()
            .filter(|e| {
                let e = e.as_ref().unwrap();
                e.file_name().to_string_lossy().starts_with("started-")
            })
            .count()
            >= 3
    })
    .await;
    // Hangs on its first run only: the timeout fails that attempt, the retry
    // completes.
    let soft = q
        .add(
            "h",
            &json!({"mode": "hang-once"}),
            JobOptions::new().attempts(2).timeout(timeout),
        )
        .await
        .unwrap();
    // Ignores SIGTERM and hangs on every run: SIGKILL, and it fails for good.
    let stubborn = q
        .add(
            "h",
            &json!({"mode": "hang", "stubborn": true}),
            JobOptions::new().attempts(1).timeout(timeout),
        )
        .await
        .unwrap();
    for i in 0..4 {
        q.add("ok", &json!({"i": i}), JobOptions::new())
            .await
            .unwrap();
    }
    let soft_pid = pid_file(state.path(), &format!("hang-{soft}"), deadline).await;
    let stubborn_pid = pid_file(state.path(), &format!("hang-{stubborn}"), deadline).await;
    wait_until("5 completed and 1 failed", left(deadline), async || {
        let c = q.counts().await.unwrap();
        (c.completed, c.failed) == (5, 1)
    })
    .await;
    wait_until("both hanging handlers gone", left(deadline), async || {
        !pid_alive(soft_pid) && !pid_alive(stubborn_pid)
    })
    .await;
    // The worker lives on with fresh handlers.
    let after = q
        .add("ok", &json!({"i": 9}), JobOptions::new())
        .await
        .unwrap();
    wait_until(
        "a job after the timeouts completed",
        left(deadline),
        async || q.counts().await.unwrap().completed == 6,
    )
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success(), "{}", work.log());
    accounted(&redis, &q, 7).await;

    let job = q.get_job(&soft).await.unwrap().unwrap();
    assert_eq!(job.attempts_made, 2, "{job:?}");
    assert!(job.return_value.is_some(), "the retry completed: {job:?}");
    assert_eq!(
        job.stacktrace.first().map(String::as_str),
        Some(format!("TimeoutError: job {soft} timed out after 2000 ms").as_str()),
        "{job:?}"
    );
    let job = q.get_job(&stubborn).await.unwrap().unwrap();
    assert_eq!(
        job.failed_reason.as_deref(),
        Some(format!("job {stubborn} timed out after 2000 ms").as_str())
    );
    assert_eq!(job.attempts_made, 1);
    assert!(q
        .get_job(&after)
        .await
        .unwrap()
        .unwrap()
        .return_value
        .is_some());
    let log = work.log();
    assert!(log.contains("handler stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_process_stops_the_handler() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "cancel").await.unwrap();
    let state = state_dir();
    let id = q
        .add("h", &json!({"mode": "hang"}), JobOptions::new().attempts(3))
        .await
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    let processor = format!("exec:python3 {}", faulty());
    let mut work = Work::start_with_env(
        &url,
        "cancel",
        &processor,
        &[],
        &[("HANDLER_STATE", state.path().to_str().unwrap())],
    );
    let pid = pid_file(state.path(), &format!("hang-{id}"), deadline).await;
    let outcome = q
        .cancel(&id, "no longer wanted", CancelMode::Fail)
        .await
        .unwrap();
    assert_eq!(outcome, CancelOutcome::Stopped { retrying: false });
    wait_until("the handler stopped", left(deadline), async || {
        !pid_alive(pid)
    })
    .await;
    let next = q
        .add("ok", &json!({"i": 1}), JobOptions::new())
        .await
        .unwrap();
    wait_until("the next job completed", left(deadline), async || {
        q.counts().await.unwrap().completed == 1
    })
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success(), "{}", work.log());
    let counts = accounted(&redis, &q, 2).await;
    assert_eq!((counts.completed, counts.failed), (1, 1));
    let job = q.get_job(&id).await.unwrap().unwrap();
    assert_eq!(job.failed_reason.as_deref(), Some("no longer wanted"));
    assert_eq!(job.attempts_made, 1, "failed for good, not retried");
    assert!(q
        .get_job(&next)
        .await
        .unwrap()
        .unwrap()
        .return_value
        .is_some());
    let log = work.log();
    assert!(log.contains("handler stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stops_the_hanging_handler_and_the_job_runs_again() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "lost").await.unwrap();
    let state = state_dir();
    let id = q
        .add("h", &json!({"mode": "hang-once"}), JobOptions::new())
        .await
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    let processor = format!("exec:python3 {}", faulty());
    let mut work = Work::start_with_env(
        &url,
        "lost",
        &processor,
        &["--lock-duration", "1000", "--stalled-interval", "500"],
        &[("HANDLER_STATE", state.path().to_str().unwrap())],
    );
    let pid = pid_file(state.path(), &format!("hang-{id}"), deadline).await;
    // The lock goes (as if it expired while the worker was cut off): the
    // LockManager's next renewal finds it lost and the worker cancels.
    let c = redis.client().await;
    let deleted: u64 = fred::prelude::KeysInterface::del(&c, format!("emq:lost:{id}:lock"))
        .await
        .unwrap();
    assert_eq!(deleted, 1, "the job was held");
    wait_until("the handler stopped", left(deadline), async || {
        !pid_alive(pid)
    })
    .await;
    // The stalled checker moves it back; the second run completes.
    wait_until("the job completed", left(deadline), async || {
        q.counts().await.unwrap().completed == 1
    })
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success());
    accounted(&redis, &q, 1).await;
    let job = q.get_job(&id).await.unwrap().unwrap();
    assert_eq!(job.stalled_counter, 1, "recovered as stalled: {job:?}");
    let log = work.log();
    assert!(log.contains("lock lost"), "{log}");
    assert!(log.contains("handler stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sigkilled_mid_run_loses_no_job() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "killed").await.unwrap();
    let state = state_dir();
    let n = 60;
    for i in 0..n {
        q.add(
            "s",
            &json!({"mode": "sleep", "ms": 100, "i": i}),
            JobOptions::new(),
        )
        .await
        .unwrap();
    }
    let deadline = Instant::now() + LIMIT;
    let processor = format!("exec:python3 {}", faulty());
    let args = [
        "--concurrency",
        "4",
        "--lock-duration",
        "1000",
        "--stalled-interval",
        "500",
    ];
    let env = [("HANDLER_STATE", state.path().to_str().unwrap())];
    let mut first = Work::start_with_env(&url, "killed", &processor, &args, &env);
    wait_until("10 jobs completed", left(deadline), async || {
        q.counts().await.unwrap().completed >= 10
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let at_kill = q.counts().await.unwrap();
    assert!(
        at_kill.active > 0,
        "jobs were held at the kill: {at_kill:?}"
    );
    assert!(at_kill.completed < n, "the kill came mid-run: {at_kill:?}");
    let mut second = Work::start_with_env(&url, "killed", &processor, &args, &env);
    wait_until("every job completed", left(deadline), async || {
        q.counts().await.unwrap().completed == n
    })
    .await;
    second.sigterm();
    assert!(second.wait_exit(deadline).await.success());
    accounted(&redis, &q, n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_headers_never_reach_the_log() {
    let redis = RedisServer::start();
    let url = redis.url();
    let conn = redis.connect().await;
    let q = Queue::new(&conn, "secret").await.unwrap();
    q.add("j", &json!({"i": 1}), JobOptions::new())
        .await
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    // Nothing listens there: the job fails (retryably) with a readable reason.
    let mut work = Work::start(
        &url,
        "secret",
        "http:http://127.0.0.1:9/run?code=TOKEN-IN-QUERY",
        &[
            "--http-header",
            "Authorization: Bearer TOKEN-IN-HEADER",
            "--log-level",
            "debug",
        ],
    );
    wait_until("the job failed", left(deadline), async || {
        q.counts().await.unwrap().failed == 1
    })
    .await;
    work.sigterm();
    assert!(work.wait_exit(deadline).await.success());
    let job = q.get_job("1").await.unwrap().unwrap();
    let reason = job.failed_reason.unwrap();
    assert!(
        reason.starts_with("HTTP request to http://127.0.0.1:9/run failed: "),
        "{reason}"
    );
    let log = work.log();
    assert!(log.contains("jobs go to an HTTP endpoint"), "{log}");
    for secret in ["TOKEN-IN-QUERY", "TOKEN-IN-HEADER"] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
        assert!(!reason.contains(secret), "{reason}");
    }
}
