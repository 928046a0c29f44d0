//! API key records: format, hashing, scope levels, permissions, expiry and rotation posture
//! (SPEC.md, "API key" and "Authentication" 7).
//!
//! Key format: `tgk.<key_id>.<secret>` where `key_id` is `key_<uuid v7>` and `secret` is 32
//! OS-random bytes in base64url. Only `sha256(secret)` is stored. The key_id in the key is only
//! a lookup handle: permissions and scope always come from the stored record, never the key text.

use crate::ids;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Days before expiry from which a key reports `rotation_required`.
pub const ROTATION_WARNING_DAYS: i64 = 14;
/// Default key lifetime (SPEC.md, Limits: 90 days).
pub const DEFAULT_EXPIRY_DAYS: u32 = 90;
/// Longest lifetime a key may be created with.
pub const MAX_EXPIRY_DAYS: u32 = 366;

/// `scope_level` of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeLevel {
    /// Every resource of the tenant.
    Organization,
    /// One fleet (`scope_target_id` = fleet_id).
    Fleet,
    /// One endpoint (`scope_target_id` = endpoint_id).
    Endpoint,
    /// One agent (`scope_target_id` = agent_id).
    Agent,
}

/// A permission a key may carry (SPEC.md, Authentication 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Read-only control-plane access.
    Read,
    /// Control-plane mutations.
    Write,
    /// Runtime decisions, hold polling, event ingestion.
    Execute,
}

impl Permission {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Execute => "execute",
        }
    }
}

/// A stored key. `secret_hash` never leaves the process ([`KeyInfo`] is the public view).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApiKeyRecord {
    /// `key_<uuid v7>`.
    pub key_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Optional label.
    pub name: Option<String>,
    /// Scope level.
    pub scope_level: ScopeLevel,
    /// Target of fleet / endpoint / agent scopes.
    pub scope_target_id: Option<String>,
    /// Sorted, de-duplicated permissions.
    pub permissions: Vec<Permission>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Expiry time.
    pub expires_at: DateTime<Utc>,
    /// Set when revoked through the control plane.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Hex SHA-256 of the secret part.
    pub secret_hash: String,
}

/// Public view of a key: everything but the hash (control-plane responses).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyInfo {
    /// Key id.
    pub key_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Label.
    pub name: Option<String>,
    /// Scope level.
    pub scope_level: ScopeLevel,
    /// Scope target.
    pub scope_target_id: Option<String>,
    /// Permissions.
    pub permissions: Vec<Permission>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub expires_at: String,
    /// True once revoked (control plane or revocation file).
    pub revoked: bool,
    /// True once expired.
    pub expired: bool,
    /// True within 14 days of expiry, or expired.
    pub rotation_required: bool,
}

impl ApiKeyRecord {
    /// True when the key carries `p`.
    pub fn has(&self, p: Permission) -> bool {
        self.permissions.contains(&p)
    }

    /// True at or after `expires_at`.
    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        now >= self.expires_at
    }

    /// True within [`ROTATION_WARNING_DAYS`] of expiry (or expired).
    pub fn rotation_required(&self, now: DateTime<Utc>) -> bool {
        now >= self.expires_at - Duration::days(ROTATION_WARNING_DAYS)
    }

    /// Constant-time check of a presented secret against the stored hash.
    pub fn secret_matches(&self, secret: &str) -> bool {
        let presented = hex::encode(Sha256::digest(secret.as_bytes()));
        presented
            .as_bytes()
            .ct_eq(self.secret_hash.as_bytes())
            .into()
    }

    /// The public view; `revoked` also reflects the revocation file.
    pub fn info(&self, now: DateTime<Utc>, revoked_by_file: bool) -> KeyInfo {
        KeyInfo {
            key_id: self.key_id.clone(),
            tenant_id: self.tenant_id.clone(),
            name: self.name.clone(),
            scope_level: self.scope_level,
            scope_target_id: self.scope_target_id.clone(),
            permissions: self.permissions.clone(),
            created_at: ids::rfc3339(self.created_at),
            expires_at: ids::rfc3339(self.expires_at),
            revoked: self.revoked_at.is_some() || revoked_by_file,
            expired: self.expired(now),
            rotation_required: self.rotation_required(now),
        }
    }
}

/// Body of POST /<tenant_id>/service/api-keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    /// Optional label (≤ 128 bytes).
    #[serde(default)]
    pub name: Option<String>,
    /// organization | fleet | endpoint | agent.
    pub scope_level: ScopeLevel,
    /// Required for fleet, endpoint and agent.
    #[serde(default)]
    pub scope_target_id: Option<String>,
    /// Non-empty subset of read, write, execute.
    pub permissions: Vec<Permission>,
    /// Lifetime in days; default 90, at most 366.
    #[serde(default)]
    pub expires_in_days: Option<u32>,
}

/// A freshly minted key: the record to store and the plaintext to return once.
pub struct MintedKey {
    /// Store this.
    pub record: ApiKeyRecord,
    /// Return this once; never store or log it.
    pub plaintext: String,
}

/// Validates a creation request and mints a key for `tenant_id`.
///
/// Errors: a message naming the field (the API answers 422).
pub fn mint(
    tenant_id: &str,
    req: CreateKeyRequest,
    now: DateTime<Utc>,
) -> Result<MintedKey, String> {
    let target = req.scope_target_id.filter(|t| !t.is_empty());
    match (req.scope_level, &target) {
        (ScopeLevel::Organization, _) | (_, Some(_)) => {}
        (level, None) => {
            return Err(format!(
                "scope_target_id is required for scope_level {}",
                serde_json::to_value(level)
                    .unwrap_or_default()
                    .as_str()
                    .unwrap_or("?")
            ))
        }
    }
    if req.permissions.is_empty() {
        return Err("permissions must name at least one of read, write, execute".into());
    }
    if req.name.as_ref().is_some_and(|n| n.len() > 128) {
        return Err("name is longer than 128 bytes".into());
    }
    let days = req.expires_in_days.unwrap_or(DEFAULT_EXPIRY_DAYS);
    if days == 0 || days > MAX_EXPIRY_DAYS {
        return Err(format!(
            "expires_in_days must be between 1 and {MAX_EXPIRY_DAYS}"
        ));
    }
    let mut permissions = req.permissions;
    permissions.sort();
    permissions.dedup();
    let key_id = ids::new_id("key");
    let secret = ids::secret_token("s", 32)[2..].to_string();
    let record = ApiKeyRecord {
        key_id: key_id.clone(),
        tenant_id: tenant_id.to_string(),
        name: req.name,
        scope_level: req.scope_level,
        scope_target_id: if req.scope_level == ScopeLevel::Organization {
            None
        } else {
            target
        },
        permissions,
        created_at: now,
        expires_at: now + Duration::days(i64::from(days)),
        revoked_at: None,
        secret_hash: hex::encode(Sha256::digest(secret.as_bytes())),
    };
    Ok(MintedKey {
        record,
        plaintext: format!("tgk.{key_id}.{secret}"),
    })
}

/// Splits a presented key into (key_id, secret); None when it is not of the key format.
pub fn parse_presented(key: &str) -> Option<(&str, &str)> {
    let mut parts = key.trim().splitn(3, '.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("tgk"), Some(id), Some(secret)) if id.starts_with("key_") && !secret.is_empty() => {
            Some((id, secret))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(level: ScopeLevel, target: Option<&str>, perms: Vec<Permission>) -> CreateKeyRequest {
        CreateKeyRequest {
            name: None,
            scope_level: level,
            scope_target_id: target.map(String::from),
            permissions: perms,
            expires_in_days: None,
        }
    }

    #[test]
    fn minted_key_verifies_only_its_own_secret_and_stores_no_plaintext() {
        let now = Utc::now();
        let m = mint(
            "t1",
            req(ScopeLevel::Agent, Some("a1"), vec![Permission::Execute]),
            now,
        )
        .unwrap();
        let (id, secret) = parse_presented(&m.plaintext).unwrap();
        assert_eq!(id, m.record.key_id);
        assert!(m.record.secret_matches(secret));
        assert!(!m.record.secret_matches("wrong"));
        let stored = serde_json::to_string(&m.record).unwrap();
        assert!(!stored.contains(secret));
        assert_eq!((m.record.expires_at - now).num_days(), 90);
    }

    #[test]
    fn creation_rules_name_the_field() {
        let now = Utc::now();
        let cases = [
            (
                req(ScopeLevel::Fleet, None, vec![Permission::Read]),
                "scope_target_id",
            ),
            (req(ScopeLevel::Organization, None, vec![]), "permissions"),
        ];
        for (r, field) in cases {
            assert!(mint("t", r, now).err().unwrap().starts_with(field));
        }
        assert!(mint(
            "t",
            req(ScopeLevel::Organization, None, vec![Permission::Write]),
            now
        )
        .is_ok());
    }

    #[test]
    fn rotation_posture_follows_expiry() {
        let now = Utc::now();
        let mut m = mint(
            "t",
            req(ScopeLevel::Organization, None, vec![Permission::Read]),
            now,
        )
        .unwrap()
        .record;
        assert!(!m.rotation_required(now) && !m.expired(now));
        m.expires_at = now + Duration::days(3);
        assert!(m.rotation_required(now) && !m.expired(now));
        m.expires_at = now;
        assert!(m.expired(now));
    }

    #[test]
    fn malformed_presented_keys_are_rejected() {
        for bad in [
            "",
            "tgk",
            "tgk.key_1",
            "abc.key_1.s",
            "tgk.nokey.s",
            "tgk.key_1.",
        ] {
            assert!(parse_presented(bad).is_none(), "{bad}");
        }
    }
}
