//! `HoldError`, the hold book's one error enum (mapped to HTTP in `api::error`).

use crate::ledger::LedgerError;
use crate::store::StoreError;

/// Errors of the hold book.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// Unknown hold token (404).
    #[error("hold not found")]
    NotFound,
    /// The hold belongs to another tenant or agent (403).
    #[error("hold belongs to a different caller")]
    OtherCaller,
    /// The hold was already resolved (409).
    #[error("hold already resolved as {resolution}")]
    AlreadyResolved {
        /// The existing resolution.
        resolution: String,
    },
    /// The cap on pending holds is reached (503).
    #[error("too many pending holds ({0}); try again later")]
    TooManyPending(usize),
    /// An approval body is invalid (422).
    #[error("{0}")]
    BadApproval(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Receipt issuing failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}
