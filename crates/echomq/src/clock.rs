//! The wall clock every protocol timestamp is taken from.
//!
//! BullMQ's scripts take their timestamps from the client (ARGV), never from
//! Redis `TIME`, so one function answers "now" for the whole runtime (the
//! worker corrects it by its measured offset to Redis's clock where due times
//! matter, docs/worker.md §Due timer). With the
//! `fault-injection` feature a process can run its clock ahead or behind, to
//! test client clock skew without touching the machine's clock.

#[cfg(feature = "fault-injection")]
use std::sync::atomic::{AtomicI64, Ordering};

#[cfg(feature = "fault-injection")]
static SKEW_MS: AtomicI64 = AtomicI64::new(0);

/// Milliseconds since the Unix epoch, as the protocol's timestamps count them.
pub fn now_ms() -> u64 {
    now_us() / 1000
}

/// Microseconds since the Unix epoch, on the same (possibly skewed) clock as
/// [`now_ms`]: the precision the worker's due timer needs.
pub fn now_us() -> u64 {
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    #[cfg(feature = "fault-injection")]
    {
        real.saturating_add_signed(SKEW_MS.load(Ordering::Relaxed).saturating_mul(1000))
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        real
    }
}

/// Runs this process's clock `ms` ahead (positive) or behind (negative).
#[cfg(feature = "fault-injection")]
pub fn set_skew_ms(ms: i64) {
    SKEW_MS.store(ms, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    #[test]
    fn now_is_after_2020() {
        assert!(super::now_ms() > 1_577_836_800_000);
    }
}
