//! POST /v1/explain and GET /v1/explain/{violation_id}?tenant_id= (SPEC.md): build, store and
//! read deterministic explanations. Both need an `execute` key of the tenant they name.

use crate::api::{ApiError, ApiJson};
use crate::auth::{AuthError, Caller, Permission};
use crate::explain::{ExplainRequest, Explanation};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;

/// Handler of POST /v1/explain. The explanation is stored under the caller's tenant (which a
/// supplied `tenant_id` must equal) and the request's `violation_id`; without a violation_id it
/// is built and returned but not stored.
pub async fn create(
    State(core): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<ExplainRequest>,
) -> Result<Json<Explanation>, ApiError> {
    caller.require(Permission::Execute)?;
    if req
        .tenant_id
        .as_deref()
        .is_some_and(|t| t != caller.tenant())
    {
        return Err(AuthError::TenantMismatch.into());
    }
    let tenant = caller.tenant().to_string();
    Ok(Json(core.explainer.create(req, &tenant).await?))
}

/// Query of GET /v1/explain/{violation_id}.
#[derive(Debug, Deserialize)]
pub struct GetQuery {
    /// Required: the tenant the explanation was stored under.
    pub tenant_id: Option<String>,
}

/// Handler of GET /v1/explain/{violation_id}: 404 `human explanation not found` when absent.
pub async fn get(
    State(core): State<AppState>,
    caller: Caller,
    Path(violation_id): Path<String>,
    Query(q): Query<GetQuery>,
) -> Result<Json<Explanation>, ApiError> {
    caller.require(Permission::Execute)?;
    let tenant = q.tenant_id.filter(|t| !t.is_empty()).ok_or_else(|| {
        ApiError::Unprocessable("tenant_id: missing required query parameter".into())
    })?;
    if tenant != caller.tenant() {
        return Err(AuthError::TenantMismatch.into());
    }
    Ok(Json(core.explainer.get(&tenant, &violation_id)?))
}
