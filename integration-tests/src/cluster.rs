//! A real Redis Cluster for the cluster tests: 3 primaries and 3 replicas of
//! `redis-server --cluster-enabled yes` on free loopback ports, joined with
//! `redis-cli --cluster create … --cluster-replicas 1`, with a short
//! `cluster-node-timeout` so that a failover takes a few seconds. Every node
//! is killed when the cluster is dropped.

use std::path::PathBuf;
use std::process::{Child, Command};

use crate::launch::{self, Probe, ServerArgs};
use std::time::{Duration, Instant};

/// Milliseconds without an answer before a node is marked failed.
pub const NODE_TIMEOUT_MS: u64 = 1000;

struct Node {
    child: Option<Child>,
    port: u16,
    bus: u16,
    dir: PathBuf,
    tls: Option<TlsFiles>,
}

/// The PEM files of a TLS cluster (see [`RedisCluster::start_tls`]).
#[derive(Clone, Debug)]
struct TlsFiles {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl TlsFiles {
    fn of(certs: &crate::tls::Certs) -> TlsFiles {
        TlsFiles {
            ca: certs.ca(),
            server_cert: certs.path("server.pem"),
            server_key: certs.path("server.key"),
            client_cert: certs.client_cert(),
            client_key: certs.client_key(),
        }
    }

    /// `redis-cli`'s flags to reach a node.
    fn cli_args(&self) -> Vec<String> {
        let p = |p: &PathBuf| p.to_str().expect("utf-8 temp path").to_owned();
        vec![
            "--tls".into(),
            "--cacert".into(),
            p(&self.ca),
            "--cert".into(),
            p(&self.client_cert),
            "--key".into(),
            p(&self.client_key),
        ]
    }
}

impl Node {
    /// Starts the node's process (again, after a kill: its `nodes.conf`
    /// makes it rejoin the cluster).
    fn spawn(&self) -> Child {
        let mut args = ServerArgs::new(self.port, &self.dir);
        if let Some(t) = &self.tls {
            let p = |p: &PathBuf| p.to_str().expect("utf-8 temp path").to_owned();
            // TLS only, on the client port, the cluster bus and the
            // replication links; nodes present the client certificate
            // to each other, clients may present one.
            args = args
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
                .args(["--tls-cert-file", &p(&t.server_cert)])
                .args(["--tls-key-file", &p(&t.server_key)])
                .args(["--tls-client-cert-file", &p(&t.client_cert)])
                .args(["--tls-client-key-file", &p(&t.client_key)])
                .args(["--tls-ca-cert-file", &p(&t.ca)])
                .args(["--tls-auth-clients", "optional"]);
        }
        args.args(["--cluster-port", &self.bus.to_string()])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            // A replica can take over only once it has synced; Redis
            // waits 5 s by default before the first full sync.
            .args(["--repl-diskless-sync-delay", "0"])
            .spawn()
    }

    /// Whether this node's process answers on its port; false when it exited
    /// (most likely its port was taken).
    fn wait_until_listening(&self, child: &mut Child) -> bool {
        let probe = match &self.tls {
            None => Probe::Plain,
            Some(t) => Probe::Tls(t.cli_args()),
        };
        launch::wait_until_ours(self.port, child, &probe)
    }
}

/// What [`RedisCluster::move_slot_of`] did.
#[derive(Debug, Clone)]
pub struct SlotMove {
    /// The primary that owned the slot.
    pub from: u16,
    /// The primary that owns it now.
    pub to: u16,
    /// Keys moved.
    pub keys: usize,
    /// `MIGRATE` commands it took.
    pub migrates: usize,
    /// From `MIGRATING` to the last `MIGRATE`.
    pub migrating: Duration,
}

/// A six-node cluster (3 primaries + 3 replicas).
pub struct RedisCluster {
    nodes: Vec<Node>,
    tls: Option<TlsFiles>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts the six nodes, creates the cluster and waits until every node
    /// says `cluster_state:ok`.
    ///
    /// Panics with a clear line when `redis-server` or `redis-cli` is missing.
    pub fn start() -> RedisCluster {
        Self::start_with(None)
    }

    /// [`RedisCluster::start`] with every node speaking TLS only (client
    /// port, cluster bus and replication), its certificate from `certs`
    /// (issued for 127.0.0.1); reach it with `rediss-cluster://` and the CA.
    pub fn start_tls(certs: &crate::tls::Certs) -> RedisCluster {
        Self::start_with(Some(TlsFiles::of(certs)))
    }

    fn start_with(tls: Option<TlsFiles>) -> RedisCluster {
        let dir = tempfile::tempdir().expect("temp dir for the cluster");
        let mut nodes = Vec::new();
        while nodes.len() < 6 {
            let (port, bus) = (launch::free_port(), launch::free_port());
            if port == bus || nodes.iter().any(|n: &Node| n.port == port || n.port == bus) {
                continue;
            }
            let node_dir: PathBuf = dir.path().join(port.to_string());
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let node = Node {
                child: None,
                port,
                bus,
                dir: node_dir,
                tls: tls.clone(),
            };
            let mut child = node.spawn();
            if node.wait_until_listening(&mut child) {
                nodes.push(Node {
                    child: Some(child),
                    ..node
                });
            } else {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let cluster = RedisCluster {
            nodes,
            tls,
            _dir: dir,
        };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(cluster.tls.iter().flat_map(TlsFiles::cli_args))
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-cli ({e}): install it (Debian/Ubuntu: `apt-get install redis-tools`)")
            });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.wait_healthy(Duration::from_secs(30));
        cluster.wait_replicas_synced(Duration::from_secs(30));
        cluster
    }

    /// Waits until the roles have settled — half the nodes say `role:master`
    /// of themselves, the other half `role:slave` with their link up (a
    /// replica that never synced cannot be promoted) — and every node's view
    /// of the cluster names the same primaries. Right after `--cluster
    /// create` a node meant to be a replica still answers as a master for a
    /// moment; a slot moved to it then fails ("use SETSLOT only with masters").
    pub fn wait_replicas_synced(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let half = self.nodes.len() / 2;
        loop {
            let mut masters = Vec::new();
            let mut synced_replicas = 0;
            for &p in &self.ports() {
                let info = self.cli(p, &["INFO", "replication"]);
                if info.contains("role:master") {
                    masters.push(p);
                } else if info.contains("master_link_status:up") {
                    synced_replicas += 1;
                }
            }
            masters.sort_unstable();
            let views_agree = masters.len() == half
                && synced_replicas == half
                && self.ports().iter().all(|&p| {
                    let mut seen = self.primaries_seen_by(p);
                    seen.sort_unstable();
                    seen == masters
                });
            if views_agree {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster roles not settled after {limit:?}: masters {masters:?}, synced replicas {synced_replicas}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis-cluster://127.0.0.1:<first port>?node=127.0.0.1:<port>&…`
    /// with every node as a seed, so a client that connects after one node
    /// died still finds the cluster (fred and the interop driver read it).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .skip(1)
            .map(|n| format!("node=127.0.0.1:{}", n.port))
            .collect();
        let scheme = if self.tls.is_some() {
            "rediss-cluster"
        } else {
            "redis-cluster"
        };
        format!(
            "{scheme}://127.0.0.1:{}?{}",
            self.nodes[0].port,
            seeds.join("&")
        )
    }

    /// `redis-cluster://127.0.0.1:<port>` with the first node as the only seed.
    pub fn single_seed_url(&self) -> String {
        format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port)
    }

    /// The ports of the live nodes.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// Runs `redis-cli -p <port> args…` and returns its output.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(self.tls.iter().flat_map(TlsFiles::cli_args))
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port of the primary that serves `key`'s slot, as a live node sees it.
    pub fn primary_of(&self, key: &str) -> u16 {
        self.try_primary_of(key)
            .unwrap_or_else(|| panic!("no primary owns the slot of {key}"))
    }

    /// Waits until a primary other than `old` serves `key`'s slot (a replica
    /// was promoted) and returns it; panics after `limit`.
    pub fn wait_new_primary(&self, key: &str, old: u16, limit: Duration) -> u16 {
        let deadline = Instant::now() + limit;
        loop {
            match self.try_primary_of(key) {
                Some(p) if p != old => return p,
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "no replica took over the slot of {key} from {old} in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn try_primary_of(&self, key: &str) -> Option<u16> {
        let any = self.ports()[0];
        let slot = self.cli(any, &["CLUSTER", "KEYSLOT", key]);
        let slot: u16 = slot
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers a number");
        for line in self.cli(any, &["CLUSTER", "NODES"]).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let owns = f[8..].iter().any(|range| match range.split_once('-') {
                Some((a, b)) => {
                    (a.parse().unwrap_or(u16::MAX)..=b.parse().unwrap_or(0)).contains(&slot)
                }
                None => range.parse::<u16>().ok() == Some(slot),
            });
            if owns {
                let addr = f[1].split('@').next().unwrap_or_default();
                return addr.rsplit(':').next().and_then(|p| p.parse().ok());
            }
        }
        None
    }

    /// The primaries' ports, as a live node sees them.
    pub fn primaries(&self) -> Vec<u16> {
        // Each candidate confirms its role itself: another node's view of
        // it may lag behind a promotion or a demotion.
        self.primaries_seen_by(self.ports()[0])
            .into_iter()
            .filter(|&p| self.cli(p, &["ROLE"]).lines().next() == Some("master"))
            .collect()
    }

    /// The healthy primaries in the cluster view of the node on `port`.
    fn primaries_seen_by(&self, port: u16) -> Vec<u16> {
        self.cli(port, &["CLUSTER", "NODES"])
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 || !f[2].contains("master") || f[2].contains("fail") {
                    return None;
                }
                let addr = f[1].split('@').next()?;
                addr.rsplit(':').next()?.parse().ok()
            })
            .collect()
    }

    /// Migrates the slot of `key` to the primary on `to`, live, as
    /// `redis-cli --cluster reshard --cluster-pipeline <batch>` does:
    /// IMPORTING/MIGRATING, `MIGRATE … KEYS` of its keys `batch` at a time
    /// until none is left, then `SETSLOT … NODE` on the target, the source
    /// and the other primaries, in that order. Returns how many keys moved
    /// and in how many `MIGRATE`s.
    pub fn move_slot_of(&self, key: &str, to: u16, batch: usize) -> SlotMove {
        let from = self.primary_of(key);
        assert_ne!(from, to, "the slot of {key} is already on {to}");
        let slot = self
            .cli(from, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .to_owned();
        let from_id = self.cli(from, &["CLUSTER", "MYID"]).trim().to_owned();
        let to_id = self.cli(to, &["CLUSTER", "MYID"]).trim().to_owned();
        let ok = |out: String, what: &str| assert!(out.trim() == "OK", "{what}: {out}");
        ok(
            self.cli(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
            "IMPORTING",
        );
        ok(
            self.cli(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
            "MIGRATING",
        );
        let started = Instant::now();
        let (mut keys_moved, mut migrates) = (0, 0);
        let count = batch.max(1).to_string();
        loop {
            let keys = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot, &count]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            let out = self.cli(from, &args);
            assert!(
                out.trim() == "OK" || out.trim() == "NOKEY",
                "MIGRATE: {out}"
            );
            keys_moved += keys.len();
            migrates += 1;
        }
        let migrating = started.elapsed();
        // The target first: once it owns the slot it stops sending MOVED
        // back to the source; then the source, which starts answering MOVED.
        let mut order = vec![to, from];
        order.extend(
            self.primaries()
                .into_iter()
                .filter(|p| *p != to && *p != from),
        );
        for p in order {
            ok(
                self.cli(p, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
                "SETSLOT NODE",
            );
        }
        SlotMove {
            from,
            to,
            keys: keys_moved,
            migrates,
            migrating,
        }
    }

    /// Starts the node on `port` again after [`RedisCluster::kill`]: with
    /// its `nodes.conf` it rejoins, as a replica of the node that took its
    /// slots over. Waits until it listens.
    pub fn restart(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster");
        assert!(node.child.is_none(), "node {port} is running");
        let mut child = node.spawn();
        assert!(
            node.wait_until_listening(&mut child),
            "node {port} did not come back"
        );
        node.child = Some(child);
    }

    /// SIGKILLs the node on `port` (a crash; its replica takes over after
    /// the node timeout).
    pub fn kill(&mut self, port: u16) {
        for n in &mut self.nodes {
            if n.port == port {
                if let Some(mut c) = n.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
    }

    /// Waits until every live node reports `cluster_state:ok` and knows the
    /// same set of primaries serving all slots.
    pub fn wait_healthy(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ok = self.ports().iter().all(|&p| {
                let info = self.cli(p, &["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster not healthy after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
