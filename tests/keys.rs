//! API keys on the control plane and their effect on the runtime: creation (plaintext once, hash
//! only), 422s, control-plane auth, revocation (API and file), health posture, authorize.

mod common;

use common::{assert_detail, request, TestApp, ADMIN_TOKEN};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn a_created_key_is_shown_once_and_listed_without_secrets() {
    let app = TestApp::start().await;
    let body = json!({"name": "ci", "scope_level": "agent", "scope_target_id": "agent-1", "permissions": ["execute", "read"]});
    let r = app
        .cp_post("/t1/service/api-keys", ADMIN_TOKEN, &body)
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let created: Value = r.json().await.unwrap();
    let key = created["key"].as_str().unwrap();
    assert_eq!(created["scope_level"], "agent");
    assert_eq!(created["permissions"], json!(["read", "execute"]));
    let expires =
        chrono::DateTime::parse_from_rfc3339(created["expires_at"].as_str().unwrap()).unwrap();
    let days = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_days();
    assert!(
        (89..=90).contains(&days),
        "default expiry is 90 days, got {days}"
    );
    let list = app
        .cp_get("/t1/service/api-keys", ADMIN_TOKEN)
        .await
        .text()
        .await
        .unwrap();
    let secret = key.rsplit('.').next().unwrap();
    assert!(list.contains(created["key_id"].as_str().unwrap()));
    assert!(
        !list.contains(secret) && !list.contains("secret_hash"),
        "{list}"
    );
    let core = app.bound.as_ref().unwrap().core.clone();
    let raw = core
        .store
        .tree(toolgate::store::TreeName::Keys)
        .get_raw(created["key_id"].as_str().unwrap().as_bytes())
        .unwrap()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&raw).contains(secret),
        "only a hash is stored"
    );
    drop(core);
    app.stop().await;
}

#[tokio::test]
async fn bad_key_requests_are_422() {
    let app = TestApp::start().await;
    let cases = [
        (
            json!({"scope_level": "galaxy", "permissions": ["read"]}),
            "scope_level",
        ),
        (
            json!({"scope_level": "fleet", "permissions": ["read"]}),
            "scope_target_id",
        ),
        (
            json!({"scope_level": "organization", "permissions": ["admin"]}),
            "permissions",
        ),
        (
            json!({"scope_level": "organization", "permissions": []}),
            "permissions",
        ),
        (json!({"permissions": ["read"]}), "scope_level"),
    ];
    for (body, field) in cases {
        assert_detail(
            app.cp_post("/t1/service/api-keys", ADMIN_TOKEN, &body)
                .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            field,
        )
        .await;
    }
    app.stop().await;
}

#[tokio::test]
async fn control_plane_authentication() {
    let app = TestApp::start().await;
    let body = json!({"scope_level": "organization", "permissions": ["execute"]});
    let r = app
        .client
        .post(format!("{}/t1/service/api-keys", app.cp))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        app.cp_post("/t1/service/api-keys", "wrong-admin-token", &body)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    let org_writer = app.key("t1", "organization", None, &["write"]).await;
    assert_eq!(
        app.cp_post("/t1/service/api-keys", &org_writer, &body)
            .await
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(
        app.cp_post("/t2/service/api-keys", &org_writer, &body)
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    let agent_writer = app.key("t1", "agent", Some("a"), &["write"]).await;
    assert_detail(
        app.cp_post("/t1/service/api-keys", &agent_writer, &body)
            .await,
        StatusCode::FORBIDDEN,
        "organization",
    )
    .await;
    let org_reader = app.key("t1", "organization", None, &["read"]).await;
    assert_eq!(
        app.cp_post("/t1/service/api-keys", &org_reader, &body)
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.cp_get("/t1/service/api-keys", &org_reader)
            .await
            .status(),
        StatusCode::OK
    );
    app.stop().await;
}

#[tokio::test]
async fn revocation_through_the_api_refuses_the_key_and_health_reports_it() {
    let app = TestApp::start().await;
    let key = app.exec_key().await;
    let health: Value = app.get("/v1/health", &key).await.json().await.unwrap();
    let key_id = health["api_key"]["key_id"].as_str().unwrap().to_string();
    assert_eq!(health["api_key"]["revoked"], false);
    assert_eq!(health["api_key"]["expired"], false);
    assert_eq!(health["api_key"]["rotation_required"], false);
    let r = app
        .client
        .delete(format!("{}/t1/service/api-keys/{key_id}", app.cp))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_detail(
        app.post("/v1/enforce", &key, &request("crm.lookup")).await,
        StatusCode::UNAUTHORIZED,
        "revoked",
    )
    .await;
    let health: Value = app.get("/v1/health", &key).await.json().await.unwrap();
    assert_eq!(health["api_key"]["revoked"], true);
    let anonymous: Value = app
        .client
        .get(format!("{}/v1/health", app.admin))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(anonymous["status"], "ok");
    assert!(anonymous.get("api_key").is_none());
    assert_eq!(
        app.get("/v1/health", "tgk.key_x.nope").await.status(),
        StatusCode::UNAUTHORIZED
    );
    app.stop().await;
}

#[tokio::test]
async fn the_revocation_file_is_reread_when_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("revoked.txt");
    std::fs::write(&file, "# none yet\n").unwrap();
    let path = file.clone();
    let app = TestApp::start_with(move |c| c.revoked_keys_file = Some(path)).await;
    let key = app.exec_key().await;
    assert_eq!(
        app.post("/v1/enforce", &key, &request("crm.lookup"))
            .await
            .status(),
        StatusCode::OK
    );
    let health: Value = app.get("/v1/health", &key).await.json().await.unwrap();
    let key_id = health["api_key"]["key_id"].as_str().unwrap();
    std::fs::write(&file, format!("# revoked by security\n{key_id}\n")).unwrap();
    // The watcher re-reads on change; wait for it through the API (bounded), not with a fixed sleep.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let h: Value = app.get("/v1/health", &key).await.json().await.unwrap();
        if h["api_key"]["revoked"] == true {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "revocation file was not picked up"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(
        app.post("/v1/enforce", &key, &request("crm.lookup"))
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    app.stop().await;
}

#[tokio::test]
async fn authorize_reports_validity_permission_and_scope() {
    let app = TestApp::start().await;
    let created: Value = app
        .cp_post("/t1/service/api-keys", ADMIN_TOKEN, &json!({"scope_level": "endpoint", "scope_target_id": "laptop-1", "permissions": ["execute"]}))
        .await.json().await.unwrap();
    let (key, key_id) = (
        created["key"].as_str().unwrap(),
        created["key_id"].as_str().unwrap(),
    );
    let check = |permission: &str, rtype: &str, rid: &str| json!({"api_key": key, "permission": permission, "resource_type": rtype, "resource_id": rid});
    let path = format!("/t1/service/api-keys/{key_id}/authorize");
    let same: Value = app
        .cp_post(
            &path,
            ADMIN_TOKEN,
            &check("execute", "endpoint", "laptop-1"),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            same["valid"].clone(),
            same["permission_allowed"].clone(),
            same["scope_allowed"].clone()
        ),
        (json!(true), json!(true), json!(true))
    );
    let other: Value = app
        .cp_post(&path, ADMIN_TOKEN, &check("write", "endpoint", "laptop-2"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            other["valid"].clone(),
            other["permission_allowed"].clone(),
            other["scope_allowed"].clone()
        ),
        (json!(true), json!(false), json!(false))
    );
    let wrong: Value = app.cp_post(&path, ADMIN_TOKEN, &json!({"api_key": "tgk.key_1.x", "permission": "read", "resource_type": "fleet", "resource_id": "f"})).await.json().await.unwrap();
    assert_eq!(wrong["valid"], false);
    app.stop().await;
}
