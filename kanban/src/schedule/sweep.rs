//! The dispatcher's pass over a board's jobs: note the sweep, then fire due jobs one
//! transaction each until none is due. Any number of dispatchers, on any number of hosts, may
//! sweep one board at once; the store makes each due time fire once.

use std::sync::Arc;
use std::time::Duration;

use super::{JobRun, SWEEP_LIMIT};
use crate::domain::BoardSlug;
use crate::store::{Store, StoreError};

/// How often a running dispatcher sweeps its board's jobs. A job is fired at most this long
/// after it falls due (plus the time to fire the jobs due before it).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Transient failures in a row one sweep tolerates before it leaves the rest to the next.
const RETRIES: u32 = 5;

/// What one sweep did.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// The runs recorded, in the order they fired.
    pub fired: Vec<JobRun>,
    /// The error that ended the sweep early, if one did.
    pub error: Option<StoreError>,
}

/// Sweeps `board` once.
pub async fn sweep(store: &dyn Store, board: &BoardSlug) -> SweepReport {
    let mut report = SweepReport::default();
    if let Err(e) = store.note_sweep(board).await {
        report.error = Some(e);
        return report;
    }
    let mut failures = 0;
    while report.fired.len() < SWEEP_LIMIT {
        match store.fire_next_job(board).await {
            Ok(Some(run)) => {
                failures = 0;
                report.fired.push(run);
            }
            Ok(None) => break,
            Err(e) if e.is_transient() && failures < RETRIES => {
                // Busy, or a due time another host fired a moment before: look again.
                failures += 1;
                tracing::debug!(board = %board, error = %e, "schedule sweep retries");
            }
            Err(e) => {
                tracing::warn!(board = %board, error = %e, "schedule sweep stopped");
                report.error = Some(e);
                break;
            }
        }
    }
    report
}

/// Sweeps `board` every [`SWEEP_INTERVAL`] until the task is aborted: what a running dispatcher
/// does besides its rounds (the tasks a sweep makes wake the rounds that claim them).
pub async fn sweep_every_interval(store: Arc<dyn Store>, board: BoardSlug) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let report = sweep(store.as_ref(), &board).await;
        if !report.fired.is_empty() {
            tracing::debug!(board = %board, fired = report.fired.len(), "scheduled jobs fired");
        }
    }
}
