//! Canonical byte encodings that every ledger, receipt and derived-event-id hash is computed
//! over, and the in-memory head of a hash chain.
//!
//! Encoding (documented in docs/ledger.md, "Canonical encodings"): a hash input is a sequence
//! of *fields*; each field is its byte length as an 8-byte big-endian integer followed by the
//! bytes. The first field is always a domain tag (for example `toolgate/receipt/v1`) so a hash
//! of one kind can never be replayed as another. Length prefixes make the encoding injective:
//! no two different field lists produce the same bytes.
//!
//! Canonical JSON (for free-form records): objects with keys sorted by their UTF-8 bytes, no
//! whitespace, strings escaped exactly as `serde_json` escapes them, numbers printed as
//! `serde_json` prints them (integers as integers, floats in shortest round-trip form), so a
//! value re-read from storage encodes to the same bytes it was hashed with.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `prev_hash` of the first entry of a chain: 64 hex zeros.
pub(crate) const ZERO_HASH: &str =
    "0000000000000000000000000000000000000000000000000000000000000000";

/// Streams length-prefixed fields into SHA-256.
#[derive(Clone)]
pub(crate) struct CanonHasher(Sha256);

impl CanonHasher {
    /// Starts a hash whose first field is the domain `tag`.
    pub(crate) fn new(tag: &str) -> CanonHasher {
        let mut h = CanonHasher(Sha256::new());
        h.field(tag.as_bytes());
        h
    }

    /// Appends one field: 8-byte big-endian length, then the bytes.
    pub(crate) fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update((bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
        self
    }

    /// Appends a string field.
    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.field(s.as_bytes())
    }

    /// Appends a sequence number as a decimal ASCII field.
    pub(crate) fn seq(&mut self, seq: u64) -> &mut Self {
        let mut buf = [0u8; 20];
        let digits = decimal(seq, &mut buf);
        self.field(digits)
    }

    /// Appends the canonical JSON of `value` as one field.
    pub(crate) fn json(&mut self, value: &Value) -> &mut Self {
        let mut buf = Vec::with_capacity(256);
        canonical_json(value, &mut buf);
        self.field(&buf)
    }

    /// The raw 32-byte digest.
    pub(crate) fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }

    /// The lower-case hex digest.
    pub(crate) fn finish_hex(self) -> String {
        hex::encode(self.finish())
    }
}

/// The decimal ASCII digits of `n`, written at the end of `buf` (u64::MAX has 20 digits).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

/// Writes the canonical JSON of `value` (sorted keys, no whitespace) to `out`.
pub(crate) fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_string(key, out);
                out.push(b':');
                if let Some(v) = map.get(key) {
                    canonical_json(v, out);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        Value::String(s) => json_string(s, out),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Null => out.extend_from_slice(b"null"),
    }
}

/// serde_json's escaping of a string, quotes included.
fn json_string(s: &str, out: &mut Vec<u8>) {
    // Serializing a &str into a Vec cannot fail: no I/O error and no non-string map keys.
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

/// The head of a hash chain: the last sequence number and its hash (`0` and [`ZERO_HASH`] for
/// an empty chain). The next entry gets `seq + 1` and `prev_hash = hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChainHead {
    /// Last assigned sequence number (0 when empty; sequences start at 1).
    pub(crate) seq: u64,
    /// Hash of that entry.
    pub(crate) hash: String,
}

impl ChainHead {
    /// The head of an empty chain.
    pub(crate) fn genesis() -> ChainHead {
        ChainHead {
            seq: 0,
            hash: ZERO_HASH.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_recursively_and_has_no_whitespace() {
        let v = json!({"b": [1, {"z": null, "a": true}], "a": "x\"y", "c": 1.5});
        let mut out = Vec::new();
        canonical_json(&v, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":"x\"y","b":[1,{"a":true,"z":null}],"c":1.5}"#
        );
    }

    #[test]
    fn canonical_json_is_stable_across_a_storage_round_trip() {
        let v = json!({"n": 1e21, "f": 0.1, "i": -3, "s": "é\n"});
        let mut first = Vec::new();
        canonical_json(&v, &mut first);
        let reread: Value = serde_json::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap();
        let mut second = Vec::new();
        canonical_json(&reread, &mut second);
        assert_eq!(first, second);
    }

    #[test]
    fn sequence_numbers_are_decimal_text() {
        let mut buf = [0u8; 20];
        for n in [0u64, 7, 10, 1234567890, u64::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }

    #[test]
    fn length_prefixes_keep_field_boundaries_apart() {
        let mut a = CanonHasher::new("t");
        a.str("ab").str("c");
        let mut b = CanonHasher::new("t");
        b.str("a").str("bc");
        assert_ne!(a.finish_hex(), b.finish_hex());
        let mut c = CanonHasher::new("t");
        c.str("x");
        let mut d = CanonHasher::new("u");
        d.str("x");
        assert_ne!(c.finish_hex(), d.finish_hex());
    }
}
