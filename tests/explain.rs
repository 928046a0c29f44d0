//! POST /v1/explain and GET /v1/explain/{violation_id} against the real app: storage round trip,
//! determinism, defaults, regulatory context, request_url, and the error statuses.

mod common;

use common::{assert_detail, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn block_request(violation_id: &str) -> Value {
    json!({
        "tenant_id": "t1",
        "violation_id": violation_id,
        "agent_id": "billing-bot",
        "tool_name": "payments.transfer",
        "decision": "BLOCK",
        "decision_reason_code": "rule_block",
        "action_classification": "financial_transaction",
        "risk_score": 91,
        "regulatory_regimes": ["PCI DSS"],
        "matched_rule_ids": ["payments-large-transfer"],
        "occurred_at": "2026-11-21T10:00:00Z"
    })
}

const TEXT_FIELDS: [&str; 4] = [
    "what_happened",
    "why_it_was_blocked",
    "what_to_do_next",
    "business_impact",
];

#[tokio::test]
async fn an_explanation_is_stored_and_read_back_unchanged() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let r = app.post("/v1/explain", &key, &block_request("vio_1")).await;
    assert_eq!(r.status(), StatusCode::OK);
    let created: Value = r.json().await.unwrap();
    for f in TEXT_FIELDS {
        assert!(
            created[f].as_str().is_some_and(|s| s.len() > 20),
            "{f}: {created}"
        );
    }
    assert!(created["what_happened"]
        .as_str()
        .unwrap()
        .contains("payments.transfer"));
    assert!(created["regulatory_context"]
        .as_str()
        .unwrap()
        .contains("PCI DSS"));
    assert_eq!(created["severity"], "critical", "derived from risk 91");
    let read: Value = app
        .get("/v1/explain/vio_1?tenant_id=t1", &key)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read, created);
    app.stop().await;
}

#[tokio::test]
async fn equal_input_gives_equal_text() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let a: Value = app
        .post("/v1/explain", &key, &block_request("vio_a"))
        .await
        .json()
        .await
        .unwrap();
    let b: Value = app
        .post("/v1/explain", &key, &block_request("vio_a"))
        .await
        .json()
        .await
        .unwrap();
    for f in TEXT_FIELDS
        .iter()
        .chain(&["regulatory_context", "request_url", "severity"])
    {
        assert_eq!(a[f], b[f], "{f}");
    }
    let mut held = block_request("vio_b");
    held["decision"] = json!("STEP_UP");
    held["step_up_timeout_seconds"] = json!(120);
    let c: Value = app
        .post("/v1/explain", &key, &held)
        .await
        .json()
        .await
        .unwrap();
    assert_ne!(
        a["why_it_was_blocked"], c["why_it_was_blocked"],
        "wording follows the decision"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_empty_request_gets_neutral_defaults() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let v: Value = app
        .post("/v1/explain", &key, &json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["decision"], "BLOCK");
    for list in [
        "regulatory_regimes",
        "matched_rule_ids",
        "matched_control_ids",
        "policy_references",
    ] {
        assert_eq!(v[list], json!([]), "{list}");
    }
    for scalar in [
        "violation_id",
        "tenant_id",
        "session_id",
        "agent_id",
        "user_id",
        "tool_name",
        "decision_reason_code",
        "risk_score",
    ] {
        assert!(
            v.get(scalar).is_some_and(Value::is_null),
            "{scalar} must be present and null"
        );
    }
    assert!(v["regulatory_context"].is_null());
    assert_eq!(v["request_url"], "", "no dashboard configured");
    assert!(v["timestamp"].is_string());
    app.stop().await;
}

#[tokio::test]
async fn the_dashboard_setting_fills_request_url() {
    let app =
        TestApp::start_with(|c| c.dashboard_url = Some("https://dash.example.com/".into())).await;
    let key = app.exec_key().await;
    let v: Value = app
        .post("/v1/explain", &key, &block_request("vio_9"))
        .await
        .json()
        .await
        .unwrap();
    let url = v["request_url"].as_str().unwrap();
    assert!(url.starts_with("https://dash.example.com/"), "{url}");
    assert!(url.contains("vio_9"), "{url}");
    app.stop().await;
}

#[tokio::test]
async fn errors_are_404_422_and_403() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let r = app.get("/v1/explain/vio_missing?tenant_id=t1", &key).await;
    let v = assert_detail(r, StatusCode::NOT_FOUND, "human explanation not found").await;
    assert_eq!(v["detail"], "human explanation not found");
    assert_detail(
        app.get("/v1/explain/vio_1", &key).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "tenant_id",
    )
    .await;
    assert_detail(
        app.get("/v1/explain/vio_1?tenant_id=t2", &key).await,
        StatusCode::FORBIDDEN,
        "tenant",
    )
    .await;
    let mut bad = block_request("vio_2");
    bad["action_classification"] = json!("alien_activity");
    assert_detail(
        app.post("/v1/explain", &key, &bad).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "action_classification",
    )
    .await;
    let mut other = block_request("vio_3");
    other["tenant_id"] = json!("t2");
    assert_eq!(
        app.post("/v1/explain", &key, &other).await.status(),
        StatusCode::FORBIDDEN
    );
    app.stop().await;
}
