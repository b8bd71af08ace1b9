//! The one way the harness starts a `redis-server` (plain, TLS, cluster node,
//! sentinel, restartable, chaos): the common arguments, the process, and the
//! wait until *this* process answers.
//!
//! A port is picked free (bind to port 0, release) and handed to the server,
//! so two tests may pick the same port at once; the second server then fails
//! to bind and exits — but not before its test may have read a PONG from the
//! first one, and two tests would share one Redis (one test's jobs taken by
//! the other's workers). So readiness is not a PONG: it is `INFO server`
//! answering with this child's `process_id`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer after its start.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// The arguments of one `redis-server` process.
#[derive(Clone, Debug)]
pub struct ServerArgs {
    wrapper: Vec<String>,
    args: Vec<String>,
}

/// What a server keeps on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing: a restart is a reset.
    None,
    /// An append-only file fsynced on every write: a SIGKILL loses no
    /// acknowledged write.
    AofAlways,
    /// An append-only file fsynced once a second (Redis's default).
    AofEverysec,
}

impl ServerArgs {
    /// A server listening on loopback `port` with its data in `dir`, logging
    /// warnings only, with `maxmemory-policy noeviction` (EchoMQ refuses
    /// evicting servers) and no persistence.
    pub fn new(port: u16, dir: &Path) -> Self {
        ServerArgs {
            wrapper: Vec::new(),
            args: vec![
                "--port".into(),
                port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--dir".into(),
                dir.to_str().expect("utf-8 temp path").into(),
                "--loglevel".into(),
                "warning".into(),
                "--maxmemory-policy".into(),
                "noeviction".into(),
            ],
        }
        .persistence(Persistence::None)
    }

    /// A sentinel from its configuration file (which names its own port).
    pub fn sentinel(conf: &Path) -> Self {
        ServerArgs {
            wrapper: Vec::new(),
            args: vec![
                conf.to_str().expect("utf-8 temp path").into(),
                "--sentinel".into(),
            ],
        }
    }

    /// What the server keeps on disk (replaces the previous choice).
    pub fn persistence(mut self, p: Persistence) -> Self {
        let (aof, fsync) = match p {
            Persistence::None => ("no", "everysec"),
            Persistence::AofAlways => ("yes", "always"),
            Persistence::AofEverysec => ("yes", "everysec"),
        };
        self.set("--save", "");
        self.set("--appendonly", aof);
        self.set("--appendfsync", fsync);
        self
    }

    /// More arguments; a flag given again replaces the earlier value
    /// (`--maxmemory-policy volatile-lru` replaces `noeviction`).
    pub fn args<I, S>(mut self, extra: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let extra: Vec<String> = extra.into_iter().map(|s| s.as_ref().to_owned()).collect();
        let mut i = 0;
        while i < extra.len() {
            let flag = &extra[i];
            let value = extra.get(i + 1).filter(|v| !v.starts_with("--"));
            match value {
                Some(v) if flag.starts_with("--") => {
                    self.set(flag, v);
                    i += 2;
                }
                _ => {
                    self.args.push(flag.clone());
                    i += 1;
                }
            }
        }
        self
    }

    /// Runs the server as the last argument of `wrapper` (`valgrind
    /// --tool=callgrind …`).
    pub fn wrapped(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|s| s.to_string()).collect();
        self
    }

    fn set(&mut self, flag: &str, value: &str) {
        match self.args.iter().position(|a| a == flag) {
            Some(at) if at + 1 < self.args.len() => self.args[at + 1] = value.to_owned(),
            _ => {
                self.args.push(flag.to_owned());
                self.args.push(value.to_owned());
            }
        }
    }

    /// Starts the process (output discarded).
    pub fn spawn(&self) -> Child {
        let binary = redis_server_binary();
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        command
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()))
    }
}

/// How to ask a server who it is.
#[derive(Clone, Debug)]
pub enum Probe {
    /// Plain TCP.
    Plain,
    /// TLS only: through `redis-cli` with these arguments (`--tls --cacert …`).
    Tls(Vec<String>),
}

/// Waits until the server on `port` answers and is `child` (its `INFO
/// server` names the child's pid). False when the child exited (its port was
/// most likely taken) or did not answer in time.
pub fn wait_until_ours(port: u16, child: &mut Child, probe: &Probe) -> bool {
    let deadline = Instant::now() + READY_WITHIN;
    let pid = child.id();
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        let info = match probe {
            Probe::Plain => info_plain(port),
            Probe::Tls(cli) => info_tls(port, cli),
        };
        if let Some(info) = info {
            return match process_id(&info) {
                Some(p) if p == pid => true,
                // Another test's server on this port: ours cannot bind it.
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    false
                }
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Starts a server on a fresh free port until one comes up as itself (5
/// tries); `args` builds the arguments for a port.
pub fn start_on_free_port(
    what: &str,
    probe: &Probe,
    mut args: impl FnMut(u16) -> ServerArgs,
) -> (Child, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut child = args(port).spawn();
        if wait_until_ours(port, &mut child, probe) {
            return (child, port);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("{what} did not start on a free port after 5 attempts");
}

fn info_plain(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"INFO server\r\n").ok()?;
    // A bulk string: `$<len>\r\n<len bytes>\r\n`.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        s.read_exact(&mut byte).ok()?;
        head.push(byte[0]);
        if head.len() > 32 {
            return None;
        }
    }
    let text = std::str::from_utf8(&head).ok()?;
    let len: usize = text.strip_prefix('$')?.trim_end().parse().ok()?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

fn info_tls(port: u16, cli: &[String]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(cli)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "INFO", "server"])
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run redis-cli ({e}): install it (Debian/Ubuntu: `apt-get install redis-tools`)")
        });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.contains("process_id:").then_some(text)
}

fn process_id(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A free loopback port, as the kernel hands one out (free now, not
/// reserved: see the module doc).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The `redis-server` binary: `$REDIS_SERVER`, else the first on `PATH`.
pub fn redis_server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("REDIS_SERVER") {
        return PathBuf::from(p);
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':').chain([
        "/usr/bin",
        "/usr/local/bin",
        "/usr/sbin",
    ]) {
        let candidate = PathBuf::from(dir).join("redis-server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("redis-server not found: install it (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`) or set REDIS_SERVER");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_given_again_replaces_its_value() {
        let a = ServerArgs::new(1, Path::new("/tmp")).args(["--maxmemory-policy", "volatile-lru"]);
        let at = a
            .args
            .iter()
            .position(|x| x == "--maxmemory-policy")
            .unwrap();
        assert_eq!(a.args[at + 1], "volatile-lru");
        assert_eq!(
            a.args.iter().filter(|x| *x == "--maxmemory-policy").count(),
            1
        );
        let b = a.persistence(Persistence::AofAlways);
        let at = b.args.iter().position(|x| x == "--appendfsync").unwrap();
        assert_eq!(b.args[at + 1], "always");
    }
}
