//! One handler process: started in its own process group, fed one `job` line
//! at a time on stdin, read back on stdout until the job's answer; its stderr
//! logged with the id of the job it is running. A handler that crashes,
//! prints garbage or is cancelled is not reused.

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tracing::{debug, info, warn};

use super::command::{ExecCommand, ExecOptions};
use crate::external::wire::{self, Message, Step};
use crate::worker::process::processor::{JobContext, ProcessError};
use serde_json::Value;

/// Stderr lines kept for the reason of a crash.
const TAIL_LINES: usize = 5;
/// How long the stderr reader may lag behind the process's exit.
const STDERR_DRAIN: Duration = Duration::from_millis(200);

/// The id of the job a handler runs, shared with its stderr reader.
type Current = Arc<Mutex<Option<Arc<str>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a job on a handler ended.
pub(crate) struct Outcome {
    /// What the worker does with the job.
    pub(crate) result: Result<Value, ProcessError>,
    /// False when the process must be replaced.
    pub(crate) reusable: bool,
}

impl Outcome {
    fn spent(result: Result<Value, ProcessError>) -> Self {
        Outcome {
            result,
            reusable: false,
        }
    }
}

/// A running handler process.
pub(crate) struct Handler {
    child: Option<Child>,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: FramedRead<ChildStdout, LinesCodec>,
    current: Current,
    tail: Arc<Mutex<VecDeque<String>>>,
    stderr: Option<JoinHandle<()>>,
    started: Instant,
    answered: u64,
    busy: bool,
    kill_grace: Duration,
    max_line_bytes: usize,
}

impl Handler {
    /// Starts `command` in a process group of its own, so that signals reach
    /// whatever it starts in turn (a shell's children), and a Ctrl-C at the
    /// terminal reaches only the worker, which then closes in order.
    pub(crate) fn spawn(command: &ExecCommand, opts: &ExecOptions) -> std::io::Result<Handler> {
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        for (k, v) in &command.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        if let Some(dir) = &command.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn()?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("handler pipes missing"));
        };
        let current: Current = Arc::default();
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr = tokio::spawn(log_stderr(
            stderr,
            pid,
            current.clone(),
            tail.clone(),
            opts.max_stderr_line_bytes,
        ));
        debug!(pid, program = ?command.program, "handler started");
        Ok(Handler {
            child: Some(child),
            pid,
            stdin: Some(stdin),
            stdout: FramedRead::new(stdout, LinesCodec::new_with_max_length(opts.max_line_bytes)),
            current,
            tail,
            stderr: Some(stderr),
            started: Instant::now(),
            answered: 0,
            busy: false,
            kill_grace: opts.kill_grace,
            max_line_bytes: opts.max_line_bytes,
        })
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// True when it died soon after its start without answering a job: the
    /// pool then waits before starting the next one.
    pub(crate) fn failed_to_start(&self, early: Duration) -> bool {
        self.answered == 0 && self.started.elapsed() < early
    }

    /// Jobs it answered.
    pub(crate) fn answered(&self) -> u64 {
        self.answered
    }

    /// True when it can take a job: still running, and nothing but blank
    /// lines or `ready` printed since its last answer (other lines are logged
    /// and skipped: they belong to no job).
    pub(crate) fn usable(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => {}
            _ => return false,
        }
        loop {
            match self.stdout.next().now_or_never() {
                None => return true,
                Some(None) | Some(Some(Err(_))) => return false,
                Some(Some(Ok(line))) => match wire::parse(&line) {
                    Ok(None) | Ok(Some(Message::Ready)) => {}
                    _ => warn!(
                        pid = self.pid,
                        line = wire::excerpt(&line),
                        "handler printed a line between jobs; skipped"
                    ),
                },
            }
        }
    }

    /// Runs the job of `ctx` to its answer, a crash, garbage or the job's
    /// cancellation.
    pub(crate) async fn run(&mut self, ctx: &JobContext) -> Outcome {
        self.busy = true;
        *lock(&self.current) = Some(Arc::from(ctx.id()));
        let outcome = self.exchange(ctx).await;
        *lock(&self.current) = None;
        if outcome.reusable {
            self.answered += 1;
            self.busy = false;
        }
        outcome
    }

    async fn exchange(&mut self, ctx: &JobContext) -> Outcome {
        let mut line = wire::job_message(ctx);
        line.push('\n');
        if self.send(&line).await.is_err() {
            // Gone before it read the job (it died while idle, or on it).
            return self.crashed("before reading the job").await;
        }
        loop {
            let next = tokio::select! {
                biased;
                _ = ctx.cancelled() => {
                    self.terminate("its job was cancelled (lock lost, timeout, remote cancel or shutdown)").await;
                    return Outcome::spent(Err(ProcessError::failed("cancelled")));
                }
                next = self.stdout.next() => next,
            };
            let text = match next {
                Some(Ok(text)) => text,
                None | Some(Err(LinesCodecError::Io(_))) => {
                    return self.crashed("before answering").await;
                }
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    let reason = format!(
                        "handler protocol error: a stdout line longer than {} bytes",
                        self.max_line_bytes
                    );
                    return self.garbage(reason).await;
                }
            };
            match wire::parse(&text) {
                Ok(None) => {}
                Ok(Some(message)) => {
                    if let Step::Done(result) = wire::apply(ctx, message).await {
                        return Outcome {
                            result,
                            reusable: true,
                        };
                    }
                }
                Err(e) => {
                    let reason = format!(
                        "handler protocol error: {e}; a handler prints only protocol messages on stdout (diagnostics go to stderr)"
                    );
                    return self.garbage(reason).await;
                }
            }
        }
    }

    async fn send(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        stdin.write_all(line.as_bytes()).await?;
        stdin.flush().await
    }

    /// Garbage on stdout: the process is in a state nobody knows, so it is
    /// stopped and replaced; the job fails (retried per its attempts).
    async fn garbage(&mut self, reason: String) -> Outcome {
        warn!(pid = self.pid, %reason, "handler replaced");
        self.terminate("it printed garbage").await;
        Outcome::spent(Err(ProcessError::failed(reason)))
    }

    /// Stdout closed (or stdin refused the job): the process is exiting.
    async fn crashed(&mut self, when: &str) -> Outcome {
        let status = self.reap(self.kill_grace).await;
        if let Some(task) = self.stderr.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN, task).await;
        }
        let mut reason = format!("handler exited {when} ({})", describe(status));
        let tail: Vec<String> = lock(&self.tail).iter().cloned().collect();
        if let Some(last) = tail.last() {
            reason.push_str(&format!("; last stderr line: {}", wire::excerpt(last)));
        }
        warn!(pid = self.pid, %reason, "handler replaced");
        Outcome::spent(Err(ProcessError::Failed {
            message: reason,
            stack: (!tail.is_empty()).then(|| tail.join("\n")),
        }))
    }

    /// SIGTERM to the process group; SIGKILL after the grace.
    async fn terminate(&mut self, why: &str) {
        self.stdin = None;
        self.signal(Signal::TERM);
        let status = self.reap(self.kill_grace).await;
        info!(pid = self.pid, why, status = %describe(status), "handler stopped");
    }

    /// Waits up to `grace` for the process to exit, then kills the group.
    async fn reap(&mut self, grace: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let status = match tokio::time::timeout(grace, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                self.signal(Signal::KILL);
                let child = self.child.as_mut()?;
                tokio::time::timeout(grace, child.wait())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
        };
        // Whatever it started and left behind in its group goes with it.
        self.signal(Signal::KILL);
        self.child = None;
        status
    }

    fn signal(&self, signal: Signal) {
        // Never 0 or 1 (`kill(-1)` would reach every process).
        if self.pid > 1 {
            if let Some(pid) = Pid::from_raw(self.pid as i32) {
                let _ = kill_process_group(pid, signal);
            }
        }
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.busy {
            // Dropped mid-job (the worker's cancel grace ran out): at once.
            self.signal(Signal::KILL);
            return;
        }
        // Idle: its stdin closes now (end of input: a handler's loop ends),
        // and it is killed if it has not exited after the grace.
        self.stdin = None;
        let (pid, grace) = (self.pid, self.kill_grace);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if tokio::time::timeout(grace, child.wait()).await.is_err() {
                        if let Some(pid) = Pid::from_raw(pid as i32).filter(|_| pid > 1) {
                            let _ = kill_process_group(pid, Signal::KILL);
                        }
                        let _ = child.wait().await;
                    }
                });
            }
            Err(_) => self.signal(Signal::KILL),
        }
    }
}

fn describe(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => s.to_string(),
        },
        None => "still running; killed".into(),
    }
}

/// Logs the handler's stderr, one event per line, with the job it runs.
async fn log_stderr(
    stderr: ChildStderr,
    pid: u32,
    current: Current,
    tail: Arc<Mutex<VecDeque<String>>>,
    max: usize,
) {
    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(max));
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(line) => line,
            Err(LinesCodecError::MaxLineLengthExceeded) => format!("(a line over {max} bytes)"),
            Err(LinesCodecError::Io(_)) => break,
        };
        let job = lock(&current).clone();
        match job.as_deref() {
            Some(job_id) => info!(pid, job_id, "handler: {line}"),
            None => info!(pid, "handler: {line}"),
        }
        let mut tail = lock(&tail);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}
