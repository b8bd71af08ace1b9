//! The faulted `redis-server` of one scenario: its own port and directory, a
//! persistence mode, the debug command enabled, and a PID the scenario can
//! signal (SIGSTOP, SIGCONT, SIGKILL) and restart on the same data.

use std::process::Child;
use std::time::Duration;

use fred::prelude::{Builder, Client, ClientLike, Config};

use crate::launch::{self, Probe, ServerArgs};

pub use crate::launch::Persistence;

/// A scenario's redis-server; killed when dropped.
pub struct ChaosRedis {
    port: u16,
    dir: tempfile::TempDir,
    persistence: Persistence,
    extra: Vec<String>,
    child: Option<Child>,
}

impl ChaosRedis {
    /// Starts a server with `persistence` and extra `redis-server` arguments.
    pub fn start(persistence: Persistence, extra: &[&str]) -> ChaosRedis {
        let mut r = ChaosRedis {
            port: crate::launch::free_port(),
            dir: tempfile::tempdir().expect("temp dir for redis-server"),
            persistence,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        r.boot();
        r
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The PID of the running server.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// A plain fred client that reconnects on its own.
    pub async fn client(&self) -> Client {
        let client = Builder::from_config(Config::from_url(&self.url()).expect("url"))
            .with_connection_config(|c| {
                c.connection_timeout = Duration::from_secs(2);
            })
            .with_performance_config(|p| {
                p.default_command_timeout = Duration::from_secs(10);
            })
            .set_policy(fred::types::config::ReconnectPolicy::new_constant(0, 100))
            .build()
            .expect("client");
        client.init().await.expect("connect plain client");
        client
    }

    /// Starts the server (again) on its port and data directory.
    pub fn boot(&mut self) {
        assert!(self.child.is_none(), "already running");
        for attempt in 0..3 {
            let mut child = ServerArgs::new(self.port, self.dir.path())
                .persistence(self.persistence)
                .args(["--enable-debug-command", "local"])
                .args(&self.extra)
                .spawn();
            if launch::wait_until_ours(self.port, &mut child, &Probe::Plain) {
                self.child = Some(child);
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(200 * (attempt + 1)));
        }
        panic!("redis-server did not come up on port {}", self.port);
    }

    /// SIGKILL: a crash; clients see their connections drop.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to the server.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            super::fleet::signal(pid, signal);
        }
    }

    /// SIGSTOP, then waits (up to 2 s) until the kernel reports the server
    /// stopped; false when it never did: the fault did not happen.
    pub fn freeze(&self) -> bool {
        self.signal("STOP");
        self.wait_state(true)
    }

    /// SIGCONT, then waits (up to 2 s) until the server runs again.
    pub fn thaw(&self) -> bool {
        self.signal("CONT");
        self.wait_state(false)
    }

    fn wait_state(&self, stopped: bool) -> bool {
        let Some(pid) = self.pid() else {
            return false;
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            if super::fleet::is_stopped(pid) == Some(stopped) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ChaosRedis {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill9();
    }
}
