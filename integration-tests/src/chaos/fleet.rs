//! The workers of a scenario: worker sets inside the runner's process (for
//! faults that need no signal) and worker *processes*, the Rust
//! `worker_process` and BullMQ's Node `interop/worker.js`, for faults that
//! are signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM).

use crate::json_lines::JsonLines;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use echomq::worker::{processor_fn, JobContext};
use echomq::{ProcessError, Queue, WorkerArgs, WorkerMsg, WorkerSet, WorkerSetSpec};
use ractor::{call_t, Actor, ActorRef};
use serde_json::Value;

use crate::NullSupervisor;

/// Sends `signal` (`KILL`, `STOP`, `CONT`, `TERM`) to `pid` with kill(1).
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Options of an in-process worker set.
#[derive(Clone, Debug)]
pub struct SetOptions {
    /// Slots.
    pub concurrency: usize,
    /// Lock duration.
    pub lock: Duration,
    /// Stalled-check interval.
    pub stalled_interval: Duration,
    /// Run a StalledChecker with the worker.
    pub checker: bool,
    /// maxStalledCount.
    pub max_stalled: u64,
}

impl Default for SetOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            lock: Duration::from_secs(2),
            stalled_interval: Duration::from_millis(500),
            checker: true,
            max_stalled: 1,
        }
    }
}

/// A worker set running in this process.
pub struct InProc {
    host: ActorRef<()>,
    /// The set's actors.
    pub set: WorkerSet,
}

impl InProc {
    /// Starts a worker set on `queue` running [`chaos_behave`].
    pub async fn start(queue: &Queue, o: SetOptions) -> InProc {
        let processor = processor_fn(|job: JobContext| async move { chaos_behave(&job).await });
        let mut args = WorkerArgs::new(queue.clone(), processor);
        args.options.concurrency = o.concurrency;
        args.options.lock_duration = o.lock;
        args.options.stalled_interval = o.stalled_interval;
        args.options.max_stalled_count = o.max_stalled;
        args.options.drain_delay = Duration::from_millis(500);
        let mut spec = WorkerSetSpec::new(args);
        if !o.checker {
            spec.stalled_checker = None;
        }
        let (host, _) = Actor::spawn(None, NullSupervisor, ())
            .await
            .expect("host actor");
        let set = spec
            .spawn_linked(host.get_cell())
            .await
            .expect("worker set");
        InProc { host, set }
    }

    /// Closes the worker (5 s deadline) and stops the set.
    pub async fn close(self) {
        let _ = call_t!(
            self.set.worker,
            WorkerMsg::Close,
            15_000,
            Duration::from_secs(5)
        );
        self.host.stop(None);
    }
}

/// What a chaos job does, read from its data: `behave`'s modes plus `panic`,
/// `block` (`std::thread::sleep`, starving the runtime thread) and
/// `sleep-fail` (sleeps `ms`, then fails its first attempt).
pub async fn chaos_behave(job: &JobContext) -> Result<Value, ProcessError> {
    let d = job.data();
    match d["mode"].as_str() {
        Some("panic") => panic!("chaos: a poison job panics"),
        Some("block") => {
            std::thread::sleep(Duration::from_millis(d["ms"].as_u64().unwrap_or(0)));
            Ok(Value::Null)
        }
        Some("sleep-fail") => {
            tokio::time::sleep(Duration::from_millis(d["ms"].as_u64().unwrap_or(0))).await;
            if job.job().attempts_made < 1 {
                Err(ProcessError::failed(
                    d["reason"].as_str().unwrap_or("fails"),
                ))
            } else {
                Ok(Value::Null)
            }
        }
        _ => crate::behave(job).await,
    }
}

/// Where the test-support binaries are: next to the running executable (a
/// binary of this package) or one level up (a test, in `deps/`).
pub fn sibling_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    for d in [dir, dir.parent().unwrap_or(dir)] {
        let p = d.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} not found next to {}: build it (cargo build -p echomq-integration-tests --bins)",
        exe.display()
    )
}

/// A worker process (Rust `worker_process` or Node `worker.js`) speaking
/// JSON lines on stdout.
pub struct Proc {
    child: Child,
    lines: JsonLines,
}

impl Proc {
    /// Starts `worker_process <url> <queue> <opts>` and waits until ready.
    pub async fn rust(bin: &Path, url: &str, queue: &str, opts: Value) -> Proc {
        let mut cmd = Command::new(bin);
        cmd.args([url, queue, &opts.to_string()]);
        Self::start(cmd).await
    }

    /// Starts `worker_process` inside the network namespace `ns` (through
    /// `ip netns exec`, which execs it: the PID is the worker's own).
    pub async fn rust_in(
        ns: &crate::netns::Netns,
        bin: &Path,
        url: &str,
        queue: &str,
        opts: Value,
    ) -> Proc {
        let mut cmd = ns.command(bin);
        cmd.args([url, queue, &opts.to_string()]);
        Self::start(cmd).await
    }

    /// Starts BullMQ's `node interop/worker.js <url> <queue> <opts>`.
    pub async fn node(url: &str, queue: &str, opts: Value) -> Proc {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
        let mut cmd = Command::new("node");
        cmd.current_dir(&dir)
            .args(["worker.js", url, queue, &opts.to_string()]);
        Self::start(cmd).await
    }

    async fn start(mut cmd: Command) -> Proc {
        // CHAOS_VERBOSE shows the workers' stderr (their logs with RUST_LOG).
        let stderr = if std::env::var_os("CHAOS_VERBOSE").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("worker process starts");
        let lines = JsonLines::read(&mut child);
        let mut me = Proc { child, lines };
        let mut early = Vec::new();
        let ready = me
            .wait_line(Duration::from_secs(60), JsonLines::ready(&mut early))
            .await;
        assert!(ready.is_some(), "worker process not ready within 60 s");
        me.lines.keep_unread(early);
        me
    }

    /// The PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (polling, without blocking the runtime) for a line matching
    /// `pred`; `None` after `limit`.
    pub async fn wait_line(
        &mut self,
        limit: Duration,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            while let Some(v) = self.lines.try_next() {
                if pred(&v) {
                    return Some(v);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lines arrived so far, without waiting.
    pub fn drain(&mut self) -> &[Value] {
        self.lines.drain()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends a signal (`STOP`, `CONT`, `TERM`, …).
    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes stdin (an orderly close) and waits up to `limit` for the exit.
    pub async fn close(mut self, limit: Duration) {
        drop(self.child.stdin.take());
        self.wait_exit(limit).await;
    }

    /// Waits up to `limit` for the process to exit; true when it did.
    pub async fn wait_exit(&mut self, limit: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if self.exited() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
