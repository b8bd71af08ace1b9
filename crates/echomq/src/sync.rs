//! A poisoned lock is not an error here.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, through a poisoning: a panic while holding one of the crate's
/// short critical sections leaves plain data behind, still consistent enough
/// to keep going.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
