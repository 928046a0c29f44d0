//! The receipt chain's part of `verify`. The `Receipts` tree holds one [`Segment`] per signed
//! checkpoint, at `seq_key(checkpoint seq)`; the walk probes seq 1, 2, … for segment keys with
//! `probe` (shared with the event ledger's walk, `verify/events.rs`), so a value that does not
//! decode is a problem, not an error, and checks, for each segment:
//!
//! * it decodes; its checkpoint's `seq` equals its key and its last receipt's seq;
//! * its receipts continue the chain: seqs consecutive from the previous segment's key + 1
//!   (a gap is a hole), each `prev_hash` equal to the previous receipt's stored hash (not
//!   checked right after a hole or a segment that does not decode), each hash recomputed;
//! * the checkpoint's `hash` equals the last receipt's hash, its key id is the given key's and
//!   its Ed25519 signature over the checkpoint statement verifies.
//!
//! A segment that passes covers each of its receipts: the hash chain links them to the signed
//! head. Holes are classified like the event ledger's (`classify_holes`).

use super::{classify_holes, common_checks, probe, ChainReport};
use crate::ledger::canon::ZERO_HASH;
use crate::ledger::receipt::{ReceiptEntry, Segment};
use crate::ledger::LedgerError;
use crate::store::Tree;
use ed25519_dalek::VerifyingKey;
use std::collections::BTreeSet;

/// State of the walk between segments.
struct Walk<'a> {
    key: &'a VerifyingKey,
    report: ChainReport,
    /// Seq the next segment's first receipt must have.
    next: u64,
    /// Stored hash of the last receipt (the next `prev_hash`), `None` when unknown.
    prev: Option<String>,
    missing: Vec<u64>,
}

/// Walks the `Receipts` tree; see the module docs.
///
/// Errors: [`LedgerError::Store`] when storage cannot be read.
pub(super) fn verify_receipts(
    tree: &Tree,
    key: &VerifyingKey,
    noted: &BTreeSet<u64>,
) -> Result<ChainReport, LedgerError> {
    let mut w = Walk {
        key,
        report: ChainReport::default(),
        next: 1,
        prev: Some(ZERO_HASH.to_string()),
        missing: Vec::new(),
    };
    let stray = probe(tree, |at, bytes| w.segment(at, bytes))?;
    let mut report = w.report;
    classify_holes(&mut report, w.missing, noted);
    report.stray(stray);
    Ok(report)
}

impl Walk<'_> {
    /// Checks the segment stored at key `at`.
    fn segment(&mut self, at: u64, bytes: &[u8]) {
        let s: Segment = match serde_json::from_slice(bytes) {
            Ok(s) => s,
            Err(e) => return self.broken(at, format!("segment does not decode: {e}")),
        };
        let Some(first) = s.receipts.first().map(|r| r.seq) else {
            return self.broken(at, "segment has no receipts".to_string());
        };
        let start = if first > self.next && first <= at {
            self.missing.extend(self.next..first);
            self.prev = None;
            first
        } else {
            self.next
        };
        for (seq, r) in (start..).zip(&s.receipts) {
            self.receipt(seq, r);
        }
        if let Some(what) = self.checkpoint_problem(at, &s) {
            self.report.problem(at, format!("checkpoint: {what}"));
        } else {
            self.report.checkpoints += 1;
        }
        self.next = at + 1;
    }

    /// Checks one receipt of a segment, expected at `seq`.
    fn receipt(&mut self, seq: u64, r: &ReceiptEntry) {
        let computed = r.compute_hash();
        let prev = self.prev.as_deref();
        if let Some(what) = common_checks(seq, r.seq, prev, &r.prev_hash, &r.hash, &computed) {
            self.report.problem(seq, what);
        }
        self.prev = Some(r.hash.clone());
        self.report.entries += 1;
        self.report.last_seq = self.report.last_seq.max(seq);
    }

    /// A segment at `at` that cannot be checked: the link after it is unknown.
    fn broken(&mut self, at: u64, what: String) {
        self.report.problem(at, what);
        self.report.last_seq = self.report.last_seq.max(at);
        self.prev = None;
        self.next = at + 1;
    }

    /// `None` when the segment's checkpoint is the given key's signature over the chain head
    /// at the segment's last receipt, stored at that receipt's seq.
    fn checkpoint_problem(&self, at: u64, s: &Segment) -> Option<String> {
        let cp = &s.checkpoint;
        let last = s.receipts.last()?;
        if cp.seq != at {
            return Some(format!("stored under seq {at} but says seq {}", cp.seq));
        }
        if last.seq != at {
            return Some(format!(
                "the segment's last receipt is seq {}, outside the checkpoint",
                last.seq
            ));
        }
        if cp.hash != last.hash {
            return Some("hash does not match the receipt's hash".to_string());
        }
        cp.problem(self.key)
    }
}
