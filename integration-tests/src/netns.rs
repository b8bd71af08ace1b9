//! Real network faults between a worker process and Redis: the worker runs
//! in a network namespace of its own, joined to the root namespace (where
//! Redis listens) by a veth pair with a /30 of its own. Faults are applied
//! inside that namespace with the kernel's packet filter (`iptables`: a
//! silent DROP, both directions or one, or random loss) and with `tc netem`
//! on both ends of the pair (latency, loss, reordering), and cleared again.
//!
//! Needs root, `ip` (iproute2) and `iptables`; netem also needs the kernel's
//! `sch_netem`. [`support`] and [`netem_support`] say why not when they
//! cannot work, so a test can skip with one line.
//!
//! Names are unique per process and per namespace (`emq-<pid>-<n>`, host
//! interface `emq<slot>`), so tests may run in parallel, in one process or
//! many; the slot is claimed by creating its interface, which the kernel
//! does atomically. [`Netns`]'s `Drop` removes everything it made, and a
//! namespace left by a process that died without unwinding is removed by
//! the next [`Netns::create`].

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// Which packets between the worker and Redis a fault touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Both ways.
    Both,
    /// The worker's requests (and its ACKs) only: Redis hears nothing.
    WorkerToRedis,
    /// Redis's replies (and its ACKs) only: commands still reach Redis and
    /// run there, the worker never hears the answers; its sockets stay open.
    RedisToWorker,
}

impl Direction {
    /// A short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Direction::Both => "both directions",
            Direction::WorkerToRedis => "worker → Redis only",
            Direction::RedisToWorker => "Redis → worker only",
        }
    }
}

/// The interface name inside the namespace.
const INNER_IF: &str = "veth0";
/// Slots (a /30 each) in 10.213.0.0/16.
const SLOTS: u32 = 1024;
/// A fresh namespace name per [`Netns::create`] in this process.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace joined to the root namespace by a veth pair, with
/// the faults applied to it; removed (with every process still in it) when
/// dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
    host_if: String,
    host_ip: Ipv4Addr,
    ns_ip: Ipv4Addr,
}

/// Why this machine cannot make namespaces, or `Ok` when it can; probed
/// once per process (a namespace made and removed).
pub fn support() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            if !is_root() {
                return Err("not root (network namespaces and packet filters need root)".into());
            }
            for tool in ["ip", "iptables"] {
                if !on_path(tool) {
                    return Err(format!(
                        "`{tool}` is not installed (Debian: apt-get install iproute2 iptables)"
                    ));
                }
            }
            let ns = Netns::create()?;
            ns.iptables(&["-L", "INPUT", "-n"])
                .map_err(|e| format!("iptables does not work in a namespace: {e}"))?;
            Ok(())
        })
        .clone()
}

/// Why `tc netem` cannot be used here, or `Ok`; probed once per process on
/// a namespace of its own (after `modprobe sch_netem` where modprobe exists).
pub fn netem_support() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            support()?;
            if !on_path("tc") {
                return Err("`tc` is not installed (Debian: apt-get install iproute2)".into());
            }
            let ns = Netns::create()?;
            let first = ns.netem(&["delay", "1ms"]);
            if first.is_ok() {
                return Ok(());
            }
            let modprobe = on_path("modprobe");
            if modprobe
                && run(Command::new("modprobe").arg("sch_netem")).is_ok()
                && ns.netem(&["delay", "1ms"]).is_ok()
            {
                return Ok(());
            }
            // The tool's own words, without the command line before them.
            let why = first.err().unwrap_or_default();
            let said = why.rsplit("\": ").next().unwrap_or(&why).trim();
            Err(format!(
                "the kernel has no sch_netem (tc qdisc … netem: {said}; modprobe sch_netem: {})",
                if modprobe {
                    "did not help"
                } else {
                    "not installed"
                }
            ))
        })
        .clone()
}

/// True when this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether a namespace test can run here. When it cannot, prints one line
/// saying why and returns false, except under `CI=true` on a root machine,
/// where the tests must run: there it panics with the reason (the CI script
/// installs iproute2 and iptables).
pub fn available_or_skip(test: &str) -> bool {
    match support() {
        Ok(()) => true,
        Err(why) if is_root() && std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test}: CI=true as root, so network namespaces must work here, but: {why}")
        }
        Err(why) => {
            skip_line(test, &why);
            false
        }
    }
}

/// Like [`available_or_skip`], for a test that needs netem as well; a
/// kernel without sch_netem skips it (with its line) even under CI.
pub fn netem_or_skip(test: &str) -> bool {
    if !available_or_skip(test) {
        return false;
    }
    match netem_support() {
        Ok(()) => true,
        Err(why) => {
            skip_line(test, &why);
            false
        }
    }
}

fn skip_line(test: &str, why: &str) {
    use std::io::Write;
    // Straight to the stream: the test harness captures `eprintln!` of a
    // passing test, and a skip must be seen.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

impl Netns {
    /// Makes a namespace with its veth pair up and addressed; removes the
    /// namespaces of processes that died before they could.
    pub fn create() -> Result<Netns, String> {
        remove_stale();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("emq-{pid}-{n}");
        run(Command::new("ip").args(["netns", "add", &name]))?;
        // From here on, Drop removes whatever was made.
        let mut ns = Netns {
            name,
            host_if: String::new(),
            host_ip: Ipv4Addr::UNSPECIFIED,
            ns_ip: Ipv4Addr::UNSPECIFIED,
        };
        let start = (pid.wrapping_mul(7).wrapping_add(n)) % SLOTS;
        let mut claimed = None;
        for i in 0..SLOTS {
            let slot = (start + i) % SLOTS;
            let host_if = format!("emq{slot}");
            // Both ends at once, the inner one straight into the namespace:
            // there is never a half-made pair to leak.
            let made = run(Command::new("ip").args([
                "link", "add", &host_if, "type", "veth", "peer", "name", INNER_IF, "netns",
                &ns.name,
            ]));
            match made {
                Ok(_) => {
                    claimed = Some((slot, host_if));
                    break;
                }
                Err(e) if e.contains("File exists") => continue,
                Err(e) => return Err(e),
            }
        }
        let (slot, host_if) = claimed.ok_or("every veth slot (emq0…emq1023) is taken")?;
        let base = u32::from(Ipv4Addr::new(10, 213, 0, 0)) + slot * 4;
        ns.host_if = host_if;
        ns.host_ip = Ipv4Addr::from(base + 1);
        ns.ns_ip = Ipv4Addr::from(base + 2);
        let host = format!("{}/30", ns.host_ip);
        let inner = format!("{}/30", ns.ns_ip);
        run(Command::new("ip").args(["addr", "add", &host, "dev", &ns.host_if]))?;
        run(Command::new("ip").args(["link", "set", &ns.host_if, "up"]))?;
        let n = ns.name.clone();
        run(Command::new("ip").args(["-n", &n, "addr", "add", &inner, "dev", INNER_IF]))?;
        run(Command::new("ip").args(["-n", &n, "link", "set", INNER_IF, "up"]))?;
        run(Command::new("ip").args(["-n", &n, "link", "set", "lo", "up"]))?;
        Ok(ns)
    }

    /// The namespace's name (for `ip netns exec`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The root namespace's end of the pair (an interface name).
    pub fn host_if(&self) -> &str {
        &self.host_if
    }

    /// The root namespace's end of the pair: where Redis must listen.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// The namespace's end: where the worker's own endpoints are reached.
    pub fn ns_ip(&self) -> Ipv4Addr {
        self.ns_ip
    }

    /// `ip netns exec <name> <program>`: a command run inside the
    /// namespace (`ip` enters it and execs the program, so the child's PID is
    /// the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    fn iptables(&self, args: &[&str]) -> Result<String, String> {
        run(self.command("iptables").arg("-w").args(args))
    }

    /// The filter rules of `dir` for the TCP traffic with Redis's `port`,
    /// as (chain, match arguments).
    fn matches(&self, port: u16, dir: Direction) -> Vec<(&'static str, Vec<String>)> {
        let redis = self.host_ip.to_string();
        let port = port.to_string();
        let out = (
            "OUTPUT",
            vec![
                "-d".into(),
                redis.clone(),
                "-p".into(),
                "tcp".into(),
                "--dport".into(),
                port.clone(),
            ],
        );
        let inp = (
            "INPUT",
            vec![
                "-s".into(),
                redis,
                "-p".into(),
                "tcp".into(),
                "--sport".into(),
                port,
            ],
        );
        match dir {
            Direction::Both => vec![out, inp],
            Direction::WorkerToRedis => vec![out],
            Direction::RedisToWorker => vec![inp],
        }
    }

    /// Silently drops (no RST, no ICMP) the TCP packets with Redis's `port`
    /// going `dir`, existing connections and new ones alike.
    pub fn drop_tcp(&self, port: u16, dir: Direction) -> Result<(), String> {
        for (chain, m) in self.matches(port, dir) {
            let mut args: Vec<&str> = vec!["-A", chain];
            args.extend(m.iter().map(String::as_str));
            args.extend(["-j", "DROP"]);
            self.iptables(&args)?;
        }
        Ok(())
    }

    /// Refuses the worker's TCP traffic to Redis's `port` with a reset (RST):
    /// every call and every connection attempt fails at once, as when Redis
    /// is down.
    pub fn reset_tcp(&self, port: u16) -> Result<(), String> {
        for (chain, m) in self.matches(port, Direction::WorkerToRedis) {
            let mut args: Vec<&str> = vec!["-A", chain];
            args.extend(m.iter().map(String::as_str));
            args.extend(["-j", "REJECT", "--reject-with", "tcp-reset"]);
            self.iptables(&args)?;
        }
        Ok(())
    }

    /// Drops each TCP packet with Redis's `port` going `dir` with
    /// `probability` (the filter's `statistic` match: real loss, without
    /// netem).
    pub fn lose_tcp(&self, port: u16, dir: Direction, probability: f64) -> Result<(), String> {
        let p = format!("{probability:.4}");
        for (chain, m) in self.matches(port, dir) {
            let mut args: Vec<&str> = vec!["-A", chain];
            args.extend(m.iter().map(String::as_str));
            args.extend([
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ]);
            self.iptables(&args)?;
        }
        Ok(())
    }

    /// Packets dropped so far by the rules of [`drop_tcp`](Self::drop_tcp)
    /// and [`lose_tcp`](Self::lose_tcp) (the filter's own counters).
    pub fn dropped(&self) -> Result<u64, String> {
        let mut n = 0;
        for chain in ["INPUT", "OUTPUT"] {
            let listing = self.iptables(&["-L", chain, "-n", "-v", "-x"])?;
            n += listing
                .lines()
                .filter(|l| matches!(l.split_whitespace().nth(2), Some("DROP" | "REJECT")))
                .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                .sum::<u64>();
        }
        Ok(n)
    }

    /// Removes every filter rule; returns what they had dropped.
    pub fn clear_filter(&self) -> Result<u64, String> {
        let dropped = self.dropped()?;
        for chain in ["INPUT", "OUTPUT"] {
            self.iptables(&["-F", chain])?;
        }
        Ok(dropped)
    }

    /// `tc qdisc replace … root netem <args>` on both ends of the pair, so
    /// both directions get it (`["delay", "100ms", "20ms", "reorder", "25%"]`).
    pub fn netem(&self, args: &[&str]) -> Result<(), String> {
        let qdisc = |c: &mut Command, dev: &str| {
            c.args(["qdisc", "replace", "dev", dev, "root", "netem"])
                .args(args);
        };
        let mut inner = self.command("tc");
        qdisc(&mut inner, INNER_IF);
        run(&mut inner)?;
        let mut host = Command::new("tc");
        qdisc(&mut host, &self.host_if);
        run(&mut host)?;
        Ok(())
    }

    /// Packets netem dropped on both ends (`tc -s qdisc show`).
    pub fn netem_dropped(&self) -> Result<u64, String> {
        let inner = run(self
            .command("tc")
            .args(["-s", "qdisc", "show", "dev", INNER_IF]))?;
        let host = run(Command::new("tc").args(["-s", "qdisc", "show", "dev", &self.host_if]))?;
        Ok(qdisc_dropped(&inner) + qdisc_dropped(&host))
    }

    /// Removes netem from both ends (no error when there was none).
    pub fn clear_netem(&self) {
        let _ = run(self
            .command("tc")
            .args(["qdisc", "del", "dev", INNER_IF, "root"]));
        let _ = run(Command::new("tc").args(["qdisc", "del", "dev", &self.host_if, "root"]));
    }

    /// PIDs of the processes inside the namespace.
    pub fn pids(&self) -> Vec<u32> {
        run(Command::new("ip").args(["netns", "pids", &self.name]))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Only this namespace's own processes: children this test started in it.
        for pid in self.pids() {
            crate::chaos::fleet::signal(pid, "KILL");
        }
        if !self.host_if.is_empty() {
            // Removes both ends at once, even while the namespace lingers.
            let _ = run(Command::new("ip").args(["link", "del", &self.host_if]));
        }
        let _ = run(Command::new("ip").args(["netns", "del", &self.name]));
    }
}

/// `dropped N` of `tc -s qdisc show` output.
fn qdisc_dropped(stats: &str) -> u64 {
    let words: Vec<&str> = stats.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "(dropped")
        .filter_map(|w| w[1].trim_end_matches(',').parse::<u64>().ok())
        .sum()
}

/// Removes the namespaces `emq-<pid>-<n>` whose process is gone (killed
/// without unwinding: its Drop never ran). Their processes, if any, are
/// left alone: they exit when their stdin closes.
fn remove_stale() {
    let Ok(list) = run(Command::new("ip").args(["netns", "list"])) else {
        return;
    };
    for line in list.lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("emq-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(Command::new("ip").args(["netns", "del", name]));
        }
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .any(|d| std::path::Path::new(d).join(tool).is_file())
}

/// Runs `cmd` to the end; its stdout, or the command and its stderr.
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::qdisc_dropped;

    #[test]
    fn netem_drops_are_read_from_tc_statistics() {
        let stats = "qdisc netem 8001: root refcnt 2 limit 1000 delay 100ms\n \
                     Sent 1234 bytes 20 pkt (dropped 3, overlimits 0 requeues 0)\n";
        assert_eq!(qdisc_dropped(stats), 3);
    }
}
