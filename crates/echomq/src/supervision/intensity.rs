//! The restart budget of a one-for-one supervisor.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// At most `max` restarts within a sliding `window`, as Erlang's restart
/// intensity. Past it a supervisor stops restarting and fails itself, so that
/// its own supervisor sees the problem instead of a restart loop.
///
/// One budget per supervisor, shared by all its children: a host that keeps
/// one per child would let a crashing neighbourhood restart forever.
#[derive(Clone, Debug)]
pub struct RestartIntensity {
    max: usize,
    window: Duration,
    recent: VecDeque<Instant>,
}

impl RestartIntensity {
    /// The budget every host of this repository uses: 10 restarts per 10 s.
    pub const DEFAULT_MAX: usize = 10;
    /// See [`RestartIntensity::DEFAULT_MAX`].
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

    /// At most `max` restarts per `window`.
    pub fn new(max: usize, window: Duration) -> Self {
        Self {
            max,
            window,
            recent: VecDeque::new(),
        }
    }

    /// The most restarts allowed in one window.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The sliding window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Records a restart now; `false` when it exceeds the budget.
    pub fn allow(&mut self) -> bool {
        let now = Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        self.recent.len() <= self.max
    }
}

impl Default for RestartIntensity {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MAX, Self::DEFAULT_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_intensity_allows_max_per_window() {
        let mut r = RestartIntensity::new(3, Duration::from_secs(60));
        assert!(r.allow() && r.allow() && r.allow());
        assert!(!r.allow());
        let mut r = RestartIntensity::new(1, Duration::ZERO);
        assert!(
            r.allow() && r.allow(),
            "an empty window forgets every restart"
        );
    }

    #[test]
    fn the_default_is_ten_per_ten_seconds() {
        let r = RestartIntensity::default();
        assert_eq!((r.max(), r.window()), (10, Duration::from_secs(10)));
    }
}
