//! What `echomq work --processor` runs: a synthetic processor, handler
//! processes (`exec:COMMAND`) or an HTTP endpoint (`http:URL`), built into the
//! worker's [`Processor`] (docs/processors.md).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use echomq::external::{
    ExecCommand, ExecOptions, ExecProcessor, HttpHeader, HttpOptions, HttpProcessor,
};
use echomq::worker::{processor_fn, Processor};
use tracing::info;

use super::synthetic::{run_synthetic, Synthetic};

/// `--processor`, parsed.
#[derive(Clone, Debug)]
pub enum ProcessorSpec {
    /// `sleep:MS | echo | fail | fail-rate:P | cpu:MS`.
    Synthetic(Synthetic),
    /// `exec:COMMAND`: handler processes.
    Exec(ExecCommand),
    /// `http:URL` (or the URL alone): each job POSTed there.
    Http(String),
}

impl std::str::FromStr for ProcessorSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(command) = s.strip_prefix("exec:") {
            return ExecCommand::parse(command)
                .map(ProcessorSpec::Exec)
                .map_err(|e| format!("--processor exec: {e}"));
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            return Ok(ProcessorSpec::Http(s.to_owned()));
        }
        if let Some(url) = s.strip_prefix("http:") {
            return Ok(ProcessorSpec::Http(url.to_owned()));
        }
        s.parse::<Synthetic>()
            .map(ProcessorSpec::Synthetic)
            .map_err(|e| format!("{e}; or exec:COMMAND, http:URL"))
    }
}

/// The settings of the external processors.
#[derive(Clone, Debug, Default)]
pub struct ExternalSettings {
    /// Handler processes (`--processes`); the concurrency when `None`.
    pub processes: Option<usize>,
    /// Per-request timeout of `http:`.
    pub http_timeout: Duration,
    /// Headers of `http:` (Debug shows names only).
    pub http_headers: Vec<HttpHeader>,
    /// A CA to trust for `https:`.
    pub http_ca_file: Option<PathBuf>,
}

/// Variables a handler process does not inherit: the worker's own settings,
/// the Redis URL (it may carry a password) and the HTTP headers.
fn scrubbed(mut command: ExecCommand) -> ExecCommand {
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("ECHOMQ_") || name == "REDIS_URL" {
            command = command.env_remove(k);
        }
    }
    command
}

/// Builds the processor; an `Err` is a configuration error (exit 2).
pub async fn build(
    spec: &ProcessorSpec,
    concurrency: usize,
    external: &ExternalSettings,
) -> Result<Arc<dyn Processor>, String> {
    match spec {
        ProcessorSpec::Synthetic(kind) => {
            let kind = kind.clone();
            Ok(processor_fn(move |ctx| run_synthetic(kind.clone(), ctx)))
        }
        ProcessorSpec::Exec(command) => {
            let processes = external.processes.unwrap_or(concurrency);
            let pool = ExecProcessor::start(
                scrubbed(command.clone()),
                ExecOptions::default().processes(processes),
            )
            .await
            .map_err(|e| format!("--processor exec: {e}"))?;
            info!(processes, program = ?command.program(), "handler processes started");
            Ok(Arc::new(pool))
        }
        ProcessorSpec::Http(url) => {
            let mut options = HttpOptions::default().timeout(external.http_timeout);
            options.headers = external.http_headers.clone();
            options.ca_file = external.http_ca_file.clone();
            let http =
                HttpProcessor::new(url, options).map_err(|e| format!("--processor http: {e}"))?;
            info!(
                endpoint = http.endpoint(),
                headers = external.http_headers.len(),
                "jobs go to an HTTP endpoint"
            );
            Ok(Arc::new(http))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processor_specs_parse() {
        assert!(matches!(
            "echo".parse::<ProcessorSpec>(),
            Ok(ProcessorSpec::Synthetic(Synthetic::Echo))
        ));
        let Ok(ProcessorSpec::Exec(c)) = "exec:python3 'my handler.py'".parse() else {
            panic!()
        };
        assert_eq!(c.program(), "python3");
        for s in ["http:https://fn.example/run", "https://fn.example/run"] {
            let Ok(ProcessorSpec::Http(u)) = s.parse() else {
                panic!("{s}")
            };
            assert_eq!(u, "https://fn.example/run");
        }
        let e = "exec:".parse::<ProcessorSpec>().unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = "nope".parse::<ProcessorSpec>().unwrap_err();
        assert!(e.contains("exec:COMMAND"), "{e}");
    }
}
