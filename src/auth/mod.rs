//! API keys: format, hashing, scopes, permissions, expiry, revocation, and the axum extractors
//! that authenticate callers (SPEC.md, "Authentication" and "API key").

use crate::store::StoreError;

/// Errors of authentication and key management.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No credential presented.
    #[error("missing API key: send X-API-Key: <API_KEY> or Authorization: Bearer <API_KEY>")]
    Missing,
    /// Unknown key, wrong secret, or malformed credential.
    #[error("invalid API key")]
    Invalid,
    /// The key was revoked.
    #[error("API key has been revoked")]
    Revoked,
    /// The key passed its expiry.
    #[error("API key has expired; create a new key")]
    Expired,
    /// The key lacks the permission the call needs.
    #[error("API key lacks the `{0}` permission")]
    PermissionDenied(&'static str),
    /// The key's scope does not cover the request.
    #[error("{0}")]
    ScopeDenied(String),
    /// The request names another tenant than the key's.
    #[error("API key belongs to another tenant")]
    TenantMismatch,
    /// A key-creation request is invalid (422).
    #[error("{0}")]
    BadKeyRequest(String),
    /// No key with that key_id in this tenant (404).
    #[error("API key not found")]
    UnknownKey,
    /// The key's rate limit is spent.
    #[error("rate limit exceeded")]
    RateLimited {
        /// Whole seconds until the next request is admitted.
        retry_after_secs: u64,
    },
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub mod extract;
pub mod keys;
pub mod keystore;
pub mod ratelimit;
pub mod revoked;
pub mod scope;

pub use extract::{Caller, IngestAuth, Operator};
pub use keys::{ApiKeyRecord, CreateKeyRequest, KeyInfo, Permission, ScopeLevel};
pub use keystore::{KeyPosture, KeyStore};
pub use ratelimit::RateLimits;
pub use revoked::{RevokedFile, RevokedSet};
