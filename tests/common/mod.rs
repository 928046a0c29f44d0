//! Test harness: starts the real app in-process with every listener on 127.0.0.1:0, a temp data
//! dir (real sled), and a real HTTP client. Helpers create keys through the control plane.
#![allow(dead_code)]

use reqwest::{Client, Response, StatusCode};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use toolgate::app::{self, Bound, Role};
use toolgate::config::{Config, Flags};

/// The admin token every test app uses.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// Path of the integration-test pack.
pub fn test_pack() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pack")
}

/// Path of the default pack shipped in policy/.
pub fn default_pack() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policy")
}

/// A plain HTTP client. reqwest is built on rustls without a process-wide crypto provider (ring
/// is the crate's one provider), so the ring provider is installed first.
pub fn http_client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new()
}

/// A running app and a client for it.
pub struct TestApp {
    pub bound: Option<Bound>,
    pub admin: String,
    pub cp: String,
    pub client: Client,
    pub dir: tempfile::TempDir,
}

/// Copies a directory tree (the pack under test) into `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A config for a fresh temp data dir, ports 0, the test admin token, and a copy of `pack` in
/// `dir/pack` (with the default pack's explanation templates when it has none of its own).
pub fn config(dir: &Path, pack: &Path) -> Config {
    let pack_copy = dir.join("pack");
    copy_dir(pack, &pack_copy);
    if !pack_copy.join("explanations").exists() {
        copy_dir(
            &default_pack().join("explanations"),
            &pack_copy.join("explanations"),
        );
    }
    let flags = Flags {
        data_dir: Some(dir.join("data")),
        policy_dir: Some(pack_copy),
        admin_listen: Some("127.0.0.1:0".into()),
        proxy_listen: Some("127.0.0.1:0".into()),
        control_plane_listen: Some("127.0.0.1:0".into()),
        ca_dir: Some(dir.join("certs")),
        ..Flags::default()
    };
    let mut c = Config::load_with(&flags, &|_| None).expect("test config");
    c.admin_token = Some(ADMIN_TOKEN.into());
    c
}

impl TestApp {
    /// Starts `up` on the test pack.
    pub async fn start() -> TestApp {
        Self::start_with(|_| {}).await
    }

    /// Starts `up` on the test pack after `tweak` adjusts the config.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), &test_pack());
        tweak(&mut cfg);
        let bound = app::build(cfg, Role::Up).await.expect("app starts");
        let admin = format!("http://{}", bound.admin_addr.unwrap());
        let cp = format!("http://{}", bound.control_plane_addr.unwrap());
        TestApp {
            bound: Some(bound),
            admin,
            cp,
            client: http_client(),
            dir,
        }
    }

    /// Creates a key on the control plane with the admin token; returns the plaintext.
    pub async fn key(
        &self,
        tenant: &str,
        scope: &str,
        target: Option<&str>,
        perms: &[&str],
    ) -> String {
        let mut body = json!({"scope_level": scope, "permissions": perms, "name": "test"});
        if let Some(t) = target {
            body["scope_target_id"] = json!(t);
        }
        let resp = self
            .cp_post(&format!("/{tenant}/service/api-keys"), ADMIN_TOKEN, &body)
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let v: Value = resp.json().await.unwrap();
        v["key"].as_str().unwrap().to_string()
    }

    /// An execute key of tenant `t1` at organization scope.
    pub async fn exec_key(&self) -> String {
        self.key("t1", "organization", None, &["execute"]).await
    }

    /// POST to the admin API with X-API-Key and a JSON body.
    pub async fn post(&self, path: &str, key: &str, body: &Value) -> Response {
        self.client
            .post(format!("{}{path}", self.admin))
            .header("X-API-Key", key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// GET on the admin API with X-API-Key.
    pub async fn get(&self, path: &str, key: &str) -> Response {
        self.client
            .get(format!("{}{path}", self.admin))
            .header("X-API-Key", key)
            .send()
            .await
            .unwrap()
    }

    /// POST to the control plane with a bearer credential.
    pub async fn cp_post(&self, path: &str, bearer: &str, body: &Value) -> Response {
        self.client
            .post(format!("{}{path}", self.cp))
            .bearer_auth(bearer)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// GET on the control plane with a bearer credential.
    pub async fn cp_get(&self, path: &str, bearer: &str) -> Response {
        self.client
            .get(format!("{}{path}", self.cp))
            .bearer_auth(bearer)
            .send()
            .await
            .unwrap()
    }

    /// POST /v1/enforce; returns (status, body).
    pub async fn enforce(&self, key: &str, body: &Value) -> (StatusCode, Value) {
        let resp = self.post("/v1/enforce", key, body).await;
        let status = resp.status();
        (status, resp.json().await.unwrap())
    }

    /// Stops the app (drain, flush).
    pub async fn stop(mut self) {
        if let Some(b) = self.bound.take() {
            b.shutdown().await;
        }
    }
}

/// A valid EnforcementRequest of tenant t1 for `tool`, with `tool` in scope, mode `block`.
pub fn request(tool: &str) -> Value {
    json!({
        "agent_id": "agent-1",
        "tenant_id": "t1",
        "tool_name": tool,
        "session_id": "sess-1",
        "user_id": "user-1",
        "approved_scope": [tool],
        "session_tool_calls": [],
        "enforcement_mode": "block"
    })
}

/// Sends `req` with `Authorization: Bearer <credential>` (an API key or the admin token) and
/// returns the status and the JSON body.
pub async fn call(req: reqwest::RequestBuilder, credential: &str) -> (StatusCode, Value) {
    let resp = req.bearer_auth(credential).send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

/// Asserts an error response: status and a `detail` string containing `needle`.
pub async fn assert_detail(resp: Response, status: StatusCode, needle: &str) -> Value {
    assert_eq!(resp.status(), status, "status");
    let v: Value = resp.json().await.unwrap();
    let detail = v["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("no detail in {v}"));
    assert!(
        detail.contains(needle),
        "detail {detail:?} lacks {needle:?}"
    );
    assert_eq!(
        v.as_object().unwrap().len(),
        1,
        "error body has only detail: {v}"
    );
    v
}
pub mod procs;
pub mod proxy;
