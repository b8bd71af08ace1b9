//! Timing checks shared by the parity tests, on Redis's clock (the events
//! stream's ids): overlap of jobs' stays in `active` (global concurrency)
//! and starts per rate-limit window; and a Rust worker that records what it
//! ran.

use echomq::RateLimit;

/// Starts of every job of queue `q` (its `active` events) on Redis's clock,
/// sorted: what a rate limit is checked on, whoever took the jobs.
pub async fn redis_starts(c: &fred::prelude::Client, q: &echomq::Queue) -> Vec<u64> {
    let mut starts: Vec<u64> = echomq_integration_tests::timeline::starts(c, &q.keys().events())
        .await
        .into_iter()
        .map(|(_, ms)| ms)
        .collect();
    starts.sort_unstable();
    starts
}

/// The most jobs of `q` in `active` at once, by the events stream: what a
/// global concurrency is checked on.
pub async fn redis_peak(c: &fred::prelude::Client, q: &echomq::Queue) -> usize {
    echomq_integration_tests::timeline::peak_active(c, &q.keys().events()).await
}

/// Panics unless the starts keep `limit` (see
/// [`echomq_integration_tests::timeline::assert_rate_limited`]), allowing
/// for the longest script call in the slow log: the test must have called
/// [`echomq_integration_tests::timeline::log_every_command`] before its
/// workers ran.
pub async fn assert_window_budget(
    c: &fred::prelude::Client,
    starts: &[u64],
    limit: RateLimit,
    what: &str,
) {
    let late_us = echomq_integration_tests::timeline::longest_script_us(c).await;
    echomq_integration_tests::timeline::assert_rate_limited(
        starts,
        limit.max as usize,
        limit.duration_ms(),
        late_us,
        what,
    );
}

/// The ids of the jobs a worker ran, in the order its processor was entered.
pub type Ran = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A Rust worker whose jobs sleep `sleep_ms` and record their id.
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
    ran: Ran,
) -> Running {
    use ractor::Actor;
    let (host, _) = Actor::spawn(None, echomq_integration_tests::NullSupervisor, ())
        .await
        .unwrap();
    let processor = echomq::processor_fn(move |job: echomq::JobContext| {
        let ran = ran.clone();
        async move {
            ran.lock().unwrap().push(job.id().to_owned());
            tokio::time::sleep(std::time::Duration::from_millis(sleep_ms)).await;
            Ok::<_, echomq::ProcessError>(serde_json::json!(null))
        }
    });
    let mut args = echomq::WorkerArgs::new(q.clone(), processor);
    args.options = options;
    let (worker, lm) = echomq_integration_tests::spawn_worker(host.get_cell(), args)
        .await
        .unwrap();
    Running {
        worker,
        _lm: lm,
        _host: host,
    }
}

impl Running {
    /// Closes the worker and waits until it is gone: from then on it takes
    /// no job (its fetch loop has ended; a `stop` would return before that).
    pub async fn close(self) {
        ractor::call_t!(
            self.worker,
            echomq::WorkerMsg::Close,
            15_000,
            std::time::Duration::from_secs(5)
        )
        .expect("the worker closes");
        self.worker
            .wait(Some(std::time::Duration::from_secs(10)))
            .await
            .expect("the closed worker stops");
    }
}
