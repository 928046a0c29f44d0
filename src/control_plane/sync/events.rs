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

use crate::api::json::{parse_json, require_json_content_type};
use crate::api::ApiError;
use crate::auth::{AuthError, Operator, Permission, ScopeLevel};
use crate::ids;
use crate::state::AppState;
use crate::store::{pair_key, Store, TreeName};
use axum::extract::{Path, Query, Request, State};
use axum::routing::{post, MethodRouter};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

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
    released: Notify,
}

impl SyncGate {
    fn lock(&self) -> MutexGuard<'_, HashSet<Vec<u8>>> {
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

/// Checks the endpoint id, the entry count, each entry's tenant and record shape.
fn validate(tenant_id: &str, shipment: &Shipment) -> Result<(), ApiError> {
    let endpoint = &shipment.endpoint_id;
    if endpoint.is_empty() || endpoint.chars().any(char::is_control) {
        return Err(ApiError::Unprocessable(
            "endpoint_id: must be non-empty without control characters".into(),
        ));
    }
    if shipment.entries.len() > MAX_SHIPMENT_ENTRIES {
        return Err(ApiError::PayloadTooLarge(format!(
            "too many entries: {}; at most {MAX_SHIPMENT_ENTRIES} per shipment",
            shipment.entries.len()
        )));
    }
    for (i, entry) in shipment.entries.iter().enumerate() {
        let Value::Object(record) = &entry.record else {
            return Err(ApiError::Unprocessable(format!(
                "entries[{i}].record: must be a JSON object"
            )));
        };
        let record_tenant = record.get("tenant_id").and_then(Value::as_str);
        for named in [entry.tenant_id.as_deref(), record_tenant]
            .into_iter()
            .flatten()
        {
            if named != tenant_id {
                return Err(ApiError::Unprocessable(format!(
                    "entries[{i}] belongs to tenant {named}, not {tenant_id}"
                )));
            }
        }
        if entry.kind.is_empty() {
            return Err(ApiError::Unprocessable(format!(
                "entries[{i}].kind: must not be empty"
            )));
        }
    }
    Ok(())
}

/// The dedupe id of an entry: `record.event_id`, else `<endpoint_id>:<seq>`.
pub fn dedupe_id(endpoint_id: &str, entry: &ShippedEntry) -> String {
    match entry.record.get("event_id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!("{endpoint_id}:{}", entry.seq),
    }
}

/// A shipment ready to store: dedupe keys and stamped records, in-request repeats removed.
struct Prepared {
    tenant_id: String,
    endpoint_id: String,
    /// `Shipped` keys (`tenant \x1f id`), one per record.
    keys: Vec<Vec<u8>>,
    /// `(kind, stamped record)`; taken when stored.
    records: Vec<(String, Value)>,
    /// Entries in the request.
    total: u64,
    /// Largest seq of the request.
    last_seq: Option<u64>,
}

impl Prepared {
    fn new(tenant_id: &str, shipment: Shipment) -> Prepared {
        let endpoint = shipment.endpoint_id;
        let last_seq = shipment.entries.iter().map(|e| e.seq).max();
        let total = shipment.entries.len() as u64;
        let mut seen = HashSet::new();
        let (mut keys, mut records) = (Vec::new(), Vec::new());
        for entry in shipment.entries {
            let key = pair_key(tenant_id, &dedupe_id(&endpoint, &entry));
            if seen.insert(key.clone()) {
                records.push((entry.kind.clone(), stamped(entry, &endpoint)));
                keys.push(key);
            }
        }
        Prepared {
            tenant_id: tenant_id.to_string(),
            endpoint_id: endpoint,
            keys,
            records,
            total,
            last_seq,
        }
    }
}

/// Stores the new entries of `p`: claims its unknown ids under the gate (`Ok(None)` when
/// another shipment holds a claim on one of them: nothing was done), appends their records in
/// one batch, writes their `Shipped` keys, then releases the claims. Not flushed.
fn store_shipment(
    core: &AppState,
    gate: &SyncGate,
    p: &mut Prepared,
) -> Result<Option<ShipmentAck>, ApiError> {
    let shipped = core.store.tree(TreeName::Shipped);
    let Some(claim) = Claim::take(gate, &shipped, &p.keys)? else {
        return Ok(None);
    };
    let fresh: HashSet<usize> = claim.indices.iter().copied().collect();
    let records: Vec<(String, Value)> = std::mem::take(&mut p.records)
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| fresh.contains(&i).then_some(r))
        .collect();
    let accepted = records.len() as u64;
    let last_cp_seq = core.ledger.append_batch(&p.tenant_id, records)?;
    let first_cp_seq = last_cp_seq + 1 - accepted;
    for (n, &i) in claim.indices.iter().enumerate() {
        shipped.put(&p.keys[i], &(first_cp_seq + n as u64))?;
    }
    let ack = ShipmentAck {
        accepted,
        duplicates: p.total - accepted,
        last_seq: p.last_seq,
    };
    let _stats = gate.lock();
    record_stats(&core.store, &p.tenant_id, &p.endpoint_id, &ack)?;
    Ok(Some(ack))
}

/// Ids of one shipment claimed in the gate; released (and waiters woken) on drop, after their
/// ledger entries and `Shipped` keys were written — or on any failure.
struct Claim<'a> {
    gate: &'a SyncGate,
    keys: Vec<Vec<u8>>,
    /// Positions (in the shipment's keys) of the ids to store, ascending.
    indices: Vec<usize>,
}

impl<'a> Claim<'a> {
    /// Under the gate: `None` if another shipment claims one of `keys`; else claims the keys
    /// not yet in `Shipped`.
    fn take(
        gate: &'a SyncGate,
        shipped: &crate::store::Tree,
        keys: &[Vec<u8>],
    ) -> Result<Option<Claim<'a>>, ApiError> {
        let mut claimed = gate.lock();
        if keys.iter().any(|k| claimed.contains(k)) {
            return Ok(None);
        }
        let mut indices = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            if !shipped.contains(key)? {
                indices.push(i);
            }
        }
        let keys: Vec<Vec<u8>> = indices.iter().map(|&i| keys[i].clone()).collect();
        claimed.extend(keys.iter().cloned());
        Ok(Some(Claim {
            gate,
            keys,
            indices,
        }))
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.keys.is_empty() {
            return;
        }
        let mut claimed = self.gate.lock();
        for key in &self.keys {
            claimed.remove(key);
        }
        drop(claimed);
        self.gate.released.notify_waiters();
    }
}

/// The record as stored on the control plane: the sender's record plus `source_endpoint_id`,
/// `source_seq` and `source_hash` (when sent).
fn stamped(entry: ShippedEntry, endpoint: &str) -> Value {
    let mut record = match entry.record {
        Value::Object(map) => map,
        other => {
            // `validate` refuses non-objects; kept total for safety.
            let mut map = Map::new();
            map.insert("value".into(), other);
            map
        }
    };
    record.insert("source_endpoint_id".into(), endpoint.into());
    record.insert("source_seq".into(), entry.seq.into());
    if let Some(hash) = entry.hash {
        record.insert("source_hash".into(), hash.into());
    }
    Value::Object(record)
}

fn stats_key(tenant_id: &str, endpoint_id: &str) -> Vec<u8> {
    let mut key = STATS_PREFIX.to_vec();
    key.extend_from_slice(&pair_key(tenant_id, endpoint_id));
    key
}

/// The endpoint's shipping stats (zeros before its first shipment).
pub fn stats(
    store: &Store,
    tenant_id: &str,
    endpoint_id: &str,
) -> Result<EndpointShipping, ApiError> {
    let stored: Option<EndpointShipping> = store
        .tree(TreeName::Meta)
        .get(&stats_key(tenant_id, endpoint_id))?;
    Ok(stored.unwrap_or_else(|| EndpointShipping {
        endpoint_id: endpoint_id.to_string(),
        ..EndpointShipping::default()
    }))
}

fn record_stats(
    store: &Store,
    tenant_id: &str,
    endpoint_id: &str,
    ack: &ShipmentAck,
) -> Result<(), ApiError> {
    let mut s = stats(store, tenant_id, endpoint_id)?;
    s.last_seq = s.last_seq.max(ack.last_seq.unwrap_or(0));
    s.accepted += ack.accepted;
    s.duplicates += ack.duplicates;
    s.updated_at = Some(ids::rfc3339(ids::now()));
    store
        .tree(TreeName::Meta)
        .put(&stats_key(tenant_id, endpoint_id), &s)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(seq: u64, record: Value) -> ShippedEntry {
        ShippedEntry {
            seq,
            tenant_id: Some("t1".into()),
            kind: "TOOL_CALL_PRE".into(),
            record,
            recorded_at: None,
            hash: Some("ab".into()),
        }
    }

    #[test]
    fn the_dedupe_id_is_the_event_id_or_endpoint_and_seq() {
        let cases = [
            (json!({"event_id": "evt_1"}), "evt_1"),
            (json!({"event_id": ""}), "ep-1:7"),
            (json!({"event_id": 5}), "ep-1:7"),
            (json!({}), "ep-1:7"),
        ];
        for (record, want) in cases {
            assert_eq!(dedupe_id("ep-1", &entry(7, record)), want);
        }
    }

    #[test]
    fn validation_refuses_other_tenants_bad_records_and_too_many_entries() {
        let ship = |entries| Shipment {
            endpoint_id: "ep-1".into(),
            entries,
        };
        assert!(validate("t1", &ship(vec![entry(1, json!({"tenant_id": "t1"}))])).is_ok());
        let cases: Vec<(Shipment, u16)> = vec![
            (ship(vec![entry(1, json!({"tenant_id": "t2"}))]), 422),
            (ship(vec![entry(1, json!([1]))]), 422),
            (
                Shipment {
                    endpoint_id: String::new(),
                    entries: vec![],
                },
                422,
            ),
            (
                ship(vec![entry(1, json!({})); MAX_SHIPMENT_ENTRIES + 1]),
                413,
            ),
        ];
        for (s, status) in cases {
            let err = validate("t1", &s).unwrap_err();
            assert_eq!(err.status().as_u16(), status, "{err}");
        }
        let mut other = entry(1, json!({}));
        other.tenant_id = Some("t2".into());
        assert!(validate("t1", &ship(vec![other])).is_err());
    }

    #[test]
    fn stamping_adds_the_source_and_keeps_the_rest() {
        let e = entry(9, json!({"event_id": "evt_1", "content": "x"}));
        let v = stamped(e, "ep-1");
        assert_eq!(
            v,
            json!({"event_id": "evt_1", "content": "x", "source_endpoint_id": "ep-1",
                   "source_seq": 9, "source_hash": "ab"})
        );
    }
}
