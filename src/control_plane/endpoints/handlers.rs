//! HTTP handlers of the endpoint calls and their authorization.

use super::*;

/// Endpoint-scoped keys may act for their own endpoint: `write` and `scope_target_id ==
/// endpoint_id`. Everyone else goes through [`Operator::authorize`] (organization keys).
///
/// Errors: `TenantMismatch`, `PermissionDenied`, `ScopeDenied` (403).
pub fn authorize_for_endpoint(
    op: &Operator,
    tenant_id: &str,
    endpoint_id: &str,
) -> Result<(), AuthError> {
    if let Operator::Key(key) = op {
        if key.scope_level == ScopeLevel::Endpoint {
            if key.tenant_id != tenant_id {
                return Err(AuthError::TenantMismatch);
            }
            if !key.has(Permission::Write) {
                return Err(AuthError::PermissionDenied(Permission::Write.as_str()));
            }
            return match key.scope_target_id.as_deref() {
                Some(target) if target == endpoint_id => Ok(()),
                other => Err(AuthError::ScopeDenied(format!(
                    "API key is scoped to endpoint `{}`, not `{endpoint_id}`",
                    other.unwrap_or("")
                ))),
            };
        }
    }
    op.authorize(tenant_id, Permission::Write, true)
}

/// Handler of POST /endpoints.
pub async fn register(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    ApiJson(reg): ApiJson<Registration>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    authorize_for_endpoint(&op, &tenant_id, &reg.endpoint_id)?;
    reg.validate().map_err(ApiError::Unprocessable)?;
    let now = ids::now();
    let (rec, created) = core.endpoints.register(&tenant_id, reg, now).await?;
    if created {
        tracing::info!(tenant_id = %tenant_id, endpoint_id = %rec.endpoint_id, by = %op.identity(), "endpoint registered");
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(rec.view(now, core.config.stale_after_seconds))))
}

/// Handler of POST /endpoints/<endpoint_id>/checkin.
pub async fn check_in(
    State(core): State<AppState>,
    op: Operator,
    Path((tenant_id, endpoint_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<CheckIn>,
) -> Result<Json<Value>, ApiError> {
    authorize_for_endpoint(&op, &tenant_id, &endpoint_id)?;
    validate_id("endpoint_id", &endpoint_id).map_err(ApiError::Unprocessable)?;
    body.validate().map_err(ApiError::Unprocessable)?;
    let now = ids::now();
    if core
        .endpoints
        .check_in(&tenant_id, &endpoint_id, body, now)?
        .is_none()
    {
        return Err(ApiError::NotFound("endpoint not registered".into()));
    }
    Ok(Json(json!({
        "endpoint_id": endpoint_id,
        "accepted": true,
        "next_checkin_seconds": core.config.checkin_interval_seconds,
        "server_time": ids::rfc3339(now),
    })))
}

/// Handler of GET /endpoints.
pub async fn list(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    let now = ids::now();
    let stale_after = core.config.stale_after_seconds;
    let endpoints: Vec<EndpointView> = core
        .endpoints
        .list(&tenant_id)?
        .iter()
        .map(|r| r.view(now, stale_after))
        .collect();
    Ok(Json(json!({ "endpoints": endpoints })))
}
