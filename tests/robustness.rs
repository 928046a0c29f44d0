//! Hostile input never crashes the process or loses accepted data: every endpoint gets malformed,
//! deeply nested, oversized, non-UTF-8 and wrongly typed bodies and answers 4xx in the
//! `{"detail": ...}` shape; afterwards the service still decides and still has earlier events.

mod common;

use common::{request, TestApp, ADMIN_TOKEN};
use serde_json::{json, Value};

fn hostile_bodies() -> Vec<Vec<u8>> {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut wide = request("crm.lookup");
    wide["approved_scope"] = json!(vec!["x"; 5000]);
    vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"\"string\"".to_vec(),
        b"{\"agent_id\": 1e999}".to_vec(),
        b"{\"tool_args\": NaN}".to_vec(),
        vec![0xff, 0xfe, 0x7b, 0x7d],
        deep.into_bytes(),
        wide.to_string().into_bytes(),
        json!({"events": [null, 1, "x"]}).to_string().into_bytes(),
        json!({"approver": ["x"], "decision": {"nested": true}})
            .to_string()
            .into_bytes(),
    ]
}

#[tokio::test]
async fn hostile_bodies_get_a_4xx_detail_and_the_service_survives() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let accepted = json!([{"tenant_id": "t1", "session_id": "s", "user_id": "u", "source_type": "agent_tool_call",
        "event_type": "TOOL_CALL_POST", "approved_scope": [], "session_tool_calls": [], "enforcement_mode": "observe",
        "content": "{}", "occurred_at": "2026-11-21T10:00:00Z", "event_id": "keep-me"}]);
    assert_eq!(
        app.post("/v1/events/batch", &key, &accepted).await.status(),
        202
    );
    let admin_paths = ["/v1/enforce", "/v1/explain", "/v1/events/batch"];
    let cp_paths = [
        "/t1/service/api-keys",
        "/t1/service/approvals/hold_x/approve",
    ];
    for body in hostile_bodies() {
        for (base, path, cred) in admin_paths
            .iter()
            .map(|p| (&app.admin, *p, key.as_str()))
            .chain(cp_paths.iter().map(|p| (&app.cp, *p, ADMIN_TOKEN)))
        {
            let r = app
                .client
                .post(format!("{base}{path}"))
                .bearer_auth(cred)
                .header("Content-Type", "application/json")
                .body(body.clone())
                .send()
                .await
                .unwrap();
            let status = r.status();
            if path == "/v1/events/batch" && body == b"[]" {
                assert_eq!(status, 202, "an empty array is a valid, empty batch");
                continue;
            }
            let unknown_fields_only =
                serde_json::from_slice::<Value>(&body).is_ok_and(|v| v.get("events").is_some());
            if path == "/v1/explain" && unknown_fields_only {
                assert_eq!(
                    status, 200,
                    "every explain field is optional and unknown fields are ignored"
                );
                continue;
            }
            assert!(
                status.is_client_error(),
                "{path} answered {status} to {:?}",
                String::from_utf8_lossy(&body[..body.len().min(40)])
            );
            let v: Value = r
                .json()
                .await
                .unwrap_or_else(|e| panic!("{path}: body is not JSON ({e})"));
            assert!(v["detail"].is_string(), "{path}: {v}");
        }
    }
    let weird_headers = [
        ("X-API-Key", "\u{7f}"),
        ("Authorization", "Bearer"),
        ("Authorization", "Basic Zm9vOmJhcg=="),
    ];
    for (h, v) in weird_headers {
        let r = app
            .client
            .post(format!("{}/v1/enforce", app.admin))
            .header(h, v)
            .json(&request("crm.lookup"))
            .send()
            .await;
        if let Ok(r) = r {
            assert_eq!(r.status(), 401, "{h}: {v:?}");
        }
    }
    let (status, d) = app.enforce(&key, &request("crm.lookup")).await;
    assert_eq!(
        (status.as_u16(), d["decision"].as_str()),
        (200, Some("ALLOW"))
    );
    assert_eq!(
        app.post("/v1/events/batch", &key, &accepted)
            .await
            .json::<Value>()
            .await
            .unwrap()["replay_dropped"],
        "1",
        "the event accepted before the hostile input is still known"
    );
    app.stop().await;
}
