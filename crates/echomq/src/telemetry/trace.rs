//! The spans EchoMQ opens, and the trace context a job carries in its `tm`
//! option, as BullMQ's telemetry does (`docs/operations.md §Traces`).
//!
//! * `job` (info): one attempt of one job in a worker, from the take to the
//!   transition, with `queue`, `job_id`, `attempt`, `worker` and, at its end,
//!   `outcome`. Inside it: `process` (debug) around the processor and
//!   `finish` (debug) around the finishing call. The fetch loop's
//!   `moveToActive` runs in `fetch` (debug).
//! * `add` (debug) around [`Queue::add`](crate::Queue::add), `add_bulk`
//!   (debug) around [`Queue::add_bulk`](crate::Queue::add_bulk).
//! * one span per actor tick: `lock_renewal`, `stalled_sweep`,
//!   `scheduler_sweep`, `events_batch` (debug);
//! * `script` (trace) around every script call, with its name.
//!
//! With the `otel` feature and `tracing-opentelemetry` listening, `add` is
//! the producer span `add <queue>.<name>` (`addBulk <queue>`) whose context
//! is written to the job's `tm` option (the propagator's fields as a JSON object, as
//! `bullmq-otel` writes them), and a `job` span is the consumer span
//! `process <queue>` whose parent is the context read back from `tm` — so a
//! trace crosses between Node and Rust producers and workers both ways.

use serde_json::{Map, Value};
use tracing::field::Empty;
use tracing::Span;

use echomq_protocol::Job;

/// How an attempt ended, as the `job` span's `outcome` field says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Failed,
    Retried,
    Delayed,
    RateLimited,
    WaitingChildren,
    MovedBack,
    LockLost,
    Abandoned,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Retried => "retried",
            Outcome::Delayed => "delayed",
            Outcome::RateLimited => "rate_limited",
            Outcome::WaitingChildren => "waiting_children",
            Outcome::MovedBack => "moved_back",
            Outcome::LockLost => "lock_lost",
            Outcome::Abandoned => "abandoned",
        }
    }
}

/// The span of one attempt of `job` on `queue`, continuing the trace its
/// `tm` option carries when the `otel` feature is on.
pub(crate) fn job_span(queue: &str, job: &Job, attempt: u64, worker: Option<&str>) -> Span {
    let span = tracing::info_span!(
        "job",
        queue = %queue,
        job_id = %job.id,
        attempt,
        worker = ?worker,
        outcome = Empty,
        otel.name = Empty,
        otel.kind = Empty,
    );
    imp::continue_trace(&span, queue, job);
    span
}

/// Records how the current attempt ended on its `job` span.
pub(crate) fn outcome(o: Outcome) {
    Span::current().record("outcome", o.as_str());
}

/// A failed attempt, on the current `job` span, as BullMQ's worker (6.7.6)
/// records one on its consumer span: an OpenTelemetry `exception` event
/// (`exception.type`, `exception.message`, `exception.stacktrace` when there
/// is a stack), a `job failed` event with `bullmq.job.failed.reason`, and the
/// attribute `bullmq.job.attempts.made` (this attempt counted). Only with the
/// `otel` feature and an OpenTelemetry layer listening; the log line is the
/// worker's own.
pub(crate) fn failed(message: &str, stack: Option<&str>, unrecoverable: bool, attempts_made: u64) {
    // Node's `err.name`: the class a BullMQ processor would have thrown.
    let kind = if unrecoverable {
        "UnrecoverableError"
    } else {
        "Error"
    };
    imp::failed(&Span::current(), kind, message, stack, attempts_made);
}

/// The span of one `Queue::add`.
pub(crate) fn add_span(queue: &str, name: &str) -> Span {
    let span = tracing::debug_span!(
        "add",
        queue = %queue,
        job_name = %name,
        otel.name = Empty,
        otel.kind = Empty,
    );
    imp::producer(&span, "add", queue, Some(name));
    span
}

/// The span of one `Queue::add_bulk`: its context goes to every job's `tm`.
pub(crate) fn add_bulk_span(queue: &str, jobs: usize) -> Span {
    let span = tracing::debug_span!(
        "add_bulk",
        queue = %queue,
        jobs,
        otel.name = Empty,
        otel.kind = Empty,
    );
    imp::producer(&span, "addBulk", queue, None);
    span
}

/// `opts` with the current trace context in `tm`, unless the job already has
/// one or asks for none (`omc`, BullMQ's `telemetry.omitContext`). Without
/// the `otel` feature, or with nothing to propagate, `opts` unchanged.
pub(crate) fn stamp_context(opts: Map<String, Value>) -> Map<String, Value> {
    if opts.contains_key(TM) || opts.get(OMC) == Some(&Value::Bool(true)) {
        return opts;
    }
    imp::stamp(opts)
}

/// The stored option holding the serialized trace context (BullMQ's
/// `telemetry.metadata`).
pub const TM: &str = "tm";
/// The stored option asking that no context be stored (BullMQ's
/// `telemetry.omitContext`).
pub const OMC: &str = "omc";

#[cfg(feature = "otel")]
mod imp {
    use std::collections::HashMap;

    use opentelemetry::propagation::{Extractor, Injector};
    use opentelemetry::Context;
    use serde_json::{Map, Value};
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use echomq_protocol::Job;

    pub(super) fn continue_trace(span: &Span, queue: &str, job: &Job) {
        if span.is_disabled() {
            return;
        }
        let tm = job.opts.extra.get(super::TM).and_then(Value::as_str);
        let parent = match tm.map(parse_carrier) {
            Some(Some(carrier)) => {
                let carrier = Carrier(carrier);
                opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier))
            }
            Some(None) => {
                tracing::debug!(job_id = %job.id, "tm is not a JSON object of strings: trace not continued");
                Context::new()
            }
            // A job span starts its own task: without `tm` it is a root.
            None => Context::new(),
        };
        // Refused when no OpenTelemetry layer listens: then the names would
        // only clutter the log lines.
        if span.set_parent(parent).is_ok() {
            span.record("otel.name", format!("process {queue}"));
            span.record("otel.kind", "consumer");
        }
    }

    pub(super) fn failed(
        span: &Span,
        kind: &str,
        message: &str,
        stack: Option<&str>,
        attempts_made: u64,
    ) {
        use opentelemetry::KeyValue;
        if span.is_disabled() {
            return;
        }
        let mut exception = vec![
            KeyValue::new("exception.type", kind.to_owned()),
            KeyValue::new("exception.message", message.to_owned()),
        ];
        if let Some(stack) = stack {
            exception.push(KeyValue::new("exception.stacktrace", stack.to_owned()));
        }
        span.add_event("exception", exception);
        span.add_event(
            "job failed",
            vec![KeyValue::new(
                "bullmq.job.failed.reason",
                message.to_owned(),
            )],
        );
        span.set_attribute("bullmq.job.attempts.made", attempts_made as i64);
    }

    /// Names a producer span `<operation> <queue>[.<job name>]`, as BullMQ does.
    pub(super) fn producer(span: &Span, operation: &str, queue: &str, job: Option<&str>) {
        if span.is_disabled() {
            return;
        }
        // The parent it would have anyway (the caller's span), set only to
        // learn whether an OpenTelemetry layer listens.
        if span.set_parent(Span::current().context()).is_ok() {
            let name = match job {
                Some(job) => format!("{operation} {queue}.{job}"),
                None => format!("{operation} {queue}"),
            };
            span.record("otel.name", name);
            span.record("otel.kind", "producer");
        }
    }

    pub(super) fn stamp(mut opts: Map<String, Value>) -> Map<String, Value> {
        let cx = Span::current().context();
        let mut fields = Fields(Map::new());
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut fields));
        if !fields.0.is_empty() {
            opts.insert(
                super::TM.into(),
                Value::String(Value::Object(fields.0).to_string()),
            );
        }
        opts
    }

    /// `tm` as BullMQ writes it: `JSON.stringify` of the propagator's carrier.
    pub(super) fn parse_carrier(tm: &str) -> Option<HashMap<String, String>> {
        let Value::Object(m) = serde_json::from_str::<Value>(tm).ok()? else {
            return None;
        };
        Some(
            m.into_iter()
                .filter_map(|(k, v)| match v {
                    Value::String(s) => Some((k, s)),
                    _ => None,
                })
                .collect(),
        )
    }

    /// The carrier written in the propagator's order (JSON keys in
    /// insertion order, as Node's object).
    struct Fields(Map<String, Value>);

    impl Injector for Fields {
        fn set(&mut self, key: &str, value: String) {
            // An empty field is no field: Node's propagator leaves an empty
            // `tracestate` out, and `tm` is what bullmq-otel would write.
            if !value.is_empty() {
                self.0.insert(key.to_owned(), Value::String(value));
            }
        }
    }

    struct Carrier(HashMap<String, String>);

    impl Extractor for Carrier {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).map(String::as_str)
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }
}

#[cfg(not(feature = "otel"))]
mod imp {
    use serde_json::{Map, Value};
    use tracing::Span;

    use echomq_protocol::Job;

    #[inline]
    pub(super) fn continue_trace(_span: &Span, _queue: &str, _job: &Job) {}

    #[inline]
    pub(super) fn producer(_span: &Span, _operation: &str, _queue: &str, _job: Option<&str>) {}

    #[inline]
    pub(super) fn stamp(opts: Map<String, Value>) -> Map<String, Value> {
        opts
    }

    #[inline]
    pub(super) fn failed(_: &Span, _: &str, _: &str, _: Option<&str>, _: u64) {}
}
