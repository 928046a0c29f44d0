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
//! holding 1 to [`SEGMENT_MAX_ENTRIES`] entries with consecutive seqs in ascending order, at
//! `seq_key(seq of its last entry)`; the next segment starts at that seq + 1. A segment is
//! also closed before an entry that would take its encoding over [`SEGMENT_MAX_BYTES`]. One
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
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::watch;

/// Domain tag of ledger entry hashes.
const LEDGER_TAG: &str = "toolgate/ledger/v1";

/// Most entries in one stored segment.
pub const SEGMENT_MAX_ENTRIES: usize = 64;

/// A segment is closed before an entry that would take its JSON encoding over this many bytes
/// (a segment holds at least one entry, whatever its size). 64 entries of ~1.1 KB fit; the cap
/// keeps segments of large records below ~128 KiB, where sled 0.34 starts writing a value to a
/// separate blob file (a quarter of its 512 KiB log segment).
pub const SEGMENT_MAX_BYTES: usize = 96 * 1024;

/// How a segment's JSON starts and ends (`{"entries":[` … `]}`); entries are encoded one by one
/// in between, separated by commas.
const SEGMENT_OPEN: &[u8] = b"{\"entries\":[";
const SEGMENT_CLOSE: &[u8] = b"]}";

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
    pub record: Value,
}

/// A stored segment, decoded with its entries as `T`.
#[derive(Deserialize)]
struct Segment<T> {
    entries: Vec<T>,
}

/// A stored segment with its entries left as JSON text (to decode only some of them).
#[derive(Deserialize)]
struct RawSegment<'a> {
    #[serde(borrow)]
    entries: Vec<&'a RawValue>,
}

/// The seq and hash of an entry (what resuming the head needs).
#[derive(Deserialize)]
struct SeqHash {
    seq: u64,
    hash: String,
}

/// True when a stored value is a segment (`{"entries": …}`), false for a bare entry of the
/// old layout (whose fields never include `entries`).
pub(super) fn is_segment(bytes: &[u8]) -> bool {
    bytes
        .trim_ascii_start()
        .strip_prefix(b"{")
        .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"\"entries\""))
}

/// Decodes a stored value of the `Ledger` tree: every entry of a segment, or the one entry
/// of the old layout. Entries are in stored order; nothing is checked.
pub(super) fn decode_stored<T: DeserializeOwned>(
    bytes: &[u8],
) -> Result<Vec<T>, serde_json::Error> {
    if is_segment(bytes) {
        Ok(serde_json::from_slice::<Segment<T>>(bytes)?.entries)
    } else {
        Ok(vec![serde_json::from_slice(bytes)?])
    }
}

/// Appends to `out` those entries of the value stored at `seq_key(last)` whose seq is at least
/// `from`, at most `want` of them. Seqs are taken from the layout (a segment's entries are
/// consecutive and end at its key), so `T` need not carry one; entries before `from` are only
/// parsed as JSON text, not decoded as `T`.
fn decode_from<T: DeserializeOwned>(
    bytes: &[u8],
    last: u64,
    from: u64,
    want: usize,
    out: &mut Vec<T>,
) -> Result<(), serde_json::Error> {
    if !is_segment(bytes) {
        if last >= from && want > 0 {
            out.push(serde_json::from_slice(bytes)?);
        }
        return Ok(());
    }
    // Which stored entries to keep, given how many there are.
    let wanted = |n: usize| {
        let first = last.saturating_add(1).saturating_sub(n as u64);
        let skip = from.saturating_sub(first).min(n as u64) as usize;
        skip..n.min(skip.saturating_add(want))
    };
    let max = SEGMENT_MAX_ENTRIES as u64;
    if last.saturating_add(1) >= from.saturating_add(max) && want >= SEGMENT_MAX_ENTRIES {
        // A whole segment of the usual size is wanted: decode it at once.
        let mut entries = serde_json::from_slice::<Segment<T>>(bytes)?.entries;
        let keep = wanted(entries.len());
        entries.truncate(keep.end);
        out.extend(entries.drain(keep.start..));
    } else {
        let raw: RawSegment = serde_json::from_slice(bytes)?;
        for entry in &raw.entries[wanted(raw.entries.len())] {
            out.push(serde_json::from_str(entry.get())?);
        }
    }
    Ok(())
}

/// A segment being assembled: its JSON so far and the chain head after its last entry.
struct SegmentBuf {
    json: Vec<u8>,
    entries: usize,
    tip: Option<ChainHead>,
}

impl SegmentBuf {
    fn new() -> SegmentBuf {
        let mut json = Vec::with_capacity(16 * 1024);
        json.extend_from_slice(SEGMENT_OPEN);
        SegmentBuf {
            json,
            entries: 0,
            tip: None,
        }
    }

    /// True when an entry of `len` encoded bytes may join (an empty segment takes any entry).
    fn fits(&self, len: usize) -> bool {
        self.entries == 0
            || (self.entries < SEGMENT_MAX_ENTRIES
                && self.json.len() + 1 + len + SEGMENT_CLOSE.len() <= SEGMENT_MAX_BYTES)
    }

    /// Adds the encoded entry `json`, which is the chain's new `tip`.
    fn push(&mut self, json: &[u8], tip: ChainHead) {
        if self.entries > 0 {
            self.json.push(b',');
        }
        self.json.extend_from_slice(json);
        self.entries += 1;
        self.tip = Some(tip);
    }
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
        let head = match tree.last::<Box<RawValue>>()? {
            Some((_, raw)) => {
                let last = decode_stored::<SeqHash>(raw.get().as_bytes())
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
            record,
        });
        self.append_entries(entries.collect())
    }

    /// Appends `entries`, each with its own tenant, under one lock, in order (the forward
    /// proxy's recorder drains the events of many calls into one call). They are stored as
    /// segments of up to [`SEGMENT_MAX_ENTRIES`] entries, one sled insert each. Returns the seq
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
            record_json.clear();
            canonical_json(&record, &mut record_json);
            drop(record);
            let fields = Fields {
                seq: tip.seq + 1,
                tenant_id: &tenant_id,
                kind: &kind,
                record: &record_json,
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
        let SegmentBuf { mut json, tip, .. } = segment;
        let Some(tip) = tip else {
            return Ok(());
        };
        json.extend_from_slice(SEGMENT_CLOSE);
        self.tree.put_raw(&seq_key(tip.seq), &json)?;
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

    /// A known answer (computed outside Rust from docs/ledger.md, "Canonical encodings"):
    /// stored hashes must never change.
    #[test]
    fn the_hash_is_the_documented_one() {
        let e = LedgerEntry {
            seq: 7,
            tenant_id: "t".into(),
            kind: "K".into(),
            record: json!({"b": "x", "a": 1}),
            recorded_at: "2026-11-21T10:00:00.000Z".into(),
            prev_hash: ZERO_HASH.into(),
            hash: String::new(),
        };
        assert_eq!(
            e.compute_hash(),
            "e565165086a76b28a6197f3b9790678541a5ef7e54b58971eaef7a361a9c7fdc"
        );
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

    /// `(key seq, entry seqs)` of every stored value.
    fn layout(store: &Store) -> Vec<(u64, Vec<u64>)> {
        let rows: Vec<(Vec<u8>, Value)> = store.tree(TreeName::Ledger).scan(b"").unwrap();
        rows.into_iter()
            .map(|(k, v)| {
                let seqs = v["entries"].as_array().unwrap().iter();
                let seqs = seqs.map(|e| e["seq"].as_u64().unwrap()).collect();
                (u64::from_be_bytes(k.try_into().unwrap()), seqs)
            })
            .collect()
    }

    fn records(n: usize, size: usize) -> Vec<(String, Value)> {
        (0..n)
            .map(|i| ("K".to_string(), json!({"i": i, "pad": "x".repeat(size)})))
            .collect()
    }

    #[test]
    fn one_append_is_stored_as_segments_of_at_most_64_entries() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        assert_eq!(ledger.append_batch("t", records(130, 10)).unwrap(), 130);
        ledger.append("t", "K", json!({})).unwrap();
        let want: Vec<(u64, Vec<u64>)> = vec![
            (64, (1..=64).collect()),
            (128, (65..=128).collect()),
            (130, vec![129, 130]),
            (131, vec![131]),
        ];
        assert_eq!(layout(&store), want);
        let raw = store.tree(TreeName::Ledger).get_raw(&seq_key(130)).unwrap();
        // Exactly what serde_json writes for the segment as a whole.
        #[derive(Serialize)]
        struct Whole {
            entries: Vec<LedgerEntry>,
        }
        let entries = ledger.read_from(129, 2).unwrap();
        let expected = serde_json::to_vec(&Whole { entries }).unwrap();
        assert_eq!(
            String::from_utf8(raw.unwrap()).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }

    #[test]
    fn entries_are_stored_exactly_as_serde_json_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        let record = json!({
            "s": "quote \" backslash \\ newline \n control \u{1} é 😀 </script>",
            "z": 1.5, "a": -3, "big": u64::MAX, "neg": i64::MIN, "tiny": 1e-7,
            "nested": {"y": [null, true, false, {"b": 2, "a": 1}], "x": {}},
            "é": "key order is by bytes", "B": "upper before lower"
        });
        ledger
            .append("te\"nant", "K\u{7}ind", record.clone())
            .unwrap();
        let raw = store
            .tree(TreeName::Ledger)
            .get_raw(&seq_key(1))
            .unwrap()
            .unwrap();
        let entry = ledger.read_from(1, 1).unwrap().remove(0);
        assert_eq!(entry.record, record);
        assert_eq!(entry.hash, entry.compute_hash());
        let serde = format!(
            "{{\"entries\":[{}]}}",
            serde_json::to_string(&entry).unwrap()
        );
        assert_eq!(String::from_utf8(raw).unwrap(), serde);
    }

    #[test]
    fn large_entries_close_a_segment_early() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        // ~40 KB each: two fit under SEGMENT_MAX_BYTES, three do not; one of 200 KB alone.
        let mut entries = records(5, 40_000);
        entries.insert(2, ("K".into(), json!({"pad": "y".repeat(200_000)})));
        ledger.append_batch("t", entries).unwrap();
        let seqs: Vec<Vec<u64>> = layout(&store).into_iter().map(|(_, s)| s).collect();
        assert_eq!(seqs, vec![vec![1, 2], vec![3], vec![4, 5], vec![6]]);
        let tree = store.tree(TreeName::Ledger);
        for (key, _) in tree.scan::<Value>(b"").unwrap() {
            let len = tree.get_raw(&key).unwrap().unwrap().len();
            assert!(len <= SEGMENT_MAX_BYTES || key == seq_key(3), "{len}");
        }
        assert_eq!(ledger.read_from(1, 10).unwrap().len(), 6);
    }

    #[test]
    fn reads_start_inside_segments_and_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        ledger.append_batch("t", records(100, 1)).unwrap(); // keys 64, 100
        for i in 0..3 {
            ledger.append("t", "K", json!({"i": 100 + i})).unwrap(); // keys 101..=103
        }
        let seqs = |from, limit| -> Vec<u64> {
            let rows = ledger.read_from(from, limit).unwrap();
            rows.iter().map(|e| e.seq).collect()
        };
        let cases: [(u64, usize, std::ops::RangeInclusive<u64>); 9] = [
            (0, 5, 1..=5),
            (1, 200, 1..=103),
            (2, 64, 2..=65),
            (10, 3, 10..=12),
            (63, 4, 63..=66),
            (64, 1, 64..=64),
            (65, 100, 65..=103),
            (99, 3, 99..=101),
            (103, 5, 103..=103),
        ];
        for (from, limit, want) in cases {
            assert_eq!(
                seqs(from, limit),
                want.collect::<Vec<_>>(),
                "{from} {limit}"
            );
        }
        assert!(seqs(104, 10).is_empty());
        assert!(seqs(1, 0).is_empty());
        // A projection without a seq is placed by the layout.
        #[derive(Deserialize)]
        struct KindOnly {
            record: Value,
        }
        let rows: Vec<KindOnly> = ledger.read_from_as(62, 4).unwrap();
        let is: Vec<u64> = rows
            .iter()
            .map(|r| r.record["i"].as_u64().unwrap())
            .collect();
        assert_eq!(is, vec![61, 62, 63, 64]);
    }

    #[test]
    fn open_resumes_from_a_segment_or_an_old_single_entry() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        ledger.append_batch("t", records(70, 1)).unwrap();
        let last = ledger.read_from(70, 1).unwrap().remove(0);
        drop(ledger);
        let ledger = Ledger::open(&store).unwrap();
        assert_eq!(ledger.len(), 70);
        ledger.append("t", "K", json!({})).unwrap();
        assert_eq!(ledger.read_from(71, 1).unwrap()[0].prev_hash, last.hash);
        // The old layout: a bare entry after the segments.
        let mut old = ledger.read_from(71, 1).unwrap().remove(0);
        old.seq = 72;
        old.prev_hash = old.hash.clone();
        old.hash = old.compute_hash();
        store
            .tree(TreeName::Ledger)
            .put(&seq_key(72), &old)
            .unwrap();
        let ledger = Ledger::open(&store).unwrap();
        assert_eq!(ledger.len(), 72);
        ledger.append("t", "K", json!({})).unwrap();
        let tail = ledger.read_from(70, 10).unwrap();
        assert_eq!(
            tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![70, 71, 72, 73]
        );
        assert_eq!(tail[3].prev_hash, old.hash);
    }
}
