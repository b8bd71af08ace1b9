//! BullMQ for Python (PyPI `bullmq`, pinned in `integration-tests/python/requirements.txt`),
//! driven through `integration-tests/python/driver.py` from the venv that
//! `just _ensure-python-packages` makes in `integration-tests/python/.venv`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned BullMQ for Python release.
pub const PYTHON_BULLMQ_VERSION: &str = "3.4.4";

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// The venv's interpreter when BullMQ for Python is installed there.
/// Without it a test is skipped with a printed line, except under `CI=true`,
/// where a missing install is a failure.
pub fn python_bullmq() -> Option<PathBuf> {
    if let Some(python) = installed_python() {
        return Some(python);
    }
    let why = format!(
        "BullMQ for Python {PYTHON_BULLMQ_VERSION} is not installed in {}: run `just _ensure-python-packages`",
        python_dir().join(".venv").display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

/// The venv's interpreter when BullMQ for Python is installed there, without
/// a word when it is not.
pub fn installed_python() -> Option<PathBuf> {
    let python = python_dir().join(".venv/bin/python");
    let installed = python.is_file()
        && Command::new(&python)
            .args([
                "-c",
                "import importlib.metadata as m; print(m.version('bullmq'))",
            ])
            .output()
            .is_ok_and(|o| {
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout).trim() == PYTHON_BULLMQ_VERSION
            });
    installed.then_some(python)
}

/// Runs a command of `driver.py` with `python` (from [`python_bullmq`])
/// against `url`/`queue` and returns its JSON output.
pub fn python_driver(
    python: &Path,
    command: &str,
    url: &str,
    queue: &str,
    args: serde_json::Value,
) -> serde_json::Value {
    let out = Command::new(python)
        .current_dir(python_dir())
        .args(["driver.py", command, url, queue, &args.to_string()])
        .output()
        .expect("the venv's python runs");
    assert!(
        out.status.success(),
        "python driver.py {command} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("driver.py prints JSON")
}
