//! GET /v1/health: liveness, the policy version, pending holds, and — when a key is presented —
//! its posture `api_key.{key_id, expired, rotation_required, revoked}` (SPEC.md, "API key").
//! `status` is `ok`, or `awaiting_policy` (with `policy_ready: false`) while a linked sidecar
//! has never received a policy bundle and fails closed. With a control plane configured,
//! `control_plane.{url, endpoint_id, tasks}` gives each link task's last error and success, and
//! `shipping.{backlog, shipped_seq, skipped, last_error,
//! last_shipped_at}` reports the ledger shipper (`link::shipper`; absent without a link).
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
    let ready = core.policy_ready.load(std::sync::atomic::Ordering::Acquire);
    let mut body = json!({
        "status": if ready { "ok" } else { "awaiting_policy" },
        "policy_ready": ready,
        "policy_version": policy.label(),
        "policy_pack": policy,
        "pending_holds": core.holds.pending_count(),
    });
    if let Some(link) = &core.link {
        body["control_plane"] = json!({
            "url": core.config.control_plane_url,
            "endpoint_id": core.config.endpoint_id,
            "tasks": link.health(),
        });
    }
    if let Some(shipping) = &core.shipping {
        body["shipping"] = shipping.health(core.ledger.len());
    }
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
