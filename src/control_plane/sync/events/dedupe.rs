//! Dedupe and append: dedupe ids, claims under the gate, the appended records and the
//! per-endpoint shipping stats.

use super::{EndpointShipping, Shipment, ShipmentAck, ShippedEntry, SyncGate, STATS_PREFIX};
use crate::api::ApiError;
use crate::ids;
use crate::state::AppState;
use crate::store::{pair_key, Store, TreeName};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// The dedupe id of an entry: `record.event_id`, else `<endpoint_id>:<seq>`.
pub fn dedupe_id(endpoint_id: &str, entry: &ShippedEntry) -> String {
    match entry.record.get("event_id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!("{endpoint_id}:{}", entry.seq),
    }
}

/// A shipment ready to store: dedupe keys and stamped records, in-request repeats removed.
pub(super) struct Prepared {
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
    pub(super) fn new(tenant_id: &str, shipment: Shipment) -> Prepared {
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
pub(super) fn store_shipment(
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
    // One insert per id, on purpose: sled 0.34's `apply_batch` runs the same per-key insert
    // under a database-wide write lock, and measured slower per id (BENCHMARKS.md, "Ledger
    // shipping", experiments not kept).
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
pub(super) fn stamped(entry: ShippedEntry, endpoint: &str) -> Value {
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
