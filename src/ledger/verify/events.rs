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

use super::links::{Link, Links};
use super::{probe, ChainReport};
use crate::ledger::chain::{decode_stored, is_segment};
use crate::ledger::{LedgerEntry, LedgerError};
use crate::store::Tree;
use std::collections::BTreeSet;

/// Walks the `Ledger` tree; see the module docs. `noted`: seqs recorded as lost elsewhere.
///
/// Errors: [`LedgerError::Store`] when storage cannot be read.
pub(super) fn verify_events(
    tree: &Tree,
    noted: &BTreeSet<u64>,
) -> Result<ChainReport, LedgerError> {
    let mut links = Links::new();
    let stray = probe(tree, |at, bytes| value(&mut links, at, bytes))?;
    Ok(links.finish(noted, stray))
}

/// Checks the value stored at key `at`.
fn value(links: &mut Links, at: u64, bytes: &[u8]) {
    let what = if is_segment(bytes) {
        "segment"
    } else {
        "entry"
    };
    let entries: Vec<LedgerEntry> = match decode_stored(bytes) {
        Ok(entries) => entries,
        Err(e) => return links.broken(at, format!("{what} does not decode: {e}")),
    };
    let Some(first) = entries.first().map(|e| e.seq) else {
        return links.broken(at, "segment has no entries".to_string());
    };
    let start = links.start(first, at);
    for (seq, e) in (start..).zip(&entries) {
        let item = Link {
            seq: e.seq,
            prev_hash: &e.prev_hash,
            hash: &e.hash,
            computed: e.compute_hash(),
        };
        links.link(seq, item);
    }
    let last = start + entries.len() as u64 - 1;
    if last > at {
        let extra = last - at;
        links.report.problem(
            at,
            format!("{extra} entries after seq {at} are stored under seq {at}"),
        );
    } else if last < at {
        // Entries missing at the end of a segment cannot come from a crash (a segment is
        // one insert): the value was edited.
        links.report.problem(
            last + 1,
            format!("segment stored under seq {at} ends at seq {last}"),
        );
    }
    links.end(at);
}
