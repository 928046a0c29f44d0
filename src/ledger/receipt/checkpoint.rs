//! Signed checkpoints of the receipt chain: the statement that is signed, the stored segment
//! (a checkpoint and the receipts it covers), the in-memory checkpoint the signer hands to
//! waiting receipts, and the verification of one receipt on its own (docs/ledger.md,
//! "Canonical encodings").
//!
//! A checkpoint `{seq, hash}` names the chain head at `seq`. Because every chain hash commits
//! to the previous one, its signature covers every receipt with a lower or equal `seq` whose
//! chain links up to it.

use super::{chain_hash, CheckpointPath, Receipt, ReceiptEntry};
use crate::ledger::canon::CanonHasher;
use crate::ledger::signing::key_id;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Domain tag of the checkpoint statement.
const CHECKPOINT_TAG: &str = "toolgate/receipt-checkpoint/v2";
/// The 32 bytes that are signed for checkpoint `{seq, hash}`: SHA-256 over the fields
/// `toolgate/receipt-checkpoint/v2`, seq (decimal), hash (hex text).
pub(crate) fn statement(seq: u64, hash: &str) -> [u8; 32] {
    let mut h = CanonHasher::new(CHECKPOINT_TAG);
    h.seq(seq).str(hash);
    h.finish()
}

/// A signed checkpoint: the `checkpoint` of a stored [`Segment`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckpointRecord {
    /// Sequence number of the receipt at the chain head that was signed.
    pub seq: u64,
    /// Chain hash of that receipt (lower-case hex).
    pub hash: String,
    /// Standard base64 (padded) Ed25519 signature over the checkpoint statement.
    pub signature: String,
    /// Key id of the signer.
    pub signing_key_id: String,
}

impl CheckpointRecord {
    /// `None` when the record is signed by `key`; otherwise what is wrong, in words.
    pub fn problem(&self, key: &VerifyingKey) -> Option<String> {
        signature_problem(
            key,
            &self.signing_key_id,
            self.seq,
            &self.hash,
            &self.signature,
        )
    }
}

/// One value of the `Receipts` tree, at `seq_key(checkpoint.seq)`: a signed checkpoint and the
/// receipts it was signed for, in seq order, the last one being the checkpoint's receipt. The
/// receipts of consecutive segments are consecutive: a segment starts right after the key of
/// the one before it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Segment {
    /// The signature over the chain head at the last receipt.
    pub checkpoint: CheckpointRecord,
    /// The receipts, `seq` ascending without gaps.
    pub receipts: Vec<ReceiptEntry>,
}

/// A [`Segment`] serialized from borrowed parts (the signer's batch).
#[derive(Serialize)]
pub(crate) struct SegmentRef<'a> {
    /// See [`Segment::checkpoint`].
    pub(crate) checkpoint: &'a CheckpointRecord,
    /// See [`Segment::receipts`].
    pub(crate) receipts: Vec<&'a ReceiptEntry>,
}

/// A checkpoint as the signer hands it to the receipts it covers: the signed head and the
/// content digests of receipts `first_seq ..= seq`, from which each receipt's path is cut.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    /// Signed head seq.
    pub(crate) seq: u64,
    /// Signed head hash (hex).
    pub(crate) hash: String,
    /// Base64 signature over [`statement`].
    pub(crate) signature: String,
    /// Seq of the first receipt of `digests`.
    pub(crate) first_seq: u64,
    /// Hex content digests of receipts `first_seq ..= seq`, shared by their paths.
    pub(crate) digests: Arc<[String]>,
}

impl Checkpoint {
    /// Completes `entry` (one of the receipts this checkpoint covers) with its proof.
    pub(crate) fn prove(&self, entry: ReceiptEntry, key_id: &str) -> Receipt {
        // `entry.seq` is in `first_seq ..= seq` (the signer only hands a checkpoint to the
        // receipts of its batch); `get` keeps an impossible out-of-range index harmless.
        let from = (entry.seq + 1).saturating_sub(self.first_seq) as usize;
        let path = CheckpointPath::suffix(self.digests.clone(), from);
        Receipt {
            entry,
            signature: self.signature.clone(),
            signing_key_id: key_id.to_string(),
            checkpoint_seq: self.seq,
            checkpoint_hash: self.hash.clone(),
            checkpoint_path: path,
        }
    }
}

impl Receipt {
    /// Verifies this receipt on its own against the signer's public key: its `hash` matches
    /// its contents, folding `checkpoint_path` from it (chain hash of seq + 1, seq + 2, …) ends
    /// at `checkpoint_hash` at `checkpoint_seq`, and `signature` is the key's signature over the
    /// checkpoint statement.
    ///
    /// Errors: what is wrong, in words (`hash does not match the contents`, `checkpoint path
    /// does not lead to checkpoint_hash`, `signature does not verify`, …).
    pub fn verify(&self, key: &VerifyingKey) -> Result<(), String> {
        let e = &self.entry;
        if e.hash != e.compute_hash() {
            return Err("hash does not match the contents".to_string());
        }
        if e.seq.checked_add(self.checkpoint_path.len() as u64) != Some(self.checkpoint_seq) {
            return Err("checkpoint_seq does not match the checkpoint path".to_string());
        }
        let mut hash = e.hash.clone();
        for (seq, digest) in (e.seq + 1..).zip(self.checkpoint_path.iter()) {
            hash = chain_hash(digest, seq, &hash);
        }
        if hash != self.checkpoint_hash {
            return Err("checkpoint path does not lead to checkpoint_hash".to_string());
        }
        match signature_problem(
            key,
            &self.signing_key_id,
            self.checkpoint_seq,
            &self.checkpoint_hash,
            &self.signature,
        ) {
            None => Ok(()),
            Some(what) => Err(what),
        }
    }
}

/// `None` when `signature` is `key`'s signature over the statement of `{seq, hash}` and
/// `kid` is `key`'s id.
fn signature_problem(
    key: &VerifyingKey,
    kid: &str,
    seq: u64,
    hash: &str,
    signature: &str,
) -> Option<String> {
    let expected = key_id(key);
    if kid != expected {
        return Some(format!(
            "signed by key {kid} but checked against key {expected}"
        ));
    }
    let sig = B64
        .decode(signature)
        .ok()
        .and_then(|b| Signature::from_slice(&b).ok());
    match sig {
        Some(sig) if key.verify(&statement(seq, hash), &sig).is_ok() => None,
        _ => Some("signature does not verify".to_string()),
    }
}
