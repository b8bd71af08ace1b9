//! Which BullMQ Node release the scripts of `integration-tests/interop` drive.
//!
//! The scripts live in one folder; the packages they load come from a pinned
//! package folder: `interop/` itself (BullMQ 6.7.6, the reference),
//! `interop-6.7.0/` (BullMQ 6.7.0, the previous reference) or `interop-6.2/`
//! (BullMQ 6.2.0, the older line), kept so that a regression against either
//! shows. `interop/pkg.js` resolves `bullmq` and `ioredis` from the
//! folder named by `EMQ_NODE_PACKAGES`; the harness sets it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A pinned BullMQ Node release the interop scripts run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeBullmq {
    /// BullMQ 6.7.6 (`integration-tests/interop`), the reference.
    V6_7,
    /// BullMQ 6.7.0 (`integration-tests/interop-6.7.0`), the previous reference.
    V6_7_0,
    /// BullMQ 6.2.0 (`integration-tests/interop-6.2`).
    V6_2,
}

impl NodeBullmq {
    /// The exact npm version pinned for this release.
    pub fn version(self) -> &'static str {
        match self {
            NodeBullmq::V6_7 => "6.7.6",
            NodeBullmq::V6_7_0 => "6.7.0",
            NodeBullmq::V6_2 => "6.2.0",
        }
    }

    /// The `meta.version` a Queue of this release writes.
    pub fn meta_version(self) -> String {
        format!("bullmq:{}", self.version())
    }

    /// The folder of the scripts (`integration-tests/interop`).
    pub fn scripts_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
    }

    /// The package folder whose `node_modules` this release is installed in.
    pub fn packages_dir(self) -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        match self {
            NodeBullmq::V6_7 => root.join("interop"),
            NodeBullmq::V6_7_0 => root.join("interop-6.7.0"),
            NodeBullmq::V6_2 => root.join("interop-6.2"),
        }
    }

    /// `node <script> <args…>` in the scripts folder, loading this release.
    /// Panics with the fix when the packages are missing or are another
    /// version than the one pinned (a stale `node_modules`).
    pub fn node(self, script: &str) -> Command {
        let packages = self.packages_dir();
        let manifest = packages.join("node_modules/bullmq/package.json");
        let installed = std::fs::read_to_string(&manifest)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["version"].as_str().map(str::to_owned));
        match installed {
            Some(v) if v == self.version() => {}
            other => panic!(
                "BullMQ {} expected in {} but found {other:?}: run `npm ci` there \
                 (or `just _ensure-node-packages`)",
                self.version(),
                packages.display()
            ),
        }
        let mut cmd = Command::new("node");
        cmd.current_dir(Self::scripts_dir()).arg(script);
        if self != NodeBullmq::V6_7 {
            cmd.env("EMQ_NODE_PACKAGES", &packages);
        }
        cmd
    }

    /// Runs a command of `interop/driver.js` with this release and returns its JSON output.
    pub fn bullmq(
        self,
        command: &str,
        url: &str,
        queue: &str,
        args: serde_json::Value,
    ) -> serde_json::Value {
        self.run("driver.js", command, url, queue, args)
    }

    /// Runs real BullMQ Workers with `driver.js work-until` (see there for
    /// `args`: `ids`, `jobs`, `finished`, `deadlineMs`, `count`, `name`,
    /// `opts`, `sleepMs`) until what they were asked to do is done or the
    /// deadline passed.
    pub fn work_until(self, url: &str, queue: &str, args: serde_json::Value) -> NodeRun {
        NodeRun::from_json(&self.bullmq("work-until", url, queue, args))
    }

    /// Runs a command of `interop/flows.js` with this release and returns its JSON output.
    pub fn flows(
        self,
        command: &str,
        url: &str,
        queue: &str,
        args: serde_json::Value,
    ) -> serde_json::Value {
        self.run("flows.js", command, url, queue, args)
    }

    /// Starts a long-running script (`worker.js`, `events.js`) with this release.
    pub fn spawn(
        self,
        script: &str,
        url: &str,
        queue: &str,
        opts: serde_json::Value,
    ) -> crate::NodeChild {
        let mut cmd = self.node(script);
        cmd.args([url, queue, &opts.to_string()]);
        crate::NodeChild::start_command(cmd)
    }

    fn run(
        self,
        script: &str,
        command: &str,
        url: &str,
        queue: &str,
        args: serde_json::Value,
    ) -> serde_json::Value {
        let out = self
            .node(script)
            .args([command, url, queue, &args.to_string()])
            .output()
            .expect("node is installed");
        assert!(
            out.status.success(),
            "node {script} {command} (BullMQ {}) failed:\n{}",
            self.version(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the interop script prints JSON")
    }
}

/// What a `driver.js work-until` run answered.
#[derive(Clone, Debug)]
pub struct NodeRun {
    /// The condition held before the deadline.
    pub done: bool,
    /// `(job id, start ms, end ms)` of every job its workers processed, in
    /// order (Node's clock: for display; timing checks read Redis's).
    pub seen: Vec<(String, u64, u64)>,
}

impl NodeRun {
    /// Parses the JSON `work-until` prints.
    pub fn from_json(v: &serde_json::Value) -> NodeRun {
        let seen = v["seen"]
            .as_array()
            .unwrap_or_else(|| panic!("work-until answered {v}"))
            .iter()
            .map(|s| {
                (
                    s["id"].as_str().unwrap_or_default().to_owned(),
                    s["start"].as_u64().unwrap_or(0),
                    s["end"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        NodeRun {
            done: v["done"] == serde_json::json!(true),
            seen,
        }
    }

    /// The ids processed, in order.
    pub fn ids(&self) -> Vec<String> {
        self.seen.iter().map(|s| s.0.clone()).collect()
    }
}

/// Runs scenarios `async fn(NodeBullmq)` of the calling test file once per
/// pinned BullMQ release: as tests `bullmq_6_7_6::<scenario>`,
/// `bullmq_6_7_0::<scenario>` and `bullmq_6_2::<scenario>`, so one
/// `cargo test` proves the reference and both older lines.
#[macro_export]
macro_rules! bullmq_matrix {
    ($($scenario:ident),* $(,)?) => {
        mod bullmq_6_7_6 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario($crate::NodeBullmq::V6_7).await
                }
            )*
        }
        mod bullmq_6_7_0 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario($crate::NodeBullmq::V6_7_0).await
                }
            )*
        }
        mod bullmq_6_2 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario($crate::NodeBullmq::V6_2).await
                }
            )*
        }
    };
}
