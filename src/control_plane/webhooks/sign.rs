//! Webhook signatures: `X-Toolgate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`.
//!
//! The MAC key is the UTF-8 bytes of the whole webhook secret (`whsec_…`, prefix included); the
//! message is `<t>.<body>`: the decimal timestamp, a full stop, and the exact bytes of the
//! request body. Receivers recompute it, compare in constant time and refuse timestamps too far
//! from their clock (docs/control-plane.md, "Verifying a delivery").

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-toolgate-signature";
/// Header carrying the event type (`hold.created`, `hold.resolved`, `webhook.test`).
pub const EVENT_HEADER: &str = "x-toolgate-event";
/// Header carrying the delivery id (`whd_…`, equal across retries of one delivery).
pub const DELIVERY_HEADER: &str = "x-toolgate-delivery";

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &str, t: i64, body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Lower-case hex HMAC-SHA256 of `<t>.<body>` under `secret`.
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    hex::encode(mac(secret, t, body).finalize().into_bytes())
}

/// The value of [`SIGNATURE_HEADER`]: `t=<t>,v1=<signature>`.
pub fn header_value(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", signature(secret, t, body))
}

/// Checks a received [`SIGNATURE_HEADER`] value against `body`: a `v1` that matches (constant
/// time) and a `t` within `tolerance_seconds` of `now`. Returns false for a malformed header.
pub fn verify(secret: &str, header: &str, body: &[u8], now: i64, tolerance_seconds: i64) -> bool {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1.push(v),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if (now - t).abs() > tolerance_seconds {
        return false;
    }
    v1.iter().any(|sig| match hex::decode(sig) {
        Ok(bytes) => mac(secret, t, body).verify_slice(&bytes).is_ok(),
        Err(_) => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_and_detect_tampering() {
        let body = br#"{"type":"webhook.test"}"#;
        let h = header_value("whsec_k", 1_700_000_000, body);
        assert!(h.starts_with("t=1700000000,v1="));
        assert_eq!(h.len(), "t=1700000000,v1=".len() + 64);
        assert!(verify("whsec_k", &h, body, 1_700_000_100, 300));
        assert!(!verify("whsec_other", &h, body, 1_700_000_000, 300));
        assert!(!verify("whsec_k", &h, b"{}", 1_700_000_000, 300));
        assert!(!verify("whsec_k", &h, body, 1_700_001_000, 300), "too old");
        assert!(!verify("whsec_k", "v1=00", body, 1_700_000_000, 300));
        assert!(!verify("whsec_k", "garbage", body, 0, 300));
    }

    #[test]
    fn matches_a_known_hmac_sha256_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut m = HmacSha256::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // And the `<t>.<body>` framing.
        let mut m = HmacSha256::new_from_slice(b"s").unwrap();
        m.update(b"5.x");
        assert_eq!(
            signature("s", 5, b"x"),
            hex::encode(m.finalize().into_bytes())
        );
    }
}
