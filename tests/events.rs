//! POST /v1/events/batch against the real app: both body shapes, dedupe and replay counts,
//! per-event errors with their index, limits, tenants, the ingest token, and the ledger.

mod common;

use common::{assert_detail, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn event(id: Option<&str>, tenant: &str) -> Value {
    let mut e = json!({
        "tenant_id": tenant,
        "session_id": "sess-1",
        "user_id": "user-1",
        "agent_id": "agent-1",
        "source_type": "agent_tool_call",
        "event_type": "TOOL_CALL_PRE",
        "tool_name": "crm.lookup",
        "approved_scope": ["crm.lookup"],
        "session_tool_calls": [],
        "enforcement_mode": "block",
        "content": "{\"id\": 7}",
        "occurred_at": "2026-11-21T10:00:00Z"
    });
    if let Some(id) = id {
        e["event_id"] = json!(id);
    }
    e
}

async fn send(app: &TestApp, key: &str, body: &Value) -> (StatusCode, Value) {
    let r = app.post("/v1/events/batch", key, body).await;
    let s = r.status();
    (s, r.json().await.unwrap())
}

#[tokio::test]
async fn batches_are_accepted_and_replays_dropped_and_counted() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let batch = json!([event(Some("e-1"), "t1"), event(Some("e-2"), "t1")]);
    let (status, ack) = send(&app, &key, &batch).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        ack,
        json!({"status": "accepted", "queued": "2", "replay_dropped": "0"})
    );
    let (_, again) = send(&app, &key, &json!({"events": batch})).await;
    assert_eq!(
        again,
        json!({"status": "accepted", "queued": "0", "replay_dropped": "2"})
    );
    let dupes = json!([
        event(Some("e-3"), "t1"),
        event(Some("e-3"), "t1"),
        event(Some("e-4"), "t1")
    ]);
    let (_, ack) = send(&app, &key, &dupes).await;
    assert_eq!(ack["queued"], "2");
    assert_eq!(ack["replay_dropped"], "1");
    let core = app.bound.as_ref().unwrap().core.clone();
    assert_eq!(core.ledger.len(), 4, "accepted events are in the ledger");
    drop(core);
    app.stop().await;
}

#[tokio::test]
async fn events_without_an_id_get_a_stable_one() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let batch = json!([event(None, "t1")]);
    assert_eq!(send(&app, &key, &batch).await.1["queued"], "1");
    assert_eq!(
        send(&app, &key, &batch).await.1["replay_dropped"],
        "1",
        "a retry of an id-less event is a replay"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_empty_batch_has_no_replay_count() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let (status, ack) = send(&app, &key, &json!([])).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(ack, json!({"status": "accepted", "queued": "0"}));
    app.stop().await;
}

#[tokio::test]
async fn malformed_batches_are_400_naming_the_problem() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let mut missing = event(Some("x"), "t1");
    missing.as_object_mut().unwrap().remove("tenant_id");
    let mut bad_type = event(Some("y"), "t1");
    bad_type["event_type"] = json!("TOOL_CALL_SOMETIME");
    let too_many: Vec<Value> = (0..101)
        .map(|i| event(Some(&format!("m-{i}")), "t1"))
        .collect();
    let cases = [
        (
            json!([event(Some("ok"), "t1"), missing]),
            "invalid event at index 1: missing tenant_id",
        ),
        (json!([bad_type]), "invalid event at index 0: event_type"),
        (json!("events"), "an events array"),
        (json!({"items": []}), "an events array"),
        (json!(too_many), "at most 100"),
        (
            json!([event(Some("a"), "t1"), event(Some("b"), "t9")]),
            "one tenant",
        ),
    ];
    for (body, needle) in cases {
        assert_detail(
            app.post("/v1/events/batch", &key, &body).await,
            StatusCode::BAD_REQUEST,
            needle,
        )
        .await;
    }
    let (_, ack) = send(&app, &key, &json!([event(Some("ok"), "t1")])).await;
    assert_eq!(
        ack["queued"], "1",
        "nothing of a rejected batch was accepted"
    );
    app.stop().await;
}

#[tokio::test]
async fn tenants_keys_and_the_ingest_token() {
    let app = TestApp::start_with(|c| c.event_ingest_token = Some("ingest-secret".into())).await;
    let key = app.exec_key().await;
    let r = app
        .post("/v1/events/batch", &key, &json!([event(Some("z"), "t2")]))
        .await;
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "a key ingests its own tenant only"
    );
    let url = format!("{}/v1/events/batch", app.admin);
    let by_token = |token: &'static str| {
        app.client
            .post(&url)
            .header("X-Service-Event-Ingest-Token", token)
            .json(&json!([event(Some("t"), "t2")]))
            .send()
    };
    assert_eq!(
        by_token("ingest-secret").await.unwrap().status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(
        by_token("wrong").await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let r = app.client.post(&url).json(&json!([])).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let read_only = app.key("t1", "organization", None, &["read"]).await;
    assert_eq!(
        app.post("/v1/events/batch", &read_only, &json!([]))
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    app.stop().await;
}

#[tokio::test]
async fn camel_case_token_metadata_is_normalized_in_the_ledger() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let mut e = event(Some("llm-1"), "t1");
    e["source_type"] = json!("agent_llm_invocation");
    e["event_type"] = json!("LLM_INVOCATION");
    e["metadata"] = json!({"promptTokens": 12, "completionTokens": 30, "modelName": "gpt-x", "provider": "openai"});
    assert_eq!(send(&app, &key, &json!([e])).await.0, StatusCode::ACCEPTED);
    let core = app.bound.as_ref().unwrap().core.clone();
    let entries = core.ledger.read_from(0, 10).unwrap();
    let record = serde_json::to_value(entries.last().unwrap())
        .unwrap()
        .to_string();
    assert!(
        record.contains("prompt_tokens")
            && record.contains("completion_tokens")
            && record.contains("model_name"),
        "{record}"
    );
    assert!(!record.contains("promptTokens"), "{record}");
    drop(core);
    app.stop().await;
}
