//! Unit tests of `ledger::event` (real sled store in a tempdir).

use super::*;
use serde_json::json;

fn valid() -> Value {
    json!({
        "tenant_id": "t1", "session_id": "s1", "user_id": "u1",
        "source_type": "agent_tool_call", "event_type": "TOOL_CALL_PRE",
        "approved_scope": ["crm.lookup"], "session_tool_calls": [],
        "enforcement_mode": "block", "content": "{}",
        "occurred_at": "2026-11-21T10:00:00Z"
    })
}

fn reason(patch: Value) -> String {
    let mut v = valid();
    for (k, val) in patch.as_object().unwrap() {
        if val == &json!("<remove>") {
            v.as_object_mut().unwrap().remove(k);
        } else {
            v[k] = val.clone();
        }
    }
    match Event::from_json(3, &v) {
        Err(IngestError::InvalidEvent { index: 3, reason }) => reason,
        other => panic!("expected InvalidEvent at 3, got {other:?}"),
    }
}

#[test]
fn each_validation_problem_has_its_own_reason() {
    let cases = [
        (json!({"tenant_id": "<remove>"}), "missing tenant_id"),
        (json!({"tenant_id": null}), "missing tenant_id"),
        (json!({"session_id": "<remove>"}), "missing session_id"),
        (json!({"user_id": "<remove>"}), "missing user_id"),
        (json!({"content": "<remove>"}), "missing content"),
        (json!({"occurred_at": "<remove>"}), "missing occurred_at"),
        (json!({"tenant_id": 7}), "tenant_id must be a string"),
        (json!({"tenant_id": ""}), "tenant_id must not be empty"),
        (json!({"tenant_id": "a\u{1f}b"}), "tenant_id must not contain control characters"),
        (json!({"content": {"a": 1}}), "content must be a string"),
        (json!({"approved_scope": "x"}), "approved_scope must be an array of strings"),
        (json!({"session_tool_calls": [1]}), "session_tool_calls must be an array of strings"),
        (json!({"metadata": [1]}), "metadata must be an object"),
        (json!({"agent_id": 5}), "agent_id must be a string"),
        (json!({"event_id": 5}), "event_id must be a string"),
        (json!({"event_id": ""}), "event_id must not be empty"),
        (
            json!({"source_type": "cli"}),
            "source_type must be one of: agent_tool_call, agent_llm_invocation",
        ),
        (
            json!({"event_type": "PRE"}),
            "event_type must be one of: TOOL_CALL_PRE, TOOL_CALL_POST, TOOL_CALL_BLOCK, LLM_INVOCATION",
        ),
        (
            json!({"enforcement_mode": "strict"}),
            "enforcement_mode must be one of: observe, progressive, step_up, block",
        ),
        (json!({"occurred_at": "yesterday"}), "occurred_at is not an ISO 8601 timestamp"),
    ];
    for (patch, expected) in cases {
        assert_eq!(reason(patch.clone()), expected, "patch {patch}");
    }
}

#[test]
fn source_and_event_types_must_pair() {
    let r = reason(json!({"event_type": "LLM_INVOCATION"}));
    assert!(
        r.starts_with("event_type LLM_INVOCATION does not go with source_type agent_tool_call"),
        "{r}"
    );
    let r = reason(json!({"source_type": "agent_llm_invocation"}));
    assert!(
        r.contains("TOOL_CALL_PRE does not go with source_type agent_llm_invocation"),
        "{r}"
    );
    let ok = json!({"source_type": "agent_llm_invocation", "event_type": "LLM_INVOCATION"});
    let mut v = valid();
    v.as_object_mut()
        .unwrap()
        .extend(ok.as_object().unwrap().clone());
    assert!(Event::from_json(0, &v).is_ok());
}

#[test]
fn a_non_object_event_is_invalid() {
    assert!(matches!(
        Event::from_json(0, &json!("x")),
        Err(IngestError::InvalidEvent { index: 0, .. })
    ));
}

#[test]
fn timestamps_with_and_without_offsets_are_accepted() {
    for ts in [
        "2026-11-21T10:00:00+01:00",
        "2026-11-21T10:00:00.123456",
        "2026-11-21T10:00:00Z",
    ] {
        let mut v = valid();
        v["occurred_at"] = json!(ts);
        assert_eq!(Event::from_json(0, &v).unwrap().occurred_at, ts);
    }
}

#[test]
fn derived_ids_are_stable_and_depend_on_content() {
    let a = Event::from_json(0, &valid()).unwrap();
    let b = Event::from_json(5, &valid()).unwrap();
    assert!(a.event_id.starts_with("evt_") && a.event_id.len() == 36);
    assert_eq!(a.event_id, b.event_id);
    let mut other = valid();
    other["content"] = json!("{\"x\":1}");
    assert_ne!(Event::from_json(0, &other).unwrap().event_id, a.event_id);
    let mut given = valid();
    given["event_id"] = json!("e-1");
    assert_eq!(Event::from_json(0, &given).unwrap().event_id, "e-1");
}

#[test]
fn derived_ids_ignore_metadata_key_spelling() {
    let mut camel = valid();
    camel["metadata"] = json!({"promptTokens": 5});
    let mut snake = valid();
    snake["metadata"] = json!({"prompt_tokens": 5});
    let a = Event::from_json(0, &camel).unwrap();
    assert_eq!(a.event_id, Event::from_json(0, &snake).unwrap().event_id);
}

#[test]
fn metadata_keys_become_snake_case_and_snake_case_wins_clashes() {
    let m = json!({
        "promptTokens": 1, "completionTokens": 2, "totalTokens": 3, "modelName": "m",
        "provider": "p", "HTTPStatus": 200, "userID": "u",
        "prompt_tokens": 10, "nested": {"innerKey": 1}
    });
    let out = Value::Object(normalize_metadata(m.as_object().unwrap().clone()));
    assert_eq!(
        out,
        json!({
            "prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 3,
            "model_name": "m", "provider": "p", "http_status": 200, "user_id": "u",
            "nested": {"innerKey": 1}
        })
    );
}

/// `Event::write_canonical` against the reference: canonicalizing the event's serde encoding.
fn assert_canonical(event: &Event) {
    let mut expected = Vec::new();
    crate::ledger::canon::canonical_json(&serde_json::to_value(event).unwrap(), &mut expected);
    let mut written = Vec::new();
    event.write_canonical(&mut written).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&written),
        String::from_utf8_lossy(&expected)
    );
}

#[test]
fn canonical_writing_matches_canonicalizing_the_encoded_event() {
    // The smallest event: no agent, tool or metadata.
    let mut event = Event::from_json(0, &valid()).unwrap();
    assert_canonical(&event);
    // Every field, and metadata whose keys were inserted out of order, nested at every depth,
    // with numbers and strings that have more than one plausible spelling.
    event.agent_id = Some("agent-\u{e9}".into());
    event.tool_name = Some("crm.\"quoted\"\\tool".into());
    event.approved_scope = vec!["b*".into(), "a".into()];
    event.session_tool_calls = vec!["z".into(), "\u{2028}line".into(), "\u{1f600}".into()];
    event.content = "{\"x\":1,\n\"ctl\":\"\u{1}\u{7f}\"}".into();
    let mut metadata = Map::new();
    for (k, v) in [
        ("zeta", json!(1)),
        ("\u{e9}t\u{e9}", json!("accent sorts after z in bytes")),
        ("Alpha", json!(true)),
        ("alpha", json!(null)),
        ("floats", json!([0.1, 1.5, 1e300, -2.5e-8, 100.0])),
        ("ints", json!([u64::MAX, i64::MIN, 0, -1])),
        (
            "nested",
            json!({"y": {"b": [{"d": 1, "c": 2}], "a": "x"}, "x": []}),
        ),
        ("a_b", json!({})),
        ("a", json!("\u{0}\t\"\\/")),
    ] {
        metadata.insert(k.into(), v);
    }
    event.metadata = Some(metadata);
    assert_canonical(&event);
    let mut written = Vec::new();
    event.write_canonical(&mut written).unwrap();
    let text = String::from_utf8(written).unwrap();
    // Keys in byte order, at the top and inside metadata.
    let order = [
        "\"agent_id\"",
        "\"approved_scope\"",
        "\"content\"",
        "\"user_id\"",
    ];
    let at: Vec<usize> = order.iter().map(|k| text.find(k).unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(
        text.find("\"Alpha\"").unwrap() < text.find("\"a\":").unwrap(),
        "{text}"
    );
    assert!(text.find("\"zeta\"").unwrap() < text.find("\"\u{e9}t\u{e9}\"").unwrap());
    assert!(text.contains(r#"{"c":2,"d":1}"#), "{text}");
}
