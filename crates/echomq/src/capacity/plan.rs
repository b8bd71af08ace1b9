//! The figure itself, as pure functions of a [`Reading`]: the instant
//! `desired_workers` ([`instant_workers`]) and the [`Hysteresis`] that
//! publishes it without flapping. No I/O here, so every rule is tested on
//! made-up readings.

use std::time::Duration;

use serde::Serialize;

use super::settings::CapacitySettings;

/// The share of a worker's slots the figure plans to keep busy: at 100%
/// any jitter in arrivals grows a backlog that only the backlog term
/// notices, late; 80% leaves room for it.
pub const UTILIZATION: f64 = 0.8;

/// No figure above this (a reading gone wrong must not ask for the moon).
const MAX_WORKERS: f64 = 100_000.0;

/// One queue at one instant, every time on Redis's clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Reading {
    /// Redis `TIME` when read, ms since the epoch.
    pub at_ms: u64,
    /// Jobs in `wait` (and the `paused` list older BullMQ versions keep).
    pub waiting: u64,
    /// Jobs in `prioritized`.
    pub prioritized: u64,
    /// Delayed jobs already due (a worker promotes them at its next fetch).
    pub delayed_due: u64,
    /// Jobs being processed.
    pub active: u64,
    /// Whether the queue is paused (the figure is then held).
    pub paused: bool,
    /// Age of the oldest job of the backlog, ms: the next one out of
    /// `wait`, of `prioritized` and the earliest due delayed job, counted
    /// from when each became ready (added, or due). 0 with no backlog.
    pub oldest_age_ms: u64,
    /// Jobs added per second over `window_ms`.
    pub arrival_rate: f64,
    /// Jobs finished (completed or failed) per second over `window_ms`.
    pub completion_rate: f64,
    /// Mean processing time of the jobs finished in the window, ms;
    /// `None` when nothing finished lately.
    pub service_time_ms: Option<f64>,
    /// The span the rates were measured over, ms.
    pub window_ms: u64,
}

impl Reading {
    /// The backlog: waiting + prioritized + due delayed jobs.
    pub fn backlog(&self) -> u64 {
        self.waiting
            .saturating_add(self.prioritized)
            .saturating_add(self.delayed_due)
    }
}

/// The workers this reading asks for, before any smoothing.
///
/// Slots must serve the arrivals and drain the backlog within the target
/// age: `(arrival_rate + backlog / target_age) × service_time`, divided by
/// [`UTILIZATION`] and by the slots of a worker, rounded up. With work in
/// hand (a backlog or active jobs) it is at least 1; with no timing yet
/// (nothing finished in the window) it is the workers the active jobs
/// occupy, at least 1, so that someone works and a time gets measured.
pub fn instant_workers(r: &Reading, s: &CapacitySettings) -> u64 {
    let backlog = r.backlog();
    let work_in_hand = backlog > 0 || r.active > 0;
    let concurrency = f64::from(s.concurrency.max(1));
    let floor = u64::from(work_in_hand);
    let Some(service_ms) = r.service_time_ms.filter(|t| t.is_finite() && *t >= 0.0) else {
        let occupied = (r.active as f64 / concurrency).ceil() as u64;
        return occupied.max(floor.max(u64::from(r.arrival_rate > 0.0)));
    };
    let target_s = (s.target_age.as_secs_f64()).max(0.001);
    let arrivals = if r.arrival_rate.is_finite() {
        r.arrival_rate.max(0.0)
    } else {
        0.0
    };
    let rate = arrivals + backlog as f64 / target_s;
    let slots = rate * (service_ms / 1000.0) / UTILIZATION;
    // A hair under an integer is that integer: 400 jobs/s × 0.02 s is
    // 8.000000000000002 in floating point, not a ninth slot.
    let workers = (slots / concurrency - 1e-9).ceil();
    let workers = if workers.is_nan() {
        0
    } else {
        workers.clamp(0.0, MAX_WORKERS) as u64
    };
    workers.max(floor)
}

/// Publishes the instant figure without flapping: a rise is published at
/// once; a drop only after the instant figure stayed below the published
/// one for `scale_down_delay` and at least that long after the last rise,
/// and then to the highest instant figure seen meanwhile.
///
/// So two drops are at least a delay apart (a rise sits between them and
/// each drop waits a delay after the rise before it), and so are two rises
/// that follow drops: at most two changes of direction per delay.
#[derive(Clone, Debug, Default)]
pub struct Hysteresis {
    published: Option<u64>,
    last_rise_ms: u64,
    /// Since when the instant figure has been below the published one, and
    /// the highest it was meanwhile.
    below: Option<(u64, u64)>,
}

impl Hysteresis {
    /// The figure published after the instant figure `instant` read at
    /// `at_ms` (Redis's clock).
    pub fn next(&mut self, at_ms: u64, instant: u64, delay: Duration) -> u64 {
        let delay_ms = delay.as_millis() as u64;
        let Some(published) = self.published else {
            // The first figure counts as a rise: a drop waits a delay.
            self.published = Some(instant);
            self.last_rise_ms = at_ms;
            return instant;
        };
        if instant > published {
            self.published = Some(instant);
            self.last_rise_ms = at_ms;
            self.below = None;
            return instant;
        }
        if instant == published {
            self.below = None;
            return published;
        }
        let (since, peak) = match self.below {
            Some((since, peak)) => (since, peak.max(instant)),
            None => (at_ms, instant),
        };
        // A clock that went back counts as no time passed.
        let held = at_ms.saturating_sub(since) >= delay_ms
            && at_ms.saturating_sub(self.last_rise_ms) >= delay_ms;
        if held {
            self.published = Some(peak);
            self.below = None;
            return peak;
        }
        self.below = Some((since, peak));
        published
    }

    /// The figure last published.
    pub fn published(&self) -> Option<u64> {
        self.published
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn settings(target_s: u64, concurrency: u32) -> CapacitySettings {
        CapacitySettings::default()
            .target_age(Duration::from_secs(target_s))
            .concurrency(concurrency)
    }

    fn steady(rate: f64, service_ms: f64) -> Reading {
        Reading {
            arrival_rate: rate,
            completion_rate: rate,
            service_time_ms: Some(service_ms),
            active: 1,
            ..Reading::default()
        }
    }

    #[test]
    fn steady_load_needs_its_slots_over_the_utilization() {
        // 400 jobs/s of 20 ms: 8 busy slots, 10 planned, 5 workers of 2.
        assert_eq!(instant_workers(&steady(400.0, 20.0), &settings(10, 2)), 5);
        // 40 jobs/s: 0.8 busy slots, 1 planned: 1 worker.
        assert_eq!(instant_workers(&steady(40.0, 20.0), &settings(10, 2)), 1);
        // 2,000 jobs/s of 50 ms (the load), 10 slots per worker: 13.
        assert_eq!(
            instant_workers(&steady(2000.0, 50.0), &settings(10, 10)),
            13
        );
    }

    #[test]
    fn a_backlog_is_planned_to_drain_within_the_target_age() {
        let mut r = steady(0.0, 100.0);
        r.waiting = 600;
        r.prioritized = 200;
        r.delayed_due = 200;
        // 1,000 jobs in 10 s: 100/s of 100 ms = 10 slots, 12.5 planned.
        assert_eq!(instant_workers(&r, &settings(10, 1)), 13);
        assert_eq!(instant_workers(&r, &settings(5, 1)), 25);
    }

    #[test]
    fn work_in_hand_without_timing_asks_for_a_worker() {
        let idle = Reading::default();
        assert_eq!(instant_workers(&idle, &settings(10, 1)), 0);
        let mut r = Reading {
            waiting: 3,
            ..Reading::default()
        };
        assert_eq!(instant_workers(&r, &settings(10, 4)), 1);
        r.active = 9;
        assert_eq!(instant_workers(&r, &settings(10, 4)), 3);
        let arriving = Reading {
            arrival_rate: 0.5,
            ..Reading::default()
        };
        assert_eq!(instant_workers(&arriving, &settings(10, 1)), 1);
        // Nothing to do: the figure goes to zero even with a known time.
        assert_eq!(instant_workers(&steady(0.0, 20.0), &settings(10, 1)), 1);
        let mut done = steady(0.0, 20.0);
        done.active = 0;
        assert_eq!(instant_workers(&done, &settings(10, 1)), 0);
    }

    #[test]
    fn nonsense_numbers_stay_bounded() {
        let mut r = steady(f64::INFINITY, f64::NAN);
        assert_eq!(instant_workers(&r, &settings(10, 1)), 1);
        r.service_time_ms = Some(1e300);
        r.arrival_rate = 1e300;
        assert_eq!(instant_workers(&r, &settings(10, 1)), 100_000);
    }

    #[test]
    fn rises_at_once_drops_after_the_delay_to_the_peak_meanwhile() {
        let d = Duration::from_secs(60);
        let mut h = Hysteresis::default();
        assert_eq!(h.next(0, 2, d), 2);
        assert_eq!(h.next(1_000, 8, d), 8);
        assert_eq!(h.next(2_000, 3, d), 8);
        assert_eq!(h.next(40_000, 5, d), 8);
        // Below for 59 s, and only 60 s after the rise: held.
        assert_eq!(h.next(61_000, 4, d), 8);
        // A minute below: the highest figure of that minute.
        assert_eq!(h.next(62_000, 4, d), 5);
        // Back up at once.
        assert_eq!(h.next(63_000, 9, d), 9);
        // A figure equal to the published one ends a stretch below.
        assert_eq!(h.next(64_000, 1, d), 9);
        assert_eq!(h.next(100_000, 9, d), 9);
        assert_eq!(h.next(150_000, 1, d), 9);
        assert_eq!(h.next(209_999, 1, d), 9);
        assert_eq!(h.next(210_000, 1, d), 1);
    }

    proptest! {
        #[test]
        fn never_under_the_instant_figure_and_at_most_two_turns_per_delay(
            steps in prop::collection::vec((0u64..20_000, 0u64..40), 1..300),
            delay_s in 1u64..120,
        ) {
            let delay = Duration::from_secs(delay_s);
            let mut h = Hysteresis::default();
            let mut at = 1_000_000u64;
            let mut last: Option<u64> = None;
            let mut direction = 0i8;
            let mut turns: Vec<u64> = Vec::new();
            for (dt, instant) in steps {
                at += dt;
                let published = h.next(at, instant, delay);
                prop_assert!(published >= instant);
                if let Some(prev) = last {
                    if instant > prev {
                        prop_assert_eq!(published, instant, "a rise is published at once");
                    }
                    let moved = (published as i128 - prev as i128).signum() as i8;
                    if moved != 0 {
                        if direction != 0 && moved != direction {
                            turns.push(at);
                        }
                        direction = moved;
                    }
                }
                last = Some(published);
            }
            for w in turns.windows(3) {
                prop_assert!(
                    w[2] - w[0] >= delay.as_millis() as u64,
                    "three turns within one delay: {:?}", w
                );
            }
        }
    }
}
