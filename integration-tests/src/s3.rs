//! A real S3-compatible server for the offload tests: moto's S3 in server
//! mode (`python -m moto.server`), from the venv `just _ensure-python-packages`
//! fills in integration-tests/s3/.venv. It accepts any credentials.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::launch::free_port;

/// A running moto server on a loopback port; killed when dropped.
pub struct S3Server {
    child: Child,
    port: u16,
}

/// The venv's interpreter, when moto is installed there.
fn installed() -> Option<PathBuf> {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("s3/.venv/bin/python");
    let ok = python.is_file()
        && Command::new(&python)
            .args(["-c", "import moto.server"])
            .output()
            .is_ok_and(|o| o.status.success());
    ok.then_some(python)
}

impl S3Server {
    /// Starts a server, or `None` with a printed line when moto is not
    /// installed (a panic under `CI=true`, where it must be).
    pub fn start() -> Option<S3Server> {
        let Some(python) = installed() else {
            let why = "moto is not installed in integration-tests/s3/.venv: run `just _ensure-python-packages`";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{why}");
            }
            eprintln!("SKIPPED: {why}");
            return None;
        };
        // A port free when asked may be taken before moto binds it: try again.
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new(&python)
                .args([
                    "-m",
                    "moto.server",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the venv's python runs");
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Some(S3Server { child, port });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("moto's S3 server did not start on a loopback port");
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates a bucket: one unsigned HTTP/1.0 PUT, which moto takes.
    pub fn create_bucket(&self, name: &str) {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("moto answers");
        write!(
            s,
            "PUT /{name} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200"),
            "create bucket: {reply}"
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
