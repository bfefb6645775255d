//! Reading PostgreSQL rows into the store's types: [`Reader`] gives `rows.rs` the columns of one
//! row, and a value that does not parse is reported as a corrupt board, not a panic.

use tokio_postgres::Row;

use crate::domain::{Board, BoardSlug};
use crate::store::StoreError;
use crate::store::postgres_error::PgTxError;
use crate::store::rows::{self, RowAccess};

/// Reading rows back: a value that does not parse means the board holds foreign data.
pub(crate) struct Reader<'r> {
    pub(crate) row: &'r Row,
    pub(crate) board: &'r BoardSlug,
}

impl<'r> Reader<'r> {
    /// Column `idx` as `T`; a value of another type is a corrupt board.
    pub(crate) fn get<T: tokio_postgres::types::FromSql<'r>>(
        &self,
        idx: usize,
    ) -> Result<T, PgTxError> {
        self.row
            .try_get(idx)
            .map_err(|e| self.corrupt(idx, e.to_string()))
    }
}

impl RowAccess for Reader<'_> {
    type Error = PgTxError;

    fn int(&self, idx: usize) -> Result<i64, PgTxError> {
        self.get(idx)
    }

    fn opt_int(&self, idx: usize) -> Result<Option<i64>, PgTxError> {
        self.get(idx)
    }

    fn text(&self, idx: usize) -> Result<&str, PgTxError> {
        self.get(idx)
    }

    fn opt_text(&self, idx: usize) -> Result<Option<&str>, PgTxError> {
        self.get(idx)
    }

    fn bad<E: std::error::Error + Send + Sync + 'static>(&self, idx: usize, e: E) -> PgTxError {
        self.corrupt(idx, e.to_string())
    }

    fn corrupt(&self, idx: usize, what: String) -> PgTxError {
        let column = self.row.columns().get(idx).map_or("?", |c| c.name());
        StoreError::Corrupt {
            board: self.board.clone(),
            what: format!("column {column}: {what}"),
        }
        .into()
    }
}

/// Reads a board row ([`BOARD_COLS`]).
pub(crate) fn board_from_row(row: &Row, board: &BoardSlug) -> Result<Board, StoreError> {
    rows::board(&Reader { row, board }).map_err(|e| e.into_store(board))
}
