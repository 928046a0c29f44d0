//! Unit tests of the events route: dedupe ids, validation and stamping.

use super::dedupe::stamped;
use super::validate::validate;
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
