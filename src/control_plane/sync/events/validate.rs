//! Request validation of a shipment: endpoint id, entry count, each entry's tenant and shape.

use super::{Shipment, MAX_SHIPMENT_ENTRIES};
use crate::api::ApiError;
use serde_json::Value;

/// Checks the endpoint id, the entry count, each entry's tenant and record shape.
pub(super) fn validate(tenant_id: &str, shipment: &Shipment) -> Result<(), ApiError> {
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
