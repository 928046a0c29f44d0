//! HoldBook: STEP_UP holds — create, poll, resolve exactly once, expire; persistence; waking
//! waiters (SPEC.md, "States and transitions").

use crate::ledger::LedgerError;
use crate::store::StoreError;

/// Errors of the hold book.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// Unknown hold token.
    #[error("hold not found")]
    NotFound,
    /// The hold belongs to another tenant or agent.
    #[error("hold belongs to a different caller")]
    OtherCaller,
    /// The hold was already resolved.
    #[error("hold already resolved as {resolution}")]
    AlreadyResolved {
        /// The existing resolution.
        resolution: String,
    },
    /// The cap on pending holds is reached.
    #[error("too many pending holds ({0}); try again later")]
    TooManyPending(usize),
    /// An approval body is invalid.
    #[error("{0}")]
    BadApproval(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Receipt issuing failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}
