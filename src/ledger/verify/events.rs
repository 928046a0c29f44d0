//! The event ledger's part of `verify`. The `Ledger` tree holds segments
//! `{"entries": [LedgerEntry, …]}` at `seq_key(seq of the last entry)`, and, in data written
//! before segments, single entries at `seq_key(seq)` (both decoded by `chain::decode_stored`;
//! one stored entry is a segment of one). The walk probes seq 1, 2, … for stored values (so a
//! value that does not decode is a problem, not an error) and checks, for each one:
//!
//! * it decodes and holds at least one entry;
//! * its entries continue the chain: seqs consecutive from the previous value's key + 1 (a
//!   gap is a hole), each `prev_hash` equal to the previous entry's stored hash (64 zeros at
//!   seq 1; not checked right after a hole or a value that does not decode), each hash
//!   recomputed;
//! * its last entry is the one at its key (entries after it are reported).
//!
//! Holes are classified by `classify_holes`: within the last `TAIL_WINDOW` seqs they are
//! crash losses, elsewhere problems.

use super::{classify_holes, common_checks, probe, ChainReport};
use crate::ledger::canon::ZERO_HASH;
use crate::ledger::chain::{decode_stored, is_segment};
use crate::ledger::{LedgerEntry, LedgerError};
use crate::store::Tree;
use std::collections::BTreeSet;

/// State of the walk between stored values.
struct Walk {
    report: ChainReport,
    /// Seq the next value's first entry must have.
    next: u64,
    /// Stored hash of the last entry (the next `prev_hash`), `None` when unknown.
    prev: Option<String>,
    missing: Vec<u64>,
}

/// Walks the `Ledger` tree; see the module docs. `noted`: seqs recorded as lost elsewhere.
///
/// Errors: [`LedgerError::Store`] when storage cannot be read.
pub(super) fn verify_events(
    tree: &Tree,
    noted: &BTreeSet<u64>,
) -> Result<ChainReport, LedgerError> {
    let mut w = Walk {
        report: ChainReport::default(),
        next: 1,
        prev: Some(ZERO_HASH.to_string()),
        missing: Vec::new(),
    };
    let stray = probe(tree, |at, bytes| w.value(at, bytes))?;
    let mut report = w.report;
    classify_holes(&mut report, w.missing, noted);
    report.stray(stray);
    Ok(report)
}

impl Walk {
    /// Checks the value stored at key `at`.
    fn value(&mut self, at: u64, bytes: &[u8]) {
        let what = if is_segment(bytes) {
            "segment"
        } else {
            "entry"
        };
        let entries: Vec<LedgerEntry> = match decode_stored(bytes) {
            Ok(entries) => entries,
            Err(e) => return self.broken(at, format!("{what} does not decode: {e}")),
        };
        let Some(first) = entries.first().map(|e| e.seq) else {
            return self.broken(at, "segment has no entries".to_string());
        };
        let start = if first > self.next && first <= at {
            self.missing.extend(self.next..first);
            self.prev = None;
            first
        } else {
            self.next
        };
        for (seq, e) in (start..).zip(&entries) {
            self.entry(seq, e);
        }
        let last = start + entries.len() as u64 - 1;
        if last > at {
            let extra = last - at;
            self.report.problem(
                at,
                format!("{extra} entries after seq {at} are stored under seq {at}"),
            );
        } else if last < at {
            // Entries missing at the end of a segment cannot come from a crash (a segment is
            // one insert): the value was edited.
            self.report.problem(
                last + 1,
                format!("segment stored under seq {at} ends at seq {last}"),
            );
        }
        self.next = at + 1;
    }

    /// Checks one entry, expected at `seq`.
    fn entry(&mut self, seq: u64, e: &LedgerEntry) {
        let computed = e.compute_hash();
        let prev = self.prev.as_deref();
        if let Some(what) = common_checks(seq, e.seq, prev, &e.prev_hash, &e.hash, &computed) {
            self.report.problem(seq, what);
        }
        self.prev = Some(e.hash.clone());
        self.report.entries += 1;
        self.report.last_seq = self.report.last_seq.max(seq);
    }

    /// A value at `at` that cannot be checked: the link after it is unknown.
    fn broken(&mut self, at: u64, what: String) {
        self.report.problem(at, what);
        self.report.last_seq = self.report.last_seq.max(at);
        self.prev = None;
        self.next = at + 1;
    }
}
