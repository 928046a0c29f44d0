//! Offline verification of both chains (`toolgate ledger verify --data-dir DIR`): recomputes
//! every receipt and ledger entry hash, checks the `prev_hash` links and sequence continuity and
//! the Ed25519 signature of every receipt checkpoint; reports counts and the first problem found.
//!
//! Both chains are stored in segments keyed by the seq of their last element: receipts in signed
//! segments (`verify/receipts.rs`), ledger entries in segments of up to 64 entries or, in data
//! written before segments, one entry per key (`verify/events.rs`). Both walks probe seq 1, 2, …
//! for stored values ([`probe`]). A missing sequence number is a broken chain, except when it
//! lies within the last [`TAIL_WINDOW`] entries or was recorded as lost when the receipt log was
//! reopened: those are reported as lost in a crash before sled's flush (docs/ledger.md, "Crash
//! semantics").

use super::receipt::{LOST_PREFIX, TAIL_WINDOW};
use super::signing::{key_id, parse_public_pem};
use super::LedgerError;
use crate::store::{seq_key, Store, Tree, TreeName};
use std::collections::BTreeSet;
use std::fmt;

mod events;
mod links;
mod receipts;

/// Probing stops after this many consecutive missing sequence numbers.
const MAX_PROBE_GAP: u64 = 100_000;

/// The first problem of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Sequence number of the offending entry (0: not tied to one entry).
    pub seq: u64,
    /// What is wrong, in words.
    pub what: String,
}

/// The result of walking one chain.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChainReport {
    /// Entries found and checked.
    pub entries: u64,
    /// Highest sequence number found (0 for an empty chain).
    pub last_seq: u64,
    /// Number of problems found (an entry can have more than one, e.g. a bad hash and a bad
    /// checkpoint).
    pub problems: u64,
    /// The first problem, by sequence number.
    pub first_problem: Option<Problem>,
    /// Sequence numbers missing because of a crash before the last flush (not problems).
    pub lost_in_crash: Vec<u64>,
    /// Receipts only: segments whose checkpoint signature verified.
    pub checkpoints: u64,
}

impl ChainReport {
    /// Counts a problem; the one with the lowest seq is kept (seq 0 only when there is no other).
    fn problem(&mut self, seq: u64, what: String) {
        self.problems += 1;
        let earlier = |p: &Problem| seq != 0 && (p.seq == 0 || seq < p.seq);
        if self.first_problem.as_ref().is_none_or(earlier) {
            self.first_problem = Some(Problem { seq, what });
        }
    }

    /// Counts `stray` stored values that are not at sequence keys of the chain as one problem.
    fn stray(&mut self, stray: u64) {
        if stray > 0 {
            self.problem(
                0,
                format!("{stray} entries are not at sequence keys of this chain"),
            );
        }
    }
}

/// What `verify` found in both chains. `Display` prints a few lines ending in `OK` or
/// `FAILED: <chain> seq <n>: <problem>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The receipt chain.
    pub receipts: ChainReport,
    /// The event ledger.
    pub events: ChainReport,
    /// Key id of the public key receipts were checked against.
    pub key_id: String,
}

impl VerifyReport {
    /// True when neither chain has a problem (crash losses are not problems).
    pub fn ok(&self) -> bool {
        self.receipts.problems == 0 && self.events.problems == 0
    }
}

/// Walks the `Receipts` and `Ledger` trees of `store`, checking receipt checkpoints (in the
/// `Meta` tree) against `public_key_pem` (the content of `<data-dir>/receipt-signing.pub`).
///
/// Errors: [`LedgerError::Key`] when the PEM is not an Ed25519 public key;
/// [`LedgerError::Store`] when storage cannot be read. Corrupt entries are problems in the
/// report, not errors.
pub fn verify(store: &Store, public_key_pem: &str) -> Result<VerifyReport, LedgerError> {
    let key = parse_public_pem(public_key_pem)?;
    let noted = noted_losses(store)?;
    let receipts = receipts::verify_receipts(&store.tree(TreeName::Receipts), &key, &noted)?;
    let events = events::verify_events(&store.tree(TreeName::Ledger), &BTreeSet::new())?;
    Ok(VerifyReport {
        receipts,
        events,
        key_id: key_id(&key),
    })
}

/// Receipt holes recorded at open (`Meta` keys under [`LOST_PREFIX`]).
fn noted_losses(store: &Store) -> Result<BTreeSet<u64>, LedgerError> {
    let rows = store
        .tree(TreeName::Meta)
        .scan::<serde_json::Value>(LOST_PREFIX)?;
    Ok(rows
        .iter()
        .filter_map(|(k, _)| k.strip_prefix(LOST_PREFIX))
        .filter_map(|seq| <[u8; 8]>::try_from(seq).ok())
        .map(u64::from_be_bytes)
        .collect())
}

/// Visits the values stored at seq keys 1, 2, … in key order, until every stored value was seen
/// or [`MAX_PROBE_GAP`] keys in a row after the last one found are empty. `visit` gets the key's
/// seq and the raw value. Returns how many stored values were not visited (keys that are not
/// sequence keys of the chain).
///
/// Errors: [`LedgerError::Store`] when storage cannot be read.
fn probe(tree: &Tree, mut visit: impl FnMut(u64, &[u8])) -> Result<u64, LedgerError> {
    let total = tree.len() as u64;
    let (mut seen, mut at, mut last_found) = (0u64, 1u64, 0u64);
    while seen < total && at - last_found <= MAX_PROBE_GAP {
        if let Some(bytes) = tree.get_raw(&seq_key(at))? {
            seen += 1;
            last_found = at;
            visit(at, &bytes);
        }
        at += 1;
    }
    Ok(total - seen)
}

/// Splits missing seqs into crash losses (within the last [`TAIL_WINDOW`] seqs, or `noted` at
/// open) and problems.
fn classify_holes(report: &mut ChainReport, missing: Vec<u64>, noted: &BTreeSet<u64>) {
    let last_seq = report.last_seq;
    let tail_start = last_seq.saturating_sub(TAIL_WINDOW);
    for seq in missing.into_iter().filter(|s| *s < last_seq) {
        if seq > tail_start || noted.contains(&seq) {
            report.lost_in_crash.push(seq);
        } else {
            report.problem(seq, "entry is missing".to_string());
        }
    }
}

/// The checks both chains share, in order: seq, link, hash.
fn common_checks(
    key_seq: u64,
    seq: u64,
    expected_prev: Option<&str>,
    prev_hash: &str,
    hash: &str,
    computed: &str,
) -> Option<String> {
    if seq != key_seq {
        return Some(format!("stored under seq {key_seq} but says seq {seq}"));
    }
    if expected_prev.is_some_and(|p| p != prev_hash) {
        return Some(match key_seq {
            1 => "prev_hash of the first entry is not 64 zeros".to_string(),
            n => format!("prev_hash does not match the hash of seq {}", n - 1),
        });
    }
    (hash != computed).then(|| "hash does not match the contents".to_string())
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let receipts_label = format!("receipts (key {})", self.key_id);
        write_chain(f, &receipts_label, &self.receipts)?;
        write_chain(f, "events", &self.events)?;
        let failed = [("receipts", &self.receipts), ("events", &self.events)]
            .into_iter()
            .find_map(|(name, c)| c.first_problem.as_ref().map(|p| (name, p, c.problems)));
        match failed {
            None => write!(f, "OK"),
            Some((name, p, n)) => {
                write!(
                    f,
                    "FAILED: {name} seq {}: {} ({n} problem(s))",
                    p.seq, p.what
                )
            }
        }
    }
}

/// One chain's summary line, the number of verified checkpoints, and a note for crash losses.
fn write_chain(f: &mut fmt::Formatter<'_>, label: &str, c: &ChainReport) -> fmt::Result {
    writeln!(
        f,
        "{label}: {} entries checked, last seq {}, {} problem(s)",
        c.entries, c.last_seq, c.problems
    )?;
    if c.checkpoints > 0 {
        writeln!(f, "  {} signed checkpoints verified", c.checkpoints)?;
    }
    if let (Some(first), Some(last)) = (c.lost_in_crash.first(), c.lost_in_crash.last()) {
        writeln!(
            f,
            "  note: {} entries between seq {first} and {last} were lost in a crash before the last flush",
            c.lost_in_crash.len()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
