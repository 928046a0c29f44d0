//! Hash-chained decision receipts covered by signed checkpoints (DESIGN.md, "Evidence";
//! docs/ledger.md, "Receipts"): every decision and every hold resolution gets one.
//!
//! Hot path: [`ReceiptLog::issue`] runs for every /v1/enforce decision, [`ReceiptLog::chain`]
//! for every forward-proxy decision. Both hash the receipt's content outside any lock and append
//! it to the chain under a short lock (seq, chain hash, head); `issue` then awaits the signer
//! task (`receipt/signer.rs`), `chain` returns at once (the signer may linger a few
//! milliseconds for more receipts; [`ReceiptLog::settle`] at shutdown ends that). The signer signs *checkpoints* (the chain
//! head `{seq, hash}`) rather than single receipts: every receipt appended while it was busy is
//! covered by its next signature (group commit, as transparency logs sign tree heads), and it
//! stores each checkpoint with the receipts it covers as one [`Segment`] in the `Receipts` tree
//! at `seq_key(checkpoint seq)`: one sled insert per batch. An idle log signs and stores each
//! awaited receipt at once. A failed segment insert stops the signer: every later receipt is
//! refused, so callers fail closed.
//!
//! Crash semantics: nothing here flushes; sled's background flusher writes segments within
//! about 500 ms, so a crash may lose the segments stored since the last flush (the receipts in
//! them were already returned, as before). No receipt is ever stored without its checkpoint.
//! Segments are written by one task in chain order, so a crash normally loses a suffix; a hole
//! (a failed insert, or a flush that kept a later segment but not an earlier one) is recorded
//! by [`ReceiptLog::open`] in the `Meta` tree (`ledger/receipts/lost/<seq>`), and `verify`
//! reports holes within the last [`TAIL_WINDOW`] receipts as lost in a crash. Callers that need
//! a receipt durable (holds) call `Store::flush` after `issue` returns.

use super::canon::{CanonHasher, ChainHead};
use super::{signing, LedgerError};
use crate::ids;
use crate::store::{seq_key, Store, Tree, TreeName};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use serde::{Deserialize, Serialize};
use std::path::Path;

mod checkpoint;
mod path;
mod signer;

pub use checkpoint::Segment;
pub use path::CheckpointPath;

/// Domain tag of a receipt's content digest.
const CONTENT_TAG: &str = "toolgate/receipt-content/v2";
/// Domain tag of a receipt's chain hash.
const CHAIN_TAG: &str = "toolgate/receipt/v2";
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

/// A receipt as stored (inside a [`Segment`]): the body and its place in the hash chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReceiptEntry {
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
    /// Lower-case hex chain hash, see [`ReceiptEntry::compute_hash`].
    pub hash: String,
}

impl ReceiptEntry {
    /// Lower-case hex SHA-256 over the length-prefixed fields `toolgate/receipt-content/v2`,
    /// receipt_id, issued_at, kind, tenant_id, subject_id, request_hash, decision,
    /// authorization_decision, decision_reason_code, policy_version (wire strings).
    pub fn content_digest(&self) -> String {
        content_digest(&self.receipt_id, &self.issued_at, &self.body)
    }

    /// The chain hash: lower-case hex SHA-256 over the fields `toolgate/receipt/v2`,
    /// content digest (hex text), seq (decimal), prev_hash (hex text).
    pub fn compute_hash(&self) -> String {
        chain_hash(&self.content_digest(), self.seq, &self.prev_hash)
    }
}

/// A receipt as the API returns it (`receipt`, `initial_receipt`, `terminal_receipt`): the stored
/// entry plus the proof that a signed checkpoint covers it. [`Receipt::verify`] checks one
/// receipt on its own: fold `checkpoint_path` from `hash` up to `checkpoint_hash`, then check
/// `signature` over the checkpoint statement (docs/ledger.md, "Canonical encodings").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Receipt {
    /// The chained receipt.
    #[serde(flatten)]
    pub entry: ReceiptEntry,
    /// Standard base64 (padded) Ed25519 signature over the checkpoint statement.
    pub signature: String,
    /// First 16 hex of SHA-256 of the signer's raw public key ([`super::key_id`]).
    pub signing_key_id: String,
    /// Sequence number of the signed checkpoint (≥ `seq`).
    pub checkpoint_seq: u64,
    /// Chain hash of receipt `checkpoint_seq`, as signed.
    pub checkpoint_hash: String,
    /// Hex content digests of receipts `seq + 1 ..= checkpoint_seq`, in order (empty when the
    /// checkpoint is this receipt); a JSON array of strings.
    pub checkpoint_path: CheckpointPath,
}

/// The content digest (hex) of a receipt: everything but its chain position.
fn content_digest(receipt_id: &str, issued_at: &str, body: &ReceiptBody) -> String {
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
    let mut h = CanonHasher::new(CONTENT_TAG);
    h.str(receipt_id).str(issued_at).str(kind.as_str());
    h.str(tenant_id).str(subject_id).str(request_hash);
    h.str(decision.as_str())
        .str(authorization_decision.as_str())
        .str(decision_reason_code.as_str());
    h.str(policy_version);
    h.finish_hex()
}

/// The chain hash (hex) of the receipt at `seq` with `content` digest after `prev_hash`.
pub(crate) fn chain_hash(content: &str, seq: u64, prev_hash: &str) -> String {
    let mut h = CanonHasher::new(CHAIN_TAG);
    h.str(content).seq(seq).str(prev_hash);
    h.finish_hex()
}

/// A receipt appended to the chain whose signed checkpoint is still to come
/// ([`ReceiptLog::chain`]).
pub struct ChainedReceipt {
    /// `rcpt_<uuid v7>`.
    pub receipt_id: String,
    covered: signer::Covered,
    key_id: String,
}

impl ChainedReceipt {
    /// Waits until the signer has signed a checkpoint covering this receipt and stored both,
    /// and returns the receipt with that proof.
    ///
    /// Errors: [`LedgerError::Key`] as [`ReceiptLog::issue`].
    pub async fn signed(self) -> Result<Receipt, LedgerError> {
        match self.covered.await {
            Ok(Ok((checkpoint, entry))) => Ok(checkpoint.prove(entry, &self.key_id)),
            Ok(Err(not_stored)) => Err(LedgerError::Key(not_stored)),
            Err(_) => Err(signer::stopped()),
        }
    }
}

/// Issues receipts. One per process (the chain head lives in memory); share it by `Arc`.
pub struct ReceiptLog {
    signer: signer::Signer,
    key_id: String,
    public_pem: String,
    tree: Tree,
}

impl ReceiptLog {
    /// Opens the chain and the signing key: loads or creates `<data_dir>/receipt-signing.key`
    /// (PKCS#8 PEM, mode 0600), writes `<data_dir>/receipt-signing.pub`, resumes the head from
    /// the last stored segment, records any crash holes in the tail (see the module docs) and
    /// starts the signer task on the current tokio runtime.
    ///
    /// Errors: [`LedgerError::Key`] for key files or when called outside a tokio runtime,
    /// [`LedgerError::Store`] for storage (including a segment in the tail that does not decode).
    pub fn open(store: &Store, data_dir: &Path) -> Result<ReceiptLog, LedgerError> {
        let key = signing::load_or_create(data_dir)?;
        let verifying = key.verifying_key();
        let public_pem = signing::public_pem(&verifying)?;
        signing::write_public(data_dir, &public_pem)?;
        let key_id = signing::key_id(&verifying);
        let tree = store.tree(TreeName::Receipts);
        let head = match tree.last::<Segment>()? {
            Some((_, s)) => ChainHead {
                seq: s.checkpoint.seq,
                hash: s.checkpoint.hash,
            },
            None => ChainHead::genesis(),
        };
        note_tail_holes(store, &tree, head.seq)?;
        let signer = signer::Signer::start(head, key, key_id.clone(), tree.clone())?;
        Ok(ReceiptLog {
            signer,
            key_id,
            public_pem,
            tree,
        })
    }

    /// Issues one receipt, waits until the signer has signed a checkpoint covering it and
    /// stored both (not flushed; see the module docs), and returns it with that proof.
    ///
    /// Cancel-safe: a dropped call's receipt is still signed and stored with its batch.
    ///
    /// Errors: [`LedgerError::Key`] when the signer task has stopped (its runtime shut down) or
    /// the receipt's segment could not be stored (the chain then has a hole there, which
    /// `verify` reports).
    pub async fn issue(&self, body: ReceiptBody) -> Result<Receipt, LedgerError> {
        self.chain(body, true)?.signed().await
    }

    /// Appends one receipt to the chain (its seq and chain hash are fixed on return) and queues
    /// it for the signer's next checkpoint, without waiting for the signature. The forward
    /// proxy forwards an allowed call as soon as its receipt is chained: waiting would add the
    /// signer's round trip to every call. Against a crash it is as durable as waiting, since
    /// neither path flushes (module docs); a clean shutdown calls [`ReceiptLog::settle`] before
    /// its final flush. What differs: if the segment insert fails, the calls of that batch have
    /// already been forwarded without a stored receipt; the signer then stops, so every later
    /// call is refused. Dropping the returned [`ChainedReceipt`] does not drop the receipt: it
    /// is signed and stored with its batch.
    ///
    /// `will_wait`: the caller will await [`ChainedReceipt::signed`], so the signer signs at
    /// once; otherwise it may wait a few milliseconds for more receipts to share the signature
    /// (`receipt/signer.rs`, `LINGER`).
    ///
    /// Errors: [`LedgerError::Key`] when the signer task has stopped (fail closed: the caller
    /// has no receipt and must not act on the decision).
    pub fn chain(&self, body: ReceiptBody, will_wait: bool) -> Result<ChainedReceipt, LedgerError> {
        let receipt_id = ids::new_id("rcpt");
        let issued_at = ids::rfc3339(ids::now());
        let digest = content_digest(&receipt_id, &issued_at, &body);
        let covered = self.signer.append(
            signer::Draft {
                receipt_id: receipt_id.clone(),
                issued_at,
                body,
                digest,
            },
            will_wait,
        )?;
        Ok(ChainedReceipt {
            receipt_id,
            covered,
            key_id: self.key_id.clone(),
        })
    }

    /// Waits until every receipt chained so far is signed and stored (ending the signer's
    /// linger), so that the final flush at shutdown covers the receipts the forward proxy did
    /// not wait for. Returns at once when the signer has stopped; callers bound the wait.
    pub async fn settle(&self) {
        self.signer.settle().await
    }

    /// The public key as SubjectPublicKeyInfo PEM (the content of `receipt-signing.pub`).
    pub fn public_key_pem(&self) -> String {
        self.public_pem.clone()
    }

    /// The `signing_key_id` stamped on receipts and checkpoints.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Number of receipts issued so far (= the last assigned seq).
    pub fn len(&self) -> u64 {
        self.signer.head_seq()
    }

    /// True when no receipt has been issued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `limit` stored receipts with seq ≥ `seq`, in seq order (readers such as the
    /// control plane's governance feed). Receipts issued but not yet stored by the signer, and
    /// receipts lost in a crash, are not returned.
    ///
    /// Errors: [`LedgerError::Store`] (including a segment that does not decode).
    pub fn read_from(&self, seq: u64, limit: usize) -> Result<Vec<ReceiptEntry>, LedgerError> {
        let mut out = Vec::new();
        // Segments are keyed by their last receipt's seq, so the first one at or after `seq`
        // may start before it; each holds at least one receipt, so `limit` segments suffice.
        for (_, segment) in self.tree.range_from::<Segment>(&seq_key(seq), limit)? {
            let fresh = segment.receipts.into_iter().filter(|r| r.seq >= seq);
            out.extend(fresh.take(limit - out.len()));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

/// Records holes among the last [`TAIL_WINDOW`] receipts in `Meta` (first detection wins).
fn note_tail_holes(store: &Store, tree: &Tree, head_seq: u64) -> Result<(), LedgerError> {
    let start = head_seq.saturating_sub(TAIL_WINDOW).max(1);
    let segments = tree.range_from::<Segment>(&seq_key(start), usize::MAX)?;
    let mut present = std::collections::BTreeSet::new();
    for (_, segment) in &segments {
        present.extend(segment.receipts.iter().map(|r| r.seq));
    }
    let meta = store.tree(TreeName::Meta);
    let detected_at = ids::rfc3339(ids::now());
    let mut holes = 0u64;
    for seq in (start..head_seq).filter(|seq| !present.contains(seq)) {
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
mod storage_tests;
#[cfg(test)]
mod tests;
