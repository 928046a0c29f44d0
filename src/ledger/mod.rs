//! Evidence (DESIGN.md, "Evidence"): the behavioural event model and its ingest (validation,
//! in-request dedupe, replay window), the hash-chained event ledger, signed hash-chained decision
//! receipts, and the offline verifier behind `toolgate ledger verify`.
//!
//! Files: `event.rs` (Event model + validation), `ingest.rs` (POST /v1/events/batch),
//! `replay.rs` (replay marks), `chain.rs` (event ledger), `receipt.rs` (receipts),
//! `signing.rs` (the Ed25519 key files), `canon.rs` (canonical hash encodings), `verify.rs`.
//! On-disk invariants and crash semantics: docs/ledger.md.

mod canon;
mod chain;
mod event;
mod ingest;
mod receipt;
mod replay;
mod signing;
pub mod verify;

#[cfg(test)]
mod test_support;

pub use chain::{Ledger, LedgerEntry, NewEntry, Record};
pub use event::{Event, EventType, SourceType};
pub use ingest::{BatchAck, Clock, IngestConfig, Ingestor, MAX_EVENTS_PER_BATCH};
pub use receipt::{
    ChainedReceipt, Receipt, ReceiptBody, ReceiptEntry, ReceiptKind, ReceiptLog, TAIL_WINDOW,
};
pub use signing::{key_id, PRIVATE_KEY_FILE, PUBLIC_KEY_FILE};
pub use verify::VerifyReport;

use crate::store::StoreError;

/// Errors of the ledger and receipts. The API maps every variant to 500.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Storage failed (sled I/O, or a stored value that does not decode).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The signing key could not be loaded, created, parsed or written (the text names the file,
    /// never the key material).
    #[error("receipt signing key: {0}")]
    Key(String),
    /// A record could not be encoded as JSON.
    #[error("ledger record does not encode: {0}")]
    Codec(#[from] serde_json::Error),
}

/// Errors of POST /v1/events/batch (SPEC.md, "POST /v1/events/batch", "Limits").
///
/// The API maps [`IngestError::Forbidden`] to 403, [`IngestError::Ledger`] to 500 and every
/// other variant to 400 with the Display text as `detail`.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The body is not JSON at all; carries serde_json's reason.
    #[error("malformed JSON body: {0}")]
    Malformed(String),
    /// The top-level JSON is neither an array nor an object with an `events` array. The field
    /// names what was found instead (for logs); the Display text is fixed.
    #[error("expected a JSON array of events or an object with an events array")]
    Shape(String),
    /// More than [`MAX_EVENTS_PER_BATCH`] events; carries the count received.
    #[error("too many events: {0}; at most 100 per batch")]
    TooMany(usize),
    /// The first invalid event, by zero-based position in the batch.
    #[error("invalid event at index {index}: {reason}")]
    InvalidEvent {
        /// Zero-based position in the batch.
        index: usize,
        /// `missing <field>`, `<field> must be a string`, `<field> must be one of: …`, …
        reason: String,
    },
    /// Events of more than one tenant in one batch.
    #[error("all events in a batch must belong to one tenant")]
    MixedTenants,
    /// The events belong to a tenant other than the authenticated API key's.
    #[error("{0}")]
    Forbidden(String),
    /// Storage or ledger failure (500; the batch may be retried with the same event_ids).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<StoreError> for IngestError {
    fn from(e: StoreError) -> Self {
        IngestError::Ledger(LedgerError::Store(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_match_the_contract() {
        let cases: Vec<(IngestError, &str)> = vec![
            (
                IngestError::Shape("a string".into()),
                "expected a JSON array of events or an object with an events array",
            ),
            (
                IngestError::TooMany(101),
                "too many events: 101; at most 100 per batch",
            ),
            (
                IngestError::InvalidEvent {
                    index: 3,
                    reason: "missing tenant_id".into(),
                },
                "invalid event at index 3: missing tenant_id",
            ),
            (
                IngestError::MixedTenants,
                "all events in a batch must belong to one tenant",
            ),
            (
                IngestError::Malformed("eof".into()),
                "malformed JSON body: eof",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }
}
