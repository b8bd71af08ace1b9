//! The autoscaling signal (docs/operations.md §Autoscaling): per queue, the
//! backlog, the age of its oldest job, the arrival and completion rates,
//! the service time and a `desired_workers` figure against a target
//! backlog age, for a scaler (KEDA, docs/deployment.md) to follow.
//!
//! - [`settings`]: what the operator sets, checked ([`CapacityError`]).
//! - [`plan`]: the figure as pure functions of a [`Reading`], and the
//!   [`Hysteresis`] that keeps it from flapping.
//! - `read`: the bounded reads of a reading
//!   ([`crate::queue::Telemetry::capacity_reading`]).
//! - [`monitor`]: readings over time ([`CapacityMonitor`]), and the set a
//!   `/metrics` endpoint keeps ([`CapacityBoard`]).
//! - [`render`]: the Prometheus gauges.

pub mod monitor;
pub mod plan;
mod read;
pub mod render;
pub mod settings;

pub use monitor::{Capacity, CapacityBoard, CapacityMonitor};
pub use plan::{instant_workers, Hysteresis, Reading, UTILIZATION};
pub use read::{EVENTS_READ, RATE_WINDOW_MS};
pub use settings::{CapacityError, CapacitySettings};
