//! The event ledger (DESIGN.md, "Evidence"): an append-only, hash-chained log of ingested
//! events and the proxy's own events in the `Ledger` tree, keyed by `seq_key(seq)`.
//!
//! Each entry's `hash` covers its content and the previous entry's hash (see
//! [`LedgerEntry::compute_hash`]), so removing, reordering or editing an entry breaks the chain
//! at that point. Appends take one lock and write under it, so entries reach sled in sequence
//! order; nothing here flushes (the ingest path flushes before acknowledging).
//!
//! [`Ledger::appended`] is a watch of the last seq, updated under the append lock after every
//! append that wrote something: the shipper (`link::shipper`) waits on it when caught up.

use super::canon::{CanonHasher, ChainHead};
use super::LedgerError;
use crate::ids;
use crate::store::{seq_key, Store, Tree, TreeName};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::watch;

/// Domain tag of ledger entry hashes.
const LEDGER_TAG: &str = "toolgate/ledger/v1";

/// One stored ledger entry (the JSON value at `seq_key(seq)` in the `Ledger` tree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// Position in the chain, starting at 1, gap-free.
    pub seq: u64,
    /// Tenant the record belongs to.
    pub tenant_id: String,
    /// Record kind: an event's `event_type` (`TOOL_CALL_PRE`, …) or a proxy event kind.
    pub kind: String,
    /// The record (for ingested events: the normalized [`super::Event`]).
    pub record: Value,
    /// When it was appended, RFC 3339 UTC with milliseconds.
    pub recorded_at: String,
    /// `hash` of entry `seq - 1`; 64 hex zeros for seq 1.
    pub prev_hash: String,
    /// Lower-case hex SHA-256, see [`LedgerEntry::compute_hash`].
    pub hash: String,
}

impl LedgerEntry {
    /// SHA-256 over the length-prefixed fields `toolgate/ledger/v1`, tenant_id, kind,
    /// recorded_at, canonical JSON of record, seq (decimal), prev_hash (docs/ledger.md).
    pub fn compute_hash(&self) -> String {
        let mut h = CanonHasher::new(LEDGER_TAG);
        h.str(&self.tenant_id)
            .str(&self.kind)
            .str(&self.recorded_at)
            .json(&self.record)
            .seq(self.seq)
            .str(&self.prev_hash);
        h.finish_hex()
    }
}

/// An entry to append: its tenant, kind (`event_type` or proxy event kind) and record.
#[derive(Debug, Clone)]
pub struct NewEntry {
    /// Tenant the record belongs to.
    pub tenant_id: String,
    /// Record kind.
    pub kind: String,
    /// The record.
    pub record: Value,
}

/// The event ledger. One per process (the chain head lives in memory); cheap to share by `Arc`.
pub struct Ledger {
    tree: Tree,
    head: Mutex<ChainHead>,
    /// The last seq written; changes after every append that wrote at least one entry.
    appended: watch::Sender<u64>,
}

impl Ledger {
    /// Opens the ledger and resumes the chain head from the last stored entry.
    ///
    /// Errors: [`LedgerError::Store`] when storage fails or the last entry does not decode.
    pub fn open(store: &Store) -> Result<Ledger, LedgerError> {
        let tree = store.tree(TreeName::Ledger);
        let head = match tree.last::<LedgerEntry>()? {
            Some((_, e)) => ChainHead {
                seq: e.seq,
                hash: e.hash,
            },
            None => ChainHead::genesis(),
        };
        Ok(Ledger {
            tree,
            appended: watch::Sender::new(head.seq),
            head: Mutex::new(head),
        })
    }

    /// Appends `entries` (`(kind, record)` pairs) for `tenant_id` under one lock, in order.
    /// Returns the seq of the last entry written (the current length for an empty list).
    /// Not flushed: callers that acknowledge durability call `Store::flush` afterwards.
    ///
    /// Errors: [`LedgerError::Store`]; entries written before the failure stay in the chain.
    pub fn append_batch(
        &self,
        tenant_id: &str,
        entries: Vec<(String, Value)>,
    ) -> Result<u64, LedgerError> {
        let entries = entries.into_iter().map(|(kind, record)| NewEntry {
            tenant_id: tenant_id.to_string(),
            kind,
            record,
        });
        self.append_entries(entries.collect())
    }

    /// Appends `entries`, each with its own tenant, under one lock, in order (the forward
    /// proxy's recorder drains the events of many calls into one call). Returns the seq of the
    /// last entry written (the current length for an empty list). Not flushed.
    ///
    /// Errors: [`LedgerError::Store`]; entries written before the failure stay in the chain.
    pub fn append_entries(&self, entries: Vec<NewEntry>) -> Result<u64, LedgerError> {
        let recorded_at = ids::rfc3339(ids::now());
        let mut head = self.lock();
        let before = head.seq;
        let written = self.write_entries(&mut head, &recorded_at, entries);
        if head.seq != before {
            // Under the lock, so watchers see the seqs in increasing order.
            self.appended.send_replace(head.seq);
        }
        written?;
        Ok(head.seq)
    }

    /// Writes `entries` after `head`, advancing it entry by entry.
    fn write_entries(
        &self,
        head: &mut ChainHead,
        recorded_at: &str,
        entries: Vec<NewEntry>,
    ) -> Result<(), LedgerError> {
        for NewEntry {
            tenant_id,
            kind,
            record,
        } in entries
        {
            let mut entry = LedgerEntry {
                seq: head.seq + 1,
                tenant_id,
                kind,
                record,
                recorded_at: recorded_at.to_string(),
                prev_hash: head.hash.clone(),
                hash: String::new(),
            };
            entry.hash = entry.compute_hash();
            self.tree.put(&seq_key(entry.seq), &entry)?;
            head.seq = entry.seq;
            head.hash = entry.hash;
        }
        Ok(())
    }

    /// Appends one entry (the forward proxy's own events). Returns its seq. Not flushed.
    ///
    /// Errors: [`LedgerError::Store`].
    pub fn append(&self, tenant_id: &str, kind: &str, record: Value) -> Result<u64, LedgerError> {
        self.append_batch(tenant_id, vec![(kind.to_string(), record)])
    }

    /// A receiver of the last seq written, marked changed after every append that wrote at
    /// least one entry (never for an empty batch). Subscribe before reading, then
    /// `changed().await` to sleep until something new is appended.
    pub fn appended(&self) -> watch::Receiver<u64> {
        self.appended.subscribe()
    }

    /// Number of entries appended (= the last seq; sequences start at 1 and have no gaps).
    pub fn len(&self) -> u64 {
        self.lock().seq
    }

    /// True when nothing has been appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `limit` entries with seq ≥ `seq`, in order (for the shipper).
    ///
    /// Errors: [`LedgerError::Store`] (including an entry that does not decode).
    pub fn read_from(&self, seq: u64, limit: usize) -> Result<Vec<LedgerEntry>, LedgerError> {
        let rows = self.tree.range_from::<LedgerEntry>(&seq_key(seq), limit)?;
        Ok(rows.into_iter().map(|(_, e)| e).collect())
    }

    /// Like [`Ledger::read_from`], decoding each stored entry as `T` (a projection of
    /// [`LedgerEntry`], e.g. with the record kept as raw JSON for the shipper).
    ///
    /// Errors: [`LedgerError::Store`] (including an entry that does not decode as `T`).
    pub fn read_from_as<T: DeserializeOwned>(
        &self,
        seq: u64,
        limit: usize,
    ) -> Result<Vec<T>, LedgerError> {
        let rows = self.tree.range_from::<T>(&seq_key(seq), limit)?;
        Ok(rows.into_iter().map(|(_, e)| e).collect())
    }

    /// The head lock. A panic while holding it cannot leave the head inconsistent (it is only
    /// assigned after a successful write), so a poisoned lock is recovered.
    fn lock(&self) -> MutexGuard<'_, ChainHead> {
        self.head.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::canon::ZERO_HASH;
    use serde_json::json;

    #[test]
    fn entries_chain_and_resume_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let ledger = Ledger::open(&store).unwrap();
            assert_eq!(ledger.append_batch("t", vec![]).unwrap(), 0);
            let last = ledger
                .append_batch(
                    "t",
                    vec![("A".into(), json!({"n": 1})), ("B".into(), json!({"n": 2}))],
                )
                .unwrap();
            assert_eq!(last, 2);
            store.flush_blocking().unwrap();
        }
        let store = crate::ledger::test_support::reopen(dir.path());
        let ledger = Ledger::open(&store).unwrap();
        assert_eq!(ledger.len(), 2);
        assert_eq!(ledger.append("t", "C", json!({"n": 3})).unwrap(), 3);
        let all = ledger.read_from(1, 10).unwrap();
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(all[0].prev_hash, ZERO_HASH);
        for pair in all.windows(2) {
            assert_eq!(pair[1].prev_hash, pair[0].hash);
        }
        for e in &all {
            assert_eq!(e.hash, e.compute_hash());
        }
        assert_eq!(ledger.read_from(3, 10).unwrap().len(), 1);
        assert_eq!(ledger.read_from(1, 2).unwrap().len(), 2);
    }

    #[tokio::test]
    async fn appends_notify_watchers_with_the_last_seq() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        let mut rx = ledger.appended();
        assert_eq!(*rx.borrow_and_update(), 0);
        ledger.append_batch("t", vec![]).unwrap();
        assert!(!rx.has_changed().unwrap(), "an empty batch does not notify");
        ledger.append("t", "K", json!({})).unwrap();
        ledger
            .append_batch("t", vec![("K".into(), json!({})), ("K".into(), json!({}))])
            .unwrap();
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow_and_update(), 3);
        let reopened = Ledger::open(&store).unwrap();
        assert_eq!(*reopened.appended().borrow(), 3);
    }

    #[test]
    fn the_hash_covers_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        ledger.append("t", "K", json!({"a": 1})).unwrap();
        let e = ledger.read_from(1, 1).unwrap().remove(0);
        let edits: [fn(&mut LedgerEntry); 6] = [
            |e| e.seq = 2,
            |e| e.tenant_id = "u".into(),
            |e| e.kind = "L".into(),
            |e| e.record = json!({"a": 2}),
            |e| e.recorded_at = "2020-01-01T00:00:00.000Z".into(),
            |e| e.prev_hash = "1".repeat(64),
        ];
        for edit in edits {
            let mut changed = e.clone();
            edit(&mut changed);
            assert_ne!(changed.compute_hash(), e.hash);
        }
    }
}
