//! Holds end to end: STEP_UP → GET /v1/enforce/hold/{token} → approve / deny on the control plane,
//! or timeout; exact Hold fields; 404, 403, 409, 503; a corrupted hold record is a 500.

mod common;

use common::{assert_detail, request, TestApp, ADMIN_TOKEN};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeSet;

async fn step_up(app: &TestApp, key: &str, tool: &str) -> String {
    let mut body = request(tool);
    body["tool_args"] = json!({"target": "prod", "notify": "ops@example.com"});
    let (status, d) = app.enforce(key, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d["decision"], "STEP_UP", "{d}");
    d["hold_token"].as_str().unwrap().to_string()
}

async fn poll(app: &TestApp, key: &str, token: &str, wait: u64) -> (StatusCode, Value) {
    let r = app
        .get(
            &format!("/v1/enforce/hold/{token}?wait_seconds={wait}"),
            key,
        )
        .await;
    let s = r.status();
    (s, r.json().await.unwrap())
}

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test]
async fn a_pending_hold_has_exactly_the_spec_fields_and_approval_releases_it() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let token = step_up(&app, &key, "deploy.run").await;
    let (status, hold) = poll(&app, &key, &token, 0).await;
    assert_eq!(status, StatusCode::OK);
    let pending: BTreeSet<String> = [
        "token",
        "tenant_id",
        "agent_id",
        "tool_name",
        "session_id",
        "expires_at",
        "resolved",
        "step_up_timeout_seconds",
        "initial_receipt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(keys_of(&hold), pending);
    assert_eq!(hold["resolved"], false);
    assert_eq!(hold["step_up_timeout_seconds"], 300);

    let list: Value = app
        .cp_get("/t1/service/approvals?status=pending", ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    let item = &list["approvals"][0];
    assert_eq!(item["hold_token"], token.as_str());
    assert_eq!(item["tool_name"], "deploy.run");
    assert!(
        item["expires_at"].is_string()
            && item["risk_score"].is_number()
            && item["reason"].is_string()
    );
    assert!(
        !item["tool_args"].to_string().contains("ops@example.com"),
        "approvers see redacted arguments"
    );

    let body = json!({"approver": "alice@example.com", "reason": "change ticket CHG-1"});
    let r = app
        .cp_post(
            &format!("/t1/service/approvals/{token}/approve"),
            ADMIN_TOKEN,
            &body,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (_, done) = poll(&app, &key, &token, 0).await;
    assert_eq!(done["resolved"], true);
    assert_eq!(done["resolution"], "ALLOW");
    assert_eq!(done["resolved_by"], "alice@example.com");
    assert_eq!(done["reason"], "change ticket CHG-1");
    assert!(done["terminal_receipt"]["signature"].is_string() && done["resolved_at"].is_string());
    let mut all = pending.clone();
    all.extend(
        [
            "resolution",
            "resolved_by",
            "resolved_at",
            "reason",
            "terminal_receipt",
        ]
        .map(String::from),
    );
    assert_eq!(keys_of(&done), all);

    let again = app
        .cp_post(
            &format!("/t1/service/approvals/{token}/deny"),
            ADMIN_TOKEN,
            &body,
        )
        .await;
    assert_detail(again, StatusCode::CONFLICT, "already resolved").await;
    let list: Value = app
        .cp_get("/t1/service/approvals", ADMIN_TOKEN)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["approvals"], json!([]));
    app.stop().await;
}

#[tokio::test]
async fn denial_with_a_write_key_blocks_and_a_long_poll_wakes_at_once() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let writer = app.key("t1", "organization", None, &["write"]).await;
    let token = step_up(&app, &key, "deploy.run").await;
    let waiter = {
        let (client, url, key) = (
            app.client.clone(),
            format!("{}/v1/enforce/hold/{token}?wait_seconds=30", app.admin),
            key.clone(),
        );
        tokio::spawn(async move {
            client
                .get(url)
                .header("X-API-Key", key)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    let body = json!({"approver": "bob"});
    let r = app
        .client
        .post(format!("{}/t1/service/approvals/{token}/deny", app.cp))
        .header("X-API-Key", &writer)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let woken = waiter.await.unwrap();
    assert_eq!(woken["resolution"], "BLOCK");
    assert_eq!(woken["resolved_by"], "bob");
    app.stop().await;
}

#[tokio::test]
async fn an_unanswered_hold_times_out_as_a_block() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let token = step_up(&app, &key, "deploy.quick").await;
    let (_, hold) = poll(&app, &key, &token, 30).await;
    assert_eq!(hold["resolved"], true, "{hold}");
    assert_eq!(hold["resolution"], "BLOCK");
    assert_eq!(hold["resolved_by"], "timeout");
    assert!(hold["reason"].as_str().unwrap().contains("timed out"));
    let late = app
        .cp_post(
            &format!("/t1/service/approvals/{token}/approve"),
            ADMIN_TOKEN,
            &json!({"approver": "x"}),
        )
        .await;
    assert_eq!(
        late.status(),
        StatusCode::CONFLICT,
        "a timed-out hold cannot be approved"
    );
    app.stop().await;
}

#[tokio::test]
async fn unknown_tokens_are_404_and_other_callers_403() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let token = step_up(&app, &key, "deploy.run").await;
    assert_detail(
        app.get("/v1/enforce/hold/hold_unknown", &key).await,
        StatusCode::NOT_FOUND,
        "hold not found",
    )
    .await;
    let other_tenant = app.key("t2", "organization", None, &["execute"]).await;
    assert_detail(
        app.get(&format!("/v1/enforce/hold/{token}"), &other_tenant)
            .await,
        StatusCode::FORBIDDEN,
        "different caller",
    )
    .await;
    let other_agent = app.key("t1", "agent", Some("agent-9"), &["execute"]).await;
    assert_eq!(
        app.get(&format!("/v1/enforce/hold/{token}"), &other_agent)
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    let r = app
        .cp_post(
            &format!("/t2/service/approvals/{token}/approve"),
            ADMIN_TOKEN,
            &json!({"approver": "x"}),
        )
        .await;
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "another tenant's approvals path does not see the hold"
    );
    let t2_writer = app.key("t2", "organization", None, &["write"]).await;
    let r = app
        .client
        .post(format!("{}/t1/service/approvals/{token}/approve", app.cp))
        .header("X-API-Key", &t2_writer)
        .json(&json!({"approver": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let bad = app
        .cp_post(
            &format!("/t1/service/approvals/{token}/approve"),
            ADMIN_TOKEN,
            &json!({"approver": ""}),
        )
        .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    app.stop().await;
}

#[tokio::test]
async fn the_pending_hold_cap_answers_503() {
    let app = TestApp::start_with(|c| c.max_pending_holds = 1).await;
    let key = app.exec_key().await;
    step_up(&app, &key, "deploy.run").await;
    let core = app.bound.as_ref().unwrap().core.clone();
    let receipts_before = core.receipts.len();
    let r = app.post("/v1/enforce", &key, &request("deploy.run")).await;
    assert_detail(r, StatusCode::SERVICE_UNAVAILABLE, "too many pending holds").await;
    assert_eq!(
        core.receipts.len(),
        receipts_before,
        "no STEP_UP receipt without a hold"
    );
    drop(core);
    app.stop().await;
}

#[tokio::test]
async fn a_corrupted_hold_record_is_a_500_without_internals() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let token = step_up(&app, &key, "deploy.run").await;
    let core = app.bound.as_ref().unwrap().core.clone();
    core.store
        .tree(toolgate::store::TreeName::Holds)
        .put_raw(token.as_bytes(), b"{not json")
        .unwrap();
    drop(core);
    let v = assert_detail(
        app.get(&format!("/v1/enforce/hold/{token}"), &key).await,
        StatusCode::INTERNAL_SERVER_ERROR,
        "retry",
    )
    .await;
    assert!(
        !v["detail"].as_str().unwrap().contains("holds"),
        "no storage internals in the body"
    );
    app.stop().await;
}
