//! The stored form of ledger segments (docs/ledger.md, "Trees and keys"): the size caps,
//! assembling a segment's JSON, and decoding stored values of every layout (compressed
//! segments, uncompressed segments and the bare entries written before segments). The LZ4
//! form itself is `store::codec`'s, shared with the receipt segments.

use crate::ledger::canon::ChainHead;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::store::codec::stored_json;

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

/// True when a stored value is a segment (compressed, or `{"entries": …}`), false for a bare
/// entry of the old layout (whose fields never include `entries`).
pub(in crate::ledger) fn is_segment(bytes: &[u8]) -> bool {
    bytes.starts_with(crate::store::codec::LZ4_MAGIC)
        || bytes
            .trim_ascii_start()
            .strip_prefix(b"{")
            .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"\"entries\""))
}

/// Decodes a stored value of the `Ledger` tree: every entry of a segment, or the one entry
/// of the old layout. Entries are in stored order; nothing is checked.
pub(in crate::ledger) fn decode_stored<T: DeserializeOwned>(
    bytes: &[u8],
) -> Result<Vec<T>, serde_json::Error> {
    let bytes = &*stored_json(bytes)?;
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
pub(super) fn decode_from<T: DeserializeOwned>(
    bytes: &[u8],
    last: u64,
    from: u64,
    want: usize,
    out: &mut Vec<T>,
) -> Result<(), serde_json::Error> {
    let bytes = &*stored_json(bytes)?;
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
pub(super) struct SegmentBuf {
    json: Vec<u8>,
    entries: usize,
    tip: Option<ChainHead>,
}

impl SegmentBuf {
    pub(super) fn new() -> SegmentBuf {
        let mut json = Vec::with_capacity(16 * 1024);
        json.extend_from_slice(SEGMENT_OPEN);
        SegmentBuf {
            json,
            entries: 0,
            tip: None,
        }
    }

    /// True when an entry of `len` encoded bytes may join (an empty segment takes any entry).
    pub(super) fn fits(&self, len: usize) -> bool {
        self.entries == 0
            || (self.entries < SEGMENT_MAX_ENTRIES
                && self.json.len() + 1 + len + SEGMENT_CLOSE.len() <= SEGMENT_MAX_BYTES)
    }

    /// The segment's complete JSON and the chain head after its last entry; `None` when empty.
    pub(super) fn finish(mut self) -> Option<(Vec<u8>, ChainHead)> {
        let tip = self.tip?;
        self.json.extend_from_slice(SEGMENT_CLOSE);
        Some((self.json, tip))
    }

    /// Adds the encoded entry `json`, which is the chain's new `tip`.
    pub(super) fn push(&mut self, json: &[u8], tip: ChainHead) {
        if self.entries > 0 {
            self.json.push(b',');
        }
        self.json.extend_from_slice(json);
        self.entries += 1;
        self.tip = Some(tip);
    }
}
