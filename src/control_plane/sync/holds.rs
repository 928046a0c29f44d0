//! HTTP handlers of the hold relay (`/sync/holds`, `/sync/holds/resolutions`,
//! `/sync/holds/ack`); the store and the shapes are in [`super::relay`]. Relayed holds produce
//! the same `hold.created` / `hold.resolved` approval callbacks as local ones (with
//! `endpoint_id` added to `data`).

use super::relay::RelayResolution;
use crate::api::{ApiError, ApiJson};
use crate::auth::{Operator, Permission};
use crate::holds::HoldRecord;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// Longest long-poll of `/sync/holds/resolutions`, seconds.
pub const MAX_WAIT_SECONDS: u64 = 30;

/// Body of POST /sync/holds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportBody {
    /// The reporting sidecar.
    pub endpoint_id: String,
    /// Its holds (created or resolved since its last report).
    pub holds: Vec<HoldRecord>,
}

/// Handler of POST /sync/holds.
pub async fn report(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    ApiJson(body): ApiJson<ReportBody>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, true)?;
    check_endpoint(&body.endpoint_id)?;
    let stored = body.holds.len();
    let changes = core
        .relay
        .report(&tenant_id, &body.endpoint_id, body.holds)
        .await?;
    for (event_type, hold) in changes {
        // The same approval callbacks as for this process's own holds, plus the endpoint.
        let mut data = match event_type {
            "hold.created" => serde_json::to_value(hold.approval()),
            _ => serde_json::to_value(hold.view()),
        }
        .unwrap_or(Value::Null);
        data["endpoint_id"] = body.endpoint_id.clone().into();
        core.webhooks.enqueue(&tenant_id, event_type, data);
    }
    tracing::info!(tenant_id = %tenant_id, endpoint_id = %body.endpoint_id, holds = stored, "holds relayed by a sidecar");
    Ok(Json(json!({ "stored": stored })))
}

/// Query of GET /sync/holds/resolutions.
#[derive(Debug, Deserialize)]
pub struct ResolutionsQuery {
    /// The asking sidecar.
    pub endpoint_id: String,
    /// Long-poll time, 0..=30 seconds (default 0).
    pub wait_seconds: Option<u64>,
}

/// Handler of GET /sync/holds/resolutions (long-poll).
pub async fn resolutions(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    Query(q): Query<ResolutionsQuery>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    check_endpoint(&q.endpoint_id)?;
    let wait = q.wait_seconds.unwrap_or(0);
    if wait > MAX_WAIT_SECONDS {
        return Err(ApiError::Unprocessable(format!(
            "wait_seconds: must be 0..={MAX_WAIT_SECONDS}"
        )));
    }
    let mut changed = core.relay.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    loop {
        changed.borrow_and_update();
        let found: Vec<RelayResolution> = core.relay.resolutions(&tenant_id, &q.endpoint_id)?;
        if !found.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(Json(json!({ "resolutions": found })));
        }
        if tokio::time::timeout_at(deadline, changed.changed())
            .await
            .is_err()
        {
            return Ok(Json(json!({ "resolutions": [] })));
        }
    }
}

/// Body of POST /sync/holds/ack.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckBody {
    /// The acknowledging sidecar.
    pub endpoint_id: String,
    /// Holds whose decision it applied.
    pub hold_tokens: Vec<String>,
}

/// Handler of POST /sync/holds/ack.
pub async fn ack(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    ApiJson(body): ApiJson<AckBody>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, true)?;
    check_endpoint(&body.endpoint_id)?;
    let acked = core
        .relay
        .ack(&tenant_id, &body.endpoint_id, &body.hold_tokens)
        .await?;
    Ok(Json(json!({ "acked": acked })))
}

fn check_endpoint(endpoint_id: &str) -> Result<(), ApiError> {
    if endpoint_id.trim().is_empty() || endpoint_id.len() > 256 {
        return Err(ApiError::Unprocessable(
            "endpoint_id: must be 1..=256 characters".into(),
        ));
    }
    Ok(())
}
