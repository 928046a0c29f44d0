//! What a sidecar pulls from its control plane, with ETags so an unchanged answer costs a 304:
//!
//! * `GET /{tenant_id}/service/sync/policy` → [`PolicyBundle`]: every file of the control
//!   plane's current policy pack (the one that loaded; a broken edit on disk is never served),
//!   `ETag: "<pack digest>"`. The sidecar writes the files, loads them, and gets the same digest.
//! * `GET /{tenant_id}/service/sync/keys` → [`KeySnapshot`]: the tenant's API key records
//!   (sha256 hashes of the secrets, never secrets), revoked ones included so sidecars refuse
//!   them; `ETag: "<sha256 of the body>"`.
//!
//! Both answer 304 to a matching `If-None-Match`. Auth: admin bearer or an organization key of
//! the tenant with `read`.

use crate::api::ApiError;
use crate::auth::{ApiKeyRecord, Operator, Permission};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::{Deserialize, Serialize};

/// The policy pack as shipped to sidecars.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PolicyBundle {
    /// Pack name.
    pub name: String,
    /// Pack version.
    pub version: String,
    /// Hex SHA-256 over the files (the pack's digest; also the ETag).
    pub digest: String,
    /// Every file the digest covers, sorted by path.
    pub files: Vec<BundleFile>,
}

/// One file of a [`PolicyBundle`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BundleFile {
    /// Path relative to the pack directory (`pack.toml`, `rules/x.toml`, …).
    pub path: String,
    /// The bytes, base64 (standard alphabet, padded).
    pub content_base64: String,
}

/// The tenant's API key records as shipped to sidecars.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeySnapshot {
    /// Every key of the tenant (hashes only), sorted by key_id.
    pub keys: Vec<ApiKeyRecord>,
}

/// Handler of GET /sync/policy.
pub async fn policy(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    let snapshot = core.policy.current();
    let v = snapshot.version();
    let etag = format!("\"{}\"", v.digest);
    if matches(&headers, &etag) {
        return Ok(not_modified(&etag));
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let bundle = PolicyBundle {
        name: v.name.clone(),
        version: v.version.clone(),
        digest: v.digest.clone(),
        files: snapshot
            .files()
            .iter()
            .map(|(path, bytes)| BundleFile {
                path: path.clone(),
                content_base64: b64.encode(bytes),
            })
            .collect(),
    };
    with_etag(&bundle, &etag)
}

/// Handler of GET /sync/keys.
pub async fn keys(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    let snapshot = KeySnapshot {
        keys: core.keys.records(&tenant_id),
    };
    let body = serde_json::to_vec(&snapshot).map_err(|e| ApiError::Internal(e.to_string()))?;
    let etag = format!("\"{}\"", crate::ids::sha256_hex(&body));
    if matches(&headers, &etag) {
        return Ok(not_modified(&etag));
    }
    Ok(json_with_etag(body, &etag))
}

fn matches(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
}

fn not_modified(etag: &str) -> Response {
    let mut r = StatusCode::NOT_MODIFIED.into_response();
    if let Ok(v) = HeaderValue::from_str(etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

fn with_etag<T: Serialize>(value: &T, etag: &str) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(json_with_etag(body, etag))
}

fn json_with_etag(body: Vec<u8>, etag: &str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    r
}
