//! Wake sources: what tells the [`Dispatcher`](super::Dispatcher) that its board may have
//! changed, so it reads the new events before the next tick.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::domain::BoardSlug;
use crate::store::PostgresStore;

/// Tells the dispatcher that the board may have changed, so it should look at new events.
/// Implementations: [`PollWake`] (any store: polls on an interval) and [`ListenWake`]
/// (PostgreSQL `LISTEN/NOTIFY`).
pub trait WakeSource: Send + 'static {
    /// Resolves at the next sign of change; `None` when the source has ended for good (the
    /// dispatcher then falls back to its tick).
    fn changed(&mut self) -> BoxFuture<'_, Option<()>>;
}

/// A wake source that fires every `interval`; the dispatcher then reads the event log and
/// runs a round only when something new is there. Works with every store.
#[derive(Debug)]
pub struct PollWake {
    interval: tokio::time::Interval,
}

impl PollWake {
    /// Fires every `every`.
    pub fn new(every: Duration) -> PollWake {
        let mut interval = tokio::time::interval(every.max(Duration::from_millis(1)));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        PollWake { interval }
    }
}

impl WakeSource for PollWake {
    fn changed(&mut self) -> BoxFuture<'_, Option<()>> {
        Box::pin(async move {
            self.interval.tick().await;
            Some(())
        })
    }
}

/// A wake source fed by PostgreSQL `LISTEN/NOTIFY` on the board's channel.
#[derive(Debug)]
pub struct ListenWake {
    changes: crate::store::BoardChanges,
}

impl ListenWake {
    /// Listens for changes of `board` in `store`.
    pub fn new(store: &PostgresStore, board: &BoardSlug) -> ListenWake {
        ListenWake {
            changes: store.subscribe(board),
        }
    }
}

impl WakeSource for ListenWake {
    fn changed(&mut self) -> BoxFuture<'_, Option<()>> {
        Box::pin(async move {
            self.changes.recv().await?;
            // Several notices often arrive together; one look at the log covers them all.
            while self.changes.try_recv().is_some() {}
            Some(())
        })
    }
}
