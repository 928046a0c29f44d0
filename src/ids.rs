//! Identifiers, unguessable tokens and timestamps shared by every module.
//!
//! * `new_id("vio")` → `vio_0193…` (UUID v7: time-ordered, for audit ids).
//! * `secret_token("hold", 32)` → `hold_<43 base64url chars>` (256 random bits from the OS).
//! * Timestamps are RFC 3339 UTC with millisecond precision (`2026-11-21T19:01:18.123Z`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// A time-ordered identifier: `<prefix>_<uuid v7 simple>`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// An unguessable token: `<prefix>_<base64url of `bytes` OS-random bytes>`.
pub fn secret_token(prefix: &str, bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut buf);
    format!("{prefix}_{}", URL_SAFE_NO_PAD.encode(buf))
}

/// Lower-case hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Now, in UTC.
pub fn now() -> DateTime<Utc> {
    Utc::now()
}

/// RFC 3339 UTC text with milliseconds and a `Z` suffix.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses an ISO 8601 / RFC 3339 timestamp (any offset) into UTC.
///
/// Errors: the input is not RFC 3339 (the message says so).
pub fn parse_rfc3339(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("`{s}` is not an ISO 8601 timestamp ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_distinct_and_long() {
        let a = secret_token("hold", 32);
        let b = secret_token("hold", 32);
        assert!(a.starts_with("hold_") && a.len() == 5 + 43);
        assert_ne!(a, b);
        assert!(new_id("vio").starts_with("vio_"));
    }

    #[test]
    fn timestamps_round_trip() {
        let t = parse_rfc3339("2026-11-21T10:00:00+01:00").unwrap();
        assert_eq!(rfc3339(t), "2026-11-21T09:00:00.000Z");
        assert!(parse_rfc3339("yesterday").is_err());
    }
}
