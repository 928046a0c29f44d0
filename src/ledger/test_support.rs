//! Test helpers shared by the ledger's unit tests.

/// Reopens a store in the same process; see [`crate::store::reopen_for_tests`].
pub(crate) use crate::store::reopen_for_tests as reopen;
