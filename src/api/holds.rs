//! GET /v1/enforce/hold/{hold_token} (SPEC.md): the Hold object; 404 unknown token, 403 a hold
//! of another tenant or (agent-scoped key) another agent.
//!
//! Optional long-poll: `?wait_seconds=N` (0..=60) answers as soon as the hold resolves, or after
//! N seconds with the still-pending hold — clients poll less and learn the outcome at once.

use crate::api::ApiError;
use crate::auth::{Caller, Permission, ScopeLevel};
use crate::holds::{HoldError, HoldRecord, HoldView};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use std::time::Duration;

/// Longest long-poll, seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// Query of the hold poll.
#[derive(Debug, Deserialize)]
pub struct PollQuery {
    /// Long-poll up to this many seconds (0..=60); absent or 0 answers at once.
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

/// Handler of GET /v1/enforce/hold/{hold_token}.
pub async fn poll(
    State(core): State<AppState>,
    caller: Caller,
    Path(token): Path<String>,
    Query(q): Query<PollQuery>,
) -> Result<Json<HoldView>, ApiError> {
    caller.require(Permission::Execute)?;
    let rec = core.holds.get(&token)?;
    check_owner(&caller, &rec)?;
    let wait = q.wait_seconds.unwrap_or(0);
    if wait > MAX_WAIT_SECONDS {
        return Err(ApiError::Unprocessable(format!(
            "wait_seconds must be between 0 and {MAX_WAIT_SECONDS}"
        )));
    }
    let rec = if wait > 0 && !rec.resolved {
        core.holds.wait(&token, Duration::from_secs(wait)).await?
    } else {
        rec
    };
    Ok(Json(rec.view()))
}

fn check_owner(caller: &Caller, rec: &HoldRecord) -> Result<(), HoldError> {
    let key = &caller.key;
    let other_agent = key.scope_level == ScopeLevel::Agent
        && key.scope_target_id.as_deref() != Some(rec.call.agent_id.as_str());
    if key.tenant_id != rec.call.tenant_id || other_agent {
        return Err(HoldError::OtherCaller);
    }
    Ok(())
}
