//! Timing checks shared by the parity tests: overlap of job spans (global
//! concurrency) and starts per rate-limit window.

use echomq::RateLimit;

/// Most spans overlapping at one instant.
pub fn peak_overlap(spans: &[(u64, u64)]) -> usize {
    let mut edges: Vec<(u64, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    // An end before a start at the same ms: back-to-back is not overlap.
    edges.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

/// At most `max` starts per fixed window: any `2·max + 1` consecutive starts
/// span at least one full window, and `n` starts need `ceil(n/max) − 1` windows.
pub fn assert_window_budget(starts: &[u64], limit: RateLimit, what: &str) {
    let d = limit.duration_ms();
    let m = limit.max as usize;
    // 30 ms of slack for timer and clock granularity.
    for w in starts.windows(2 * m + 1) {
        assert!(
            w[2 * m] - w[0] + 30 >= d,
            "{what}: {} starts within {} ms: {starts:?}",
            2 * m + 1,
            w[2 * m] - w[0]
        );
    }
    let need = (starts.len().div_ceil(m) as u64 - 1) * d;
    let took = starts.last().unwrap() - starts[0];
    assert!(
        took + 50 >= need,
        "{what}: {} starts in {took} ms, the limit needs {need} ms: {starts:?}",
        starts.len()
    );
}
