//! Control-plane API key calls (SPEC.md, "Control-plane calls" and Authentication 7–9):
//!
//! * `POST /<tenant_id>/service/api-keys` → 201 `{key, key_id, tenant_id, name, scope_level,
//!   scope_target_id, permissions, created_at, expires_at, revoked, expired, rotation_required}`;
//!   `key` (the plaintext) appears only here. Admin bearer or an organization key with `write`.
//! * `GET /<tenant_id>/service/api-keys` → `{"api_keys": [KeyInfo…]}` (never a key or its hash).
//!   Admin bearer or an organization key with `read`.
//! * `DELETE /<tenant_id>/service/api-keys/<key_id>` → 200 KeyInfo with `revoked: true`.
//! * `POST /<tenant_id>/service/api-keys/<key_id>/authorize` with `{api_key, permission,
//!   resource_type, resource_id}` → `{key_id, valid, permission_allowed, scope_allowed, expired,
//!   revoked, rotation_required}`.

use crate::api::{ApiError, ApiJson};
use crate::auth::{AuthError, CreateKeyRequest, KeyInfo, Operator, Permission};
use crate::ids;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// Handler of POST /api-keys.
pub async fn create(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    ApiJson(req): ApiJson<CreateKeyRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    op.authorize(&tenant_id, Permission::Write, true)?;
    let now = ids::now();
    let minted = core.keys.create(&tenant_id, req, now).await?;
    let info = minted.record.info(now, false);
    tracing::info!(key_id = %info.key_id, tenant_id = %tenant_id, by = %op.identity(), "API key created");
    let mut body = serde_json::to_value(&info).map_err(|e| ApiError::Internal(e.to_string()))?;
    body["key"] = Value::String(minted.plaintext);
    Ok((StatusCode::CREATED, Json(body)))
}

/// Handler of GET /api-keys.
pub async fn list(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    Ok(Json(
        json!({ "api_keys": core.keys.list(&tenant_id, ids::now()) }),
    ))
}

/// Handler of DELETE /api-keys/<key_id>.
pub async fn revoke(
    State(core): State<AppState>,
    op: Operator,
    Path((tenant_id, key_id)): Path<(String, String)>,
) -> Result<Json<KeyInfo>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, true)?;
    let info = core.keys.revoke(&tenant_id, &key_id, ids::now()).await?;
    tracing::info!(key_id = %key_id, tenant_id = %tenant_id, by = %op.identity(), "API key revoked");
    Ok(Json(info))
}

/// Body of the authorize call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizeRequest {
    /// The plaintext key to check.
    pub api_key: String,
    /// read | write | execute.
    pub permission: Permission,
    /// organization | fleet | endpoint | agent.
    pub resource_type: String,
    /// Id of the resource.
    pub resource_id: String,
}

/// Handler of POST /api-keys/<key_id>/authorize: checks a key before rollout. `valid` is false
/// for a key that does not verify, is another key than `<key_id>`, or is revoked or expired.
pub async fn authorize(
    State(core): State<AppState>,
    op: Operator,
    Path((tenant_id, key_id)): Path<(String, String)>,
    ApiJson(req): ApiJson<AuthorizeRequest>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    core.keys.get(&tenant_id, &key_id)?;
    let now = ids::now();
    let posture = match core.keys.inspect(&req.api_key) {
        Ok(p) if p.record.key_id == key_id && p.record.tenant_id == tenant_id => Some(p),
        Ok(_) | Err(AuthError::Invalid) => None,
        Err(e) => return Err(e.into()),
    };
    let Some(p) = posture else {
        return Ok(Json(
            json!({"key_id": key_id, "valid": false, "permission_allowed": false, "scope_allowed": false}),
        ));
    };
    let valid = !p.revoked && !p.record.expired(now);
    let resource_type = req.resource_type.as_str();
    let scope_allowed = valid
        && (resource_type == "organization" && req.resource_id == tenant_id
            || crate::auth::scope::covers(&p.record, resource_type, &req.resource_id));
    Ok(Json(json!({
        "key_id": key_id,
        "valid": valid,
        "permission_allowed": valid && p.record.has(req.permission),
        "scope_allowed": scope_allowed,
        "revoked": p.revoked,
        "expired": p.record.expired(now),
        "rotation_required": p.record.rotation_required(now),
    })))
}
