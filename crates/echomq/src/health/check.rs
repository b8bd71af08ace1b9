//! The probes behind the endpoints: [`HealthCheck`] and what it answers.

use std::time::{Duration, Instant};

use echomq_protocol::ScriptId;
use fred::prelude::{ClientLike, LuaInterface, Options};
use ractor::{call_t, ActorRef};

use crate::connection::pool::Connection;
use crate::connection::server::host_port;
use crate::supervision::host::{ChildId, HostSupervisorMsg};
use crate::worker::messages::WorkerMsg;

/// One check of a [`Probe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What was checked: `supervisor`, `worker`, `redis`, `scripts`.
    pub name: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What was seen, one line.
    pub detail: String,
}

/// The answer of [`HealthCheck::live`] or [`HealthCheck::ready`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// `livez` or `readyz`.
    pub name: &'static str,
    /// Every check passed.
    pub ok: bool,
    /// Each check, in order.
    pub checks: Vec<Check>,
}

impl Probe {
    fn new(name: &'static str, checks: Vec<Check>) -> Self {
        Probe {
            name,
            ok: checks.iter().all(|c| c.ok),
            checks,
        }
    }
}

/// The body the endpoints send: a `[+]`/`[-]` line per check, then
/// `<name> check passed|failed`, as the Kubernetes API server's own
/// `?verbose` health endpoints write it.
impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in &self.checks {
            let mark = if c.ok { '+' } else { '-' };
            writeln!(f, "[{mark}]{} {}", c.name, c.detail)?;
        }
        let verdict = if self.ok { "passed" } else { "failed" };
        writeln!(f, "{} check {verdict}", self.name)
    }
}

/// What to look at: the connection, the supervisor and its worker sets.
#[derive(Clone, Debug)]
pub struct HealthCheck {
    conn: Connection,
    host: ActorRef<HostSupervisorMsg>,
    sets: Vec<ChildId>,
    timeout: Duration,
}

impl HealthCheck {
    /// Checks `host` and the Redis behind `conn`; add the worker sets to
    /// watch with [`HealthCheck::worker_set`].
    pub fn new(conn: Connection, host: ActorRef<HostSupervisorMsg>) -> Self {
        Self {
            conn,
            host,
            sets: Vec::new(),
            timeout: Duration::from_secs(1),
        }
    }

    /// Watches this worker set of the supervisor as well.
    pub fn worker_set(mut self, id: ChildId) -> Self {
        self.sets.push(id);
        self
    }

    /// How long each check may take before it counts as failed. Default
    /// 1 s; keep it below the probe's `timeoutSeconds`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The actor tree is alive.
    pub async fn live(&self) -> Probe {
        let mut checks = vec![self.supervisor().await];
        for id in &self.sets {
            checks.push(self.worker(*id, false).await);
        }
        Probe::new("livez", checks)
    }

    /// Redis reachable, scripts loaded, workers taking jobs or idle by choice.
    pub async fn ready(&self) -> Probe {
        let redis = self.redis().await;
        let scripts = if redis.ok {
            self.scripts().await
        } else {
            failed("scripts", "not checked: Redis unreachable")
        };
        let mut checks = vec![redis, scripts];
        for id in &self.sets {
            checks.push(self.worker(*id, true).await);
        }
        Probe::new("readyz", checks)
    }

    fn ms(&self) -> u64 {
        self.timeout.as_millis() as u64
    }

    async fn supervisor(&self) -> Check {
        match call_t!(self.host, HostSupervisorMsg::GetStatus, self.ms()) {
            Ok(s) => passed("supervisor", format!("running, {} restarts", s.restarts)),
            Err(e) => failed("supervisor", format!("not answering: {e}")),
        }
    }

    async fn worker(&self, id: ChildId, ready: bool) -> Check {
        let set = match call_t!(self.host, HostSupervisorMsg::GetWorkerSet, self.ms(), id) {
            Ok(Some(set)) => set,
            Ok(None) => return failed("worker", format!("{id}: no such worker set")),
            Err(e) => return failed("worker", format!("{id}: supervisor not answering: {e}")),
        };
        let status = match call_t!(set.worker, WorkerMsg::GetStatus, self.ms()) {
            Ok(s) => s,
            Err(e) => return failed("worker", format!("{id}: worker not answering: {e}")),
        };
        if !ready {
            return passed("worker", format!("{id}: running"));
        }
        if status.closing {
            failed("worker", format!("{id}: closing"))
        } else if !status.lock_manager_attached {
            failed("worker", format!("{id}: no LockManager attached"))
        } else if status.paused {
            passed("worker", format!("{id}: paused by choice"))
        } else {
            passed(
                "worker",
                format!("{id}: taking jobs, {} running", status.active_jobs.len()),
            )
        }
    }

    async fn redis(&self) -> Check {
        let t0 = Instant::now();
        let opts = Options {
            timeout: Some(self.timeout),
            max_attempts: Some(1),
            ..Default::default()
        };
        let client = self.conn.pool().next().with_options(&opts);
        let ping = tokio::time::timeout(self.timeout, client.ping::<String>(None)).await;
        match ping {
            Ok(Ok(_)) => passed("redis", format!("PONG in {} ms", t0.elapsed().as_millis())),
            Ok(Err(e)) => failed(
                "redis",
                format!("PING to {} failed: {e}", host_port(&self.conn.config().url)),
            ),
            Err(_) => failed(
                "redis",
                format!("no answer to PING within {} ms", self.ms()),
            ),
        }
    }

    async fn scripts(&self) -> Check {
        let shas: Vec<String> = ScriptId::ALL
            .iter()
            .filter_map(|id| id.def().map(|d| d.sha1.to_owned()))
            .collect();
        let client = self.conn.pool().next();
        let exists =
            tokio::time::timeout(self.timeout, client.script_exists::<Vec<bool>, _>(shas)).await;
        let missing = match exists {
            Ok(Ok(found)) => found.iter().filter(|f| !**f).count(),
            Ok(Err(e)) => return failed("scripts", format!("SCRIPT EXISTS failed: {e}")),
            Err(_) => return failed("scripts", "no answer to SCRIPT EXISTS".to_owned()),
        };
        if missing == 0 {
            return passed("scripts", format!("{} loaded", ScriptId::ALL.len()));
        }
        // Redis restarted (or SCRIPT FLUSH): load them now rather than on the
        // first call's NOSCRIPT; either way the calls would work.
        match tokio::time::timeout(self.timeout, self.conn.load_scripts()).await {
            Ok(Ok(())) => passed("scripts", format!("{missing} were missing; loaded again")),
            Ok(Err(e)) => failed("scripts", format!("{missing} missing; loading failed: {e}")),
            Err(_) => failed("scripts", format!("{missing} missing; loading timed out")),
        }
    }
}

/// The answer while nothing is attached yet: the process is connecting.
#[cfg_attr(not(feature = "health-server"), allow(dead_code))]
pub(crate) fn starting(name: &'static str, live: bool) -> Probe {
    let check = if live {
        passed("process", "starting: connecting to Redis")
    } else {
        failed("process", "starting: not connected to Redis yet")
    };
    Probe::new(name, vec![check])
}

fn passed(name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        name,
        ok: true,
        detail: format!("ok: {}", detail.into()),
    }
}

fn failed(name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        name,
        ok: false,
        detail: format!("failed: {}", detail.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_body_reads_like_kubernetes_verbose_output() {
        let p = Probe::new(
            "readyz",
            vec![passed("redis", "PONG in 1 ms"), failed("scripts", "x")],
        );
        assert!(!p.ok);
        assert_eq!(
            p.to_string(),
            "[+]redis ok: PONG in 1 ms\n[-]scripts failed: x\nreadyz check failed\n"
        );
    }
}
