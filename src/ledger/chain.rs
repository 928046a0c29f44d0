//! The event ledger (DESIGN.md, "Evidence"): an append-only, hash-chained log of ingested
//! events and the proxy's own events in the `Ledger` tree.
//!
//! Each entry's `hash` covers its content and the previous entry's hash (see
//! [`LedgerEntry::compute_hash`]), so removing, reordering or editing an entry breaks the chain
//! at that point. Appends take one lock and write under it, so entries reach sled in sequence
//! order; nothing here flushes (the ingest path flushes before acknowledging).
//!
//! Storage layout (docs/ledger.md, "Trees and keys"): entries are stored in *segments*, one
//! sled insert per segment. A segment is the JSON object `{"entries": [LedgerEntry, …]}`
//! holding 1 to [`SEGMENT_MAX_ENTRIES`](segment::SEGMENT_MAX_ENTRIES) entries with consecutive seqs in ascending order, at
//! `seq_key(seq of its last entry)`; the next segment starts at that seq + 1. A segment is
//! also closed before an entry that would take its encoding over [`SEGMENT_MAX_BYTES`](segment::SEGMENT_MAX_BYTES). One
//! [`Ledger::append_entries`] call writes its entries as ⌈n / 64⌉ segments (more when entries
//! are large), so a crash loses whole segments, never part of one. Why: an insert costs sled
//! ~13.6 µs of CPU for a 1.1 KB entry, while 64 such entries in one insert cost ~2.2 µs each
//! (BENCHMARKS.md, "Ledger shipping").
//!
//! Data written before segments (one bare `LedgerEntry` object per key, at `seq_key(seq)`) is
//! still read everywhere: a stored value is a segment when its first key is `entries`, else one
//! entry. Both layouts can follow each other in one tree.
//!
//! [`Ledger::appended`] is a watch of the last seq, updated under the append lock after every
//! append that wrote something: the shipper (`link::shipper`) waits on it when caught up.

use super::canon::{canonical_json, CanonHasher, ChainHead};
use super::LedgerError;
use crate::ids;
use crate::store::{seq_key, Store, StoreError, Tree, TreeName};
use segment::{decode_from, SegmentBuf};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::watch;

mod segment;

/// Every stored value of the ledger tree, `(key seq, JSON)`, decompressed (for tests that
/// inspect or tamper with the stored layout).
#[cfg(test)]
pub(in crate::ledger) fn stored_values(store: &Store) -> Vec<(u64, Value)> {
    let tree = store.tree(TreeName::Ledger);
    let rows = tree.range_raw(b"").map(Result::unwrap);
    rows.map(|(k, v)| {
        let key = u64::from_be_bytes(k.try_into().unwrap());
        (
            key,
            serde_json::from_slice(&crate::store::codec::stored_json(&v).unwrap()).unwrap(),
        )
    })
    .collect()
}
pub(in crate::ledger) use segment::{decode_stored, is_segment};

/// Domain tag of ledger entry hashes.
const LEDGER_TAG: &str = "toolgate/ledger/v1";

/// One ledger entry (an element of a stored segment, or a whole value in the old layout).
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
        let mut record = Vec::with_capacity(1024);
        canonical_json(&self.record, &mut record);
        Fields {
            seq: self.seq,
            tenant_id: &self.tenant_id,
            kind: &self.kind,
            record: &record,
            recorded_at: &self.recorded_at,
            prev_hash: &self.prev_hash,
        }
        .hash()
    }
}

/// An entry's fields with its record as canonical JSON: what an append hashes and stores, so
/// the record is encoded once (not once for the hash and again for storage).
struct Fields<'a> {
    seq: u64,
    tenant_id: &'a str,
    kind: &'a str,
    /// Canonical JSON of the record.
    record: &'a [u8],
    recorded_at: &'a str,
    prev_hash: &'a str,
}

impl Fields<'_> {
    /// The entry hash ([`LedgerEntry::compute_hash`] is defined by this).
    fn hash(&self) -> String {
        let mut h = CanonHasher::new(LEDGER_TAG);
        h.str(self.tenant_id)
            .str(self.kind)
            .str(self.recorded_at)
            .field(self.record)
            .seq(self.seq)
            .str(self.prev_hash);
        h.finish_hex()
    }

    /// Writes the entry as JSON to `out`: the bytes `serde_json` writes for the
    /// [`LedgerEntry`] (same fields, same order; canonical JSON is how `serde_json` writes a
    /// `Value`, whose object keys are sorted), without encoding the record a second time.
    fn encode(&self, hash: &str, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        out.extend_from_slice(b"{\"seq\":");
        out.extend_from_slice(self.seq.to_string().as_bytes());
        out.extend_from_slice(b",\"tenant_id\":");
        serde_json::to_writer(&mut *out, self.tenant_id)?;
        out.extend_from_slice(b",\"kind\":");
        serde_json::to_writer(&mut *out, self.kind)?;
        out.extend_from_slice(b",\"record\":");
        out.extend_from_slice(self.record);
        out.extend_from_slice(b",\"recorded_at\":");
        serde_json::to_writer(&mut *out, self.recorded_at)?;
        out.extend_from_slice(b",\"prev_hash\":");
        serde_json::to_writer(&mut *out, self.prev_hash)?;
        out.extend_from_slice(b",\"hash\":");
        serde_json::to_writer(&mut *out, hash)?;
        out.push(b'}');
        Ok(())
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
    pub record: Record,
}

impl NewEntry {
    /// An event as a new entry: kind `event_type`, the record its canonical JSON
    /// ([`Event::write_canonical`](crate::ledger::Event::write_canonical), no `Value` tree).
    ///
    /// Errors: what serde_json reports for an event it cannot write (none in practice).
    pub fn event(event: crate::ledger::Event) -> Result<NewEntry, serde_json::Error> {
        let mut record = Vec::with_capacity(1024);
        event.write_canonical(&mut record)?;
        Ok(NewEntry {
            tenant_id: event.tenant_id,
            kind: event.event_type.as_str().to_string(),
            record: Record::Canonical(record),
        })
    }
}

/// The record of a [`NewEntry`].
#[derive(Debug, Clone)]
pub enum Record {
    /// A JSON value, written as its canonical JSON.
    Json(Value),
    /// Canonical JSON its producer already wrote (object keys in byte order, no whitespace,
    /// serde_json's string and number forms), e.g. by `Event::write_canonical`, stored and
    /// hashed as given. It must be exactly what canonicalizing the parsed value gives, or
    /// `toolgate ledger verify` reports the entry as altered.
    Canonical(Vec<u8>),
}

/// The seq and hash of an entry (what resuming the head needs).
#[derive(Deserialize)]
struct SeqHash {
    seq: u64,
    hash: String,
}

/// The event ledger. One per process (the chain head lives in memory); cheap to share by `Arc`.
pub struct Ledger {
    tree: Tree,
    head: Mutex<ChainHead>,
    /// The last seq written; changes after every append that wrote at least one entry.
    appended: watch::Sender<u64>,
}

impl Ledger {
    /// Opens the ledger and resumes the chain head from the last entry of the last stored
    /// value (a segment, or a single entry of the old layout).
    ///
    /// Errors: [`LedgerError::Store`] when storage fails or the last value does not decode
    /// (or is a segment without entries).
    pub fn open(store: &Store) -> Result<Ledger, LedgerError> {
        let tree = store.tree(TreeName::Ledger);
        let head = match tree.last_raw()? {
            Some(raw) => {
                let last = decode_stored::<SeqHash>(&raw)
                    .and_then(|mut entries| {
                        entries.pop().ok_or_else(|| {
                            serde::de::Error::custom("the last segment has no entries")
                        })
                    })
                    .map_err(decode_error)?;
                ChainHead {
                    seq: last.seq,
                    hash: last.hash,
                }
            }
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
    /// Errors: [`LedgerError::Store`]; segments written before the failure stay in the chain.
    pub fn append_batch(
        &self,
        tenant_id: &str,
        entries: Vec<(String, Value)>,
    ) -> Result<u64, LedgerError> {
        let entries = entries.into_iter().map(|(kind, record)| NewEntry {
            tenant_id: tenant_id.to_string(),
            kind,
            record: Record::Json(record),
        });
        self.append_entries(entries.collect())
    }

    /// Appends `entries`, each with its own tenant, under one lock, in order (the forward
    /// proxy's recorder drains the events of many calls into one call). They are stored as
    /// segments of up to [`SEGMENT_MAX_ENTRIES`](segment::SEGMENT_MAX_ENTRIES) entries, one sled insert each. Returns the seq
    /// of the last entry written (the current length for an empty list). Not flushed.
    ///
    /// Errors: [`LedgerError::Store`], [`LedgerError::Codec`]; segments written before the
    /// failure stay in the chain, the entries of the failed one are not appended.
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

    /// Chains `entries` after `head` and writes them as segments, moving `head` to the last
    /// entry of each segment once it is stored.
    fn write_entries(
        &self,
        head: &mut ChainHead,
        recorded_at: &str,
        entries: Vec<NewEntry>,
    ) -> Result<(), LedgerError> {
        let mut segment = SegmentBuf::new();
        let mut tip = head.clone();
        let (mut record_json, mut encoded) = (Vec::with_capacity(2048), Vec::with_capacity(2048));
        for NewEntry {
            tenant_id,
            kind,
            record,
        } in entries
        {
            let record: &[u8] = match &record {
                Record::Json(value) => {
                    record_json.clear();
                    canonical_json(value, &mut record_json);
                    &record_json
                }
                Record::Canonical(bytes) => bytes,
            };
            let fields = Fields {
                seq: tip.seq + 1,
                tenant_id: &tenant_id,
                kind: &kind,
                record,
                recorded_at,
                prev_hash: &tip.hash,
            };
            let hash = fields.hash();
            encoded.clear();
            fields.encode(&hash, &mut encoded)?;
            let seq = fields.seq;
            if !segment.fits(encoded.len()) {
                self.store_segment(head, std::mem::replace(&mut segment, SegmentBuf::new()))?;
            }
            tip = ChainHead { seq, hash };
            segment.push(&encoded, tip.clone());
        }
        self.store_segment(head, segment)
    }

    /// Writes `segment` (one insert) and moves `head` to its last entry; nothing for an empty
    /// one.
    fn store_segment(&self, head: &mut ChainHead, segment: SegmentBuf) -> Result<(), LedgerError> {
        let Some((json, tip)) = segment.finish() else {
            return Ok(());
        };
        self.tree
            .put_raw(&seq_key(tip.seq), &crate::store::codec::compress(&json))?;
        *head = tip;
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

    /// Up to `limit` entries with seq ≥ `seq`, in order (for the shipper and the feed). The
    /// part of the first segment before `seq` is skipped.
    ///
    /// Errors: [`LedgerError::Store`] (including a stored value that does not decode).
    pub fn read_from(&self, seq: u64, limit: usize) -> Result<Vec<LedgerEntry>, LedgerError> {
        self.read_from_as(seq, limit)
    }

    /// Like [`Ledger::read_from`], decoding each stored entry as `T` (a projection of
    /// [`LedgerEntry`], e.g. with the record kept as raw JSON for the shipper). `T` needs no
    /// seq: entries are placed by the layout (a segment's entries are consecutive and end at
    /// its key). Values at keys that are not sequence keys are passed over (`verify` reports
    /// them).
    ///
    /// Errors: [`LedgerError::Store`] (including an entry that does not decode as `T`).
    pub fn read_from_as<T: DeserializeOwned>(
        &self,
        seq: u64,
        limit: usize,
    ) -> Result<Vec<T>, LedgerError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for row in self.tree.range_raw(&seq_key(seq)) {
            let (key, bytes) = row?;
            let Ok(key) = <[u8; 8]>::try_from(key.as_slice()) else {
                continue;
            };
            let want = limit - out.len();
            decode_from(&bytes, u64::from_be_bytes(key), seq, want, &mut out)
                .map_err(decode_error)?;
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// The head lock. A panic while holding it cannot leave the head inconsistent (it is only
    /// assigned after a successful write), so a poisoned lock is recovered.
    fn lock(&self) -> MutexGuard<'_, ChainHead> {
        self.head.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A stored value of the `Ledger` tree that does not decode.
fn decode_error(source: serde_json::Error) -> LedgerError {
    LedgerError::Store(StoreError::Decode {
        tree: TreeName::Ledger.as_str(),
        source,
    })
}

#[cfg(test)]
mod tests;
