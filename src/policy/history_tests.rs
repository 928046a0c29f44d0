//! Tests of [`ToolCallHistory`]: the kept JSON text always equals serde_json's, and a request
//! written with it has the same bytes (so the same request_hash) as one serialized in full.

use super::*;
use crate::policy::test_support::request;
use serde_json::json;
use std::sync::Arc;

/// Names that need escaping, and some that do not.
fn awkward(i: usize) -> String {
    match i % 5 {
        0 => format!("tool.{i}"),
        1 => format!("quote\"{i}\\back"),
        2 => format!("ctl\u{1}\n{i}"),
        3 => format!("ünï\u{1F600}{i}"),
        _ => format!("\"session_tool_calls\":[]{i}"),
    }
}

#[test]
fn kept_text_matches_serde_json_while_growing_and_at_the_cap() {
    let mut h = ToolCallHistory::kept();
    assert_eq!(h.kept_json(), Some("[]"));
    for i in 0..40 {
        h.push_bounded(awkward(i), 16);
        let expected = serde_json::to_string(&h.to_vec()).unwrap();
        assert_eq!(
            h.kept_json(),
            Some(expected.as_str()),
            "after {} pushes",
            i + 1
        );
        assert_eq!(h.len(), (i + 1).min(16));
    }
    assert_eq!(
        h.first(),
        Some(&awkward(24)),
        "the oldest names were dropped"
    );
    assert_eq!(h.last(), Some(&awkward(39)));
}

#[test]
fn a_cap_of_one_keeps_the_last_name() {
    let mut h = ToolCallHistory::kept();
    for i in 0..3 {
        h.push_bounded(awkward(i), 1);
    }
    assert_eq!(&*h, &[awkward(2)]);
    let expected = serde_json::to_string(&[awkward(2)]).unwrap();
    assert_eq!(h.kept_json(), Some(expected.as_str()));
}

#[test]
fn read_from_json_it_is_a_plain_list_and_equality_ignores_the_kept_text() {
    let read: ToolCallHistory = serde_json::from_value(json!(["a", "b"])).unwrap();
    assert_eq!(read.kept_json(), None);
    let mut kept = ToolCallHistory::kept();
    kept.push_bounded("a".into(), 8);
    kept.push_bounded("b".into(), 8);
    assert_eq!(read, kept);
    assert_eq!(serde_json::to_value(&kept).unwrap(), json!(["a", "b"]));
}

/// A request whose other fields try to look like the history field.
fn tricky_request(history: ToolCallHistory) -> crate::policy::EnforcementRequest {
    let mut req = request("payments.refund");
    req.approved_scope = vec![
        "\"session_tool_calls\":[]".into(),
        "session_tool_calls".into(),
    ];
    req.user_id = "\",\"session_tool_calls\":[]".into();
    req.session_tool_calls = Arc::new(history);
    req.tool_args = Some(
        json!({"session_tool_calls": [], "nested": {"session_tool_calls": []}, "n": 1.5})
            .as_object()
            .cloned()
            .unwrap(),
    );
    req.metadata = Some(
        json!({"session_tool_calls": []})
            .as_object()
            .cloned()
            .unwrap(),
    );
    req
}

#[test]
fn a_request_with_a_kept_history_writes_the_same_bytes_as_serde_json() {
    let kept = |n: usize| {
        let mut h = ToolCallHistory::kept();
        for i in 0..n {
            h.push_bounded(awkward(i), 256);
        }
        h
    };
    let (below, at) = (KEPT_TEXT_MIN_NAMES - 1, KEPT_TEXT_MIN_NAMES);
    let plain = ToolCallHistory::from((0..40).map(awkward).collect::<Vec<_>>());
    for history in [kept(0), kept(1), kept(below), kept(at), kept(300), plain] {
        let req = tricky_request(history);
        let mut written = b"prefix".to_vec();
        req.write_json(&mut written).unwrap();
        let expected = [b"prefix".as_slice(), &serde_json::to_vec(&req).unwrap()].concat();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }
}

#[test]
fn the_kept_history_is_spliced_not_serialized() {
    // A history whose kept text differs from its names (never the case outside this test)
    // shows which one write_json used.
    let mut h = ToolCallHistory::kept();
    for _ in 0..KEPT_TEXT_MIN_NAMES {
        h.push_bounded("real".into(), 256);
    }
    h.json = Some("[\"kept\"]".into());
    let mut out = Vec::new();
    tricky_request(h).write_json(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\"session_tool_calls\":[\"kept\"]"), "{text}");
    assert!(!text.contains("\"real\""), "{text}");
    // Later serializations on this thread write the names again.
    let mut h = ToolCallHistory::kept();
    h.push_bounded("real".into(), 8);
    assert_eq!(serde_json::to_string(&h).unwrap(), "[\"real\"]");
}
