//! The worker's rate limiter as the fetching scripts take it: the
//! `{max, duration}` map inside FetchOpts and FinishOpts (docs/protocol.md
//! §Rate limiting). The scripts count every start in `{P}limiter`, so Rust and
//! Node workers with the same limiter share one budget.

use echomq_protocol::packing::Limiter;

use crate::worker::options::WorkerOptions;

/// The limiter to send with a fetch, `None` when the worker has none.
pub(crate) fn wire(opts: &WorkerOptions) -> Option<Limiter> {
    opts.limiter.map(|l| Limiter {
        max: l.max,
        duration: l.duration_ms(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::limits::RateLimit;
    use std::time::Duration;

    #[test]
    fn sent_as_max_and_duration_in_ms() {
        assert_eq!(wire(&WorkerOptions::default()), None);
        let opts = WorkerOptions::default().limiter(RateLimit {
            max: 3,
            duration: Duration::from_millis(1500),
        });
        assert_eq!(
            wire(&opts),
            Some(Limiter {
                max: 3,
                duration: 1500
            })
        );
    }
}
