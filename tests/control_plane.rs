//! The control plane's endpoints, alerts, governance feed and webhooks end to end: the real app
//! in-process, real HTTP, a webhook receiver started by the test on 127.0.0.1:0.

mod common;

use axum::body::Bytes;
use axum::http::HeaderMap;
use common::{assert_detail, call, request, TestApp, ADMIN_TOKEN};
use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use toolgate::store::{pair_key, TreeName};

/// Upper bound on waiting for something the app does on its own (a guard, not a sync).
const PATIENCE: Duration = Duration::from_secs(30);

/// A control-plane request with an optional bearer credential and JSON body.
async fn cp(
    app: &TestApp,
    method: Method,
    path: &str,
    cred: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let mut req = app.client.request(method, format!("{}{path}", app.cp));
    if let Some(b) = body {
        req = req.json(b);
    }
    match cred {
        Some(c) => call(req, c).await,
        None => {
            let resp = req.send().await.unwrap();
            let status = resp.status();
            (status, resp.json().await.unwrap_or(Value::Null))
        }
    }
}

fn now() -> String {
    toolgate::ids::rfc3339(toolgate::ids::now())
}

/// A SPEC event of `tenant` for `agent`.
fn event(tenant: &str, agent: &str, event_type: &str, id: &str) -> Value {
    let source = if event_type == "LLM_INVOCATION" {
        "agent_llm_invocation"
    } else {
        "agent_tool_call"
    };
    json!({
        "tenant_id": tenant, "session_id": "sess-1", "user_id": "user-1", "agent_id": agent,
        "source_type": source, "event_type": event_type, "tool_name": "files.share",
        "approved_scope": ["files.share"], "session_tool_calls": [], "enforcement_mode": "block",
        "content": "{}", "occurred_at": now(), "event_id": id
    })
}

async fn ingest(app: &TestApp, key: &str, events: &[Value]) -> Value {
    let resp = app.post("/v1/events/batch", key, &json!(events)).await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    resp.json().await.unwrap()
}

async fn alerts(app: &TestApp, tenant: &str) -> Vec<Value> {
    let (s, v) = cp(
        app,
        Method::GET,
        &format!("/{tenant}/service/alerts"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["alerts"].as_array().unwrap().clone()
}

fn of_kind<'a>(alerts: &'a [Value], kind: &str) -> Vec<&'a Value> {
    alerts.iter().filter(|a| a["kind"] == kind).collect()
}

fn registration(id: &str) -> Value {
    json!({
        "endpoint_id": id, "hostname": "laptop-7", "employee_email": "dana@acme.example",
        "enrollment": "mdm", "environment": "prod", "proxy_version": "0.9.0",
        "agent_ids": ["support-bot"]
    })
}

#[tokio::test]
async fn endpoints_register_check_in_and_list_with_the_stale_flag() {
    let app = TestApp::start().await;
    let ep = "/t1/service/endpoints";
    let (s, first) = cp(
        &app,
        Method::POST,
        ep,
        Some(ADMIN_TOKEN),
        Some(&registration("e-1")),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    assert_eq!(first["endpoint_id"], "e-1");
    assert_eq!(first["last_checkin_at"], Value::Null);
    assert_eq!(first["stale"], false);
    let again = json!({"endpoint_id": "e-1", "proxy_version": "1.0.0"});
    let (s, second) = cp(&app, Method::POST, ep, Some(ADMIN_TOKEN), Some(&again)).await;
    assert_eq!(s, StatusCode::OK, "re-registration is an update");
    assert_eq!(second["registered_at"], first["registered_at"]);
    assert_eq!(second["hostname"], "laptop-7", "absent fields are kept");
    assert_eq!(second["proxy_version"], "1.0.0");

    let checkin = json!({"proxy_version": "1.0.1", "agent_ids": ["support-bot", "ops-bot"],
        "risk_score": 42.5, "violations_today": 3, "sessions_today": 9});
    let (s, ack) = cp(
        &app,
        Method::POST,
        "/t1/service/endpoints/e-1/checkin",
        Some(ADMIN_TOKEN),
        Some(&checkin),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{ack}");
    assert_eq!(ack["endpoint_id"], "e-1");
    assert_eq!(ack["accepted"], true);
    assert_eq!(ack["next_checkin_seconds"], 30);
    assert!(toolgate::ids::parse_rfc3339(ack["server_time"].as_str().unwrap()).is_ok());
    let unknown = app
        .cp_post(
            "/t1/service/endpoints/e-404/checkin",
            ADMIN_TOKEN,
            &json!({}),
        )
        .await;
    assert_detail(unknown, StatusCode::NOT_FOUND, "endpoint not registered").await;

    cp(
        &app,
        Method::POST,
        ep,
        Some(ADMIN_TOKEN),
        Some(&registration("e-0")),
    )
    .await;
    // Make e-0's last sign of life two hours old, as if it stopped checking in.
    let core = app.bound.as_ref().unwrap().core.clone();
    let tree = core.store.tree(TreeName::Endpoints);
    let key = pair_key("t1", "e-0");
    let mut rec: Value = tree.get(&key).unwrap().unwrap();
    let old = toolgate::ids::rfc3339(toolgate::ids::now() - chrono::Duration::hours(2));
    rec["registered_at"] = json!(old);
    rec["updated_at"] = json!(old);
    tree.put(&key, &rec).unwrap();
    drop(core);

    let (s, list) = cp(&app, Method::GET, ep, Some(ADMIN_TOKEN), None).await;
    assert_eq!(s, StatusCode::OK);
    let eps = list["endpoints"].as_array().unwrap();
    let ids: Vec<&str> = eps
        .iter()
        .map(|e| e["endpoint_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["e-0", "e-1"], "sorted by endpoint_id");
    let (stale, fresh) = (&eps[0], &eps[1]);
    assert_eq!(stale["stale"], true);
    assert!(stale["seconds_since_checkin"].as_u64().unwrap() >= 7200);
    assert_eq!(fresh["stale"], false);
    assert!(fresh["seconds_since_checkin"].as_u64().unwrap() < 90);
    assert_eq!(fresh["risk_score"], 42.5);
    assert_eq!(
        (
            fresh["violations_today"].clone(),
            fresh["sessions_today"].clone()
        ),
        (json!(3), json!(9))
    );
    assert_eq!(fresh["agent_ids"], json!(["support-bot", "ops-bot"]));
    assert_eq!(fresh["proxy_version"], "1.0.1");
    assert!(fresh["last_checkin_at"].is_string());
    let expected: BTreeSet<&str> = [
        "endpoint_id",
        "hostname",
        "employee_email",
        "enrollment",
        "environment",
        "proxy_version",
        "agent_ids",
        "registered_at",
        "last_checkin_at",
        "risk_score",
        "violations_today",
        "sessions_today",
        "stale",
        "seconds_since_checkin",
    ]
    .into();
    let got: BTreeSet<&str> = fresh
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(got, expected);

    let stale_alerts = of_kind(&alerts(&app, "t1").await, "endpoint_stale").len();
    assert_eq!(stale_alerts, 1);
    let (_, other) = cp(
        &app,
        Method::GET,
        "/t2/service/endpoints",
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(
        other["endpoints"],
        json!([]),
        "a tenant never sees another's endpoints"
    );
    app.stop().await;
}

#[tokio::test]
async fn bad_endpoint_bodies_are_422_naming_the_field() {
    let app = TestApp::start().await;
    let ep = "/t1/service/endpoints";
    let long = "x".repeat(257);
    for (body, needle) in [
        (json!({"hostname": "h"}), "endpoint_id"),
        (json!({"endpoint_id": ""}), "endpoint_id must be 1 to 256"),
        (json!({"endpoint_id": long}), "endpoint_id must be 1 to 256"),
        (json!({"endpoint_id": "e", "agent_ids": "a"}), "agent_ids"),
        (json!({"endpoint_id": 7}), "endpoint_id"),
    ] {
        let resp = app.cp_post(ep, ADMIN_TOKEN, &body).await;
        assert_detail(resp, StatusCode::UNPROCESSABLE_ENTITY, needle).await;
    }
    app.cp_post(ep, ADMIN_TOKEN, &json!({"endpoint_id": "e"}))
        .await;
    let path = "/t1/service/endpoints/e/checkin";
    for (body, needle) in [
        (json!({"risk_score": 101}), "risk_score"),
        (json!({"risk_score": "high"}), "risk_score"),
        (json!({"violations_today": -1}), "violations_today"),
        (json!({"sessions_today": 1.5}), "sessions_today"),
    ] {
        let resp = app.cp_post(path, ADMIN_TOKEN, &body).await;
        assert_detail(resp, StatusCode::UNPROCESSABLE_ENTITY, needle).await;
    }
    app.stop().await;
}

#[tokio::test]
async fn every_call_has_the_auth_table_of_the_spec() {
    let app = TestApp::start().await;
    let read = app.key("t1", "organization", None, &["read"]).await;
    let write = app
        .key("t1", "organization", None, &["read", "write"])
        .await;
    let other = app
        .key("t2", "organization", None, &["read", "write"])
        .await;
    let fleet = app
        .key("t1", "fleet", Some("f-1"), &["read", "write"])
        .await;
    let (s, _) = cp(
        &app,
        Method::PUT,
        "/t1/service/settings/webhook",
        Some(&write),
        Some(&json!({"url": "http://127.0.0.1:9/unused"})),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::OK,
        "an organization write key configures the webhook"
    );
    app.cp_post(
        "/t1/service/endpoints",
        ADMIN_TOKEN,
        &json!({"endpoint_id": "e-1"}),
    )
    .await;

    let gets = [
        "/t1/service/endpoints",
        "/t1/service/alerts",
        "/t1/service/governance/feed",
        "/t1/service/settings/webhook",
    ];
    for path in gets {
        assert_eq!(
            cp(&app, Method::GET, path, Some(ADMIN_TOKEN), None).await.0,
            StatusCode::OK,
            "admin {path}"
        );
        assert_eq!(
            cp(&app, Method::GET, path, Some(&read), None).await.0,
            StatusCode::OK,
            "read key {path}"
        );
        assert_eq!(
            cp(&app, Method::GET, path, Some(&other), None).await.0,
            StatusCode::FORBIDDEN,
            "other tenant {path}"
        );
        assert_eq!(
            cp(&app, Method::GET, path, Some(&fleet), None).await.0,
            StatusCode::FORBIDDEN,
            "fleet key {path}"
        );
        assert_eq!(
            cp(&app, Method::GET, path, None, None).await.0,
            StatusCode::UNAUTHORIZED,
            "no credential {path}"
        );
        assert_eq!(
            cp(&app, Method::GET, path, Some("tgk.key_x.nope"), None)
                .await
                .0,
            StatusCode::UNAUTHORIZED,
            "bad key {path}"
        );
    }
    let mutations: Vec<(Method, &str, Option<Value>)> = vec![
        (
            Method::POST,
            "/t1/service/endpoints",
            Some(json!({"endpoint_id": "e-1"})),
        ),
        (
            Method::POST,
            "/t1/service/endpoints/e-1/checkin",
            Some(json!({"risk_score": 1})),
        ),
        (
            Method::PUT,
            "/t1/service/settings/webhook",
            Some(json!({"url": "http://127.0.0.1:9/x"})),
        ),
        (Method::POST, "/t1/service/settings/webhook/test", None),
        (Method::DELETE, "/t1/service/settings/webhook", None),
    ];
    for (method, path, body) in &mutations {
        let b = body.as_ref();
        let status = |cred| cp(&app, method.clone(), path, cred, b);
        assert_eq!(
            status(Some(&read)).await.0,
            StatusCode::FORBIDDEN,
            "read key {method} {path}"
        );
        assert_eq!(
            status(Some(&other)).await.0,
            StatusCode::FORBIDDEN,
            "other tenant {method} {path}"
        );
        assert_eq!(
            status(Some(&fleet)).await.0,
            StatusCode::FORBIDDEN,
            "fleet key {method} {path}"
        );
        assert_eq!(
            status(None).await.0,
            StatusCode::UNAUTHORIZED,
            "no credential {method} {path}"
        );
    }
    for (method, path, body) in &mutations {
        let (s, v) = cp(&app, method.clone(), path, Some(&write), body.as_ref()).await;
        assert!(s.is_success(), "write key {method} {path}: {s} {v}");
    }
    for (method, path, body) in &mutations[..3] {
        let (s, v) = cp(&app, method.clone(), path, Some(ADMIN_TOKEN), body.as_ref()).await;
        assert!(s.is_success(), "admin {method} {path}: {s} {v}");
    }

    // An endpoint-scoped key registers and checks in for its own endpoint only.
    let own = app.key("t1", "endpoint", Some("e-own"), &["write"]).await;
    let own_ro = app.key("t1", "endpoint", Some("e-own"), &["read"]).await;
    let mine = json!({"endpoint_id": "e-own"});
    let (s, _) = cp(
        &app,
        Method::POST,
        "/t1/service/endpoints",
        Some(&own),
        Some(&mine),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = cp(
        &app,
        Method::POST,
        "/t1/service/endpoints/e-own/checkin",
        Some(&own),
        Some(&json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = cp(
        &app,
        Method::POST,
        "/t1/service/endpoints/e-1/checkin",
        Some(&own),
        Some(&json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "another endpoint's check-in");
    let theirs = json!({"endpoint_id": "e-1"});
    let (s, _) = cp(
        &app,
        Method::POST,
        "/t1/service/endpoints",
        Some(&own),
        Some(&theirs),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "another endpoint's registration");
    let (s, _) = cp(
        &app,
        Method::POST,
        "/t1/service/endpoints/e-own/checkin",
        Some(&own_ro),
        Some(&json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a check-in needs write");
    let (s, _) = cp(&app, Method::GET, "/t1/service/endpoints", Some(&own), None).await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "listing needs an organization key"
    );
    let (s, _) = cp(
        &app,
        Method::POST,
        "/t2/service/endpoints/e-own/checkin",
        Some(&own),
        Some(&json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "another tenant");
    app.stop().await;
}

#[tokio::test]
async fn a_burst_of_blocks_alerts_for_that_agent_only_in_its_tenant() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let key2 = app.key("t2", "organization", None, &["execute"]).await;
    let mut batch: Vec<Value> = (0..6)
        .map(|i| event("t1", "rogue-bot", "TOOL_CALL_BLOCK", &format!("b-{i}")))
        .collect();
    batch.extend((0..3).map(|i| event("t1", "calm-bot", "TOOL_CALL_BLOCK", &format!("c-{i}"))));
    batch.extend((0..5).map(|i| event("t1", "busy-bot", "TOOL_CALL_PRE", &format!("p-{i}"))));
    ingest(&app, &key, &batch).await;
    ingest(
        &app,
        &key2,
        &[event("t2", "quiet-bot", "TOOL_CALL_BLOCK", "x-1")],
    )
    .await;

    let t1 = alerts(&app, "t1").await;
    let bursts = of_kind(&t1, "block_burst");
    assert_eq!(bursts.len(), 1, "{t1:?}");
    let b = bursts[0];
    assert_eq!(b["subject"], "rogue-bot");
    assert_eq!(b["severity"], "high");
    assert_eq!(b["details"]["agent_id"], "rogue-bot");
    assert_eq!(b["details"]["blocks"], 6);
    assert_eq!(b["details"]["tools"], json!(["files.share"]));
    assert!(b["alert_id"].as_str().unwrap().starts_with("alr_"));
    let keys: BTreeSet<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
    let expected: BTreeSet<&str> = [
        "alert_id",
        "kind",
        "severity",
        "subject",
        "message",
        "detected_at",
        "details",
    ]
    .into();
    assert_eq!(keys, expected);
    let again = alerts(&app, "t1").await;
    assert_eq!(
        of_kind(&again, "block_burst")[0]["alert_id"],
        b["alert_id"],
        "stable ids"
    );
    assert!(of_kind(&alerts(&app, "t2").await, "block_burst").is_empty());
    app.stop().await;
}

#[tokio::test]
async fn keys_near_expiry_timed_out_holds_and_replay_storms_alert() {
    let app = TestApp::start().await;
    let body =
        json!({"scope_level": "organization", "permissions": ["read"], "expires_in_days": 7});
    let (s, created) = call(
        app.client
            .post(format!("{}/t1/service/api-keys", app.cp))
            .json(&body),
        ADMIN_TOKEN,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let key_id = created["key_id"].as_str().unwrap();

    let exec = app.exec_key().await;
    let (_, d) = app.enforce(&exec, &request("deploy.quick")).await;
    assert_eq!(d["decision"], "STEP_UP", "{d}");
    let token = d["hold_token"].as_str().unwrap();
    let polled: Value = app
        .get(&format!("/v1/enforce/hold/{token}?wait_seconds=5"), &exec)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(polled["resolved_by"], "timeout", "{polled}");

    let batch: Vec<Value> = (0..60)
        .map(|i| event("t1", "replayer", "TOOL_CALL_POST", &format!("r-{i}")))
        .collect();
    assert_eq!(ingest(&app, &exec, &batch).await["queued"], "60");
    assert_eq!(ingest(&app, &exec, &batch).await["replay_dropped"], "60");

    let all = alerts(&app, "t1").await;
    let expiring = of_kind(&all, "key_expiring");
    assert_eq!(expiring.len(), 1, "{all:?}");
    assert_eq!(expiring[0]["subject"], key_id);
    assert_eq!(expiring[0]["details"]["key_id"], key_id);
    assert!(expiring[0]["details"]["days_left"].as_f64().unwrap() > 6.0);
    let timeouts = of_kind(&all, "hold_timeout");
    assert_eq!(timeouts.len(), 1);
    assert_eq!(timeouts[0]["details"]["hold_token"], token);
    assert_eq!(timeouts[0]["details"]["tool_name"], "deploy.quick");
    let storms = of_kind(&all, "replay_storm");
    assert_eq!(storms.len(), 1);
    assert_eq!(storms[0]["details"]["dropped"], 60);
    let ranks: Vec<u8> = all
        .iter()
        .map(|a| match a["severity"].as_str().unwrap() {
            "critical" => 3,
            "high" => 2,
            "medium" => 1,
            _ => 0,
        })
        .collect();
    assert!(
        ranks.windows(2).all(|w| w[0] >= w[1]),
        "most severe first: {ranks:?}"
    );
    let t2 = alerts(&app, "t2").await;
    assert!(t2.is_empty(), "nothing of t1 leaks into t2: {t2:?}");
    app.stop().await;
}

#[tokio::test]
async fn the_feed_lists_decisions_violations_holds_and_token_spend_newest_first_in_pages() {
    let app = TestApp::start().await;
    let exec = app.exec_key().await;
    let (_, allow) = app.enforce(&exec, &request("crm.lookup")).await;
    assert_eq!(allow["decision"], "ALLOW", "{allow}");
    let (_, block) = app.enforce(&exec, &request("files.share")).await;
    assert_eq!(block["decision"], "BLOCK", "{block}");
    let (_, held) = app.enforce(&exec, &request("deploy.run")).await;
    let token = held["hold_token"].as_str().unwrap();
    let approve = json!({"approver": "cfo@acme.example"});
    let r = app
        .cp_post(
            &format!("/t1/service/approvals/{token}/approve"),
            ADMIN_TOKEN,
            &approve,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);

    let llm = |id: &str, meta: Value| {
        let mut e = event("t1", "writer-bot", "LLM_INVOCATION", id);
        e["metadata"] = meta;
        e
    };
    let events = vec![
        event("t1", "agent-1", "TOOL_CALL_PRE", "pre-1"),
        event("t1", "agent-1", "TOOL_CALL_POST", "post-1"),
        event("t1", "agent-1", "TOOL_CALL_BLOCK", "blk-1"),
        llm(
            "l-1",
            json!({"provider": "openai", "model": "gpt-4.1", "input_tokens": 100, "output_tokens": 20, "total_tokens": 120}),
        ),
        llm(
            "l-2",
            json!({"provider": "openai", "model": "gpt-4.1", "input_tokens": 50, "output_tokens": 5}),
        ),
        llm(
            "l-3",
            json!({"provider": "anthropic", "modelName": "claude-x", "promptTokens": 7, "completionTokens": 3, "totalTokens": 10}),
        ),
    ];
    ingest(&app, &exec, &events).await;
    let exec2 = app.key("t2", "organization", None, &["execute"]).await;
    ingest(
        &app,
        &exec2,
        &[event("t2", "other", "TOOL_CALL_BLOCK", "t2-1")],
    )
    .await;

    let (s, full) = cp(
        &app,
        Method::GET,
        "/t1/service/governance/feed?limit=500",
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{full}");
    assert_eq!(full["next_cursor"], Value::Null);
    let items = full["items"].as_array().unwrap();
    let mut types: BTreeMap<&str, usize> = BTreeMap::new();
    for i in items {
        *types.entry(i["type"].as_str().unwrap()).or_default() += 1;
        assert!(i["id"].is_string() && i["at"].is_string(), "{i}");
    }
    let expected: BTreeMap<&str, usize> = [
        ("decision", 2),  // ALLOW and STEP_UP receipts
        ("violation", 2), // the BLOCK decision and the TOOL_CALL_BLOCK event
        ("hold_created", 1),
        ("hold_resolved", 1),
        ("tool_call", 1),
        ("llm_invocation", 3),
    ]
    .into();
    assert_eq!(types, expected, "{items:#?}");
    let ats: Vec<&str> = items.iter().map(|i| i["at"].as_str().unwrap()).collect();
    assert!(
        ats.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {ats:?}"
    );
    let violation = items
        .iter()
        .find(|i| i["type"] == "violation" && i["source"] == "decision")
        .unwrap();
    assert_eq!(violation["violation_id"], block["violation_id"]);
    assert_eq!(violation["decision"], "BLOCK");
    let resolved = items.iter().find(|i| i["type"] == "hold_resolved").unwrap();
    assert_eq!(resolved["hold_token"], token);
    assert_eq!(resolved["resolution"], "ALLOW");
    assert_eq!(resolved["resolved_by"], "cfo@acme.example");
    assert!(
        items.iter().all(|i| i["agent_id"] != "other"),
        "tenant-filtered"
    );
    assert_eq!(
        full["token_spend"],
        json!([
            {"provider": "openai", "model": "gpt-4.1", "calls": 2, "input_tokens": 150, "output_tokens": 25, "total_tokens": 175},
            {"provider": "anthropic", "model": "claude-x", "calls": 1, "input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
        ])
    );

    // Paging with limit=3 walks the same items once each.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/t1/service/governance/feed?limit=3&cursor={c}"),
            None => "/t1/service/governance/feed?limit=3".to_string(),
        };
        let (s, page) = cp(&app, Method::GET, &path, Some(ADMIN_TOKEN), None).await;
        assert_eq!(s, StatusCode::OK, "{page}");
        let got = page["items"].as_array().unwrap();
        assert!(got.len() <= 3);
        assert_eq!(
            page["token_spend"], full["token_spend"],
            "spend covers the window"
        );
        paged.extend(got.iter().map(|i| i["id"].clone()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let all_ids: Vec<Value> = items.iter().map(|i| i["id"].clone()).collect();
    assert_eq!(paged, all_ids);

    for q in [
        "limit=0",
        "limit=501",
        "limit=x",
        "since_hours=0",
        "since_hours=169",
        "cursor=%21%21",
    ] {
        let (s, v) = cp(
            &app,
            Method::GET,
            &format!("/t1/service/governance/feed?{q}"),
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{q}: {v}");
        assert!(v["detail"].is_string());
    }
    let (_, t2) = cp(
        &app,
        Method::GET,
        "/t2/service/governance/feed",
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    let t2_items = t2["items"].as_array().unwrap();
    assert_eq!(t2_items.len(), 1, "{t2}");
    assert_eq!(t2_items[0]["agent_id"], "other");
    assert_eq!(t2["token_spend"], json!([]));
    app.stop().await;
}

/// One request the receiver got.
#[derive(Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
    answered: u16,
}

/// A webhook receiver on 127.0.0.1:0 that answers 500 to its first `fail_first` requests and 200
/// afterwards, and reports every request on a channel.
async fn receiver(fail_first: usize) -> (String, mpsc::UnboundedReceiver<Received>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    let handler = move |headers: HeaderMap, body: Bytes| {
        let (tx, seen) = (tx.clone(), seen.clone());
        async move {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let answered = if n < fail_first { 500 } else { 200 };
            let _ = tx.send(Received {
                headers,
                body,
                answered,
            });
            axum::http::StatusCode::from_u16(answered).unwrap()
        }
    };
    let router = axum::Router::new().route("/hook", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}/hook"), rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Received>) -> Received {
    tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("a delivery arrives")
        .expect("receiver open")
}

/// Checks `X-Toolgate-Signature` independently of toolgate's code: HMAC-SHA256 under the
/// secret over `<t>.<body>`.
fn assert_signed(r: &Received, secret: &str) -> Value {
    let header = r.headers["x-toolgate-signature"].to_str().unwrap();
    let (t, v1) = header.split_once(',').unwrap();
    let t = t.strip_prefix("t=").unwrap();
    let v1 = v1.strip_prefix("v1=").unwrap();
    let age = toolgate::ids::now().timestamp() - t.parse::<i64>().unwrap();
    assert!((0..300).contains(&age), "fresh timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(&r.body);
    assert_eq!(
        hex::encode(mac.finalize().into_bytes()),
        v1,
        "signature verifies"
    );
    assert_eq!(r.headers["content-type"], "application/json");
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        r.headers["x-toolgate-event"].to_str().unwrap(),
        body["type"].as_str().unwrap()
    );
    assert_eq!(
        r.headers["x-toolgate-delivery"].to_str().unwrap(),
        body["delivery_id"].as_str().unwrap()
    );
    body
}

async fn configure(app: &TestApp, tenant: &str, url: &str) -> String {
    let path = format!("/{tenant}/service/settings/webhook");
    let (s, v) = cp(
        app,
        Method::PUT,
        &path,
        Some(ADMIN_TOKEN),
        Some(&json!({"url": url})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["url"], url);
    v["secret"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn the_webhook_test_delivers_a_signed_payload_and_reports_it() {
    let app = TestApp::start().await;
    let path = "/t1/service/settings/webhook";
    let test = "/t1/service/settings/webhook/test";
    let (s, v) = cp(&app, Method::POST, test, Some(ADMIN_TOKEN), None).await;
    assert_eq!(
        (s, v["detail"].as_str()),
        (StatusCode::NOT_FOUND, Some("no webhook configured"))
    );
    let (s, _) = cp(&app, Method::GET, path, Some(ADMIN_TOKEN), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    for bad in ["ftp://example.com/x", "not a url", "file:///etc/passwd"] {
        let resp = app
            .client
            .put(format!("{}{path}", app.cp))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"url": bad}))
            .send()
            .await
            .unwrap();
        assert_detail(resp, StatusCode::UNPROCESSABLE_ENTITY, "url").await;
    }

    let (url, mut rx) = receiver(0).await;
    let secret = configure(&app, "t1", &url).await;
    assert!(secret.starts_with("whsec_"));
    let (s, shown) = cp(&app, Method::GET, path, Some(ADMIN_TOKEN), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(shown["url"], url.as_str());
    assert!(shown["configured_at"].is_string());
    assert!(
        !shown.to_string().contains(&secret),
        "the secret is shown only once"
    );

    let (s, report) = cp(&app, Method::POST, test, Some(ADMIN_TOKEN), None).await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(report["delivered"], true);
    assert_eq!(report["status_code"], 200);
    assert_eq!(report["error"], Value::Null);
    assert!(report["latency_ms"].as_f64().unwrap() >= 0.0);
    let got = next(&mut rx).await;
    let body = assert_signed(&got, &secret);
    assert_eq!(body["type"], "webhook.test");
    assert_eq!(body["tenant_id"], "t1");
    assert_eq!(body["delivery_id"], report["delivery_id"]);
    assert!(body["created_at"].is_string() && body["data"].is_object());

    // A receiver that answers 500 is reported, not retried.
    let (bad_url, mut bad_rx) = receiver(usize::MAX).await;
    configure(&app, "t1", &bad_url).await;
    let (_, report) = cp(&app, Method::POST, test, Some(ADMIN_TOKEN), None).await;
    assert_eq!(
        (report["delivered"].clone(), report["status_code"].clone()),
        (json!(false), json!(500))
    );
    assert_eq!(report["error"], "HTTP 500");
    assert_eq!(next(&mut bad_rx).await.answered, 500);

    let (s, gone) = cp(&app, Method::DELETE, path, Some(ADMIN_TOKEN), None).await;
    assert_eq!((s, gone["deleted"].clone()), (StatusCode::OK, json!(true)));
    assert_eq!(
        cp(&app, Method::GET, path, Some(ADMIN_TOKEN), None).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        cp(&app, Method::DELETE, path, Some(ADMIN_TOKEN), None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    app.stop().await;
}

#[tokio::test]
async fn holds_send_signed_callbacks_and_a_failed_delivery_is_retried() {
    let app = TestApp::start().await;
    let (url, mut rx) = receiver(1).await;
    let secret = configure(&app, "t1", &url).await;
    let exec = app.exec_key().await;
    let (_, held) = app.enforce(&exec, &request("deploy.run")).await;
    let token = held["hold_token"].as_str().unwrap().to_string();
    // Another tenant's hold sends nothing to t1's webhook.
    let exec2 = app.key("t2", "organization", None, &["execute"]).await;
    let mut other = request("deploy.run");
    other["tenant_id"] = json!("t2");
    assert_eq!(app.enforce(&exec2, &other).await.1["decision"], "STEP_UP");

    // The first attempt of hold.created is answered 500; its retry (same delivery id) succeeds.
    let first = next(&mut rx).await;
    assert_eq!(first.answered, 500);
    let failed = assert_signed(&first, &secret);
    assert_eq!(failed["type"], "hold.created");
    let retry = next(&mut rx).await;
    assert_eq!(retry.answered, 200);
    let created = assert_signed(&retry, &secret);
    assert_eq!(
        created["delivery_id"], failed["delivery_id"],
        "a retry is the same delivery"
    );
    assert_eq!(retry.body, first.body, "with the same body");
    assert_eq!(created["tenant_id"], "t1");
    assert_eq!(created["data"]["hold_token"], token.as_str());
    assert_eq!(created["data"]["status"], "pending");
    assert_eq!(created["data"]["tool_name"], "deploy.run");

    let approve = json!({"approver": "alice@example.com", "reason": "CHG-1"});
    let r = app
        .cp_post(
            &format!("/t1/service/approvals/{token}/approve"),
            ADMIN_TOKEN,
            &approve,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let resolved_req = next(&mut rx).await;
    assert_eq!(resolved_req.answered, 200);
    let resolved = assert_signed(&resolved_req, &secret);
    assert_eq!(resolved["type"], "hold.resolved");
    assert_eq!(resolved["data"]["token"], token.as_str());
    assert_eq!(resolved["data"]["resolution"], "ALLOW");
    assert_eq!(resolved["data"]["resolved_by"], "alice@example.com");
    assert!(resolved["data"]["terminal_receipt"]["signature"].is_string());
    assert!(rx.try_recv().is_err(), "nothing else for t1");
    app.stop().await;
}
