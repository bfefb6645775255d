//! How PostgreSQL's errors become [`StoreError`]s: a lost lock or serialization race is `Busy`,
//! a connection that is gone `Unavailable`, the rest `Backend`, each with the server's own
//! words.

use tokio_postgres::error::SqlState;

use crate::domain::BoardSlug;
use crate::store::StoreError;
use crate::store::error::{self, DbError};

/// An error inside a PostgreSQL transaction.
pub(crate) type PgTxError = error::TxError<tokio_postgres::Error>;

impl DbError for tokio_postgres::Error {
    fn into_store(self, board: &BoardSlug) -> StoreError {
        pg_error(board, self)
    }
}

/// Classifies a PostgreSQL error: lock and serialization losses are `Busy` (retry), a lost or
/// refused connection is `Unavailable` (retry once the pool reconnects), the rest `Backend`.
pub(crate) fn pg_error(board: &BoardSlug, e: tokio_postgres::Error) -> StoreError {
    let board = board.clone();
    if let Some(code) = e.code() {
        let busy = [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::UNIQUE_VIOLATION,
            SqlState::LOCK_NOT_AVAILABLE,
        ];
        if busy.contains(code) {
            return StoreError::Busy { board };
        }
        let gone = [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
        ];
        if gone.contains(code) || code.code().starts_with("08") {
            return StoreError::Unavailable {
                board,
                reason: describe_pg(&e),
            };
        }
        return StoreError::Backend {
            board,
            source: describe_pg(&e).into(),
        };
    }
    // No SQLSTATE: the connection broke, closed, or never opened.
    if e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) {
        return StoreError::Unavailable {
            board,
            reason: e.to_string(),
        };
    }
    StoreError::Backend {
        board,
        source: Box::new(e),
    }
}

/// The server's own words for an error: the driver's `Display` says only "db error" when the
/// server answered, and the message, detail and SQLSTATE live in the `DbError` behind it.
fn describe_pg(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(": ");
                text.push_str(detail);
            }
            text
        }
        None => e.to_string(),
    }
}
