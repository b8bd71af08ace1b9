//! `echomq work` as a service: its settings from flags, `ECHOMQ_*`
//! variables and a TOML file (in that precedence, then the defaults), its
//! logs (text or JSON), the start-up that waits for Redis, and the exit
//! codes of `docs/deployment.md §Running as a service`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, ValueEnum};
use echomq::connection::{host_port, server_facts, ServerProblem};
use echomq::external::HttpHeader;
use echomq::{Connection, Queue, RetryPolicy};
use echomq_cli::diagnose::{self, FailureClass};
use serde::Deserialize;
use tracing::warn;

use crate::processors::{ExternalSettings, ProcessorSpec};
use crate::target::Target;
use crate::work::WorkSettings;

/// Options of `echomq work`. Each is optional here: a value missing from
/// the command line and the environment comes from the file, then from the
/// default named in its help.
#[derive(Clone, Debug, Default, Args)]
pub struct WorkArgs {
    /// The queue to work on (file key: `queue`).
    #[arg(env = "ECHOMQ_QUEUE")]
    pub queue: Option<String>,
    /// A TOML file with any of these options (snake_case keys, and `url`, `prefix`).
    #[arg(long, env = "ECHOMQ_CONFIG")]
    pub config: Option<PathBuf>,
    /// Jobs run at the same time [default: 1].
    #[arg(long, env = "ECHOMQ_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// exec:COMMAND (handler processes) | http:URL | sleep:MS | echo | fail |
    /// fail-rate:P | cpu:MS [default: echo] (docs/processors.md).
    #[arg(long, env = "ECHOMQ_PROCESSOR")]
    pub processor: Option<String>,
    /// Handler processes of `exec:` [default: the concurrency].
    #[arg(long, env = "ECHOMQ_PROCESSES")]
    pub processes: Option<usize>,
    /// Per-request timeout of `http:` in ms [default: 30000].
    #[arg(long, env = "ECHOMQ_HTTP_TIMEOUT")]
    pub http_timeout: Option<u64>,
    /// A header of every `http:` request, `Name: value` (repeat the flag; in
    /// ECHOMQ_HTTP_HEADERS one per line). Never logged.
    #[arg(
        long = "http-header",
        env = "ECHOMQ_HTTP_HEADERS",
        value_delimiter = '\n',
        hide_env_values = true,
        value_name = "NAME: VALUE"
    )]
    pub http_headers: Vec<HttpHeader>,
    /// PEM CA to trust for an `https:` endpoint [default: the system's roots].
    #[arg(long, env = "ECHOMQ_HTTP_CA_FILE", value_name = "PEM")]
    pub http_ca_file: Option<PathBuf>,
    /// Lock TTL in ms [default: 30000].
    #[arg(long, env = "ECHOMQ_LOCK_DURATION")]
    pub lock_duration: Option<u64>,
    /// Stalled-check interval in ms [default: 30000].
    #[arg(long, env = "ECHOMQ_STALLED_INTERVAL")]
    pub stalled_interval: Option<u64>,
    /// Stop after this many processed jobs.
    #[arg(long, env = "ECHOMQ_MAX_JOBS")]
    pub max_jobs: Option<u64>,
    /// Worker name (listed by BullMQ's getWorkers).
    #[arg(long, env = "ECHOMQ_NAME")]
    pub name: Option<String>,
    /// Worker rate limiter MAX/DURATION_MS (BullMQ's `limiter`, shared with
    /// every worker of the queue that has one, Node's included).
    #[arg(long, env = "ECHOMQ_LIMITER")]
    pub limiter: Option<String>,
    /// Concurrency of every group without its own (BullMQ Pro's worker
    /// `group.concurrency`), written to the queue's group defaults for the
    /// whole fleet at start [default: leave them as they are].
    #[arg(long, env = "ECHOMQ_GROUP_CONCURRENCY", value_name = "N")]
    pub group_concurrency: Option<u64>,
    /// Rate limit MAX/DURATION_MS of every group without its own (Pro's
    /// `group.limit`), written with --group-concurrency's rule.
    #[arg(long, env = "ECHOMQ_GROUP_RATE_LIMIT", value_name = "MAX/DURATION_MS")]
    pub group_rate_limit: Option<String>,
    /// Record per-minute completed/failed counts, keeping this many minutes
    /// (BullMQ's `metrics.maxDataPoints`) [default: off].
    #[arg(long, env = "ECHOMQ_METRICS", value_name = "MAX_DATA_POINTS")]
    pub metrics: Option<u64>,
    /// No per-second lines (`--quiet` or `--quiet=false`).
    #[arg(long, env = "ECHOMQ_QUIET", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub quiet: Option<bool>,
    /// Give up connecting at start-up after this many ms [default: wait for Redis forever].
    #[arg(long, env = "ECHOMQ_CONNECT_TIMEOUT")]
    pub connect_timeout: Option<u64>,
    /// Serve /livez and /readyz on this address, e.g. 127.0.0.1:8080.
    #[arg(long, env = "ECHOMQ_HEALTH_ADDR")]
    pub health_addr: Option<SocketAddr>,
    /// Serve Prometheus /metrics on this address, e.g. 127.0.0.1:9464 (a
    /// non-loopback address is logged as such) [default: off].
    #[arg(long, env = "ECHOMQ_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Export spans over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318
    /// [default: OTEL_EXPORTER_OTLP_ENDPOINT when set, else off].
    #[arg(long, env = "ECHOMQ_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// How long running jobs may finish at SIGTERM before they go back to wait, ms [default: 10000].
    #[arg(long, env = "ECHOMQ_CLOSE_TIMEOUT")]
    pub close_timeout: Option<u64>,
    /// Fail an attempt still running after this many ms, for jobs without a
    /// `timeout` of their own [default: no timeout].
    #[arg(long, env = "ECHOMQ_DEFAULT_TIMEOUT", value_name = "MS")]
    pub default_timeout: Option<u64>,
    /// Take jobs in batches: SIZE, SIZE/MIN or SIZE/MIN/TIMEOUT_MS (wait up to
    /// TIMEOUT_MS for MIN jobs); each batch is taken and finished in one round
    /// trip, its jobs run side by side [default: one job at a time].
    #[arg(long, env = "ECHOMQ_BATCH", value_name = "SIZE[/MIN[/TIMEOUT_MS]]")]
    pub batch: Option<String>,
    /// Log lines as text or JSON [default: text].
    #[arg(long, env = "ECHOMQ_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter: a level (`info`) or EnvFilter directives (`echomq=debug,warn`);
    /// without it RUST_LOG is read [default: info].
    #[arg(long, env = "ECHOMQ_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Run on a server whose maxmemory-policy is not noeviction (a warning instead of exit 4).
    #[arg(long, env = "ECHOMQ_ALLOW_EVICTION", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_eviction: Option<bool>,
}

/// How log lines are written (to stderr).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The `--config` file: the same options, snake_case.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    url: Option<String>,
    prefix: Option<String>,
    queue: Option<String>,
    concurrency: Option<usize>,
    processor: Option<String>,
    processes: Option<usize>,
    http_timeout: Option<u64>,
    http_headers: Option<Vec<String>>,
    http_ca_file: Option<PathBuf>,
    lock_duration: Option<u64>,
    stalled_interval: Option<u64>,
    max_jobs: Option<u64>,
    name: Option<String>,
    limiter: Option<String>,
    group_concurrency: Option<u64>,
    group_rate_limit: Option<String>,
    metrics: Option<u64>,
    quiet: Option<bool>,
    connect_timeout: Option<u64>,
    health_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    otlp_endpoint: Option<String>,
    close_timeout: Option<u64>,
    default_timeout: Option<u64>,
    batch: Option<String>,
    log_format: Option<LogFormat>,
    log_level: Option<String>,
    allow_eviction: Option<bool>,
}

/// Everything `echomq work` runs with, resolved and validated.
#[derive(Debug)]
pub struct Resolved {
    pub url: String,
    pub prefix: String,
    pub queue: String,
    pub connect_timeout: Option<Duration>,
    pub health_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    /// The OTLP collector; `Some("")` when only the OTEL_* variables name it.
    pub otlp_endpoint: Option<String>,
    pub log_format: LogFormat,
    pub log_level: Option<String>,
    pub allow_eviction: bool,
    pub settings: WorkSettings,
}

/// Where the global `--url`/`--prefix` values came from.
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalSources {
    /// `--url` was on the command line.
    pub url_flag: bool,
    /// `--url` came from `REDIS_URL`.
    pub url_env: bool,
    /// `--prefix` was on the command line.
    pub prefix_flag: bool,
}

impl GlobalSources {
    pub fn of(m: &ArgMatches) -> Self {
        let src = |id: &str| m.value_source(id);
        Self {
            url_flag: src("url") == Some(ValueSource::CommandLine),
            url_env: src("url") == Some(ValueSource::EnvVariable),
            prefix_flag: src("prefix") == Some(ValueSource::CommandLine),
        }
    }
}

/// Flag > env > file > default, for every option; a config error is one
/// line.
pub fn resolve(
    cli: &Target,
    sources: GlobalSources,
    args: &WorkArgs,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Resolved, String> {
    let file = match &args.config {
        Some(path) => read_file(path)?,
        None => FileConfig::default(),
    };
    // The global flags have clap defaults, so their source decides.
    let url = if sources.url_flag {
        cli.url.clone()
    } else if let Some(u) = env("ECHOMQ_URL") {
        u
    } else if sources.url_env {
        cli.url.clone()
    } else {
        file.url.clone().unwrap_or_else(|| cli.url.clone())
    };
    let prefix = if sources.prefix_flag {
        cli.prefix.clone()
    } else {
        env("ECHOMQ_PREFIX")
            .or(file.prefix.clone())
            .unwrap_or_else(|| cli.prefix.clone())
    };
    let queue =
        args.queue.clone().or(file.queue).ok_or(
            "no queue: give it as an argument, ECHOMQ_QUEUE or `queue` in the config file",
        )?;
    echomq::protocol::QueueKeys::new(&prefix, &queue).map_err(|e| e.to_string())?;
    let processor: ProcessorSpec = args
        .processor
        .clone()
        .or(file.processor)
        .unwrap_or_else(|| "echo".into())
        .parse()?;
    let concurrency = args.concurrency.or(file.concurrency).unwrap_or(1);
    if concurrency == 0 {
        return Err("concurrency must be at least 1".into());
    }
    let processes = args.processes.or(file.processes);
    if processes == Some(0) {
        return Err("--processes must be at least 1".into());
    }
    let http_headers = if !args.http_headers.is_empty() {
        args.http_headers.clone()
    } else {
        let lines = file.http_headers.unwrap_or_default();
        lines
            .iter()
            .map(|l| l.parse::<HttpHeader>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("http_headers: {e}"))?
    };
    let http_timeout = args.http_timeout.or(file.http_timeout).unwrap_or(30_000);
    if http_timeout == 0 {
        return Err("--http-timeout must be positive".into());
    }
    let external = ExternalSettings {
        processes,
        http_timeout: Duration::from_millis(http_timeout),
        http_headers,
        http_ca_file: args.http_ca_file.clone().or(file.http_ca_file),
    };
    let default_timeout = match args.default_timeout.or(file.default_timeout) {
        Some(0) => return Err("--default-timeout must be at least 1 ms".into()),
        t => t.map(Duration::from_millis),
    };
    let batch = match args.batch.clone().or(file.batch) {
        Some(text) => Some(parse_batch(&text).map_err(|e| format!("--batch: {e}"))?),
        None => None,
    };
    let lock_duration = args.lock_duration.or(file.lock_duration).unwrap_or(30_000);
    let stalled_interval = args
        .stalled_interval
        .or(file.stalled_interval)
        .unwrap_or(30_000);
    if lock_duration == 0 || stalled_interval == 0 {
        return Err("lock_duration and stalled_interval must be positive".into());
    }
    let limiter = match args.limiter.clone().or(file.limiter) {
        Some(text) => {
            Some(crate::limits::parse_rate_limit(&text).map_err(|e| format!("--limiter: {e}"))?)
        }
        None => None,
    };
    let group = group_defaults(
        args.group_concurrency.or(file.group_concurrency),
        args.group_rate_limit.clone().or(file.group_rate_limit),
    )?;
    let metrics = args.metrics.or(file.metrics);
    if metrics == Some(0) {
        return Err("--metrics: MAX_DATA_POINTS must be at least 1".into());
    }
    let ms = Duration::from_millis;
    Ok(Resolved {
        url,
        prefix,
        queue,
        connect_timeout: args.connect_timeout.or(file.connect_timeout).map(ms),
        health_addr: args.health_addr.or(file.health_addr),
        metrics_addr: args.metrics_addr.or(file.metrics_addr),
        otlp_endpoint: args
            .otlp_endpoint
            .clone()
            .or(file.otlp_endpoint)
            .or_else(|| {
                // The standard variables, read by the exporter itself.
                [
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                ]
                .iter()
                .any(|k| env(k).is_some_and(|v| !v.is_empty()))
                .then(String::new)
            }),
        log_format: args.log_format.or(file.log_format).unwrap_or_default(),
        log_level: args.log_level.clone().or(file.log_level),
        allow_eviction: args.allow_eviction.or(file.allow_eviction).unwrap_or(false),
        settings: WorkSettings {
            concurrency,
            processor,
            external,
            lock_duration: ms(lock_duration),
            stalled_interval: ms(stalled_interval),
            max_jobs: args.max_jobs.or(file.max_jobs),
            name: args.name.clone().or(file.name),
            limiter,
            group,
            metrics,
            quiet: args.quiet.or(file.quiet).unwrap_or(false),
            close_timeout: ms(args.close_timeout.or(file.close_timeout).unwrap_or(10_000)),
            default_timeout,
            batch,
        },
    })
}

/// `SIZE`, `SIZE/MIN` or `SIZE/MIN/TIMEOUT_MS`.
fn parse_batch(text: &str) -> Result<echomq::worker::BatchOptions, String> {
    let parts: Vec<&str> = text.split('/').map(str::trim).collect();
    if parts.len() > 3 {
        return Err(format!("{text:?} is not SIZE[/MIN[/TIMEOUT_MS]]"));
    }
    let number = |s: &str, what: &str| -> Result<u64, String> {
        s.parse()
            .map_err(|_| format!("{what} {s:?} is not a whole number"))
    };
    let size = number(parts[0], "SIZE")? as usize;
    let mut batch = echomq::worker::BatchOptions::new(size);
    if let Some(min) = parts.get(1) {
        let min = number(min, "MIN")? as usize;
        let wait = match parts.get(2) {
            Some(t) => Duration::from_millis(number(t, "TIMEOUT_MS")?),
            None => Duration::ZERO,
        };
        batch = batch.min_size(min, wait);
    }
    batch.validate().map_err(|e| e.to_string())?;
    Ok(batch)
}

fn read_file(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    parse_file(&text, path)
}

/// The file's text as settings, or one error line naming the file (and the
/// line, when the parser gives a position).
fn parse_file(text: &str, path: &Path) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| {
        let first = e.message().lines().next().unwrap_or_default().to_owned();
        match e.span() {
            Some(span) => {
                let line = text[..span.start].matches('\n').count() + 1;
                format!("config file {} line {line}: {first}", path.display())
            }
            None => format!("config file {}: {first}", path.display()),
        }
    })
}

/// Installs the tracing subscriber: `log_level` when given, else RUST_LOG,
/// else `info`; text or JSON lines on stderr; and the OTLP span export when
/// `otlp` is given (with its own `info` filter, so a debug log level does
/// not export every debug span).
fn init_logging(
    format: LogFormat,
    level: Option<&str>,
    otlp: Option<crate::otlp::Export>,
) -> Result<(), String> {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => EnvFilter::try_new(l).map_err(|e| format!("log level {l:?}: {e}"))?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    let otel = otlp.map(|o| o.layer().with_filter(EnvFilter::new("info")));
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()
        .map_err(|e| format!("logging: {e}"))
}

/// Prints one error line and gives the exit code of its class.
fn fail(class: FailureClass, message: &str) -> i32 {
    crate::style::print_error(message);
    class.exit_code()
}

/// `echomq work`, start to exit; answers the exit code.
pub async fn main(cli: &Target, sources: GlobalSources, args: &WorkArgs) -> i32 {
    let r = match resolve(cli, sources, args, |k| std::env::var(k).ok()) {
        Ok(r) => r,
        Err(e) => return fail(FailureClass::Config, &e),
    };
    let otlp = match r.otlp_endpoint.as_deref().map(crate::otlp::Export::start) {
        Some(Ok(export)) => Some(export),
        Some(Err(e)) => return fail(FailureClass::Config, &e),
        None => None,
    };
    let flush = otlp.as_ref().map(crate::otlp::Export::provider);
    if let Err(e) = init_logging(r.log_format, r.log_level.as_deref(), otlp) {
        return fail(FailureClass::Config, &e);
    }
    // Before any worker starts: components take their metric handles then.
    let metrics = match r.metrics_addr {
        Some(addr) => match start_metrics(addr).await {
            Ok(server) => server,
            Err(e) => return fail(FailureClass::Config, &e),
        },
        None => None,
    };
    // Up before connecting, so that a liveness probe does not kill a
    // process that is only waiting for its Redis.
    let health = match r.health_addr {
        Some(addr) => match echomq::health::serve(addr, None).await {
            Ok(server) => Some(server),
            Err(e) => {
                return fail(
                    FailureClass::Config,
                    &format!("health endpoints on {addr}: {e}"),
                )
            }
        },
        None => None,
    };
    // TLS and durability come from the global flags (and their env vars);
    // URL and prefix from the resolved flag > env > file > default layers.
    let mut config = cli.config.clone();
    config.url = r.url.clone();
    config.prefix = r.prefix.clone();
    let policy = match r.connect_timeout {
        Some(t) => {
            // One attempt must not outlast the whole budget.
            config.connect_timeout = config
                .connect_timeout
                .min(t.max(Duration::from_millis(100)));
            RetryPolicy::with_deadline(t)
        }
        None => RetryPolicy::default(),
    };
    let url = r.url.clone();
    let explain = move |e: &echomq::Error| diagnose::diagnose(e, Some(&url)).message;
    let conn = match Connection::connect_with_retry_explained(config, &policy, &explain).await {
        Ok(c) => c,
        Err(e) => {
            let d = diagnose::diagnose(&e, Some(&r.url));
            return fail(d.class, &d.message);
        }
    };
    let code = run_connected(&conn, r, health.as_ref(), metrics.as_ref()).await;
    conn.close().await;
    if let Some(provider) = flush {
        crate::otlp::shutdown(provider);
    }
    code
}

/// The `/metrics` endpoint, with the recorder installed (feature `metrics`).
#[cfg(feature = "metrics")]
async fn start_metrics(addr: SocketAddr) -> Result<Option<MetricsServer>, String> {
    echomq::telemetry::prometheus::serve(addr)
        .await
        .map(Some)
        .map_err(|e| format!("metrics endpoint on {addr}: {e}"))
}

#[cfg(not(feature = "metrics"))]
async fn start_metrics(_addr: SocketAddr) -> Result<Option<MetricsServer>, String> {
    Err("--metrics-addr: this echomq was built without the `metrics` feature".into())
}

#[cfg(feature = "metrics")]
type MetricsServer = echomq::telemetry::prometheus::MetricsServer;
/// Stands in for the endpoint in a build without it.
#[cfg(not(feature = "metrics"))]
type MetricsServer = std::convert::Infallible;

#[cfg(feature = "metrics")]
fn watch(server: Option<&MetricsServer>, queue: &Queue) {
    if let Some(s) = server {
        s.watch(queue.clone());
    }
}

#[cfg(not(feature = "metrics"))]
fn watch(_server: Option<&MetricsServer>, _queue: &Queue) {}

async fn run_connected(
    conn: &Connection,
    r: Resolved,
    health: Option<&echomq::health::HealthServer>,
    metrics: Option<&MetricsServer>,
) -> i32 {
    let facts = match server_facts(conn).await {
        Ok(f) => f,
        Err(e) => {
            let d = diagnose::diagnose(&e, Some(&r.url));
            return fail(d.class, &d.message);
        }
    };
    let at = host_port(&r.url);
    for problem in facts.problems(&at, &r.prefix, &[&r.queue]) {
        if r.allow_eviction && matches!(problem, ServerProblem::Eviction { .. }) {
            warn!("{problem} (allowed by allow_eviction)");
            continue;
        }
        return fail(FailureClass::Server, &problem.to_string());
    }
    let queue = match Queue::new(conn, &r.queue).await {
        Ok(q) => q,
        Err(e) => {
            let d = diagnose::diagnose(&e, Some(&r.url));
            return fail(d.class, &d.message);
        }
    };
    watch(metrics, &queue);
    let processor = match crate::processors::build(
        &r.settings.processor,
        r.settings.concurrency,
        &r.settings.external,
    )
    .await
    {
        Ok(p) => p,
        Err(e) => return fail(FailureClass::Config, &e),
    };
    match crate::work::work(conn.clone(), queue, r.settings, processor, health).await {
        Ok(()) => 0,
        Err(e) => fail(FailureClass::Runtime, &e.to_string()),
    }
}

/// `--group-concurrency` and `--group-rate-limit` as the worker's `group`
/// option; `None` when neither is given.
fn group_defaults(
    concurrency: Option<u64>,
    rate_limit: Option<String>,
) -> Result<Option<echomq::groups::GroupDefaults>, String> {
    if concurrency == Some(0) {
        return Err("--group-concurrency: N must be at least 1".into());
    }
    let limit = match rate_limit {
        Some(text) => {
            let l = crate::limits::parse_rate_limit(&text)
                .map_err(|e| format!("--group-rate-limit: {e}"))?;
            Some((l.max, l.duration_ms()))
        }
        None => None,
    };
    if concurrency.is_none() && limit.is_none() {
        return Ok(None);
    }
    Ok(Some(echomq::groups::GroupDefaults { concurrency, limit }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    fn parse(argv: &[&str]) -> (crate::cli::Cli, GlobalSources, WorkArgs) {
        let m = crate::cli::Cli::command()
            .try_get_matches_from(argv)
            .unwrap();
        let cli = crate::cli::Cli::from_arg_matches(&m).unwrap();
        let crate::cli::Command::Work(args) = &cli.command else {
            panic!("not work")
        };
        let args = (**args).clone();
        (cli, GlobalSources::of(&m), args)
    }

    #[test]
    fn flag_beats_env_beats_file_beats_default() {
        let dir = std::env::temp_dir().join(format!("echomq-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("echomq.toml");
        std::fs::write(
            &path,
            "url = \"redis://file:1\"\nqueue = \"fromfile\"\nconcurrency = 3\nlock_duration = 7000\nprefix = \"{f}\"\nmetrics = 60\n",
        )
        .unwrap();
        let cfg = path.to_str().unwrap();
        // Env comes in through clap for the work options; ECHOMQ_URL/PREFIX through `env`.
        let (cli, src, mut args) =
            parse(&["echomq", "work", "--config", cfg, "--concurrency", "5"]);
        args.lock_duration = args.lock_duration.or(Some(9000)); // as if ECHOMQ_LOCK_DURATION=9000
        let env = |k: &str| (k == "ECHOMQ_PREFIX").then(|| "{e}".to_owned());
        let r = resolve(&cli.target(), src, &args, env).unwrap();
        assert_eq!(r.settings.concurrency, 5, "flag over file");
        assert_eq!(
            r.settings.lock_duration,
            Duration::from_millis(9000),
            "env over file"
        );
        assert_eq!(r.prefix, "{e}", "env over file");
        assert_eq!(r.url, "redis://file:1", "file over default");
        assert_eq!(r.queue, "fromfile");
        assert_eq!(r.settings.metrics, Some(60), "file over default (off)");
        assert_eq!(
            r.settings.stalled_interval,
            Duration::from_secs(30),
            "default"
        );
        let (cli, src, args) = parse(&[
            "echomq",
            "--url",
            "redis://flag:2",
            "work",
            "q",
            "--config",
            cfg,
        ]);
        let r = resolve(&cli.target(), src, &args, |k| {
            (k == "ECHOMQ_URL").then(|| "redis://env:3".into())
        })
        .unwrap();
        assert_eq!(r.url, "redis://flag:2", "flag over env");
        assert_eq!(r.queue, "q");
        let (cli, src, args) = parse(&["echomq", "work", "q", "--url", "redis://flag:2"]);
        let r = resolve(&cli.target(), src, &args, |k| {
            (k == "ECHOMQ_URL").then(|| "redis://env:3".into())
        })
        .unwrap();
        assert_eq!(
            r.url, "redis://flag:2",
            "a global flag after the subcommand counts as a flag"
        );
        let (cli, src, args) = parse(&["echomq", "work", "q", "--config", cfg]);
        let r = resolve(&cli.target(), src, &args, |k| {
            (k == "ECHOMQ_URL").then(|| "redis://env:3".into())
        })
        .unwrap();
        assert_eq!(r.url, "redis://env:3", "env over file");
        std::fs::write(&path, "concurency = 3\n").unwrap();
        let e = resolve(&cli.target(), src, &args, |_| None).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "config file {cfg} line 1: unknown field `concurency`"
            )),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn metrics_and_otlp_options_resolve_like_the_others() {
        let (cli, src, args) = parse(&["echomq", "work", "q", "--metrics-addr", "127.0.0.1:9464"]);
        let r = resolve(&cli.target(), src, &args, |_| None).unwrap();
        assert_eq!(r.metrics_addr, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(r.otlp_endpoint, None, "off by default");
        // The standard OTLP variable alone turns the export on, the exporter
        // reading the endpoint itself.
        let r = resolve(&cli.target(), src, &args, |k| {
            (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://c:4318".into())
        })
        .unwrap();
        assert_eq!(r.otlp_endpoint.as_deref(), Some(""));
        let (cli, src, args) =
            parse(&["echomq", "work", "q", "--otlp-endpoint", "http://flag:4318"]);
        let r = resolve(&cli.target(), src, &args, |k| {
            (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://env:4318".into())
        })
        .unwrap();
        assert_eq!(r.otlp_endpoint.as_deref(), Some("http://flag:4318"));
        assert!(parse_err(&[
            "echomq",
            "work",
            "q",
            "--metrics-addr",
            "nowhere"
        ]));
    }

    fn parse_err(argv: &[&str]) -> bool {
        crate::cli::Cli::command()
            .try_get_matches_from(argv)
            .is_err()
    }

    #[test]
    fn batch_and_default_timeout_options_are_checked() {
        let b = parse_batch("50").unwrap();
        assert_eq!((b.size, b.min_size, b.timeout), (50, 1, Duration::ZERO));
        let b = parse_batch("50/10/200").unwrap();
        assert_eq!(
            (b.size, b.min_size, b.timeout),
            (50, 10, Duration::from_millis(200))
        );
        for bad in ["0", "10/20", "x", "10/2/3/4", "10/0"] {
            assert!(parse_batch(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn processor_options_resolve_and_headers_stay_secret() {
        let dir = std::env::temp_dir().join(format!("echomq-proc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("echomq.toml");
        std::fs::write(
            &path,
            "processor = \"http:https://fn.example/run\"\nhttp_headers = [\"X-Key: file-secret\"]\nhttp_timeout = 5000\nprocesses = 3\n",
        )
        .unwrap();
        let cfg = path.to_str().unwrap();
        let (cli, src, args) = parse(&["echomq", "work", "q", "--config", cfg]);
        let r = resolve(&cli.target(), src, &args, |_| None).unwrap();
        assert!(matches!(r.settings.processor, ProcessorSpec::Http(_)));
        assert_eq!(r.settings.external.processes, Some(3));
        assert_eq!(r.settings.external.http_timeout, Duration::from_secs(5));
        assert_eq!(r.settings.external.http_headers[0].name(), "x-key");
        let shown = format!("{r:?}");
        assert!(!shown.contains("file-secret"), "{shown}");
        // The flag replaces the file's headers.
        let (cli, src, args) = parse(&[
            "echomq",
            "work",
            "q",
            "--config",
            cfg,
            "--http-header",
            "Authorization: Bearer flag-secret",
        ]);
        let r = resolve(&cli.target(), src, &args, |_| None).unwrap();
        assert_eq!(r.settings.external.http_headers.len(), 1);
        assert_eq!(r.settings.external.http_headers[0].name(), "authorization");
        assert!(!format!("{args:?}{r:?}").contains("flag-secret"));
        std::fs::write(&path, "http_headers = [\"no colon secret\"]\n").unwrap();
        let e = resolve(&cli.target(), src, &args_without_headers(cfg), |_| None).unwrap_err();
        assert!(
            e.starts_with("http_headers: ") && !e.contains("secret"),
            "{e}"
        );
        assert!(parse_err(&[
            "echomq",
            "work",
            "q",
            "--http-header",
            "nocolon"
        ]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn args_without_headers(cfg: &str) -> WorkArgs {
        parse(&["echomq", "work", "q", "--config", cfg]).2
    }

    #[test]
    fn bool_options_take_an_optional_value() {
        let (_, _, a) = parse(&["echomq", "work", "--quiet", "q"]);
        assert_eq!((a.quiet, a.queue.as_deref()), (Some(true), Some("q")));
        let (_, _, a) = parse(&[
            "echomq",
            "work",
            "q",
            "--quiet=false",
            "--log-format",
            "json",
        ]);
        assert_eq!(
            (a.quiet, a.log_format),
            (Some(false), Some(LogFormat::Json))
        );
    }

    /// Pieces of TOML, right and wrong: the file's keys, values of every
    /// kind, tables, and characters of several bytes around them.
    fn toml_piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let key = prop::sample::select(vec![
            "url",
            "prefix",
            "queue",
            "concurrency",
            "lock_duration",
            "quiet",
            "health_addr",
            "log_format",
            "metrics",
            "concurency",
            "é",
            "[x]",
            "[[a]]",
            "a.b",
            "\"k\"",
        ]);
        let value = prop_oneof![
            Just("\"redis://h:1\"".to_owned()),
            Just("18446744073709551616".to_owned()),
            Just("-1".to_owned()),
            Just("1e400".to_owned()),
            Just("true".to_owned()),
            Just("[1, \"a\"]".to_owned()),
            Just("{ a = 1 }".to_owned()),
            Just("\"\"\"\n€\"\"\"".to_owned()),
            Just("'€😀'".to_owned()),
            Just("\"127.0.0.1:99999\"".to_owned()),
            "[\\PC]{0,6}",
        ];
        let sep = prop::sample::select(vec![" = ", "=", " ", "\n", "\r\n", "€", "😀", "#", "\""]);
        (
            key,
            sep,
            value,
            prop::sample::select(vec!["\n", "", "\r", " # c\n"]),
        )
            .prop_map(|(k, s, v, end)| format!("{k}{s}{v}{end}"))
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 400, ..Default::default() })]

        /// Any file text: settings, or one error line naming the file.
        #[test]
        fn any_config_text_is_settings_or_one_error_line(
            pieces in proptest::collection::vec(toml_piece(), 0..8),
            raw in "[\\PC\n]{0,24}",
        ) {
            let path = Path::new("echomq.toml");
            for text in [pieces.concat(), raw] {
                if let Err(e) = parse_file(&text, path) {
                    proptest::prop_assert!(e.starts_with("config file echomq.toml"), "{}", e);
                    proptest::prop_assert!(!e.contains('\n'), "{}", e);
                }
            }
        }

        /// Settings written to a file read back as written.
        #[test]
        fn config_file_round_trip(
            queue in "[\\PC]{1,12}",
            url in proptest::option::of("[\\PC]{0,12}"),
            numbers in (0..=i64::MAX as u64, 0..=i64::MAX as u64, 0usize..=i64::MAX as usize),
            quiet in proptest::option::of(proptest::bool::ANY),
            json in proptest::bool::ANY,
            addr in proptest::option::of((proptest::num::u8::ANY, proptest::num::u16::ANY)),
        ) {
            let quote = |s: &str| serde_json::to_string(s).unwrap();
            let mut text = format!(
                "queue = {}\nlock_duration = {}\nmax_jobs = {}\nconcurrency = {}\nlog_format = {}\n",
                quote(&queue),
                numbers.0,
                numbers.1,
                numbers.2,
                if json { "\"json\"" } else { "\"text\"" },
            );
            if let Some(u) = &url {
                text.push_str(&format!("url = {}\n", quote(u)));
            }
            if let Some(q) = quiet {
                text.push_str(&format!("quiet = {q}\n"));
            }
            let addr = addr.map(|(a, port)| SocketAddr::from(([127, 0, 0, a], port)));
            if let Some(a) = addr {
                text.push_str(&format!("health_addr = \"{a}\"\n"));
            }
            let f = parse_file(&text, Path::new("c.toml")).unwrap();
            proptest::prop_assert_eq!(f.queue, Some(queue));
            proptest::prop_assert_eq!(f.url, url);
            proptest::prop_assert_eq!(f.lock_duration, Some(numbers.0));
            proptest::prop_assert_eq!(f.max_jobs, Some(numbers.1));
            proptest::prop_assert_eq!(f.concurrency, Some(numbers.2));
            proptest::prop_assert_eq!(f.quiet, quiet);
            proptest::prop_assert_eq!(f.health_addr, addr);
            let format = if json { LogFormat::Json } else { LogFormat::Text };
            proptest::prop_assert_eq!(f.log_format, Some(format));
        }
    }
}
