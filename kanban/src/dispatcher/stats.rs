//! The dispatcher's counters: kept by the actor, read by any handle at any time.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters since the dispatcher started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DispatcherStats {
    /// Rounds run.
    pub rounds: u64,
    /// Tasks claimed.
    pub claimed: u64,
    /// Workers that ended with their task completed.
    pub completed: u64,
    /// Workers that ended with their task blocked by the worker.
    pub blocked: u64,
    /// Runs recorded as failures (crash, timeout, spawn failure).
    pub failed: u64,
    /// Runs that ended without a terminal board call.
    pub protocol_violations: u64,
    /// Runs requeued after a rate limit.
    pub rate_limited: u64,
    /// Workers stopped because their task was archived, blocked or taken back.
    pub stopped: u64,
    /// Workers running now.
    pub running: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) rounds: AtomicU64,
    pub(super) claimed: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) blocked: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) protocol_violations: AtomicU64,
    pub(super) rate_limited: AtomicU64,
    pub(super) stopped: AtomicU64,
    pub(super) running: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> DispatcherStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DispatcherStats {
            rounds: get(&self.rounds),
            claimed: get(&self.claimed),
            completed: get(&self.completed),
            blocked: get(&self.blocked),
            failed: get(&self.failed),
            protocol_violations: get(&self.protocol_violations),
            rate_limited: get(&self.rate_limited),
            stopped: get(&self.stopped),
            running: get(&self.running),
        }
    }

    pub(super) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}
