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

use super::links::{Link, Links};
use super::{probe, ChainReport};
use crate::ledger::receipt::Segment;
use crate::ledger::LedgerError;
use crate::store::Tree;
use ed25519_dalek::VerifyingKey;
use std::collections::BTreeSet;

/// State of the walk between segments.
struct Walk<'a> {
    key: &'a VerifyingKey,
    links: Links,
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
        links: Links::new(),
    };
    let stray = probe(tree, |at, bytes| w.segment(at, bytes))?;
    Ok(w.links.finish(noted, stray))
}

impl Walk<'_> {
    /// Checks the segment stored at key `at`.
    fn segment(&mut self, at: u64, bytes: &[u8]) {
        let decoded = crate::store::codec::stored_json(bytes)
            .and_then(|json| serde_json::from_slice::<Segment>(&json));
        let s = match decoded {
            Ok(s) => s,
            Err(e) => {
                return self
                    .links
                    .broken(at, format!("segment does not decode: {e}"))
            }
        };
        let Some(first) = s.receipts.first().map(|r| r.seq) else {
            return self.links.broken(at, "segment has no receipts".to_string());
        };
        let start = self.links.start(first, at);
        for (seq, r) in (start..).zip(&s.receipts) {
            let item = Link {
                seq: r.seq,
                prev_hash: &r.prev_hash,
                hash: &r.hash,
                computed: r.compute_hash(),
            };
            self.links.link(seq, item);
        }
        if let Some(what) = self.checkpoint_problem(at, &s) {
            self.links.report.problem(at, format!("checkpoint: {what}"));
        } else {
            self.links.report.checkpoints += 1;
        }
        self.links.end(at);
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
