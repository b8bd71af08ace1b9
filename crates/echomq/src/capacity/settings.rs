//! What the operator sets: the backlog age to keep under, the slots of one
//! worker, and how long a lower figure must hold before the figure drops.

use std::time::Duration;

/// The settings of the `desired_workers` figure. `Default` gives the
/// documented defaults; [`CapacitySettings::validate`] (called by
/// [`super::CapacityMonitor::new`]) refuses the ones that make no sense.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapacitySettings {
    /// The age the oldest waiting job should stay under: the backlog is
    /// planned to drain within it. Default 10 s.
    pub target_age: Duration,
    /// Jobs one worker runs at once (its `concurrency`). Default 1.
    pub concurrency: u32,
    /// How long the instant figure must stay below the published one
    /// before the published one drops (and how long after a rise a drop
    /// may come): at most two changes of direction per this delay. Rises
    /// are never delayed. Default 60 s.
    pub scale_down_delay: Duration,
}

impl Default for CapacitySettings {
    fn default() -> Self {
        CapacitySettings {
            target_age: Duration::from_secs(10),
            concurrency: 1,
            scale_down_delay: Duration::from_secs(60),
        }
    }
}

/// A setting that cannot give a figure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapacityError {
    /// A target age of zero asks for an empty queue at every instant.
    #[error("capacity: the target backlog age must be at least 1 ms")]
    ZeroTargetAge,
    /// A worker that runs no job adds no capacity.
    #[error("capacity: the concurrency per worker must be at least 1")]
    ZeroConcurrency,
    /// Without a delay the figure would follow every wobble down.
    #[error("capacity: the scale-down delay must be at least 1 s")]
    ShortScaleDownDelay,
}

impl CapacitySettings {
    /// These settings with `target_age`.
    pub fn target_age(mut self, target_age: Duration) -> Self {
        self.target_age = target_age;
        self
    }

    /// These settings with `concurrency` slots per worker.
    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// These settings with `delay` before a drop.
    pub fn scale_down_delay(mut self, delay: Duration) -> Self {
        self.scale_down_delay = delay;
        self
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), CapacityError> {
        if self.target_age.as_millis() == 0 {
            return Err(CapacityError::ZeroTargetAge);
        }
        if self.concurrency == 0 {
            return Err(CapacityError::ZeroConcurrency);
        }
        if self.scale_down_delay < Duration::from_secs(1) {
            return Err(CapacityError::ShortScaleDownDelay);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zeros_are_refused() {
        assert_eq!(CapacitySettings::default().validate(), Ok(()));
        let d = CapacitySettings::default();
        assert_eq!(
            d.target_age(Duration::ZERO).validate(),
            Err(CapacityError::ZeroTargetAge)
        );
        assert_eq!(
            d.target_age(Duration::from_micros(999)).validate(),
            Err(CapacityError::ZeroTargetAge)
        );
        assert_eq!(
            d.concurrency(0).validate(),
            Err(CapacityError::ZeroConcurrency)
        );
        assert_eq!(
            d.scale_down_delay(Duration::from_millis(999)).validate(),
            Err(CapacityError::ShortScaleDownDelay)
        );
    }
}
