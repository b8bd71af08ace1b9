//! Observability end to end (docs/operations.md): the `/metrics` endpoint
//! scraped over HTTP after a known workload, BullMQ's queue-state text
//! against BullMQ Node's own, and trace context carried through a job's `tm`
//! option between BullMQ Node (with `bullmq-otel`) and EchoMQ, both ways.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use echomq::telemetry::prometheus;
use echomq::worker::{processor_fn, JobContext};
use echomq::{
    FlowJob, FlowProducer, JobOptions, NewJob, Queue, QueueEvents, QueueEventsArgs, StalledChecker,
    StalledCheckerArgs, WorkerArgs, WorkerMsg, WorkerOptions,
};
use echomq_integration_tests::{behave, simulated, wait_until, NullSupervisor, RedisServer};
use fred::prelude::*;
use opentelemetry::trace::{SpanKind, TracerProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use ractor::{call_t, Actor, ActorRef};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

/// The body of `GET /metrics`.
async fn scrape(addr: SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The value of one series (`name{labels}` exactly as exported).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn series(name: &str, queue: &str) -> String {
    format!("{name}{{queue=\"{queue}\"}}")
}

fn jobs_in(queue: &str, state: &str) -> String {
    format!("bullmq_job_count{{queue=\"{queue}\", state=\"{state}\"}}")
}

async fn start_worker(q: &Queue, options: WorkerOptions) -> (ActorRef<WorkerMsg>, ActorRef<()>) {
    let (host, _) = Actor::spawn(None, NullSupervisor, ()).await.unwrap();
    let processor = processor_fn(|job: JobContext| async move { behave(&job).await });
    let mut args = WorkerArgs::new(q.clone(), processor);
    args.options = options;
    let (worker, _lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    (worker, host)
}

async fn close_worker(worker: &ActorRef<WorkerMsg>) {
    call_t!(worker, WorkerMsg::Close, 30_000, Duration::from_secs(10)).unwrap();
}

async fn wait_counts(q: &Queue, completed: u64, failed: u64) {
    wait_until(
        "the workload to finish",
        Duration::from_secs(90),
        async || {
            let c = q.counts().await.unwrap();
            c.completed == completed && c.failed == failed
        },
    )
    .await;
}

/// 20 jobs complete (one runs 6 s: renewal ticks come every 2.5 s), 5 fail
/// after a retry each, and a dead worker's job is recovered by the stalled
/// checker and completes: the scrape says exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_counts_a_known_workload() {
    let redis = RedisServer::start();
    // First: components take their metric handles when they start.
    let server = prometheus::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    assert!(server.addr().ip().is_loopback());
    let conn = redis.connect().await;
    let name = "obs-metrics";
    let q = Queue::new(&conn, name).await.unwrap();
    server.watch(q.clone());

    // A dead worker's job: taken, then its lock gone.
    q.add("stalled", &json!({}), JobOptions::new())
        .await
        .unwrap();
    let (dead, _) = simulated::take(&conn, q.keys(), "dead", Duration::from_secs(30))
        .await
        .unwrap();
    let c = redis.client().await;
    c.del::<(), _>(q.keys().lock(&dead)).await.unwrap();
    for _ in 0..19 {
        q.add("ok", &json!({}), JobOptions::new()).await.unwrap();
    }
    q.add(
        "slow",
        &json!({"mode": "sleep", "ms": 6000}),
        JobOptions::new(),
    )
    .await
    .unwrap();
    for _ in 0..5 {
        let data = json!({"mode": "fail", "reason": "bad input"});
        q.add("bad", &data, JobOptions::new().attempts(2))
            .await
            .unwrap();
    }

    let events = QueueEventsArgs::new(conn.clone(), name);
    let (_events, _) = Actor::spawn(None, QueueEvents, events).await.unwrap();
    let options = WorkerOptions::default()
        .concurrency(4)
        .lock_duration(Duration::from_secs(5))
        .max_metrics_size(60);
    let (worker, _host) = start_worker(&q, options).await;
    let mut sweeps = StalledCheckerArgs::new(conn.clone(), name);
    sweeps.interval = Duration::from_millis(200);
    let (_checker, _) = Actor::spawn(None, StalledChecker, sweeps).await.unwrap();

    wait_counts(&q, 21, 5).await;
    let addr = server.addr();
    let completed = series("echomq_jobs_completed_total", name);
    wait_until(
        "the counters to catch up",
        Duration::from_secs(30),
        async || {
            let t = scrape(addr).await;
            value(&t, &completed) == Some(21.0)
                && value(&t, &series("echomq_locks_held", name)) == Some(0.0)
        },
    )
    .await;
    let t = scrape(addr).await;
    let v = |n: &str| value(&t, &series(n, name)).unwrap_or_else(|| panic!("{n} missing:\n{t}"));
    assert_eq!(v("echomq_jobs_completed_total"), 21.0);
    assert_eq!(v("echomq_jobs_failed_total"), 5.0);
    assert_eq!(v("echomq_jobs_retried_total"), 5.0);
    assert_eq!(v("echomq_jobs_processed_total"), 31.0);
    assert_eq!(v("echomq_job_duration_seconds_count"), 31.0);
    assert!(
        v("echomq_job_duration_seconds_sum") >= 6.0,
        "the slow job ran 6 s"
    );
    assert_eq!(v("echomq_job_wait_seconds_count"), 31.0);
    assert_eq!(v("echomq_stalled_jobs_recovered_total"), 1.0);
    assert!(v("echomq_stalled_sweeps_total") >= 2.0);
    assert!(v("echomq_stalled_sweep_duration_seconds_count") >= 2.0);
    assert!(
        v("echomq_lock_renewals_total") >= 1.0,
        "the slow job's lock was renewed"
    );
    assert!(v("echomq_lock_renewal_duration_seconds_count") >= 1.0);
    assert_eq!(v("echomq_locks_lost_total"), 0.0);
    assert_eq!(v("echomq_locks_held"), 0.0);
    assert_eq!(v("echomq_queue_events_gaps_total"), 0.0);
    assert!(v("echomq_queue_events_lag_seconds") >= 0.0);
    assert!(
        t.contains("# HELP echomq_jobs_completed_total Jobs completed"),
        "{t}"
    );
    assert!(
        t.contains("# TYPE echomq_job_duration_seconds histogram"),
        "{t}"
    );
    // BullMQ's gauges, read from Redis at the scrape.
    assert_eq!(value(&t, &jobs_in(name, "completed")), Some(21.0));
    assert_eq!(value(&t, &jobs_in(name, "failed")), Some(5.0));
    assert_eq!(value(&t, &jobs_in(name, "waiting")), Some(0.0));
    assert_eq!(value(&t, &jobs_in(name, "active")), Some(0.0));
    assert_eq!(
        value(&t, &series("bullmq_job_completed_total", name)),
        Some(21.0)
    );
    assert_eq!(
        value(&t, &series("bullmq_job_failed_total", name)),
        Some(5.0)
    );
    assert_eq!(t.matches("# TYPE bullmq_job_count gauge").count(), 1);
    close_worker(&worker).await;
}

/// Runs `node interop/otel.js <command> <url> <queue> <args>` and returns its JSON.
fn node_otel(command: &str, url: &str, queue: &str, args: Value) -> Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    assert!(
        dir.join("node_modules/bullmq-otel").is_dir(),
        "npm packages missing: run `npm ci` in {}",
        dir.display()
    );
    let out = std::process::Command::new("node")
        .current_dir(&dir)
        .args(["otel.js", command, url, queue, &args.to_string()])
        .output()
        .expect("node is installed");
    assert!(
        out.status.success(),
        "node otel.js {command} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("otel.js prints JSON")
}

/// A queue in every state BullMQ counts, with per-minute metrics recorded:
/// EchoMQ's text is BullMQ Node's, line for line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_queue_state_is_bullmq_nodes_text() {
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let name = "obs-export";
    let q = Queue::new(&conn, name).await.unwrap();
    for data in [
        json!({}),
        json!({}),
        json!({"mode": "fail", "reason": "no"}),
    ] {
        q.add("run", &data, JobOptions::new()).await.unwrap();
    }
    let (worker, _host) = start_worker(&q, WorkerOptions::default().max_metrics_size(10)).await;
    wait_counts(&q, 2, 1).await;
    close_worker(&worker).await;
    q.add(
        "later",
        &json!({}),
        JobOptions::new().delay(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    q.add("urgent", &json!({}), JobOptions::new().priority(3))
        .await
        .unwrap();
    for _ in 0..3 {
        q.add("plain", &json!({}), JobOptions::new()).await.unwrap();
    }
    let flow =
        FlowJob::new("parent", name, json!({})).child(FlowJob::new("child", name, json!({})));
    FlowProducer::new(&conn).add(flow).await.unwrap();
    simulated::take(&conn, q.keys(), "tok", Duration::from_secs(60))
        .await
        .unwrap();

    let globals = [("env", "test"), ("team", "a\"b")];
    let rust = q
        .telemetry()
        .export_prometheus_metrics(&globals)
        .await
        .unwrap();
    let node = node_otel(
        "export-prometheus",
        &redis.url(),
        name,
        json!({"globals": {"env": "test", "team": "a\"b"}}),
    );
    let node = node["text"].as_str().unwrap();
    assert_eq!(rust, node);
    for expected in [
        r#"bullmq_job_count{queue="obs-export", state="completed", env="test", team="a\"b"} 2"#,
        r#"bullmq_job_count{queue="obs-export", state="failed", env="test", team="a\"b"} 1"#,
        r#"bullmq_job_count{queue="obs-export", state="delayed", env="test", team="a\"b"} 1"#,
        r#"bullmq_job_count{queue="obs-export", state="active", env="test", team="a\"b"} 1"#,
        r#"bullmq_job_count{queue="obs-export", state="waiting-children", env="test", team="a\"b"} 1"#,
        r#"bullmq_job_completed_total{queue="obs-export", env="test", team="a\"b"} 2"#,
        r#"bullmq_job_failed_total{queue="obs-export", env="test", team="a\"b"} 1"#,
    ] {
        assert!(
            rust.lines().any(|l| l == expected),
            "{expected} not in\n{rust}"
        );
    }
}

/// Every span this test binary closes, through `tracing-opentelemetry`, with
/// the W3C trace-context propagator (what Node's SDK installs).
fn exported() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    &EXPORTER
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("echomq-test"));
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
                .expect("no other global subscriber in this test binary");
            opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
            (exporter, provider)
        })
        .0
}

async fn wait_for_span(name: &str) -> SpanData {
    let mut found = None;
    wait_until(name, Duration::from_secs(30), async || {
        found = exported()
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .find(|s| s.name == name);
        found.is_some()
    })
    .await;
    found.unwrap()
}

fn node_span<'a>(spans: &'a Value, name: &str) -> &'a Value {
    spans
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no Node span {name} in {spans}"))
}

/// Node's `queue.add` (bullmq-otel) starts a trace; the Rust worker's
/// `process` span is the child of Node's `add` span, in the same trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_started_by_a_node_producer_continues_in_a_rust_worker() {
    exported();
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let name = "obs-node-to-rust";
    let q = Queue::new(&conn, name).await.unwrap();
    let added = node_otel("add", &redis.url(), name, json!({"name": "hello"}));
    let add = node_span(&added["spans"], &format!("add {name}.hello"));
    assert_eq!(add["kind"], 3, "a PRODUCER span");
    let job = q
        .get_job(added["id"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    let tm = job.opts.extra["tm"].as_str().unwrap().to_owned();
    assert!(tm.contains(add["spanId"].as_str().unwrap()), "tm = {tm}");

    let (worker, _host) = start_worker(&q, WorkerOptions::default()).await;
    let process = wait_for_span(&format!("process {name}")).await;
    close_worker(&worker).await;
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(
        process.span_context.trace_id().to_string(),
        add["traceId"].as_str().unwrap()
    );
    assert_eq!(
        process.parent_span_id.to_string(),
        add["spanId"].as_str().unwrap()
    );
    let attr = |k: &str| {
        process
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attr("job_id").as_deref(), added["id"].as_str());
    assert_eq!(attr("outcome").as_deref(), Some("completed"));
    assert_eq!(attr("attempt").as_deref(), Some("1"));
}

/// A failed attempt is recorded on the worker's `process` span as BullMQ
/// 6.7.6's worker records it — an `exception` event, a `job failed` event
/// with `bullmq.job.failed.reason`, the `bullmq.job.attempts.made`
/// attribute — with the same names on both sides (Node's span read from its
/// in-memory exporter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_recorded_on_the_span_with_bullmq_s_names() {
    exported();
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let name = "obs-failed";
    let q = Queue::new(&conn, name).await.unwrap();

    // Node's worker, on a job that throws.
    q.add("boom", &json!({}), JobOptions::new()).await.unwrap();
    let url = redis.url();
    let worked = tokio::task::spawn_blocking(move || {
        node_otel(
            "fail",
            &url,
            name,
            json!({"count": 1, "reason": "node says no"}),
        )
    })
    .await
    .unwrap();
    let node = node_span(&worked["spans"], &format!("process {name}"));
    let node_events: Vec<&str> = node["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        node_events.contains(&"exception") && node_events.contains(&"job failed"),
        "{node}"
    );
    let node_failed = node["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "job failed")
        .unwrap();
    assert_eq!(
        node_failed["attributes"]["bullmq.job.failed.reason"],
        "node says no"
    );
    assert_eq!(node["attributes"]["bullmq.job.attempts.made"], 1);

    // EchoMQ's worker, on a job that fails the same way.
    q.add(
        "boom",
        &json!({"mode": "fail", "reason": "rust says no"}),
        JobOptions::new(),
    )
    .await
    .unwrap();
    let (worker, _host) = start_worker(&q, WorkerOptions::default()).await;
    let mut found = None;
    wait_until(
        "the failed attempt's span",
        Duration::from_secs(30),
        async || {
            found = exported()
                .get_finished_spans()
                .unwrap()
                .into_iter()
                .find(|s| {
                    s.name == format!("process {name}")
                        && s.events.iter().any(|e| e.name == "job failed")
                });
            found.is_some()
        },
    )
    .await;
    close_worker(&worker).await;
    let span = found.unwrap();
    let event = |n: &str| {
        span.events
            .iter()
            .find(|e| e.name == n)
            .unwrap_or_else(|| panic!("no {n} event on {span:?}"))
    };
    let attr = |attrs: &[opentelemetry::KeyValue], k: &str| {
        attrs
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    };
    let exception = event("exception");
    assert_eq!(
        attr(&exception.attributes, "exception.message").as_deref(),
        Some("rust says no")
    );
    assert_eq!(
        attr(&exception.attributes, "exception.type").as_deref(),
        Some("Error")
    );
    assert_eq!(
        attr(&event("job failed").attributes, "bullmq.job.failed.reason").as_deref(),
        Some("rust says no")
    );
    assert_eq!(
        attr(&span.attributes, "bullmq.job.attempts.made").as_deref(),
        Some("1")
    );
    assert_eq!(attr(&span.attributes, "outcome").as_deref(), Some("failed"));
}

/// `Queue::add` inside a Rust trace writes its `add` span's context to
/// `tm`; a BullMQ Node worker (bullmq-otel) continues that trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_started_in_rust_continues_in_a_node_worker() {
    exported();
    let redis = RedisServer::start();
    let conn = redis.connect().await;
    let name = "obs-rust-to-node";
    let q = Queue::new(&conn, name).await.unwrap();
    let id = q
        .add("hello", &json!({}), JobOptions::new())
        .instrument(tracing::info_span!("request"))
        .await
        .unwrap();
    let add = wait_for_span(&format!("add {name}.hello")).await;
    assert_eq!(add.span_kind, SpanKind::Producer);
    let job = q.get_job(&id).await.unwrap().unwrap();
    let tm: Value = serde_json::from_str(job.opts.extra["tm"].as_str().unwrap()).unwrap();
    let traceparent = format!(
        "00-{}-{}-01",
        add.span_context.trace_id(),
        add.span_context.span_id()
    );
    assert_eq!(tm, json!({"traceparent": traceparent}));

    let url = redis.url();
    let worked =
        tokio::task::spawn_blocking(move || node_otel("work", &url, name, json!({"count": 1})))
            .await
            .unwrap();
    let process = node_span(&worked["spans"], &format!("process {name}"));
    assert_eq!(process["kind"], 4, "a CONSUMER span");
    assert_eq!(process["traceId"], add.span_context.trace_id().to_string());
    assert_eq!(
        process["parentSpanId"],
        add.span_context.span_id().to_string()
    );

    // A job asking for no context (BullMQ's `telemetry.omitContext`) gets none.
    let mut opts = JobOptions::new();
    opts.extra.insert("omc".into(), json!(true));
    let id = q
        .add("quiet", &json!({}), opts)
        .instrument(tracing::info_span!("request"))
        .await
        .unwrap();
    let job = q.get_job(&id).await.unwrap().unwrap();
    assert!(!job.opts.extra.contains_key("tm"));

    // add_bulk: every job carries the `addBulk <queue>` span, as with Node's addBulk.
    let jobs = (0..2)
        .map(|n| NewJob {
            name: "bulk".into(),
            data: json!({ "n": n }),
            options: JobOptions::new(),
        })
        .collect();
    let ids = q
        .add_bulk(jobs)
        .instrument(tracing::info_span!("request"))
        .await
        .unwrap();
    let bulk = wait_for_span(&format!("addBulk {name}")).await;
    assert_eq!(bulk.span_kind, SpanKind::Producer);
    for id in ids {
        let job = q.get_job(&id).await.unwrap().unwrap();
        let tm: Value = serde_json::from_str(job.opts.extra["tm"].as_str().unwrap()).unwrap();
        let expected = format!(
            "00-{}-{}-01",
            bulk.span_context.trace_id(),
            bulk.span_context.span_id()
        );
        assert_eq!(tm["traceparent"], expected.as_str());
    }
}
