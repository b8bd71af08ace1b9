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

/// (start ms, end ms) of every job a worker ran.
pub type Spans = std::sync::Arc<std::sync::Mutex<Vec<(u64, u64)>>>;

/// A Rust worker whose jobs sleep `sleep_ms` and record their span.
pub struct Running {
    pub worker: ractor::ActorRef<echomq::WorkerMsg>,
    _lm: ractor::ActorRef<echomq::LockManagerMsg>,
    _host: ractor::ActorRef<()>,
}

/// Starts a [`Running`] worker on `q` under a null supervisor.
pub async fn timed_worker(
    q: &echomq::Queue,
    options: echomq::WorkerOptions,
    sleep_ms: u64,
    spans: Spans,
) -> Running {
    use ractor::Actor;
    let (host, _) = Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let processor = echomq::processor_fn(move |_job: echomq::JobContext| {
        let spans = spans.clone();
        async move {
            let t0 = echomq::clock::now_ms();
            tokio::time::sleep(std::time::Duration::from_millis(sleep_ms)).await;
            spans.lock().unwrap().push((t0, echomq::clock::now_ms()));
            Ok::<_, echomq::ProcessError>(serde_json::json!(null))
        }
    });
    let mut args = echomq::WorkerArgs::new(q.clone(), processor);
    args.options = options;
    let (worker, lm) = echomq::worker::spawn_linked(host.get_cell(), args)
        .await
        .unwrap();
    Running {
        worker,
        _lm: lm,
        _host: host,
    }
}
