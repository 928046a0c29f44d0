//! Control-plane approvals of STEP_UP holds:
//!
//! * `GET /<tenant_id>/service/approvals?status=pending` → `{"approvals": [ApprovalView…]}`
//!   (hold_token, tool_name, agent_id, session_id, DLP-redacted tool_args, risk_score, reason,
//!   expires_at, …), soonest expiry first. `status` defaults to `pending`, the only value served.
//!   Admin bearer or a `read` key of the tenant.
//! * `POST /<tenant_id>/service/approvals/<hold_token>/approve` and `/deny` with
//!   `{"approver": "...", "reason": "..."}` → 200 with the resolved Hold. Admin bearer or a `write`
//!   key of the tenant. 404 unknown token (or another tenant's), 409 already resolved, 422 bad body.

use crate::api::{ApiError, ApiJson};
use crate::auth::{Operator, Permission};
use crate::control_plane::sync::relay::RelayDecision;
use crate::holds::{HoldError, HoldView, Resolution};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// Query of the approvals list.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    /// Only `pending` is served.
    pub status: Option<String>,
}

/// Handler of GET /approvals.
pub async fn list(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, false)?;
    match q.status.as_deref() {
        None | Some("pending") => {}
        Some(other) => {
            return Err(ApiError::Unprocessable(format!(
                "status: unknown value `{other}`; expected pending"
            )))
        }
    }
    let mut approvals: Vec<Value> = Vec::new();
    for h in core.holds.pending_for(&tenant_id)? {
        approvals.push(serde_json::to_value(h.approval()).unwrap_or(Value::Null));
    }
    // Holds relayed by remote sidecars carry the endpoint that holds the call.
    for r in core.relay.pending(&tenant_id)? {
        let mut view = serde_json::to_value(r.hold.approval()).unwrap_or(Value::Null);
        view["endpoint_id"] = r.endpoint_id.into();
        approvals.push(view);
    }
    Ok(Json(json!({ "approvals": approvals })))
}

/// Body of approve / deny.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// Approver identity (e-mail or name), 1..=256 bytes.
    pub approver: String,
    /// Optional reason (≤ 2048 bytes).
    #[serde(default)]
    pub reason: Option<String>,
}

impl DecisionBody {
    fn validate(&self) -> Result<(), HoldError> {
        let a = self.approver.trim();
        if a.is_empty() || a.len() > 256 || a == "timeout" {
            return Err(HoldError::BadApproval(
                "approver must be 1 to 256 bytes and not `timeout`".into(),
            ));
        }
        if self.reason.as_ref().is_some_and(|r| r.len() > 2048) {
            return Err(HoldError::BadApproval(
                "reason is longer than 2048 bytes".into(),
            ));
        }
        Ok(())
    }
}

/// Handler of POST /approvals/<hold_token>/approve.
pub async fn approve(
    State(core): State<AppState>,
    op: Operator,
    Path((tenant_id, token)): Path<(String, String)>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> Result<Json<HoldView>, ApiError> {
    resolve(core, op, tenant_id, token, body, true).await
}

/// Handler of POST /approvals/<hold_token>/deny.
pub async fn deny(
    State(core): State<AppState>,
    op: Operator,
    Path((tenant_id, token)): Path<(String, String)>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> Result<Json<HoldView>, ApiError> {
    resolve(core, op, tenant_id, token, body, false).await
}

async fn resolve(
    core: AppState,
    op: Operator,
    tenant_id: String,
    token: String,
    body: DecisionBody,
    approve: bool,
) -> Result<Json<HoldView>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, false)?;
    body.validate()?;
    let approver = body.approver.trim().to_string();
    if core.holds.get(&token).is_err() {
        // Not a hold of this process: a hold a remote sidecar relayed, decided here once and
        // applied there (`sync::relay`).
        let decision = RelayDecision {
            approve,
            approver,
            reason: body.reason,
            decided_at: crate::ids::now(),
        };
        return match core.relay.decide(&tenant_id, &token, decision).await? {
            Some(rec) => {
                tracing::info!(tenant_id = %tenant_id, by = %op.identity(), approved = approve, "relayed hold decided");
                Ok(Json(rec.view()))
            }
            None => Err(HoldError::NotFound.into()),
        };
    }
    let how = if approve {
        Resolution::Approve {
            approver,
            reason: body.reason,
        }
    } else {
        Resolution::Deny {
            approver,
            reason: body.reason,
        }
    };
    let rec = core.holds.resolve(&token, Some(&tenant_id), how).await?;
    tracing::info!(tenant_id = %tenant_id, by = %op.identity(), approved = approve, "hold resolved");
    Ok(Json(rec.view()))
}
