//! Metrics and traces: the runtime's metrics through the `metrics` facade,
//! served as Prometheus `/metrics` with BullMQ's queue gauges (feature
//! `prometheus`); and a span per job (`job` with its queue, id, attempt and
//! outcome, `process` inside it) through `tracing`, exported over OTLP/HTTP
//! when OTEL_EXPORTER_OTLP_ENDPOINT names a collector (feature `otel`). Trace
//! context travels in the job (`tm`), as BullMQ's telemetry carries it, so a
//! Node producer's trace continues in the Rust worker.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run -p echomq --example observability --features prometheus,otel`

use std::time::{Duration, Instant};

use echomq::worker::processor_fn;
use echomq::{Connection, Host, JobOptions, ProcessError, Queue, WorkerArgs};
use opentelemetry::trace::TracerProvider;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Traces: spans on stderr as they close, and to a collector when named.
    let provider = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok().map(|_| {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .expect("OTLP exporter");
        opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .build()
    });
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("echomq-example")));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_span_events(FmtSpan::CLOSE),
        )
        .with(tracing_subscriber::EnvFilter::new(
            "echomq=info,observability=info",
        ))
        .with(otel)
        .init();

    // Metrics: before the worker starts, so it takes its handles then.
    let metrics = echomq::telemetry::prometheus::serve("127.0.0.1:0".parse()?).await?;

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = Connection::connect_url(&url).await?;
    Queue::new(&conn, "observed")
        .await?
        .obliterate(true)
        .await?;
    let queue = Queue::new(&conn, "observed").await?;
    metrics.watch(queue.clone());
    for n in 0..10 {
        let options = JobOptions::new().attempts(2);
        queue.add("work", &json!({ "n": n }), options).await?;
    }
    let processor = processor_fn(|job| async move {
        tracing::info!(n = %job.data()["n"], "working");
        if job.data()["n"] == 7 && job.attempt() == 1 {
            return Err(ProcessError::failed("first attempt of 7 fails"));
        }
        Ok::<_, ProcessError>(json!(null))
    });
    let host = Host::start().await?;
    let args = WorkerArgs::new(queue.clone(), processor);
    host.add_worker(args).await?;
    let t0 = Instant::now();
    while queue.counts().await?.completed < 10 && t0.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // What a Prometheus scrape reads.
    let mut scrape = tokio::net::TcpStream::connect(metrics.addr()).await?;
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await?;
    let mut text = String::new();
    scrape.read_to_string(&mut text).await?;
    println!("scraped http://{}/metrics:", metrics.addr());
    for line in text
        .lines()
        .filter(|l| l.starts_with("echomq_") || l.starts_with("bullmq_"))
    {
        println!("  {line}");
    }

    host.close(Duration::from_secs(5)).await?;
    conn.close().await;
    if let Some(p) = provider {
        p.shutdown()?;
    }
    Ok(())
}
