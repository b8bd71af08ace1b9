//! `echomq work [QUEUE]` as a service: its options from flags, `ECHOMQ_*`
//! variables and a TOML file (in that precedence, then the defaults;
//! `settings`), its logs (text or JSON), the start-up that waits for Redis,
//! the worker tree (`tree`) and the exit codes of `docs/deployment.md
//! §Running as a service`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use echomq::connection::{host_port, server_facts, ServerProblem};
use echomq::external::HttpHeader;
use echomq::{Connection, Queue, QueueOptions, RetryPolicy};
use echomq_cli::diagnose::{self, FailureClass};
use serde::Deserialize;
use tracing::warn;

use crate::target::Target;
use settings::{HeaderLines, Settings};

mod otlp;
mod processors;
mod settings;
mod synthetic;
mod tree;

/// Options of `echomq work`. Each is optional here: a value missing from
/// the command line and the environment comes from the file, then from the
/// default named in its help.
//
// One struct for all three layers: clap reads the flags and their
// `ECHOMQ_*` variables (so `--help` names them and a bad value is clap's
// usage error), serde reads the `--config` file into the same fields
// (snake_case keys), and `Args::or` lays the first over the second.
#[derive(Clone, Debug, Default, clap::Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    /// File only: the global `--url`/`REDIS_URL` is the flag (`ECHOMQ_URL`
    /// comes between them).
    #[arg(skip)]
    url: Option<String>,
    /// File only, as `url` (`ECHOMQ_PREFIX`).
    #[arg(skip)]
    prefix: Option<String>,
    /// The queue to work on (file key: `queue`).
    #[arg(env = "ECHOMQ_QUEUE")]
    queue: Option<String>,
    /// A TOML file with any of these options (snake_case keys, and `url`, `prefix`).
    #[arg(long, env = "ECHOMQ_CONFIG")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Jobs run at the same time [default: 1].
    #[arg(long, env = "ECHOMQ_CONCURRENCY")]
    concurrency: Option<usize>,
    /// exec:COMMAND (handler processes) | http:URL | sleep:MS | echo | fail |
    /// fail-rate:P | cpu:MS [default: echo] (docs/processors.md).
    #[arg(long, env = "ECHOMQ_PROCESSOR")]
    processor: Option<String>,
    /// Handler processes of `exec:` [default: the concurrency].
    #[arg(long, env = "ECHOMQ_PROCESSES")]
    processes: Option<usize>,
    /// Per-request timeout of `http:` in ms [default: 30000].
    #[arg(long, env = "ECHOMQ_HTTP_TIMEOUT")]
    http_timeout: Option<u64>,
    /// A header of every `http:` request, `Name: value` (repeat the flag; in
    /// ECHOMQ_HTTP_HEADERS one per line). Never logged.
    #[arg(
        long = "http-header",
        env = "ECHOMQ_HTTP_HEADERS",
        value_delimiter = '\n',
        hide_env_values = true,
        value_name = "NAME: VALUE"
    )]
    #[serde(skip)]
    http_headers: Vec<HttpHeader>,
    /// The file's `http_headers`, parsed once the layers are merged so that
    /// a bad one is named by its key (and never shown).
    #[arg(skip)]
    #[serde(rename = "http_headers")]
    file_http_headers: Option<HeaderLines>,
    /// PEM CA to trust for an `https:` endpoint [default: the system's roots].
    #[arg(long, env = "ECHOMQ_HTTP_CA_FILE", value_name = "PEM")]
    http_ca_file: Option<PathBuf>,
    /// Lock TTL in ms [default: 30000].
    #[arg(long, env = "ECHOMQ_LOCK_DURATION")]
    lock_duration: Option<u64>,
    /// Stalled-check interval in ms [default: 30000].
    #[arg(long, env = "ECHOMQ_STALLED_INTERVAL")]
    stalled_interval: Option<u64>,
    /// Take at most this many jobs (no fetch past it), then exit once they
    /// are finished.
    #[arg(long, env = "ECHOMQ_MAX_JOBS")]
    max_jobs: Option<u64>,
    /// Worker name (listed by BullMQ's getWorkers).
    #[arg(long, env = "ECHOMQ_NAME")]
    name: Option<String>,
    /// Worker rate limiter MAX/DURATION_MS (BullMQ's `limiter`, shared with
    /// every worker of the queue that has one, Node's included).
    #[arg(long, env = "ECHOMQ_LIMITER")]
    limiter: Option<String>,
    /// Concurrency of every group without its own (BullMQ Pro's worker
    /// `group.concurrency`), written to the queue's group defaults for the
    /// whole fleet at start [default: leave them as they are].
    #[arg(long, env = "ECHOMQ_GROUP_CONCURRENCY", value_name = "N")]
    group_concurrency: Option<u64>,
    /// Rate limit MAX/DURATION_MS of every group without its own (Pro's
    /// `group.limit`), written with --group-concurrency's rule.
    #[arg(long, env = "ECHOMQ_GROUP_RATE_LIMIT", value_name = "MAX/DURATION_MS")]
    group_rate_limit: Option<String>,
    /// Dead-letter queue: jobs that fail for good move there, those this
    /// worker fails in the same call, other workers' (BullMQ Node's) by a
    /// follower of the queue's events this process runs (docs/operations.md
    /// §Dead letters) [default: none, they stay in `failed`].
    #[arg(long, env = "ECHOMQ_DEAD_LETTER", value_name = "QUEUE")]
    dead_letter: Option<String>,
    /// Record per-minute completed/failed counts, keeping this many minutes
    /// (BullMQ's `metrics.maxDataPoints`) [default: off].
    #[arg(long, env = "ECHOMQ_METRICS", value_name = "MAX_DATA_POINTS")]
    metrics: Option<u64>,
    /// No per-second lines (`--quiet` or `--quiet=false`).
    #[arg(long, env = "ECHOMQ_QUIET", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    quiet: Option<bool>,
    /// Give up connecting at start-up after this many ms [default: wait for Redis forever].
    #[arg(long, env = "ECHOMQ_CONNECT_TIMEOUT")]
    connect_timeout: Option<u64>,
    /// Serve /livez and /readyz on this address, e.g. 127.0.0.1:8080.
    #[arg(long, env = "ECHOMQ_HEALTH_ADDR")]
    health_addr: Option<SocketAddr>,
    /// Serve Prometheus /metrics on this address, e.g. 127.0.0.1:9464 (a
    /// non-loopback address is logged as such) [default: off].
    #[arg(long, env = "ECHOMQ_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// The age (ms) the queue's oldest waiting job should stay under: the
    /// `echomq_capacity_desired_workers` gauge of /metrics is computed
    /// against it (docs/operations.md §Autoscaling) [default: 10000].
    #[arg(long, env = "ECHOMQ_SCALE_TARGET_AGE", value_name = "MS")]
    scale_target_age: Option<u64>,
    /// Jobs one worker runs at once, for that gauge [default: --concurrency].
    #[arg(long, env = "ECHOMQ_SCALE_CONCURRENCY", value_name = "N")]
    scale_concurrency: Option<u32>,
    /// Export spans over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318
    /// [default: OTEL_EXPORTER_OTLP_ENDPOINT when set, else off].
    #[arg(long, env = "ECHOMQ_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// How long running jobs may finish at SIGTERM before they go back to wait, ms [default: 10000].
    #[arg(long, env = "ECHOMQ_CLOSE_TIMEOUT")]
    close_timeout: Option<u64>,
    /// Fail an attempt still running after this many ms, for jobs without a
    /// `timeout` of their own [default: no timeout].
    #[arg(long, env = "ECHOMQ_DEFAULT_TIMEOUT", value_name = "MS")]
    default_timeout: Option<u64>,
    /// Take jobs in batches: SIZE, SIZE/MIN or SIZE/MIN/TIMEOUT_MS (wait up to
    /// TIMEOUT_MS for MIN jobs); each batch is taken and finished in one round
    /// trip, its jobs run side by side [default: one job at a time].
    #[arg(long, env = "ECHOMQ_BATCH", value_name = "SIZE[/MIN[/TIMEOUT_MS]]")]
    batch: Option<String>,
    /// Log lines as text or JSON [default: text].
    #[arg(long, env = "ECHOMQ_LOG_FORMAT")]
    log_format: Option<LogFormat>,
    /// Log filter: a level (`info`) or EnvFilter directives (`echomq=debug,warn`);
    /// without it RUST_LOG is read [default: info].
    #[arg(long, env = "ECHOMQ_LOG_LEVEL")]
    log_level: Option<String>,
    /// Run on a server whose maxmemory-policy is not noeviction (a warning instead of exit 4).
    #[arg(long, env = "ECHOMQ_ALLOW_EVICTION", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    allow_eviction: Option<bool>,
    /// Store return values through this payload codec: gzip |
    /// aes256gcm+gzip; job data stored through any codec is decoded whatever
    /// this says [default: none].
    #[arg(long, env = "ECHOMQ_CODEC", value_name = "CODEC")]
    codec: Option<String>,
    /// Payload keys as `id:base64` lines, the last one current [default: the
    /// ECHOMQ_CODEC_KEYS variable, `id:base64,id:base64`]. Never logged.
    #[arg(long, env = "ECHOMQ_CODEC_KEYS_FILE", value_name = "FILE")]
    codec_keys_file: Option<PathBuf>,
    /// The largest decoded payload accepted, in bytes [default: 512 MiB].
    #[arg(long, env = "ECHOMQ_MAX_DECODED_BYTES", value_name = "BYTES")]
    max_decoded_bytes: Option<usize>,
    /// Offload data and return values over the threshold to a blob store:
    /// `dir:/path` or `s3://bucket/prefix?endpoint=URL&region=R` (credentials
    /// from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); the worker also
    /// sweeps the blobs no job uses, every minute [default: none].
    #[arg(long, env = "ECHOMQ_OFFLOAD", value_name = "STORE")]
    offload: Option<String>,
    /// Payloads larger than this many bytes (as stored) are offloaded [default: 262144].
    #[arg(long, env = "ECHOMQ_OFFLOAD_THRESHOLD", value_name = "BYTES")]
    offload_threshold: Option<usize>,
}

/// How log lines are written (to stderr).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Installs the tracing subscriber: `log_level` when given, else RUST_LOG,
/// else `info`; text or JSON lines on stderr; and the OTLP span export when
/// `otlp` is given (with its own `info` filter, so a debug log level does
/// not export every debug span).
fn init_logging(
    format: LogFormat,
    level: Option<&str>,
    otlp: Option<otlp::Export>,
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
pub(crate) async fn run(args: Args, cli: &Target) -> i32 {
    let r = match settings::resolve(cli, args, |k| std::env::var(k).ok()) {
        Ok(r) => r,
        Err(e) => return fail(FailureClass::Config, &e),
    };
    let otlp = match r.otlp_endpoint.as_deref().map(otlp::Export::start) {
        Some(Ok(export)) => Some(export),
        Some(Err(e)) => return fail(FailureClass::Config, &e),
        None => None,
    };
    let flush = otlp.as_ref().map(otlp::Export::provider);
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
        otlp::shutdown(provider);
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
fn watch(server: Option<&MetricsServer>, queue: &Queue, r: &Settings) {
    if let Some(s) = server {
        s.watch(queue.clone());
        // Checked when the settings were resolved.
        if let Err(e) = s.set_capacity(r.capacity) {
            warn!("{e}");
        }
    }
}

#[cfg(not(feature = "metrics"))]
fn watch(_server: Option<&MetricsServer>, _queue: &Queue, _r: &Settings) {}

/// While the worker runs, the blobs no job uses are deleted: a page a
/// second until none is due, then a minute's rest. Dropped, it stops.
fn sweep_blobs(queue: &Queue) -> Option<AbortOnDrop> {
    queue.codec().offload.as_ref()?;
    let queue = queue.clone();
    Some(AbortOnDrop(tokio::spawn(async move {
        const PAGE: u64 = 250;
        const GRACE: std::time::Duration = std::time::Duration::from_secs(3600);
        loop {
            let pause = match queue.collect_blobs(GRACE, PAGE).await {
                Ok(s) if s.examined as u64 == PAGE => std::time::Duration::from_secs(1),
                Ok(_) => std::time::Duration::from_secs(60),
                Err(e) => {
                    warn!(error = %e, "blob sweep failed; trying again in a minute");
                    std::time::Duration::from_secs(60)
                }
            };
            tokio::time::sleep(pause).await;
        }
    })))
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn run_connected(
    conn: &Connection,
    r: Settings,
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
    let options = QueueOptions::default().codec(r.codec.clone());
    let queue = match Queue::with_options(conn, &r.queue, options).await {
        Ok(q) => q,
        Err(e) => {
            let d = diagnose::diagnose(&e, Some(&r.url));
            return fail(d.class, &d.message);
        }
    };
    watch(metrics, &queue, &r);
    // The dead-letter queue's own counts and dead letters by class.
    if let Some(dlq) = &r.dead_letter {
        let options = echomq::QueueOptions::default().skip_meta_update(true);
        if let Ok(d) = Queue::with_options(conn, dlq, options).await {
            watch(metrics, &d, &r);
        }
    }
    let processor = match processors::build(&r.processor, r.concurrency, &r.external).await {
        Ok(p) => p,
        Err(e) => return fail(FailureClass::Config, &e),
    };
    let _sweeper = sweep_blobs(&queue);
    match tree::work(conn.clone(), queue, r, processor, health).await {
        Ok(()) => 0,
        Err(e) => fail(FailureClass::Runtime, &e.to_string()),
    }
}
