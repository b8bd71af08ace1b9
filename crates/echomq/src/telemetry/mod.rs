//! What EchoMQ tells the people who run it, besides logs: runtime metrics
//! ([`metrics`], feature `metrics`), BullMQ's queue-state gauges
//! ([`queue_state`]), per-group gauges of the busiest groups ([`group_state`]),
//! byte budgets ([`budget_state`]), the `/metrics` endpoint (`prometheus`, feature
//! `prometheus`), and spans with trace context carried through jobs
//! ([`trace`], OpenTelemetry with feature `otel`). Operators' guide:
//! `docs/operations.md`.

pub mod budget_state;
pub mod dead_letter_state;
pub mod group_state;
pub mod metrics;
#[cfg(feature = "prometheus")]
pub mod prometheus;
pub mod queue_state;
pub mod trace;

pub use metrics::QueueMetrics;
