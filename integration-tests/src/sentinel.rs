//! A real Sentinel deployment for the Sentinel tests: one primary and two
//! replicas (`redis-server --replicaof`), watched by three sentinels
//! (`redis-server --sentinel`, quorum 2, a primary is down after 1 s), all on
//! free loopback ports and killed when dropped.

use std::process::{Child, Command};

use crate::launch::{self, Probe, ServerArgs};
use std::time::{Duration, Instant};

/// The name the sentinels monitor the primary under.
pub const SERVICE: &str = "emq";

struct Proc {
    child: Option<Child>,
    port: u16,
}

/// 1 primary + 2 replicas + 3 sentinels.
pub struct SentinelSet {
    servers: Vec<Proc>,
    sentinels: Vec<Proc>,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    /// Starts everything and waits until every sentinel knows the primary,
    /// both replicas (synced) and the two other sentinels.
    pub fn start() -> SentinelSet {
        let dir = tempfile::tempdir().expect("temp dir for the sentinel set");
        let mut servers: Vec<Proc> = Vec::new();
        while servers.len() < 3 {
            let replica_of = servers.first().map(|p| p.port);
            let (child, port) = launch::start_on_free_port("redis-server", &Probe::Plain, |port| {
                let node_dir = dir.path().join(port.to_string());
                std::fs::create_dir_all(&node_dir).expect("node dir");
                let args =
                    ServerArgs::new(port, &node_dir).args(["--repl-diskless-sync-delay", "0"]);
                match replica_of {
                    Some(primary) => args.args(["--replicaof", "127.0.0.1", &primary.to_string()]),
                    None => args,
                }
            });
            servers.push(Proc {
                child: Some(child),
                port,
            });
        }
        let primary = servers[0].port;
        let mut sentinels: Vec<Proc> = Vec::new();
        while sentinels.len() < 3 {
            let (child, port) =
                launch::start_on_free_port("redis-sentinel", &Probe::Plain, |port| {
                    let conf = dir.path().join(format!("sentinel-{port}.conf"));
                    std::fs::write(
                        &conf,
                        format!(
                            "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
                         sentinel down-after-milliseconds {SERVICE} 1000\n\
                         sentinel failover-timeout {SERVICE} 5000\n\
                         sentinel parallel-syncs {SERVICE} 2\n",
                            dir.path().display()
                        ),
                    )
                    .expect("write the sentinel config");
                    ServerArgs::sentinel(&conf)
                });
            sentinels.push(Proc {
                child: Some(child),
                port,
            });
        }
        let set = SentinelSet {
            servers,
            sentinels,
            _dir: dir,
        };
        set.wait_settled(Duration::from_secs(30));
        set
    }

    /// `redis-sentinel://127.0.0.1:<sentinel>?sentinelServiceName=emq&node=…`
    /// naming all three sentinels.
    pub fn url(&self) -> String {
        let others: Vec<String> = self.sentinels[1..]
            .iter()
            .map(|s| format!("&node=127.0.0.1:{}", s.port))
            .collect();
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE}{}",
            self.sentinels[0].port,
            others.concat()
        )
    }

    /// Runs `redis-cli -p <port> args…` and returns its output.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-cli ({e}): install it (Debian/Ubuntu: `apt-get install redis-tools`)")
            });
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port of the primary, as the first live sentinel reports it.
    pub fn primary(&self) -> u16 {
        let s = self.live_sentinel();
        let out = self.cli(s, &["SENTINEL", "get-master-addr-by-name", SERVICE]);
        out.lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .expect("the sentinels know the primary")
    }

    fn live_sentinel(&self) -> u16 {
        self.sentinels
            .iter()
            .find(|s| s.child.is_some())
            .map(|s| s.port)
            .expect("a live sentinel")
    }

    /// The ports of the live servers holding `key`.
    pub fn holders(&self, key: &str) -> Vec<u16> {
        self.servers
            .iter()
            .filter(|s| s.child.is_some())
            .filter(|s| self.cli(s.port, &["EXISTS", key]).trim() == "1")
            .map(|s| s.port)
            .collect()
    }

    /// One line per server: port, role and key count (for failure messages).
    pub fn describe(&self) -> String {
        self.servers
            .iter()
            .filter(|s| s.child.is_some())
            .map(|s| {
                let role = self.cli(s.port, &["ROLE"]);
                let role: Vec<&str> = role.lines().take(3).collect();
                let keys = self.cli(s.port, &["DBSIZE"]);
                format!("{} {:?} keys={}", s.port, role, keys.trim())
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// `SENTINEL FAILOVER`: a replica is promoted without the primary failing.
    pub fn failover(&self) {
        let out = self.cli(self.live_sentinel(), &["SENTINEL", "FAILOVER", SERVICE]);
        assert!(out.trim() == "OK", "SENTINEL FAILOVER: {out}");
    }

    /// SIGKILLs the redis-server on `port`.
    pub fn kill(&mut self, port: u16) {
        for p in self.servers.iter_mut().chain(self.sentinels.iter_mut()) {
            if p.port == port {
                if let Some(mut c) = p.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
    }

    /// Waits until the primary is not `old` and the new one accepts writes.
    pub fn wait_new_primary(&self, old: u16, limit: Duration) -> u16 {
        let deadline = Instant::now() + limit;
        loop {
            let now = self.primary();
            if now != old && self.cli(now, &["ROLE"]).starts_with("master") {
                return now;
            }
            assert!(Instant::now() < deadline, "no new primary after {limit:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until each live sentinel sees the other live sentinels and the
    /// live replicas, and each live replica is synced.
    pub fn wait_settled(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let live_sentinels = self.sentinels.iter().filter(|s| s.child.is_some()).count();
        loop {
            let primary = self.primary();
            let replicas: Vec<u16> = self
                .servers
                .iter()
                .filter(|s| s.child.is_some() && s.port != primary)
                .map(|s| s.port)
                .collect();
            let synced = replicas.iter().all(|&r| {
                self.cli(r, &["INFO", "replication"])
                    .contains("master_link_status:up")
            });
            let known = self
                .sentinels
                .iter()
                .filter(|s| s.child.is_some())
                .all(|s| {
                    let info = self.cli(s.port, &["SENTINEL", "master", SERVICE]);
                    let field = |name: &str| -> usize {
                        let lines: Vec<&str> = info.lines().collect();
                        lines
                            .iter()
                            .position(|l| l.trim() == name)
                            .and_then(|i| lines.get(i + 1))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0)
                    };
                    field("num-other-sentinels") + 1 >= live_sentinels
                        && field("num-slaves") >= replicas.len()
                });
            if synced && known {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sentinel set not settled after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for p in self.sentinels.iter_mut().chain(self.servers.iter_mut()) {
            if let Some(mut c) = p.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
