//! Locking that survives a panic: the one `lock` every crate of troupe uses on its mutexes.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, carrying on with the data when a holder panicked. Every mutex in troupe guards
/// data that stays valid between two statements (maps, lists, a connection whose unfinished
/// transaction rolls back on drop), so a poisoned lock is no reason to fail the caller.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
