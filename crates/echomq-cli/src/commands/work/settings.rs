//! The settings of `echomq work`: the flags and their `ECHOMQ_*` variables
//! (clap) over the `--config` file (the same [`Args`], read by serde) over
//! the defaults, checked into one [`Settings`]. A configuration error is one
//! line (exit 2).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use echomq::external::HttpHeader;
use serde::Deserialize;

use super::processors::{ExternalSettings, ProcessorSpec};
use super::{Args, LogFormat};
use crate::target::Target;

/// Everything `echomq work` runs with, resolved and validated.
#[derive(Debug)]
pub(super) struct Settings {
    pub(super) url: String,
    pub(super) prefix: String,
    pub(super) queue: String,
    pub(super) connect_timeout: Option<Duration>,
    pub(super) health_addr: Option<SocketAddr>,
    pub(super) metrics_addr: Option<SocketAddr>,
    /// The settings of the autoscaling gauges /metrics serves.
    pub(super) capacity: echomq::capacity::CapacitySettings,
    /// The OTLP collector; `Some("")` when only the OTEL_* variables name it.
    pub(super) otlp_endpoint: Option<String>,
    pub(super) log_format: LogFormat,
    pub(super) log_level: Option<String>,
    pub(super) allow_eviction: bool,
    pub(super) concurrency: usize,
    pub(super) processor: ProcessorSpec,
    /// Settings of `exec:` and `http:` processors.
    pub(super) external: ExternalSettings,
    pub(super) lock_duration: Duration,
    pub(super) stalled_interval: Duration,
    pub(super) max_jobs: Option<u64>,
    pub(super) name: Option<String>,
    /// The worker rate limiter, when given.
    pub(super) limiter: Option<echomq::RateLimit>,
    /// The worker's `group` option (the queue's group defaults), when given.
    pub(super) group: Option<echomq::groups::GroupDefaults>,
    /// The dead-letter queue, when given.
    pub(super) dead_letter: Option<String>,
    /// Minutes of metrics kept (`metrics.maxDataPoints`), when recording.
    pub(super) metrics: Option<u64>,
    pub(super) quiet: bool,
    /// How long running jobs may finish at shutdown.
    pub(super) close_timeout: Duration,
    /// The timeout of jobs without their own.
    pub(super) default_timeout: Option<Duration>,
    /// Batches, when taken in batches.
    pub(super) batch: Option<echomq::worker::BatchOptions>,
    /// Payload codec settings (their `Debug` shows key ids only).
    pub(super) codec: echomq::codec::CodecOptions,
}

/// The `http_headers` lines of a file, unchecked; `Debug` shows how many,
/// never a value.
#[derive(Clone, Default, Deserialize)]
pub(super) struct HeaderLines(Vec<String>);

impl std::fmt::Debug for HeaderLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} header line(s)", self.0.len())
    }
}

impl Args {
    /// These values where given, else `file`'s.
    fn or(self, file: Args) -> Args {
        Args {
            url: self.url.or(file.url),
            prefix: self.prefix.or(file.prefix),
            queue: self.queue.or(file.queue),
            config: self.config,
            concurrency: self.concurrency.or(file.concurrency),
            processor: self.processor.or(file.processor),
            processes: self.processes.or(file.processes),
            http_timeout: self.http_timeout.or(file.http_timeout),
            // The flag's headers replace the file's.
            file_http_headers: match self.http_headers.is_empty() {
                true => file.file_http_headers,
                false => None,
            },
            http_headers: self.http_headers,
            http_ca_file: self.http_ca_file.or(file.http_ca_file),
            lock_duration: self.lock_duration.or(file.lock_duration),
            stalled_interval: self.stalled_interval.or(file.stalled_interval),
            max_jobs: self.max_jobs.or(file.max_jobs),
            name: self.name.or(file.name),
            limiter: self.limiter.or(file.limiter),
            group_concurrency: self.group_concurrency.or(file.group_concurrency),
            group_rate_limit: self.group_rate_limit.or(file.group_rate_limit),
            dead_letter: self.dead_letter.or(file.dead_letter),
            metrics: self.metrics.or(file.metrics),
            quiet: self.quiet.or(file.quiet),
            connect_timeout: self.connect_timeout.or(file.connect_timeout),
            health_addr: self.health_addr.or(file.health_addr),
            metrics_addr: self.metrics_addr.or(file.metrics_addr),
            scale_target_age: self.scale_target_age.or(file.scale_target_age),
            scale_concurrency: self.scale_concurrency.or(file.scale_concurrency),
            otlp_endpoint: self.otlp_endpoint.or(file.otlp_endpoint),
            close_timeout: self.close_timeout.or(file.close_timeout),
            default_timeout: self.default_timeout.or(file.default_timeout),
            batch: self.batch.or(file.batch),
            log_format: self.log_format.or(file.log_format),
            log_level: self.log_level.or(file.log_level),
            allow_eviction: self.allow_eviction.or(file.allow_eviction),
            codec: self.codec.or(file.codec),
            codec_keys_file: self.codec_keys_file.or(file.codec_keys_file),
            max_decoded_bytes: self.max_decoded_bytes.or(file.max_decoded_bytes),
            offload: self.offload.or(file.offload),
            offload_threshold: self.offload_threshold.or(file.offload_threshold),
        }
    }
}

/// Flag > env > file > default, for every option; `env` reads the
/// variables that are not the flags' own (`ECHOMQ_URL`, `ECHOMQ_PREFIX`,
/// the OTEL_* ones).
pub(super) fn resolve(
    t: &Target,
    args: Args,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Settings, String> {
    let file = match &args.config {
        Some(path) => read_file(path)?,
        None => Args::default(),
    };
    let a = args.or(file);
    // The global flags have clap defaults, so their source decides.
    let url = match (t.sources.url_flag, env("ECHOMQ_URL")) {
        (true, _) => t.url.clone(),
        (false, Some(u)) => u,
        _ if t.sources.url_env => t.url.clone(),
        _ => a.url.clone().unwrap_or_else(|| t.url.clone()),
    };
    let prefix = match t.sources.prefix_flag {
        true => t.prefix.clone(),
        false => env("ECHOMQ_PREFIX")
            .or(a.prefix.clone())
            .unwrap_or_else(|| t.prefix.clone()),
    };
    let queue = a
        .queue
        .clone()
        .ok_or("no queue: give it as an argument, ECHOMQ_QUEUE or `queue` in the config file")?;
    echomq::protocol::QueueKeys::new(&prefix, &queue).map_err(|e| e.to_string())?;
    // The standard variables, read by the exporter itself.
    let otel_env = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|k| env(k).is_some_and(|v| !v.is_empty()));
    let codec = crate::codec::options(
        a.codec.as_deref(),
        a.codec_keys_file.as_deref(),
        a.max_decoded_bytes,
        &env,
    )?
    .offload(
        crate::codec::OffloadArgs {
            offload: a.offload.clone(),
            offload_threshold: a.offload_threshold,
        }
        .options()?,
    );
    checked(a, url, prefix, queue, otel_env, codec)
}

/// The merged options checked, in the order their errors are reported, with
/// the defaults filled in.
fn checked(
    a: Args,
    url: String,
    prefix: String,
    queue: String,
    otel_env: bool,
    codec: echomq::codec::CodecOptions,
) -> Result<Settings, String> {
    let processor: ProcessorSpec = a.processor.as_deref().unwrap_or("echo").parse()?;
    let concurrency = a.concurrency.unwrap_or(1);
    if concurrency == 0 {
        return Err("concurrency must be at least 1".into());
    }
    let external = external(
        a.processes,
        a.http_headers,
        a.file_http_headers,
        a.http_timeout,
        a.http_ca_file,
    )?;
    let default_timeout = match a.default_timeout {
        Some(0) => return Err("--default-timeout must be at least 1 ms".into()),
        t => t.map(Duration::from_millis),
    };
    let batch = match a.batch {
        Some(text) => Some(parse_batch(&text).map_err(|e| format!("--batch: {e}"))?),
        None => None,
    };
    let lock_duration = a.lock_duration.unwrap_or(30_000);
    let stalled_interval = a.stalled_interval.unwrap_or(30_000);
    if lock_duration == 0 || stalled_interval == 0 {
        return Err("lock_duration and stalled_interval must be positive".into());
    }
    let limiter = match a.limiter {
        Some(text) => Some(
            crate::commands::limiter::parse_rate_limit(&text)
                .map_err(|e| format!("--limiter: {e}"))?,
        ),
        None => None,
    };
    let group = group_defaults(a.group_concurrency, a.group_rate_limit)?;
    if a.metrics == Some(0) {
        return Err("--metrics: MAX_DATA_POINTS must be at least 1".into());
    }
    // One worker's slots are its concurrency unless told otherwise.
    let capacity = crate::capacity::settings(
        a.scale_target_age,
        a.scale_concurrency,
        u32::try_from(concurrency).unwrap_or(u32::MAX),
    )?;
    let dead_letter = match a.dead_letter {
        Some(dlq) if dlq == queue => {
            return Err(format!(
                "--dead-letter: queue {queue:?} cannot be its own dead-letter queue"
            ))
        }
        Some(dlq) => {
            echomq::protocol::QueueKeys::new(&prefix, &dlq)
                .map_err(|e| format!("--dead-letter: {e}"))?;
            Some(dlq)
        }
        None => None,
    };
    let ms = Duration::from_millis;
    Ok(Settings {
        url,
        prefix,
        queue,
        connect_timeout: a.connect_timeout.map(ms),
        health_addr: a.health_addr,
        metrics_addr: a.metrics_addr,
        capacity,
        otlp_endpoint: a.otlp_endpoint.or(otel_env.then(String::new)),
        log_format: a.log_format.unwrap_or_default(),
        log_level: a.log_level,
        allow_eviction: a.allow_eviction.unwrap_or(false),
        concurrency,
        processor,
        external,
        lock_duration: ms(lock_duration),
        stalled_interval: ms(stalled_interval),
        max_jobs: a.max_jobs,
        name: a.name,
        limiter,
        group,
        dead_letter,
        metrics: a.metrics,
        quiet: a.quiet.unwrap_or(false),
        close_timeout: ms(a.close_timeout.unwrap_or(10_000)),
        default_timeout,
        batch,
        codec,
    })
}

/// The settings of `exec:` and `http:`, checked.
fn external(
    processes: Option<usize>,
    flag_headers: Vec<HttpHeader>,
    file_headers: Option<HeaderLines>,
    http_timeout: Option<u64>,
    http_ca_file: Option<std::path::PathBuf>,
) -> Result<ExternalSettings, String> {
    if processes == Some(0) {
        return Err("--processes must be at least 1".into());
    }
    let http_headers = match file_headers {
        Some(HeaderLines(lines)) => lines
            .iter()
            .map(|l| l.parse::<HttpHeader>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("http_headers: {e}"))?,
        None => flag_headers,
    };
    let http_timeout = http_timeout.unwrap_or(30_000);
    if http_timeout == 0 {
        return Err("--http-timeout must be positive".into());
    }
    Ok(ExternalSettings {
        processes,
        http_timeout: Duration::from_millis(http_timeout),
        http_headers,
        http_ca_file,
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

fn read_file(path: &Path) -> Result<Args, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    parse_file(&text, path)
}

/// The file's text as settings, or one error line naming the file (and the
/// line, when the parser gives a position).
fn parse_file(text: &str, path: &Path) -> Result<Args, String> {
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
            let l = crate::commands::limiter::parse_rate_limit(&text)
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

    fn parse(argv: &[&str]) -> (Target, Args) {
        let m = crate::cli::Cli::command()
            .try_get_matches_from(argv)
            .unwrap();
        let cli = crate::cli::Cli::from_arg_matches(&m).unwrap();
        let crate::commands::Command::Work(args) = &cli.command else {
            panic!("not work")
        };
        (cli.target(&m), (**args).clone())
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
        let (target, mut args) = parse(&["echomq", "work", "--config", cfg, "--concurrency", "5"]);
        args.lock_duration = args.lock_duration.or(Some(9000)); // as if ECHOMQ_LOCK_DURATION=9000
        let env = |k: &str| (k == "ECHOMQ_PREFIX").then(|| "{e}".to_owned());
        let r = resolve(&target, args.clone(), env).unwrap();
        assert_eq!(r.concurrency, 5, "flag over file");
        assert_eq!(
            r.lock_duration,
            Duration::from_millis(9000),
            "env over file"
        );
        assert_eq!(r.prefix, "{e}", "env over file");
        assert_eq!(r.url, "redis://file:1", "file over default");
        assert_eq!(r.queue, "fromfile");
        assert_eq!(r.metrics, Some(60), "file over default (off)");
        assert_eq!(r.stalled_interval, Duration::from_secs(30), "default");
        let (target, args) = parse(&[
            "echomq",
            "--url",
            "redis://flag:2",
            "work",
            "q",
            "--config",
            cfg,
        ]);
        let r = resolve(&target, args.clone(), |k| {
            (k == "ECHOMQ_URL").then(|| "redis://env:3".into())
        })
        .unwrap();
        assert_eq!(r.url, "redis://flag:2", "flag over env");
        assert_eq!(r.queue, "q");
        let (target, args) = parse(&["echomq", "work", "q", "--url", "redis://flag:2"]);
        let r = resolve(&target, args.clone(), |k| {
            (k == "ECHOMQ_URL").then(|| "redis://env:3".into())
        })
        .unwrap();
        assert_eq!(
            r.url, "redis://flag:2",
            "a global flag after the subcommand counts as a flag"
        );
        let (target, args) = parse(&["echomq", "work", "q", "--config", cfg]);
        let r = resolve(&target, args.clone(), |k| {
            (k == "ECHOMQ_URL").then(|| "redis://env:3".into())
        })
        .unwrap();
        assert_eq!(r.url, "redis://env:3", "env over file");
        std::fs::write(&path, "concurency = 3\n").unwrap();
        let e = resolve(&target, args.clone(), |_| None).unwrap_err();
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
        let (target, args) = parse(&["echomq", "work", "q", "--metrics-addr", "127.0.0.1:9464"]);
        let r = resolve(&target, args.clone(), |_| None).unwrap();
        assert_eq!(r.metrics_addr, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(r.otlp_endpoint, None, "off by default");
        // The standard OTLP variable alone turns the export on, the exporter
        // reading the endpoint itself.
        let r = resolve(&target, args.clone(), |k| {
            (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://c:4318".into())
        })
        .unwrap();
        assert_eq!(r.otlp_endpoint.as_deref(), Some(""));
        let (target, args) = parse(&["echomq", "work", "q", "--otlp-endpoint", "http://flag:4318"]);
        let r = resolve(&target, args.clone(), |k| {
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

    #[test]
    fn scale_options_default_to_the_worker_and_refuse_zero() {
        let (target, args) = parse(&["echomq", "work", "q", "--concurrency", "4"]);
        let r = resolve(&target, args, |_| None).unwrap();
        assert_eq!(r.capacity.concurrency, 4, "a worker's slots by default");
        assert_eq!(r.capacity.target_age, Duration::from_secs(10));
        let (target, args) = parse(&[
            "echomq",
            "work",
            "q",
            "--scale-target-age",
            "2500",
            "--scale-concurrency",
            "2",
        ]);
        let r = resolve(&target, args, |_| None).unwrap();
        assert_eq!(r.capacity.target_age, Duration::from_millis(2500));
        assert_eq!(r.capacity.concurrency, 2);
        for flag in ["--scale-target-age", "--scale-concurrency"] {
            let (target, args) = parse(&["echomq", "work", "q", flag, "0"]);
            let e = resolve(&target, args, |_| None).unwrap_err();
            assert!(e.starts_with(flag), "{e}");
        }
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
        let (target, args) = parse(&["echomq", "work", "q", "--config", cfg]);
        let r = resolve(&target, args.clone(), |_| None).unwrap();
        assert!(matches!(r.processor, ProcessorSpec::Http(_)));
        assert_eq!(r.external.processes, Some(3));
        assert_eq!(r.external.http_timeout, Duration::from_secs(5));
        assert_eq!(r.external.http_headers[0].name(), "x-key");
        let shown = format!("{r:?}");
        assert!(!shown.contains("file-secret"), "{shown}");
        // The flag replaces the file's headers.
        let (target, args) = parse(&[
            "echomq",
            "work",
            "q",
            "--config",
            cfg,
            "--http-header",
            "Authorization: Bearer flag-secret",
        ]);
        let r = resolve(&target, args.clone(), |_| None).unwrap();
        assert_eq!(r.external.http_headers.len(), 1);
        assert_eq!(r.external.http_headers[0].name(), "authorization");
        assert!(!format!("{args:?}{r:?}").contains("flag-secret"));
        std::fs::write(&path, "http_headers = [\"no colon secret\"]\n").unwrap();
        let e = resolve(&target, args_without_headers(cfg), |_| None).unwrap_err();
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

    fn args_without_headers(cfg: &str) -> Args {
        parse(&["echomq", "work", "q", "--config", cfg]).1
    }

    #[test]
    fn bool_options_take_an_optional_value() {
        let (_, a) = parse(&["echomq", "work", "--quiet", "q"]);
        assert_eq!((a.quiet, a.queue.as_deref()), (Some(true), Some("q")));
        let (_, a) = parse(&[
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
