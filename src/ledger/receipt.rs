//! Signed, hash-chained decision receipts (DESIGN.md, "Evidence"): every decision and every
//! hold resolution gets one, stored in the `Receipts` tree at `seq_key(seq)`.
//!
//! Hot path: [`ReceiptLog::issue`] runs for every /v1/enforce decision. Only the sequence
//! assignment, the last two hash fields and the head update run under the lock; the id,
//! timestamp, the content part of the hash, the Ed25519 signature and the sled insert run
//! outside it.
//!
//! Crash semantics: `issue` does not flush; sled's background flusher writes receipts within
//! about 500 ms, so a crash may lose the receipts issued since the last flush. Because inserts
//! happen outside the lock, receipt `n + 1` can reach sled just before receipt `n`, so a crash
//! can also leave a hole in the last few sequence numbers. [`ReceiptLog::open`] records such
//! holes in the `Meta` tree (`ledger/receipts/lost/<seq>`), and `verify` reports them (and
//! any hole within the last [`TAIL_WINDOW`] receipts) as "lost in a crash", not as a broken
//! chain. Callers that need a receipt durable (hold resolutions) call `Store::flush` themselves.

use super::canon::{CanonHasher, ChainHead};
use super::{signing, LedgerError};
use crate::ids;
use crate::store::{seq_key, Store, Tree, TreeName};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Domain tag of receipt hashes.
const RECEIPT_TAG: &str = "toolgate/receipt/v1";
/// Holes within this many receipts of the chain head are attributed to a crash.
pub const TAIL_WINDOW: u64 = 1024;
/// `Meta` key prefix of holes found at open; the key ends with `seq_key(seq)`.
pub(crate) const LOST_PREFIX: &[u8] = b"ledger/receipts/lost/";

/// What a receipt attests.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// A decision of POST /v1/enforce.
    Decision,
    /// The resolution of a hold.
    HoldResolution,
}

impl ReceiptKind {
    /// The wire string (`decision`, `hold_resolution`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptKind::Decision => "decision",
            ReceiptKind::HoldResolution => "hold_resolution",
        }
    }
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

/// A signed receipt: the body plus its place in the chain, hash and signature. This JSON is
/// both what is stored and what the API returns as `receipt` / `initial_receipt`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    /// `rcpt_<uuid v7>`.
    pub receipt_id: String,
    /// Position in the receipt chain, starting at 1.
    pub seq: u64,
    /// Issue time, RFC 3339 UTC with milliseconds. Not strictly ordered by `seq` under
    /// concurrency (taken before the sequence is assigned).
    pub issued_at: String,
    /// Attested facts.
    #[serde(flatten)]
    pub body: ReceiptBody,
    /// `hash` of receipt `seq - 1`; 64 hex zeros for seq 1.
    pub prev_hash: String,
    /// Lower-case hex SHA-256, see [`Receipt::compute_hash`].
    pub hash: String,
    /// Standard base64 (padded) Ed25519 signature over the 32 raw bytes of `hash`.
    pub signature: String,
    /// First 16 hex of SHA-256 of the signer's raw public key ([`super::key_id`]).
    pub signing_key_id: String,
}

impl Receipt {
    /// SHA-256 over the length-prefixed fields `toolgate/receipt/v1`, receipt_id, issued_at,
    /// kind, tenant_id, subject_id, request_hash, decision, authorization_decision,
    /// decision_reason_code, policy_version (wire strings), seq (decimal), prev_hash.
    pub fn compute_hash(&self) -> String {
        let h = content_hasher(&self.receipt_id, &self.issued_at, &self.body);
        hex::encode(finish_chain_hash(h, self.seq, &self.prev_hash))
    }
}

/// The hash state over everything but the chain position (computed outside the lock).
fn content_hasher(receipt_id: &str, issued_at: &str, body: &ReceiptBody) -> CanonHasher {
    // Exhaustive destructuring: a new body field fails to compile until it is hashed.
    let ReceiptBody {
        kind,
        tenant_id,
        subject_id,
        request_hash,
        decision,
        authorization_decision,
        decision_reason_code,
        policy_version,
    } = body;
    let mut h = CanonHasher::new(RECEIPT_TAG);
    h.str(receipt_id)
        .str(issued_at)
        .str(kind.as_str())
        .str(tenant_id);
    h.str(subject_id).str(request_hash).str(decision.as_str());
    h.str(authorization_decision.as_str())
        .str(decision_reason_code.as_str());
    h.str(policy_version);
    h
}

/// Adds the chain position to a content hash and finishes it.
fn finish_chain_hash(mut h: CanonHasher, seq: u64, prev_hash: &str) -> [u8; 32] {
    h.seq(seq).str(prev_hash);
    h.finish()
}

/// Issues receipts. One per process (the chain head lives in memory); share it by `Arc`.
pub struct ReceiptLog {
    tree: Tree,
    head: Mutex<ChainHead>,
    key: SigningKey,
    key_id: String,
    public_pem: String,
}

impl ReceiptLog {
    /// Opens the chain and the signing key: loads or creates `<data_dir>/receipt-signing.key`
    /// (PKCS#8 PEM, mode 0600), writes `<data_dir>/receipt-signing.pub`, resumes the head from
    /// the last stored receipt and records any crash holes in the tail (see the module docs).
    ///
    /// Errors: [`LedgerError::Key`] for key files, [`LedgerError::Store`] for storage (including
    /// a last receipt that does not decode).
    pub fn open(store: &Store, data_dir: &Path) -> Result<ReceiptLog, LedgerError> {
        let key = signing::load_or_create(data_dir)?;
        let verifying = key.verifying_key();
        let public_pem = signing::public_pem(&verifying)?;
        signing::write_public(data_dir, &public_pem)?;
        let tree = store.tree(TreeName::Receipts);
        let head = match tree.last::<Receipt>()? {
            Some((_, r)) => ChainHead {
                seq: r.seq,
                hash: r.hash,
            },
            None => ChainHead::genesis(),
        };
        note_tail_holes(store, &tree, head.seq)?;
        Ok(ReceiptLog {
            tree,
            head: Mutex::new(head),
            key_id: signing::key_id(&verifying),
            key,
            public_pem,
        })
    }

    /// Issues, signs and stores one receipt (not flushed; see the module docs).
    ///
    /// Errors: [`LedgerError::Store`] when the insert fails; the sequence number is then used
    /// up and the chain has a hole there, which `verify` reports.
    pub fn issue(&self, body: ReceiptBody) -> Result<Receipt, LedgerError> {
        let receipt_id = ids::new_id("rcpt");
        let issued_at = ids::rfc3339(ids::now());
        let content = content_hasher(&receipt_id, &issued_at, &body);
        let (seq, prev_hash, digest) = self.advance(content);
        let signature = B64.encode(self.key.sign(&digest).to_bytes());
        let receipt = Receipt {
            receipt_id,
            seq,
            issued_at,
            body,
            prev_hash,
            hash: hex::encode(digest),
            signature,
            signing_key_id: self.key_id.clone(),
        };
        if let Err(e) = self.tree.put(&seq_key(seq), &receipt) {
            tracing::error!(seq, error = %e, "receipt insert failed; the chain has a hole here");
            return Err(e.into());
        }
        Ok(receipt)
    }

    /// The critical section: assign the next seq, finish the hash, advance the head.
    fn advance(&self, content: CanonHasher) -> (u64, String, [u8; 32]) {
        let mut head = self.lock();
        let seq = head.seq + 1;
        let digest = finish_chain_hash(content, seq, &head.hash);
        let prev_hash = std::mem::replace(&mut head.hash, hex::encode(digest));
        head.seq = seq;
        (seq, prev_hash, digest)
    }

    /// The public key as SubjectPublicKeyInfo PEM (the content of `receipt-signing.pub`).
    pub fn public_key_pem(&self) -> String {
        self.public_pem.clone()
    }

    /// The `signing_key_id` stamped on receipts.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Number of receipts issued so far (= the last assigned seq).
    pub fn len(&self) -> u64 {
        self.lock().seq
    }

    /// True when no receipt has been issued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The head lock; recovered when poisoned (the head is assigned in one step, after the
    /// hash is computed, so a panic cannot leave it half-updated).
    fn lock(&self) -> MutexGuard<'_, ChainHead> {
        self.head.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Records holes among the last [`TAIL_WINDOW`] receipts in `Meta` (first detection wins).
fn note_tail_holes(store: &Store, tree: &Tree, head_seq: u64) -> Result<(), LedgerError> {
    let meta = store.tree(TreeName::Meta);
    let detected_at = ids::rfc3339(ids::now());
    let mut holes = 0u64;
    for seq in head_seq.saturating_sub(TAIL_WINDOW).max(1)..head_seq {
        if tree.contains(&seq_key(seq))? {
            continue;
        }
        let mut key = LOST_PREFIX.to_vec();
        key.extend_from_slice(&seq_key(seq));
        let note = serde_json::json!({"detected_at": detected_at, "head_seq": head_seq});
        if meta.put_new(&key, &note)? {
            holes += 1;
        }
    }
    if holes > 0 {
        tracing::warn!(
            holes,
            head_seq,
            "receipts lost in a crash before the last flush"
        );
        // Rare (only after a crash); make the notes durable before new receipts push the hole
        // out of the window where the next start-up would find it again.
        store.flush_blocking()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
