//! A `redis-server` that can be stopped and started again on the same port
//! with the same data, for outage tests; or started only later, for tests of
//! a worker that comes up before its Redis.
//!
//! Unlike [`RedisServer`](crate::RedisServer) it persists: an append-only
//! file fsynced on every write, so a stop (SIGKILL, a crash) loses no
//! acknowledged write, and key TTLs (job locks) keep running while it is
//! down, as they would on a real server restarted from its AOF.

use std::process::Child;

use crate::launch::{self, Persistence, Probe, ServerArgs};
use std::time::{Duration, Instant};

/// A persistent `redis-server` on a fixed port; killed when dropped.
pub struct RestartableRedis {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RestartableRedis {
    /// Picks a free port and a data directory; does not start the server.
    pub fn reserve() -> RestartableRedis {
        RestartableRedis {
            port: crate::launch::free_port(),
            dir: tempfile::tempdir().expect("temp dir for redis-server"),
            child: None,
        }
    }

    /// Reserves and starts at once.
    pub fn start_now() -> RestartableRedis {
        let mut r = Self::reserve();
        r.start();
        r
    }

    /// `redis://127.0.0.1:<port>`, valid before the first start.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server process is running.
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the server on its port with its data directory and waits until
    /// it answers PING (after loading its AOF). Panics when it does not
    /// within 10 s (the port taken meanwhile by another process, most likely).
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let mut child = ServerArgs::new(self.port, self.dir.path())
            .persistence(Persistence::AofAlways)
            .spawn();
        if !launch::wait_until_ours(self.port, &mut child, &Probe::Plain) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redis-server did not come up on port {}", self.port);
        }
        self.child = Some(child);
    }

    /// Kills the server (SIGKILL): clients see their connections drop and
    /// new ones refused until [`RestartableRedis::start`].
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RestartableRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits (blocking the thread) until nothing listens on `port` any more.
pub fn wait_until_closed(port: u16, limit: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("port {port} still open after {limit:?}");
}
