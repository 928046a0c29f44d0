//! GET /v1/health: liveness, the policy version, pending holds, and — when a key is presented —
//! its posture `api_key.{key_id, expired, rotation_required, revoked}` (SPEC.md, "API key").
//!
//! Without a key it answers 200 with the service status only (for probes). A presented key that
//! does not verify is 401; a revoked or expired key is reported, not refused, so operators can see
//! why their calls fail.

use crate::api::ApiError;
use crate::auth::extract::presented_credential;
use crate::ids;
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{json, Value};

/// Handler of GET /v1/health.
pub async fn health(
    State(core): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let policy = core.policy.current().version().clone();
    let mut body = json!({
        "status": "ok",
        "policy_version": policy.label(),
        "policy_pack": policy,
        "pending_holds": core.holds.pending_count(),
    });
    if let Some(presented) = presented_credential(&headers) {
        let posture = core.keys.inspect(presented)?;
        let now = ids::now();
        body["api_key"] = json!({
            "key_id": posture.record.key_id,
            "tenant_id": posture.record.tenant_id,
            "expired": posture.record.expired(now),
            "rotation_required": posture.record.rotation_required(now),
            "revoked": posture.revoked,
            "expires_at": ids::rfc3339(posture.record.expires_at),
        });
    }
    Ok(Json(body))
}
