//! The settings of the autoscaling figures (`echomq_capacity_*`,
//! docs/operations.md §Autoscaling), the same flags for `echomq stats` and
//! `echomq work`.

use std::time::Duration;

use echomq::capacity::{CapacityError, CapacitySettings};

/// The target backlog age when none is given, ms.
pub(crate) const DEFAULT_TARGET_AGE_MS: u64 = 10_000;

/// The capacity settings of `echomq stats`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CapacityArgs {
    /// The age (ms) the oldest waiting job should stay under: the
    /// `desired_workers` figure plans to drain the backlog within it.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_TARGET_AGE_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) scale_target_age: u64,
    /// Jobs one worker runs at once, for the `desired_workers` figure.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scale_concurrency: u32,
}

impl CapacityArgs {
    /// The settings, checked.
    pub(crate) fn settings(&self) -> Result<CapacitySettings, String> {
        settings(Some(self.scale_target_age), Some(self.scale_concurrency), 1)
    }
}

/// The settings from a target age (ms) and slots per worker, each
/// defaulted when not given; an error names the option.
pub(crate) fn settings(
    target_age_ms: Option<u64>,
    concurrency: Option<u32>,
    default_concurrency: u32,
) -> Result<CapacitySettings, String> {
    let s = CapacitySettings::default()
        .target_age(Duration::from_millis(
            target_age_ms.unwrap_or(DEFAULT_TARGET_AGE_MS),
        ))
        .concurrency(concurrency.unwrap_or(default_concurrency));
    s.validate().map_err(|e| match e {
        CapacityError::ZeroTargetAge => format!("--scale-target-age: {e}"),
        CapacityError::ZeroConcurrency => format!("--scale-concurrency: {e}"),
        other => other.to_string(),
    })?;
    Ok(s)
}

/// A duration in ms as a person reads it: `850ms`, `12.5s`.
pub(crate) fn human_ms(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.1}s", ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_name_their_option() {
        assert_eq!(
            settings(None, None, 4).unwrap(),
            CapacitySettings::default().concurrency(4)
        );
        let e = settings(Some(0), None, 1).unwrap_err();
        assert!(e.starts_with("--scale-target-age"), "{e}");
        let e = settings(None, Some(0), 1).unwrap_err();
        assert!(e.starts_with("--scale-concurrency"), "{e}");
        assert_eq!(human_ms(850.4), "850ms");
        assert_eq!(human_ms(12_500.0), "12.5s");
    }
}
