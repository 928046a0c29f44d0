//! POST /v1/events/batch (SPEC.md): validate, dedupe, drop replays, append to the ledger, flush,
//! answer 202 with the batch acknowledgement.

use crate::api::{ApiError, JsonBytes};
use crate::auth::IngestAuth;
use crate::ledger::BatchAck;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

/// Handler of POST /v1/events/batch.
pub async fn batch(
    State(core): State<AppState>,
    auth: IngestAuth,
    JsonBytes(body): JsonBytes,
) -> Result<(StatusCode, Json<BatchAck>), ApiError> {
    let ack = core
        .ingestor
        .ingest(&core.ledger, &body, auth.tenant())
        .await?;
    Ok((StatusCode::ACCEPTED, Json(ack)))
}
