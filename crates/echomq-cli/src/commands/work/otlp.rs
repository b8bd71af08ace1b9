//! `echomq work --otlp-endpoint`: spans exported over OTLP/HTTP (protobuf)
//! to a collector through `tracing-opentelemetry`, with the W3C trace
//! context propagator installed so that jobs carry and continue traces in
//! their `tm` option as BullMQ's telemetry does (`docs/operations.md §Traces`).
//! Built with the CLI's `otel` feature.

#[cfg(feature = "otel")]
mod imp {
    use opentelemetry::trace::TracerProvider;
    use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use opentelemetry_sdk::Resource;
    use tracing::Subscriber;
    use tracing_subscriber::registry::LookupSpan;
    use tracing_subscriber::Layer;

    /// The export pipeline, started.
    pub struct Export {
        provider: SdkTracerProvider,
    }

    /// What flushes and stops the export at exit.
    pub type Provider = SdkTracerProvider;

    impl Export {
        /// Starts a batch export to `endpoint` (the collector's base URL;
        /// `/v1/traces` is appended as the OTLP variables would), or to what
        /// the OTEL_EXPORTER_OTLP_* variables say when it is empty.
        pub fn start(endpoint: &str) -> Result<Export, String> {
            let named = [
                endpoint.to_owned(),
                std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").unwrap_or_default(),
                std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or_default(),
            ];
            // The HTTP client is built without TLS (no second crypto stack
            // next to the one the Redis connections use): say so at start
            // rather than lose every span later.
            if let Some(url) = named.iter().find(|u| !u.is_empty()) {
                if url.to_ascii_lowercase().starts_with("https://") {
                    return Err(format!(
                        "OTLP endpoint {url}: https is not supported; export over plain HTTP to a collector beside the worker"
                    ));
                }
            }
            let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
            if !endpoint.is_empty() {
                use opentelemetry_otlp::WithExportConfig;
                let base = endpoint.trim_end_matches('/');
                let url = if base.ends_with("/v1/traces") {
                    base.to_owned()
                } else {
                    format!("{base}/v1/traces")
                };
                builder = builder.with_endpoint(url);
            }
            let exporter = builder
                .build()
                .map_err(|e| format!("--otlp-endpoint: {e}"))?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(Resource::builder().with_service_name("echomq").build())
                .build();
            // Node's SDK default: trace context and baggage, so `tm` holds
            // what bullmq-otel writes there.
            opentelemetry::global::set_text_map_propagator(
                opentelemetry::propagation::TextMapCompositePropagator::new(vec![
                    Box::new(TraceContextPropagator::new()),
                    Box::new(BaggagePropagator::new()),
                ]),
            );
            opentelemetry::global::set_tracer_provider(provider.clone());
            Ok(Export { provider })
        }

        /// The handle [`shutdown`] takes.
        pub fn provider(&self) -> Provider {
            self.provider.clone()
        }

        /// The `tracing` layer that turns spans into OpenTelemetry spans.
        pub fn layer<S>(self) -> impl Layer<S>
        where
            S: Subscriber + for<'a> LookupSpan<'a>,
        {
            let tracer = self.provider.tracer("echomq");
            tracing_opentelemetry::layer().with_tracer(tracer)
        }
    }

    /// Exports what is still buffered and stops.
    pub fn shutdown(provider: Provider) {
        if let Err(e) = provider.shutdown() {
            tracing::warn!(error = %e, "OTLP export did not shut down cleanly");
        }
    }
}

#[cfg(not(feature = "otel"))]
mod imp {
    use tracing::Subscriber;
    use tracing_subscriber::layer::Identity;
    use tracing_subscriber::Layer;

    /// Never made: this build has no OTLP export.
    pub enum Export {}

    /// Never made.
    pub type Provider = std::convert::Infallible;

    impl Export {
        pub fn start(_endpoint: &str) -> Result<Export, String> {
            Err("--otlp-endpoint: this echomq was built without the `otel` feature".into())
        }

        pub fn provider(&self) -> Provider {
            match *self {}
        }

        pub fn layer<S: Subscriber>(self) -> impl Layer<S> {
            let _: Identity = match self {};
            #[allow(unreachable_code)]
            Identity::new()
        }
    }

    pub fn shutdown(provider: Provider) {
        match provider {}
    }
}

pub use imp::{shutdown, Export};
