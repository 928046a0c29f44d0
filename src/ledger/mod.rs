//! Evidence: the event model and ingest (dedupe, replay window), the hash-chained ledger, and
//! signed hash-chained receipts. STUB: replaced by the ledger module.

use crate::store::{Store, StoreError};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Errors of the ledger and receipts.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The signing key could not be loaded or created.
    #[error("receipt signing key: {0}")]
    Key(String),
}

/// Errors of POST /v1/events/batch.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Top-level shape wrong.
    #[error("{0}")]
    Shape(String),
    /// Tenant not the caller's.
    #[error("{0}")]
    Forbidden(String),
    /// Ledger failure.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What a receipt attests.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// A decision of POST /v1/enforce.
    Decision,
    /// The resolution of a hold.
    HoldResolution,
}

/// The attested facts of a receipt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReceiptBody {
    /// What is attested.
    pub kind: ReceiptKind,
    /// Tenant.
    pub tenant_id: String,
    /// violation_id, hold_token or decision id.
    pub subject_id: String,
    /// Hex SHA-256 of the canonical request.
    pub request_hash: String,
    /// Decision.
    pub decision: Decision,
    /// Authorization decision.
    pub authorization_decision: AuthorizationDecision,
    /// Reason code.
    pub decision_reason_code: ReasonCode,
    /// Policy version label.
    pub policy_version: String,
}

/// A signed receipt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    /// Attested facts.
    #[serde(flatten)]
    pub body: ReceiptBody,
}

/// Issues receipts.
pub struct ReceiptLog {
    _store: Store,
}

impl ReceiptLog {
    /// Opens the chain and the signing key.
    pub fn open(store: &Store, data_dir: &Path) -> Result<ReceiptLog, LedgerError> {
        let _ = data_dir;
        Ok(ReceiptLog { _store: store.clone() })
    }

    /// Issues one receipt.
    pub fn issue(&self, body: ReceiptBody) -> Result<Receipt, LedgerError> {
        Ok(Receipt { body })
    }
}

/// The event ledger.
pub struct Ledger {
    _store: Store,
}

impl Ledger {
    /// Opens the ledger.
    pub fn open(store: &Store) -> Result<Ledger, LedgerError> {
        Ok(Ledger { _store: store.clone() })
    }
}

/// Ingest configuration.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Replay protection on.
    pub replay_protection: bool,
    /// Replay window.
    pub replay_window: std::time::Duration,
}

/// The 202 body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BatchAck {
    /// `accepted`.
    pub status: String,
    /// Decimal count.
    pub queued: String,
    /// Decimal count; absent for an empty batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_dropped: Option<String>,
}

/// Validates and appends batches.
pub struct Ingestor {
    _store: Store,
}

impl Ingestor {
    /// New ingestor.
    pub fn new(store: &Store, config: IngestConfig) -> Ingestor {
        let _ = config;
        Ingestor { _store: store.clone() }
    }

    /// Ingests one batch body.
    pub async fn ingest(
        &self,
        ledger: &Ledger,
        body: &[u8],
        caller_tenant: Option<&str>,
    ) -> Result<BatchAck, IngestError> {
        let _ = (ledger, body, caller_tenant);
        todo!("ingest")
    }
}
