//! Control-plane tenant settings: the webhook of approval callbacks (SPEC.md, "Control-plane
//! calls": POST /settings/webhook/test; "Events"). Shapes: docs/control-plane.md.
//!
//! * `PUT /<tenant_id>/service/settings/webhook` `{"url": "https://…"}` → 200 `{"url",
//!   "secret", "configured_at"}`. A fresh signing secret every time; it is shown only here.
//!   422 for a URL that is not http(s).
//! * `GET /<tenant_id>/service/settings/webhook` → 200 `{"url", "configured_at"}`; 404 `no
//!   webhook configured`.
//! * `DELETE /<tenant_id>/service/settings/webhook` → 200 `{"url", "deleted": true}`; 404 `no
//!   webhook configured`.
//! * `POST /<tenant_id>/service/settings/webhook/test` (no body) → 200 `{"delivered",
//!   "status_code", "latency_ms", "error", "delivery_id"}` after one signed `webhook.test`
//!   delivery (10 s timeout, no retry); 404 `no webhook configured`.
//!
//! Authentication: the admin bearer or an organization key of the tenant: `read` for the GET,
//! `write` for the others.

use crate::api::{ApiError, ApiJson};
use crate::auth::{Operator, Permission};
use crate::control_plane::webhooks::validate_url;
use crate::ids;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// Body of PUT /settings/webhook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookBody {
    /// Absolute http(s) URL, at most 2048 bytes.
    pub url: String,
}

fn not_configured() -> ApiError {
    ApiError::NotFound("no webhook configured".into())
}

/// Handler of PUT /settings/webhook.
pub async fn put_webhook(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    ApiJson(body): ApiJson<WebhookBody>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, true)?;
    let url = body.url.trim();
    validate_url(url).map_err(ApiError::Unprocessable)?;
    let s = core.webhooks.configure(&tenant_id, url, ids::now()).await?;
    tracing::info!(tenant_id = %tenant_id, url = %s.url, by = %op.identity(), "webhook configured");
    Ok(Json(json!({
        "url": s.url,
        "secret": s.secret,
        "configured_at": ids::rfc3339(s.configured_at),
    })))
}

/// Handler of GET /settings/webhook.
pub async fn get_webhook(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    let s = core
        .webhooks
        .settings(&tenant_id)?
        .ok_or_else(not_configured)?;
    Ok(Json(json!({
        "url": s.url,
        "configured_at": ids::rfc3339(s.configured_at),
    })))
}

/// Handler of DELETE /settings/webhook.
pub async fn delete_webhook(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, true)?;
    let s = core
        .webhooks
        .remove(&tenant_id)
        .await?
        .ok_or_else(not_configured)?;
    tracing::info!(tenant_id = %tenant_id, by = %op.identity(), "webhook removed");
    Ok(Json(json!({ "url": s.url, "deleted": true })))
}

/// Handler of POST /settings/webhook/test. A request body, if any, is ignored.
pub async fn test_webhook(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, true)?;
    let (delivery_id, outcome) = core
        .webhooks
        .test(&tenant_id)
        .await?
        .ok_or_else(not_configured)?;
    Ok(Json(json!({
        "delivered": outcome.delivered,
        "status_code": outcome.status_code,
        "latency_ms": outcome.latency_ms,
        "error": outcome.error,
        "delivery_id": delivery_id,
    })))
}
