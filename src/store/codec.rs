//! The LZ4 form of large stored values (the ledger's segments and the receipt segments,
//! docs/ledger.md "Trees and keys"): [`compress`] writes it, [`stored_json`] reads it back and
//! passes any other value through as stored, so uncompressed values written before keep
//! reading. Every typed read of a [`Tree`](super::Tree) goes through [`stored_json`].

/// A compressed segment starts with these bytes (no JSON value can: NUL is not whitespace),
/// then the length of its JSON (u32, little endian), then the JSON as one LZ4 block.
pub(crate) const LZ4_MAGIC: &[u8] = b"\0LZ4";

/// Largest JSON a compressed segment may claim to hold (a guard against a corrupted length,
/// far above any segment written: a ledger segment is closed at 96 KiB unless its one entry is
/// larger, a receipt segment holds at most 64 receipts of about 600 bytes).
const MAX_SEGMENT_JSON: usize = 256 << 20;

/// The stored form of a segment's JSON: [`LZ4_MAGIC`], the JSON's length, its LZ4 block.
///
/// Why compressed: sled 0.34 keeps up to 16 values in a leaf and rewrites the whole leaf as it
/// consolidates or splits it, so a leaf of 16 segments of 40–96 KiB is rewritten (as a blob
/// file above 128 KiB) again and again. The proxy's events compress about 5×, receipt
/// segments about 3× (their hex hashes shrink only where they repeat; BENCHMARKS.md).
pub(crate) fn compress(json: &[u8]) -> Vec<u8> {
    if json.len() > MAX_SEGMENT_JSON {
        // Never written in practice; stored as JSON, which every reader also accepts.
        return json.to_vec();
    }
    let header = LZ4_MAGIC.len() + 4;
    let mut out = vec![0; header + lz4_flex::block::get_maximum_output_size(json.len())];
    out[..LZ4_MAGIC.len()].copy_from_slice(LZ4_MAGIC);
    out[LZ4_MAGIC.len()..header].copy_from_slice(&(json.len() as u32).to_le_bytes());
    match lz4_flex::block::compress_into(json, &mut out[header..]) {
        Ok(n) => {
            out.truncate(header + n);
            out
        }
        // The buffer has the block's maximum size, so this does not happen; if it did, the
        // JSON is stored as is rather than lost.
        Err(_) => json.to_vec(),
    }
}

/// The JSON of a stored value: decompressed when it is a compressed segment, else as stored.
///
/// Errors (as `serde_json::Error`, like every other undecodable value): a value cut short, a
/// claimed length over [`MAX_SEGMENT_JSON`], a block that does not decompress to that length.
pub(crate) fn stored_json(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, serde_json::Error> {
    use serde::de::Error;
    let Some(rest) = bytes.strip_prefix(LZ4_MAGIC) else {
        return Ok(std::borrow::Cow::Borrowed(bytes));
    };
    let (len, block) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| Error::custom("compressed segment is truncated"))?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_SEGMENT_JSON {
        return Err(Error::custom(format!(
            "compressed segment claims {len} bytes"
        )));
    }
    let mut json = vec![0; len];
    let n = lz4_flex::block::decompress_into(block, &mut json)
        .map_err(|e| Error::custom(format!("compressed segment does not decompress: {e}")))?;
    if n != len {
        return Err(Error::custom(
            "compressed segment is shorter than its length",
        ));
    }
    Ok(std::borrow::Cow::Owned(json))
}
