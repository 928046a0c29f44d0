//! Ledger shipping, control-plane side (docs/ledger.md, "Shipping"): sidecars POST their ledger
//! entries here and the control plane stores each event once in its own ledger.
//!
//! * `POST /{tenant_id}/service/sync/events` with [`Shipment`]
//!   `{"endpoint_id": "...", "entries": [{"seq", "tenant_id", "kind", "record", "recorded_at",
//!   "hash"?}, …]}` (at most [`MAX_SHIPMENT_ENTRIES`] entries and [`MAX_SHIPMENT_BYTES`] bytes,
//!   413 otherwise) → 200 [`ShipmentAck`] `{"accepted": n, "duplicates": m, "last_seq": max seq
//!   of the request or null}`. Extra entry fields (the sidecar sends whole ledger entries,
//!   `prev_hash` too) are ignored.
//! * `GET /{tenant_id}/service/sync/events?endpoint_id=E` → [`EndpointShipping`]: what this
//!   control plane has received from endpoint E (zeros before its first shipment).
//!
//! Auth: admin bearer, an organization key of the tenant (`write` to ship, `read` to look), or
//! an endpoint-scoped key of the tenant whose `scope_target_id` is the `endpoint_id`.
//!
//! Idempotence: each entry's dedupe id is `record.event_id` (a non-empty string) or else
//! `<endpoint_id>:<seq>`. Ids already in the `Shipped` tree (key `tenant_id \x1f id`, value the
//! control-plane ledger seq it was stored at), or earlier in the same request, are counted as
//! duplicates. The rest are appended in one `append_batch` (kind kept; the record gains
//! `source_endpoint_id`, `source_seq` and, when sent, `source_hash`), then their ids are
//! written to `Shipped`, then one flush (also when everything was a duplicate: the ids may have
//! been written by a concurrent shipment not yet flushed), then the answer.
//!
//! Concurrency: under one lock (the [`SyncGate`]) a shipment checks its ids against `Shipped`
//! and *claims* the new ones; a shipment that finds one of its ids claimed by another waits for
//! that one to finish and looks again. Claims are released once the ledger entries and
//! `Shipped` keys are written (or on failure), so two shipments of the same ids never both
//! append, while shipments of different ids (a sidecar keeps two on their way) parse, hash and
//! write in parallel. The ledger entries are written before their `Shipped` keys and sled
//! recovers a prefix of its log, so a crash before the flush can leave entries without ids (a
//! re-shipment then stores them twice: at least once), never ids without entries.
mod dedupe;
#[cfg(test)]
mod tests;
mod validate;

pub use dedupe::{dedupe_id, stats};

use crate::api::json::{parse_json, require_json_content_type};
use crate::api::ApiError;
use crate::auth::{AuthError, Operator, Permission, ScopeLevel};
use crate::state::AppState;
use axum::extract::{Path, Query, Request, State};
use axum::routing::{post, MethodRouter};
use axum::{Extension, Json};
use dedupe::{store_shipment, Prepared};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;
use validate::validate;

/// At most this many entries per shipment (413 beyond).
pub const MAX_SHIPMENT_ENTRIES: usize = 10_000;
/// At most this many body bytes per shipment (413 beyond); independent of `max_body_bytes`.
pub const MAX_SHIPMENT_BYTES: usize = 64 * 1024 * 1024;
/// `Meta` key prefix of per-endpoint shipping stats (`sync/events/` + `tenant \x1f endpoint`).
const STATS_PREFIX: &[u8] = b"sync/events/";

/// The body of a shipment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shipment {
    /// The sending endpoint (non-empty, no control characters).
    pub endpoint_id: String,
    /// Ledger entries, in the sender's seq order.
    pub entries: Vec<ShippedEntry>,
}

/// One shipped ledger entry (a sidecar's `LedgerEntry`; unknown fields are ignored).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShippedEntry {
    /// The entry's seq in the sender's ledger.
    pub seq: u64,
    /// Tenant of the entry; when present it must be the path's tenant.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Record kind (`TOOL_CALL_PRE`, …), kept as is.
    pub kind: String,
    /// The record: a JSON object; its `tenant_id`, when present, must be the path's tenant.
    pub record: Value,
    /// When the sender appended it (informational).
    #[serde(default)]
    pub recorded_at: Option<String>,
    /// The entry's hash in the sender's chain, stored as `source_hash` (anchors that chain).
    #[serde(default)]
    pub hash: Option<String>,
}

/// The 200 answer to a shipment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShipmentAck {
    /// Entries appended to the control plane's ledger.
    pub accepted: u64,
    /// Entries whose id was already stored (or repeated within the request).
    pub duplicates: u64,
    /// The largest `seq` of the request; null for an empty one.
    pub last_seq: Option<u64>,
}

/// What the control plane has received from one endpoint (`Meta`, per tenant and endpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointShipping {
    /// The endpoint.
    pub endpoint_id: String,
    /// Largest sender seq received so far (0: none).
    pub last_seq: u64,
    /// Entries stored, over all shipments.
    pub accepted: u64,
    /// Entries counted as duplicates, over all shipments.
    pub duplicates: u64,
    /// Time of the last shipment, RFC 3339 UTC; null before the first.
    pub updated_at: Option<String>,
}

/// Ids being stored by shipments still at work, and the lock over "is this id new?".
#[derive(Default)]
pub struct SyncGate {
    /// `Shipped` keys claimed by a shipment that has not written them yet.
    claimed: Mutex<HashSet<Vec<u8>>>,
    /// Woken whenever claims are released.
    pub(super) released: Notify,
}

impl SyncGate {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashSet<Vec<u8>>> {
        // The set stays consistent whatever step panicked: claims are released by `Claim::drop`.
        self.claimed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The method router of `/{tenant_id}/service/sync/events` (POST ships, GET looks), with its
/// gate.
pub fn route() -> MethodRouter<AppState> {
    post(receive)
        .get(status)
        .layer(Extension(Arc::new(SyncGate::default())))
}

/// Handler of POST /sync/events.
pub async fn receive(
    State(core): State<AppState>,
    Extension(gate): Extension<Arc<SyncGate>>,
    op: Operator,
    Path(tenant_id): Path<String>,
    req: Request,
) -> Result<Json<ShipmentAck>, ApiError> {
    op.authorize(&tenant_id, Permission::Write, false)?;
    let body = read_body(req).await?;
    // Parsing a shipment takes milliseconds: off the runtime's threads.
    let mut prepared = tokio::task::spawn_blocking(move || {
        let shipment: Shipment = parse_json(&body)?;
        authorize_endpoint(&op, &tenant_id, &shipment.endpoint_id)?;
        validate(&tenant_id, &shipment)?;
        Ok::<_, ApiError>(Prepared::new(&tenant_id, shipment))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("shipment task failed: {e}")))??;
    let ack = loop {
        let released = gate.released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let (core, gate) = (core.clone(), gate.clone());
        let outcome = tokio::task::spawn_blocking(move || {
            let outcome = store_shipment(&core, &gate, &mut prepared);
            (outcome, prepared)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("shipment task failed: {e}")))?;
        prepared = outcome.1;
        match outcome.0? {
            Some(ack) => break ack,
            // Some ids are being stored by another shipment: wait for it, then look again.
            None => released.await,
        }
    };
    core.store.flush().await?;
    Ok(Json(ack))
}

/// Query of GET /sync/events.
#[derive(Debug, Deserialize)]
pub struct StatusQuery {
    /// The endpoint to report on (required).
    pub endpoint_id: Option<String>,
}

/// Handler of GET /sync/events?endpoint_id=E.
pub async fn status(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    Query(q): Query<StatusQuery>,
) -> Result<Json<EndpointShipping>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, false)?;
    let Some(endpoint_id) = q.endpoint_id.filter(|e| !e.is_empty()) else {
        return Err(ApiError::Unprocessable(
            "endpoint_id: query parameter is required".into(),
        ));
    };
    authorize_endpoint(&op, &tenant_id, &endpoint_id)?;
    Ok(Json(stats(&core.store, &tenant_id, &endpoint_id)?))
}

/// Organization keys (and the admin) act for every endpoint; an endpoint-scoped key only for its
/// own endpoint.
fn authorize_endpoint(op: &Operator, tenant_id: &str, endpoint_id: &str) -> Result<(), AuthError> {
    if let Operator::Key(key) = op {
        if key.scope_level == ScopeLevel::Endpoint
            && key.scope_target_id.as_deref() == Some(endpoint_id)
        {
            return Ok(());
        }
    }
    op.authorize(tenant_id, Permission::Read, true)
}

/// The JSON body, with this route's own size limit: 400 without a JSON Content-Type, 413 when
/// too large.
async fn read_body(req: Request) -> Result<axum::body::Bytes, ApiError> {
    require_json_content_type(req.headers())?;
    axum::body::to_bytes(req.into_body(), MAX_SHIPMENT_BYTES)
        .await
        .map_err(|_| {
            ApiError::PayloadTooLarge(format!(
                "shipment body is larger than {MAX_SHIPMENT_BYTES} bytes"
            ))
        })
}
