//! Test harness: every test gets its own throwaway `redis-server` on a free
//! loopback port, in a temporary directory, with persistence off. Tests never
//! touch a Redis they did not start.
//!
//! ```no_run
//! # async fn t() {
//! let redis = echomq_integration_tests::RedisServer::start();
//! let conn = redis.connect().await;
//! # }
//! ```

pub mod chaos;
pub mod cluster;
pub mod fault_proxy;
mod json_lines;
pub mod keyspace;
pub mod launch;
pub mod netns;
mod node_bullmq;
mod python_bullmq;
pub mod s3;
pub mod scale;
pub mod sentinel;
pub mod timeline;
pub mod tls;
pub mod topology;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use echomq::{Connection, ConnectionConfig};
use fred::prelude::{Builder, Client, ClientLike, Config};
use launch::{Probe, ServerArgs};

pub use node_bullmq::{NodeBullmq, NodeRun};
pub use python_bullmq::{python_bullmq, python_driver, PYTHON_BULLMQ_VERSION};

/// A `redis-server` child process, stopped (killed) when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers.
    ///
    /// Panics with one line saying how to install `redis-server` when it is
    /// missing: a test cannot run without it, and no other Redis is used.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`--maxmemory`, …).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::start_wrapped(&[], extra)
    }

    /// Starts the server as the last argument of `wrapper` (`valgrind
    /// --tool=callgrind …`), for counting the server's own work per job.
    pub fn start_wrapped(wrapper: &[&str], extra: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().expect("temp dir for redis-server");
        let (child, port) = launch::start_on_free_port("redis-server", &Probe::Plain, |port| {
            ServerArgs::new(port, dir.path())
                .args(extra)
                .wrapped(wrapper)
        });
        RedisServer {
            child,
            port,
            _dir: dir,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// An EchoMQ connection (pool + scripts) to this server.
    pub async fn connect(&self) -> Connection {
        Connection::connect(ConnectionConfig::with_url(self.url()))
            .await
            .expect("connect to the test redis-server")
    }

    /// A plain fred client, for asserting Redis state directly.
    pub async fn client(&self) -> Client {
        let client = Builder::from_config(Config::from_url(&self.url()).unwrap())
            .build()
            .unwrap();
        client.init().await.expect("connect plain client");
        client
    }

    /// A fresh server with an EchoMQ connection and a queue named `queue`
    /// on it: the preamble of most tests in one line. Keep the server bound
    /// (`_redis` when unused): dropping it stops the server.
    pub async fn with_queue(queue: &str) -> (RedisServer, Connection, echomq::Queue) {
        let redis = RedisServer::start();
        let conn = redis.connect().await;
        let q = echomq::Queue::new(&conn, queue)
            .await
            .expect("a queue on the test redis-server");
        (redis, conn, q)
    }

    /// Waits until the server has exited by itself (after `SHUTDOWN`), so
    /// that whatever it writes on exit is complete.
    pub fn wait_exit(&mut self) {
        let _ = self.child.wait();
    }

    /// Kills the server at once (a crash, for fault tests).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads the whole events stream of a queue as `(event name, fields)` pairs,
/// fields in stream order (`timeline::stamps` has the ids and times too).
pub async fn events(client: &Client, key: &str) -> Vec<(String, Vec<(String, String)>)> {
    timeline::stamps(client, key)
        .await
        .into_iter()
        .map(|s| (s.name, s.fields))
        .collect()
}

/// The names of the events in a stream, in order.
pub async fn event_names(client: &Client, key: &str) -> Vec<String> {
    events(client, key)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// `KEYS pattern`, sorted (fred has no typed KEYS; fine on a test server).
/// Script calls (EVALSHA) the server has run so far, from `INFO commandstats`.
pub async fn evalsha_calls(client: &Client) -> u64 {
    let info: String = client
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .expect("INFO commandstats");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub async fn keys(client: &Client, pattern: &str) -> Vec<String> {
    use fred::types::{ClusterHash, CustomCommand};
    let cmd = CustomCommand::new_static("KEYS", ClusterHash::FirstKey, false);
    let mut keys: Vec<String> = client
        .custom(cmd, vec![pattern.to_string()])
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

/// Runs a command of the BullMQ Node driver (`integration-tests/interop/driver.js`)
/// with BullMQ 6.7.0 against `url`/`queue` and returns its JSON output. Panics
/// with a clear line when Node or the npm packages are missing
/// (`npm ci` in `integration-tests/interop`).
pub fn bullmq(command: &str, url: &str, queue: &str, args: serde_json::Value) -> serde_json::Value {
    NodeBullmq::V6_7.bullmq(command, url, queue, args)
}

/// Runs real BullMQ 6.7.0 Workers on `url`/`queue` with `driver.js
/// work-until` until they did what `args` asks (see [`NodeBullmq::work_until`]).
pub fn bullmq_work_until(url: &str, queue: &str, args: serde_json::Value) -> NodeRun {
    NodeBullmq::V6_7.work_until(url, queue, args)
}

/// Runs `node interop/flows.js <command> <url> <queue> <args-json>` (BullMQ's
/// FlowProducer and flow-aware workers, 6.7.0) and returns the JSON it prints.
pub fn node_flows(
    command: &str,
    url: &str,
    queue: &str,
    args: serde_json::Value,
) -> serde_json::Value {
    NodeBullmq::V6_7.flows(command, url, queue, args)
}

/// What a test job does, read from its data; the twin of `interop/behave.js`,
/// so a job behaves the same whichever side's worker takes it.
pub async fn behave(job: &echomq::JobContext) -> Result<serde_json::Value, echomq::ProcessError> {
    use echomq::ProcessError;
    let d = job.data();
    let text = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
    let ret = d.get("ret").cloned().unwrap_or(serde_json::Value::Null);
    match d["mode"].as_str() {
        Some("fail") => Err(ProcessError::failed(text("reason"))),
        Some("fail-until") if job.job().attempts_made < d["n"].as_u64().unwrap_or(0) => {
            Err(ProcessError::failed(text("reason")))
        }
        Some("unrecoverable") => Err(ProcessError::unrecoverable(text("reason"))),
        Some("progress") => {
            job.update_progress(&d["p"])
                .await
                .map_err(|e| ProcessError::failed(e.to_string()))?;
            Ok(ret)
        }
        Some("sleep") => {
            tokio::time::sleep(Duration::from_millis(d["ms"].as_u64().unwrap_or(0))).await;
            Ok(ret)
        }
        _ => Ok(ret),
    }
}

/// A Node script of `integration-tests/interop` running as a child process
/// (`worker.js`, `events.js`), or the Rust `worker_process`: its JSON stdout lines arrive on a channel. It
/// ends cleanly when its stdin is closed ([`NodeChild::finish`]) or at once
/// with SIGKILL ([`NodeChild::kill`]); dropping it kills it.
pub struct NodeChild {
    child: Child,
    lines: json_lines::JsonLines,
}

impl NodeChild {
    /// Starts `node <script> <url> <queue> <opts>` and waits for its
    /// `{"ev":"ready"}` line; BullMQ 6.7.0 (see [`NodeBullmq::spawn`]).
    pub fn spawn(script: &str, url: &str, queue: &str, opts: serde_json::Value) -> NodeChild {
        NodeBullmq::V6_7.spawn(script, url, queue, opts)
    }

    /// Starts the test-support Rust worker process `worker_process` (its path
    /// from `env!("CARGO_BIN_EXE_worker_process")`, known to tests only) with
    /// the same protocol as `worker.js`.
    pub fn spawn_rust_worker(
        binary: &str,
        url: &str,
        queue: &str,
        opts: serde_json::Value,
    ) -> NodeChild {
        let mut cmd = Command::new(binary);
        cmd.args([url, queue, &opts.to_string()]);
        Self::start(cmd)
    }

    pub(crate) fn start_command(cmd: Command) -> NodeChild {
        Self::start(cmd)
    }

    fn start(mut cmd: Command) -> NodeChild {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node is installed / worker_process is built");
        let lines = json_lines::JsonLines::read(&mut child);
        let mut me = NodeChild { child, lines };
        let mut early = Vec::new();
        me.wait_line(
            Duration::from_secs(20),
            json_lines::JsonLines::ready(&mut early),
        );
        me.lines.keep_unread(early);
        me
    }

    /// Waits (blocking) for a line matching `pred` and returns it; panics
    /// after `limit`.
    pub fn wait_line(
        &mut self,
        limit: Duration,
        mut pred: impl FnMut(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(v) = self.lines.next_within(left) else {
                panic!(
                    "node child: no matching line within {limit:?}; seen {:?}",
                    self.lines.seen()
                )
            };
            if pred(&v) {
                return v;
            }
        }
    }

    /// Collects the lines that arrived so far without waiting.
    pub fn drain(&mut self) -> &[serde_json::Value] {
        self.lines.drain()
    }

    /// Closes stdin (the script closes its BullMQ objects) and waits for the
    /// process; returns the `{"ev":"summary"}` line when it printed one.
    pub fn finish(mut self) -> Option<serde_json::Value> {
        drop(self.child.stdin.take());
        let summary = {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut found = None;
            while Instant::now() < deadline {
                match self.lines.next_within(Duration::from_millis(200)) {
                    Ok(v) => {
                        if v["ev"] == "summary" {
                            found = Some(v);
                            break;
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(_) => {}
                }
            }
            found
        };
        let _ = self.child.wait();
        summary
    }

    /// SIGKILL: the process dies mid-whatever, holding its locks.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A supervisor for tests and benches that owns actors and lets them fail
/// without reacting (ractor's default would stop the parent).
pub struct NullSupervisor;

impl ractor::Actor for NullSupervisor {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ractor::ActorRef<()>,
        _: (),
    ) -> Result<(), ractor::ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ractor::ActorRef<()>,
        _: ractor::SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ractor::ActorProcessingErr> {
        Ok(())
    }
}

/// A Worker and its LockManager linked to `supervisor`, with no
/// StalledChecker (for tests that run the stalled check themselves): the set
/// the host spawns (`WorkerSetSpec::spawn_linked`), less its checker.
pub async fn spawn_worker(
    supervisor: ractor::ActorCell,
    args: echomq::WorkerArgs,
) -> Result<
    (
        ractor::ActorRef<echomq::WorkerMsg>,
        ractor::ActorRef<echomq::LockManagerMsg>,
    ),
    ractor::SpawnErr,
> {
    let spec = echomq::WorkerSetSpec {
        worker: args,
        stalled_checker: None,
    };
    let set = spec.spawn_linked(supervisor).await?;
    Ok((set.worker, set.lock_manager))
}

/// Polls `f` every 10 ms until it holds; panics with `what` after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// The consistency audit of `queue` at quiescence (every "Q" check hard,
/// group checks included); panics with the violations.
pub async fn assert_consistent(conn: &echomq::Connection, queue: &str) {
    let opts = echomq::audit::AuditOptions {
        quiescent: true,
        ..Default::default()
    };
    let report = echomq::audit::Audit::new(conn, queue)
        .options(opts)
        .run()
        .await
        .unwrap();
    assert!(
        report.is_consistent(),
        "audit of {queue}: {:?}",
        report.violations
    );
}

pub mod restartable;
pub mod simulated;

/// Reading and driving Redis state directly in tests, with panics on error
/// (a test cannot go on without them).
pub mod state {
    use std::collections::HashMap;

    use fred::prelude::*;
    use fred::types::{ClusterHash, CustomCommand};

    /// Owned field/value pairs.
    pub fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Any command fred has no typed method for.
    pub async fn cmd<R: FromValue>(c: &Client, name: &'static str, args: Vec<String>) -> R {
        let command = CustomCommand::new_static(name, ClusterHash::FirstKey, false);
        c.custom(command, args)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// HGETALL.
    pub async fn hash(c: &Client, key: &str) -> HashMap<String, String> {
        c.hgetall(key).await.unwrap()
    }

    /// The whole list.
    pub async fn list(c: &Client, key: &str) -> Vec<String> {
        c.lrange(key, 0, -1).await.unwrap()
    }

    /// The whole sorted set with scores.
    pub async fn zset(c: &Client, key: &str) -> Vec<(String, f64)> {
        c.zrange(key, 0, -1, None, false, None, true).await.unwrap()
    }

    /// The members of a set, sorted.
    pub async fn members(c: &Client, key: &str) -> Vec<String> {
        let mut m: Vec<String> = c.smembers(key).await.unwrap();
        m.sort();
        m
    }

    /// TYPE.
    pub async fn key_type(c: &Client, key: &str) -> String {
        cmd(c, "TYPE", vec![key.to_string()]).await
    }

    /// EXISTS.
    pub async fn exists(c: &Client, key: &str) -> bool {
        c.exists::<i64, _>(key).await.unwrap() == 1
    }
}
