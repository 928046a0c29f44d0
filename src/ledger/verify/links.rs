//! The chain-link bookkeeping both segment walks share (`verify/events.rs`,
//! `verify/receipts.rs`): the report, the seq the next segment must start at, the stored hash
//! the next `prev_hash` must equal, and the seqs found missing.

use super::{classify_holes, common_checks, ChainReport};
use crate::ledger::canon::ZERO_HASH;
use std::collections::BTreeSet;

/// State of a walk between stored segments.
pub(super) struct Links {
    /// What was found so far.
    pub report: ChainReport,
    /// Seq the next segment's first item must have.
    next: u64,
    /// Stored hash of the last item (the next `prev_hash`), `None` when unknown.
    prev: Option<String>,
    missing: Vec<u64>,
}

/// One chained item as stored: its own seq and hashes, and its recomputed hash.
pub(super) struct Link<'a> {
    /// The seq the item says it has.
    pub seq: u64,
    /// Its stored `prev_hash`.
    pub prev_hash: &'a str,
    /// Its stored `hash`.
    pub hash: &'a str,
    /// Its hash recomputed from its contents.
    pub computed: String,
}

impl Links {
    /// A walk at the start of a chain (seq 1, previous hash 64 zeros).
    pub fn new() -> Links {
        Links {
            report: ChainReport::default(),
            next: 1,
            prev: Some(ZERO_HASH.to_string()),
            missing: Vec::new(),
        }
    }

    /// The seq a segment stored at `at`, whose first item says `first`, starts at: a gap
    /// before it is recorded as a hole (the link after a hole is not checked).
    pub fn start(&mut self, first: u64, at: u64) -> u64 {
        if first > self.next && first <= at {
            self.missing.extend(self.next..first);
            self.prev = None;
            first
        } else {
            self.next
        }
    }

    /// Checks one item expected at `seq`: seq, link, hash.
    pub fn link(&mut self, seq: u64, item: Link<'_>) {
        let prev = self.prev.as_deref();
        let problem = common_checks(
            seq,
            item.seq,
            prev,
            item.prev_hash,
            item.hash,
            &item.computed,
        );
        if let Some(what) = problem {
            self.report.problem(seq, what);
        }
        self.prev = Some(item.hash.to_string());
        self.report.entries += 1;
        self.report.last_seq = self.report.last_seq.max(seq);
    }

    /// The segment stored at `at` is done; the next one starts after it.
    pub fn end(&mut self, at: u64) {
        self.next = at + 1;
    }

    /// A value at `at` that cannot be checked: the link after it is unknown.
    pub fn broken(&mut self, at: u64, what: String) {
        self.report.problem(at, what);
        self.report.last_seq = self.report.last_seq.max(at);
        self.prev = None;
        self.next = at + 1;
    }

    /// The report, with holes classified (`noted`: seqs recorded as lost elsewhere) and
    /// `stray` values not at sequence keys counted.
    pub fn finish(self, noted: &BTreeSet<u64>, stray: u64) -> ChainReport {
        let mut report = self.report;
        classify_holes(&mut report, self.missing, noted);
        report.stray(stray);
        report
    }
}
