//! POST /v1/enforce against the real app: verdicts, evidence fields, the four modes, DEFER,
//! budgets, and every error status of SPEC.md's table that the endpoint can produce.

mod common;

use common::{assert_detail, request, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn an_in_scope_call_is_allowed_with_full_evidence() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let mut body = request("crm.lookup");
    body["enforcement_trace_id"] = json!("trace-abc");
    let (status, d) = app.enforce(&key, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d["decision"], "ALLOW");
    assert_eq!(d["authorization_decision"], "ALLOW");
    assert_eq!(d["decision_reason_code"], "policy_allow");
    assert_eq!(d["enforcement_trace_id"], "trace-abc");
    for field in ["decision_envelope_version", "policy_version", "reason"] {
        assert!(
            d[field].as_str().is_some_and(|s| !s.is_empty()),
            "{field}: {d}"
        );
    }
    for field in ["risk_score", "latency_ms"] {
        assert!(d[field].is_number(), "{field}");
    }
    for field in [
        "matched_rule_ids",
        "matched_control_ids",
        "policy_references",
        "score_components",
        "top_contributors",
    ] {
        assert!(d[field].is_array(), "{field}");
    }
    let receipt = &d["receipt"];
    for field in [
        "hash",
        "prev_hash",
        "signature",
        "signing_key_id",
        "request_hash",
    ] {
        assert!(
            receipt[field].as_str().is_some_and(|s| !s.is_empty()),
            "receipt.{field}: {receipt}"
        );
    }
    for absent in [
        "hold_token",
        "violation_id",
        "modified_tool_args",
        "step_up_timeout_seconds",
    ] {
        assert!(
            d.get(absent).is_none(),
            "{absent} must be absent on a plain ALLOW"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn receipts_chain_from_one_decision_to_the_next() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let (_, first) = app.enforce(&key, &request("crm.lookup")).await;
    let (_, second) = app.enforce(&key, &request("crm.lookup")).await;
    assert_eq!(second["receipt"]["prev_hash"], first["receipt"]["hash"]);
    assert_ne!(first["receipt"]["hash"], second["receipt"]["hash"]);
    app.stop().await;
}

#[tokio::test]
async fn a_tool_outside_the_approved_scope_is_blocked_with_a_violation_id() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let mut body = request("payments.transfer");
    body["approved_scope"] = json!(["crm.lookup"]);
    let (status, d) = app.enforce(&key, &body).await;
    assert_eq!(status, StatusCode::OK, "BLOCK is a 200");
    assert_eq!(d["decision"], "BLOCK");
    assert_eq!(d["authorization_decision"], "DENY");
    assert_eq!(d["decision_reason_code"], "scope_violation");
    assert!(d["violation_id"].as_str().unwrap().starts_with("vio_"));
    assert!(d.get("hold_token").is_none());
    app.stop().await;
}

#[tokio::test]
async fn an_email_address_in_the_arguments_is_redacted() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let mut body = request("email.send");
    body["tool_args"] =
        json!({"to": "bob@example.com", "subject": "hello", "nested": {"cc": ["eve@example.org"]}});
    let (_, d) = app.enforce(&key, &body).await;
    assert_eq!(d["decision"], "ALLOW");
    assert_eq!(d["authorization_decision"], "MODIFY");
    assert_eq!(d["decision_reason_code"], "outbound_dlp_redaction");
    let modified = d["modified_tool_args"].to_string();
    assert!(
        !modified.contains("bob@example.com") && !modified.contains("eve@example.org"),
        "{modified}"
    );
    assert!(modified.contains("REDACTED"), "{modified}");
    assert_eq!(d["modified_tool_args"]["subject"], "hello");
    let reason = d["modification_reason"].as_str().unwrap();
    assert!(
        !reason.contains("bob@example.com"),
        "the reason must not leak the value"
    );
    app.stop().await;
}

/// (tool, mode) → expected (decision, authorization_decision).
#[tokio::test]
async fn enforcement_modes_shape_the_verdict() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let out_of_scope = |mode: &str| {
        let mut b = request("payments.transfer");
        b["approved_scope"] = json!(["crm.lookup"]);
        b["enforcement_mode"] = json!(mode);
        b
    };
    let with_mode = |tool: &str, mode: &str| {
        let mut b = request(tool);
        b["enforcement_mode"] = json!(mode);
        b
    };
    let rm_rf = |mode: &str| {
        let mut b = with_mode("shell.exec", mode);
        b["tool_args"] = json!({"command": "rm -rf /var/lib/app"});
        b
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (with_mode("files.share", "block"), "BLOCK", "DENY"),
        (
            with_mode("files.share", "progressive"),
            "STEP_UP",
            "STEP_UP",
        ),
        (with_mode("files.share", "step_up"), "STEP_UP", "STEP_UP"),
        (with_mode("files.share", "observe"), "ALLOW", "ALLOW"),
        (out_of_scope("progressive"), "BLOCK", "DENY"),
        (out_of_scope("step_up"), "STEP_UP", "STEP_UP"),
        (out_of_scope("observe"), "ALLOW", "ALLOW"),
        (rm_rf("observe"), "BLOCK", "DENY"),
        (rm_rf("step_up"), "BLOCK", "DENY"),
    ];
    for (body, decision, auth) in cases {
        let (_, d) = app.enforce(&key, &body).await;
        let label = format!("{} in {}", body["tool_name"], body["enforcement_mode"]);
        assert_eq!(d["decision"], decision, "{label}: {d}");
        assert_eq!(d["authorization_decision"], auth, "{label}");
    }
    let (_, observed) = app
        .enforce(&key, &with_mode("files.share", "observe"))
        .await;
    assert_eq!(observed["decision_reason_code"], "observe_mode");
    assert_eq!(
        observed["decision_evidence"]["raw_authorization_decision"],
        "DENY"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_policy_deferral_is_a_step_up_with_defer() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let (_, d) = app.enforce(&key, &request("ticket.close")).await;
    assert_eq!(d["decision"], "STEP_UP");
    assert_eq!(d["authorization_decision"], "DEFER");
    assert!(d["hold_token"].as_str().unwrap().starts_with("hold_"));
    assert_eq!(d["step_up_timeout_seconds"], 300);
    assert_eq!(d["matched_rule_ids"], json!(["close-ticket-defer"]));
    app.stop().await;
}

#[tokio::test]
async fn token_and_session_budgets_block() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let mut big = request("llm.complete");
    big["token_count"] = json!(5000);
    let (_, d) = app.enforce(&key, &big).await;
    assert_eq!(d["decision_reason_code"], "token_budget_exceeded");
    let mut spend = request("llm.complete");
    spend["estimated_cost_usd"] = json!(3.0);
    let (_, first) = app.enforce(&key, &spend).await;
    assert_eq!(first["decision"], "ALLOW", "{first}");
    let (_, second) = app.enforce(&key, &spend).await;
    assert_eq!(second["decision"], "BLOCK");
    assert_eq!(second["decision_reason_code"], "session_budget_exceeded");
    let mut other_session = spend.clone();
    other_session["session_id"] = json!("sess-2");
    let (_, third) = app.enforce(&key, &other_session).await;
    assert_eq!(third["decision"], "ALLOW", "budgets are per session");
    app.stop().await;
}

#[tokio::test]
async fn schema_failures_are_422_naming_the_field() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let mut missing = request("crm.lookup");
    missing.as_object_mut().unwrap().remove("tool_name");
    let mut wrong_type = request("crm.lookup");
    wrong_type["approved_scope"] = json!("crm.lookup");
    let mut bad_mode = request("crm.lookup");
    bad_mode["enforcement_mode"] = json!("yolo");
    let mut empty = request("crm.lookup");
    empty["agent_id"] = json!("");
    let mut args_not_object = request("crm.lookup");
    args_not_object["tool_args"] = json!([1, 2]);
    for (body, field) in [
        (missing, "tool_name"),
        (wrong_type, "approved_scope"),
        (bad_mode, "enforcement_mode"),
        (empty, "agent_id"),
        (args_not_object, "tool_args"),
    ] {
        assert_detail(
            app.post("/v1/enforce", &key, &body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            field,
        )
        .await;
    }
    app.stop().await;
}

#[tokio::test]
async fn malformed_bodies_are_400_and_oversized_bodies_413() {
    let app = TestApp::start_with(|c| c.max_body_bytes = 4096).await;
    let key = app.exec_key().await;
    let url = format!("{}/v1/enforce", app.admin);
    let send = |body: String, ct: Option<&'static str>| {
        let mut r = app.client.post(&url).header("X-API-Key", &key).body(body);
        if let Some(ct) = ct {
            r = r.header("Content-Type", ct);
        }
        r.send()
    };
    let r = send("{\"agent_id\": ".into(), Some("application/json"))
        .await
        .unwrap();
    assert_detail(r, StatusCode::BAD_REQUEST, "malformed JSON").await;
    let r = send(request("crm.lookup").to_string(), None).await.unwrap();
    assert_detail(r, StatusCode::BAD_REQUEST, "Content-Type").await;
    let r = send(request("crm.lookup").to_string(), Some("text/plain"))
        .await
        .unwrap();
    assert_detail(r, StatusCode::BAD_REQUEST, "Content-Type").await;
    let mut huge = request("crm.lookup");
    huge["tool_args"] = json!({"blob": "x".repeat(10_000)});
    let r = send(huge.to_string(), Some("application/json"))
        .await
        .unwrap();
    assert_detail(r, StatusCode::PAYLOAD_TOO_LARGE, "larger than 4096").await;
    let (status, _) = app.enforce(&key, &request("crm.lookup")).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the service still answers after bad input"
    );
    app.stop().await;
}

#[tokio::test]
async fn authentication_and_scope_statuses() {
    let app = TestApp::start().await;
    let body = request("crm.lookup");
    let r = app
        .client
        .post(format!("{}/v1/enforce", app.admin))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_detail(r, StatusCode::UNAUTHORIZED, "missing API key").await;
    assert_detail(
        app.post("/v1/enforce", "tgk.key_0.bogus", &body).await,
        StatusCode::UNAUTHORIZED,
        "invalid",
    )
    .await;
    assert_detail(
        app.post("/v1/enforce", "not-a-key", &body).await,
        StatusCode::UNAUTHORIZED,
        "invalid",
    )
    .await;
    let read_only = app.key("t1", "organization", None, &["read"]).await;
    assert_detail(
        app.post("/v1/enforce", &read_only, &body).await,
        StatusCode::FORBIDDEN,
        "execute",
    )
    .await;
    let other_tenant = app.key("t2", "organization", None, &["execute"]).await;
    assert_detail(
        app.post("/v1/enforce", &other_tenant, &body).await,
        StatusCode::FORBIDDEN,
        "tenant",
    )
    .await;
    let agent_key = app.key("t1", "agent", Some("agent-2"), &["execute"]).await;
    assert_detail(
        app.post("/v1/enforce", &agent_key, &body).await,
        StatusCode::FORBIDDEN,
        "agent-2",
    )
    .await;
    let own_agent = app.key("t1", "agent", Some("agent-1"), &["execute"]).await;
    assert_eq!(
        app.post("/v1/enforce", &own_agent, &body).await.status(),
        StatusCode::OK
    );
    let fleet_key = app.key("t1", "fleet", Some("fleet-a"), &["execute"]).await;
    let mut in_fleet_b = body.clone();
    in_fleet_b["fleet_id"] = json!("fleet-b");
    assert_detail(
        app.post("/v1/enforce", &fleet_key, &in_fleet_b).await,
        StatusCode::FORBIDDEN,
        "fleet",
    )
    .await;
    in_fleet_b["fleet_id"] = json!("fleet-a");
    assert_eq!(
        app.post("/v1/enforce", &fleet_key, &in_fleet_b)
            .await
            .status(),
        StatusCode::OK
    );
    let endpoint_key = app
        .key("t1", "endpoint", Some("laptop-1"), &["execute"])
        .await;
    let mut elsewhere = body.clone();
    elsewhere["endpoint_id"] = json!("laptop-2");
    let r = app.post("/v1/enforce", &endpoint_key, &elsewhere).await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "an endpoint mismatch is allowed and logged"
    );
    let bearer = app.exec_key().await;
    let r = app
        .client
        .post(format!("{}/v1/enforce", app.admin))
        .bearer_auth(&bearer)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "the bearer form carries the same key"
    );
    app.stop().await;
}

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after() {
    let app = TestApp::start_with(|c| {
        c.rate_limit_per_second = 1;
        c.rate_limit_burst = 2;
    })
    .await;
    let key = app.exec_key().await;
    let body = request("crm.lookup");
    for _ in 0..2 {
        assert_eq!(
            app.post("/v1/enforce", &key, &body).await.status(),
            StatusCode::OK
        );
    }
    let r = app.post("/v1/enforce", &key, &body).await;
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    assert_detail(r, StatusCode::TOO_MANY_REQUESTS, "rate limit").await;
    let other = app.exec_key().await;
    assert_eq!(
        app.post("/v1/enforce", &other, &body).await.status(),
        StatusCode::OK,
        "limits are per key"
    );
    app.stop().await;
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_in_the_detail_shape() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    assert_detail(
        app.get("/v1/nope", &key).await,
        StatusCode::NOT_FOUND,
        "no such endpoint",
    )
    .await;
    assert_detail(
        app.get("/v1/enforce", &key).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method",
    )
    .await;
    app.stop().await;
}
