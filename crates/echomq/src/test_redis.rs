//! A throwaway `redis-server` for the crate's own unit tests, the ones that
//! need a crate-private type against a real server (the finisher's group
//! commit). The integration harness (`echomq-integration-tests`) has the
//! full launcher; it depends on this crate, so it cannot be used here.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::connection::pool::Connection;

/// A `redis-server` on a loopback port, killed when dropped.
pub(crate) struct TestRedis {
    child: Child,
    port: u16,
}

impl TestRedis {
    /// Starts a server with persistence off; panics when none will start.
    pub(crate) fn start() -> TestRedis {
        for _ in 0..5 {
            // The OS picks a free port; a race with another process is
            // possible between here and the server's bind, hence the retries.
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on the PATH (the README installs it)");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return TestRedis { child, port };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start on a free port after 5 attempts");
    }

    /// A connection with the scripts loaded.
    pub(crate) async fn connect(&self) -> Connection {
        Connection::connect_url(&format!("redis://127.0.0.1:{}", self.port))
            .await
            .expect("connect to the test redis-server")
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
