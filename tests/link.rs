//! A control plane and linked sidecars as separate processes (`toolgate control-plane` and
//! `toolgate serve --control-plane URL --tenant T --endpoint-id E`): keys and policy flow from
//! the control plane to the sidecar without a restart, holds are approved centrally, check-ins
//! show in GET /endpoints, and a sidecar that never had a policy fails closed. Synchronisation
//! waits on the processes' own log lines ("policy bundle … applied", …), never on sleeps.

mod common;

use common::procs::Proc;
use common::{call, copy_dir, http_client, request, test_pack};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use toolgate::control_plane::webhooks::sign;

const ADMIN: &str = "link-test-admin-token";
const TENANT: &str = "acme";

/// A control plane on a copy of the test pack.
struct ControlPlane {
    proc: Proc,
    url: String,
    pack: PathBuf,
}

impl ControlPlane {
    fn start(dir: &Path) -> ControlPlane {
        let pack = dir.join("cp-pack");
        if !pack.exists() {
            copy_dir(&test_pack(), &pack);
            copy_dir(
                &common::default_pack().join("explanations"),
                &pack.join("explanations"),
            );
        }
        let proc = Proc::start(
            "control-plane",
            &dir.join("cp"),
            &pack,
            &[("TOOLGATE_ADMIN_TOKEN", ADMIN)],
        );
        let url = proc.url("control_plane_url");
        ControlPlane { proc, url, pack }
    }

    async fn key(&self, permissions: &[&str]) -> String {
        let (status, body) = call(
            http_client()
                .post(format!("{}/{TENANT}/service/api-keys", self.url))
                .json(&json!({"scope_level": "organization", "permissions": permissions})),
            ADMIN,
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["key"].as_str().unwrap().to_string()
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body) = call(
            http_client().get(format!("{}/{TENANT}/service{path}", self.url)),
            ADMIN,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

/// A sidecar linked to `cp_url` with `token`.
fn sidecar(dir: &Path, cp_url: &str, token: &str, endpoint: &str) -> Proc {
    let env = [
        ("TOOLGATE_CONTROL_PLANE_TOKEN", token),
        ("TOOLGATE_SYNC_INTERVAL_SECONDS", "1"),
        ("TOOLGATE_CHECKIN_INTERVAL_SECONDS", "1"),
    ];
    let args = [
        "--control-plane",
        cp_url,
        "--tenant",
        TENANT,
        "--endpoint-id",
        endpoint,
    ];
    Proc::start_with("serve", &dir.join(endpoint), &test_pack(), &env, &args)
}

async fn enforce(admin: &str, key: &str, tool: &str) -> (StatusCode, Value) {
    let mut body = request(tool);
    body["tenant_id"] = TENANT.into();
    call(
        http_client()
            .post(format!("{admin}/v1/enforce"))
            .json(&body),
        key,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_policy_holds_and_checkins_flow_between_control_plane_and_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let cp = ControlPlane::start(dir.path());
    let token = cp.key(&["read", "write"]).await;
    let side = sidecar(dir.path(), &cp.url, &token, "ep-1");
    side.wait_for_log("policy bundle from the control plane applied");
    let admin = side.url("admin_url");

    // A key created centrally works at the sidecar once its snapshot arrives.
    let exec = cp.key(&["execute"]).await;
    side.wait_for_log("key snapshot from the control plane applied");
    let (status, d) = enforce(&admin, &exec, "crm.lookup").await;
    assert_eq!(status, StatusCode::OK, "{d}");
    assert_eq!(d["decision"], "ALLOW", "{d}");

    // A policy change on the control plane changes the sidecar's verdict, no restart.
    std::fs::write(
        cp.pack.join("rules/added.toml"),
        "[[rule]]\nid = \"no-crm-lookup\"\ndescription = \"added centrally\"\nwhen = 'tool_name == \"crm.lookup\"'\neffect = \"block\"\nseverity = \"high\"\nclassification = \"policy_violation\"\nrisk = 10\n",
    )
    .unwrap();
    cp.proc.signal("-HUP");
    cp.proc.wait_for_log("policy reloaded");
    side.wait_for_log("policy bundle from the control plane applied");
    let (_, d) = enforce(&admin, &exec, "crm.lookup").await;
    assert_eq!(d["decision"], "BLOCK", "{d}");
    assert_eq!(d["matched_rule_ids"], json!(["no-crm-lookup"]), "{d}");

    // A hold created at the sidecar is approved on the control plane and released there; the
    // control plane's webhook receives signed callbacks for the relayed hold.
    let (hook_url, mut hooks) = webhook_receiver().await;
    let put = http_client()
        .put(format!("{}/{TENANT}/service/settings/webhook", cp.url))
        .json(&json!({ "url": hook_url }));
    let (status, hook) = call(put, ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{hook}");
    let secret = hook["secret"].as_str().unwrap().to_string();
    let (_, d) = enforce(&admin, &exec, "deploy.run").await;
    assert_eq!(d["decision"], "STEP_UP", "{d}");
    let hold = d["hold_token"].as_str().unwrap().to_string();
    cp.proc.wait_for_log("holds relayed by a sidecar");
    let list = cp.get("/approvals?status=pending").await;
    let approvals = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["hold_token"] == hold.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{hold} not among {list}"));
    assert_eq!(approvals["endpoint_id"], "ep-1", "{approvals}");
    let approve = http_client()
        .post(format!(
            "{}/{TENANT}/service/approvals/{hold}/approve",
            cp.url
        ))
        .json(&json!({"approver": "dana@acme.test", "reason": "planned"}));
    let (status, body) = call(approve, ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let poll = http_client().get(format!("{admin}/v1/enforce/hold/{hold}?wait_seconds=10"));
    let (_, h) = call(poll, &exec).await;
    assert_eq!(h["resolved"], true, "{h}");
    assert_eq!(h["resolution"], "ALLOW", "{h}");
    assert_eq!(h["resolved_by"], "dana@acme.test", "{h}");
    for expected in ["hold.created", "hold.resolved"] {
        let (signature, body) = hooks.recv().await.unwrap();
        let now = chrono::Utc::now().timestamp();
        assert!(
            sign::verify(&secret, &signature, &body, now, 300),
            "bad signature"
        );
        let payload: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(payload["type"], expected, "{payload}");
        assert_eq!(payload["data"]["endpoint_id"], "ep-1", "{payload}");
        assert_eq!(
            payload["data"]["hold_token"]
                .as_str()
                .or(payload["data"]["token"].as_str()),
            Some(hold.as_str()),
            "{payload}"
        );
    }
    let again = http_client()
        .post(format!("{}/{TENANT}/service/approvals/{hold}/deny", cp.url))
        .json(&json!({"approver": "eve@acme.test"}));
    assert_eq!(call(again, ADMIN).await.0, StatusCode::CONFLICT);

    // Check-ins show up in GET /endpoints, with the sidecar's activity.
    let endpoints =
        wait_for_checkin(&cp, "ep-1", |e| e["violations_today"].as_u64() >= Some(1)).await;
    assert!(
        endpoints["agent_ids"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "agent-1"),
        "{endpoints}"
    );
    assert!(
        endpoints["violations_today"].as_u64().unwrap() >= 1,
        "{endpoints}"
    );
    assert_eq!(endpoints["stale"], false);
}

/// An HTTP receiver on 127.0.0.1:0 that passes each POST's signature header and body on.
async fn webhook_receiver() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let tx = tx.clone();
                async move {
                    let sig = headers
                        .get("x-toolgate-signature")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let _ = tx.send((sig, body.to_vec()));
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

/// The endpoint's record once a check-in satisfies `done` (check-ins run every second here;
/// a bounded retry on the real listing).
async fn wait_for_checkin(
    cp: &ControlPlane,
    endpoint: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..200 {
        let list = cp.get("/endpoints").await;
        let found = list["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["endpoint_id"] == endpoint)
            .cloned();
        if let Some(e) = found.filter(|e| !e["last_checkin_at"].is_null() && done(e)) {
            return e;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("{endpoint} never checked in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_fails_closed_until_its_first_bundle_and_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    // A control plane address that refuses connections: bind, read the port, close.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let never = sidecar(dir.path(), &dead_url, "tgk.none.none", "ep-dark");
    let admin = never.url("admin_url");
    let health: Value = http_client()
        .get(format!("{admin}/v1/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "awaiting_policy", "{health}");
    assert_eq!(health["policy_ready"], false);
    // Nothing is decided: no key or policy ever arrived (the enforce path would answer 503 for
    // a known key; an unknown one is already refused).
    let (status, _) = enforce(&admin, "tgk.key_x.secret", "crm.lookup").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(never.terminate(), 0);

    // With a bundle once received, a restart while the control plane is down keeps serving it.
    let cp = ControlPlane::start(dir.path());
    let token = cp.key(&["read", "write"]).await;
    let exec = cp.key(&["execute"]).await;
    let side = sidecar(dir.path(), &cp.url, &token, "ep-2");
    // Each sync round applies the key snapshot, then the bundle.
    side.wait_for_log("key snapshot from the control plane applied");
    side.wait_for_log("policy bundle from the control plane applied");
    assert_eq!(side.terminate(), 0);
    assert_eq!(cp.proc.terminate(), 0);
    let again = sidecar(dir.path(), &cp.url, &token, "ep-2");
    let admin = again.url("admin_url");
    let (status, d) = enforce(&admin, &exec, "files.share").await;
    assert_eq!(status, StatusCode::OK, "{d}");
    assert_eq!(d["decision"], "BLOCK", "the last good bundle decides: {d}");
    assert_eq!(again.terminate(), 0);
}
