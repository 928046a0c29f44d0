//! Ledger shipping end to end (docs/ledger.md, "Shipping"): a real `toolgate control-plane`
//! and a real `toolgate serve --control-plane …` process, each with its own data dir. Events
//! ingested at the sidecar arrive once; a control-plane outage (and sidecar restarts during it)
//! loses none, the backlog shows on /v1/health meanwhile, and a replayed shipment stores
//! nothing new. The control-plane route's validation, auth and concurrent dedupe are checked
//! in-process.
//!
//! Waiting is a bounded loop polling a real endpoint (health, the control plane's shipping
//! stats), never a fixed sleep.

mod common;

use common::{copy_dir, default_pack, test_pack, TestApp, ADMIN_TOKEN};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
const INGEST_TOKEN: &str = "ingest-token-for-shipping-tests";
const ENDPOINT: &str = "ep-ship-1";
/// Upper bound of every wait.
const PATIENCE: Duration = Duration::from_secs(60);

/// A running toolgate process; its stderr is collected for failure messages.
struct Proc {
    child: Child,
    ready: Value,
    log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Starts `role` on `dir/data` with every listener on port 0 and the extra `args`/`env`.
    fn start(role: &str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Proc {
        let ready_file = dir.join(format!("ready-{role}.json"));
        let _ = std::fs::remove_file(&ready_file);
        let mut cmd = Command::new(BIN);
        cmd.arg(role)
            .args(["--admin-listen", "127.0.0.1:0"])
            .args(["--control-plane-listen", "127.0.0.1:0"])
            .args(["--proxy-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--policy")
            .arg(pack_in(dir))
            .arg("--ready-file")
            .arg(&ready_file)
            .arg("--ca-dir")
            .arg(dir.join("certs"))
            .args(args)
            .env("TOOLGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn toolgate");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log = Arc::new(Mutex::new(Vec::new()));
        for line in lines.by_ref() {
            let line = line.unwrap();
            assert!(
                !line.contains("toolgate: "),
                "{role} failed to start: {line}"
            );
            log.lock().unwrap().push(line.clone());
            if line.contains("toolgate ready") {
                break;
            }
        }
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let ready = std::fs::read_to_string(&ready_file).expect("ready file");
        Proc {
            child,
            ready: serde_json::from_str(&ready).unwrap(),
            log,
        }
    }

    fn url(&self, key: &str) -> String {
        self.ready[key].as_str().unwrap().to_string()
    }

    fn tail(&self) -> String {
        let log = self.log.lock().unwrap();
        log[log.len().saturating_sub(15)..].join("\n")
    }

    /// SIGTERM, then waits for exit 0.
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let code = self.child.wait().unwrap().code();
        assert_eq!(code, Some(0), "exit status; log:\n{}", self.tail());
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test pack with the default explanation templates, in `dir/pack`.
fn pack_in(dir: &Path) -> PathBuf {
    let pack = dir.join("pack");
    if !pack.exists() {
        copy_dir(&test_pack(), &pack);
        copy_dir(
            &default_pack().join("explanations"),
            &pack.join("explanations"),
        );
    }
    pack
}

/// Starts the control plane on `dir`.
fn control_plane(dir: &Path) -> Proc {
    Proc::start("control-plane", dir, &[], &[])
}

/// Starts a sidecar on `dir` linked to `cp_url` with the control-plane `token`.
fn sidecar(dir: &Path, cp_url: &str, token: &str) -> Proc {
    Proc::start(
        "serve",
        dir,
        &[
            "--control-plane",
            cp_url,
            "--tenant",
            "t1",
            "--endpoint-id",
            ENDPOINT,
        ],
        &[
            ("TOOLGATE_CONTROL_PLANE_TOKEN", token),
            ("TOOLGATE_EVENT_INGEST_TOKEN", INGEST_TOKEN),
            ("TOOLGATE_SYNC_INTERVAL_SECONDS", "1"),
        ],
    )
}

/// A valid event of tenant t1; `id` None lets the sidecar derive one.
fn event(id: Option<&str>, n: usize) -> Value {
    let mut e = json!({
        "tenant_id": "t1", "session_id": "sess-1", "user_id": "user-1", "agent_id": "agent-1",
        "source_type": "agent_tool_call", "event_type": "TOOL_CALL_PRE", "tool_name": "crm.lookup",
        "approved_scope": ["crm.lookup"], "session_tool_calls": [], "enforcement_mode": "block",
        "content": format!("{{\"n\": {n}}}"), "occurred_at": "2026-11-21T10:00:00Z"
    });
    if let Some(id) = id {
        e["event_id"] = json!(id);
    }
    e
}

/// Ingests `events` at the sidecar (ingest token); asserts all were queued.
async fn ingest(client: &Client, admin: &str, events: &[Value]) {
    for chunk in events.chunks(100) {
        let resp = client
            .post(format!("{admin}/v1/events/batch"))
            .header("X-Service-Event-Ingest-Token", INGEST_TOKEN)
            .json(&json!({ "events": chunk }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        let ack: Value = resp.json().await.unwrap();
        assert_eq!(ack["queued"], chunk.len().to_string(), "{ack}");
    }
}

/// Polls `probe` until it returns Some (at most [`PATIENCE`]); `what` and `log` explain a
/// timeout.
async fn wait_for<T, F, Fut>(what: &str, log: impl Fn() -> String, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get_json(client: &Client, url: &str, bearer: Option<&str>) -> Option<Value> {
    let mut req = client.get(url);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}

/// The sidecar's `shipping` health object.
async fn shipping(client: &Client, sc: &Proc) -> Value {
    let url = format!("{}/v1/health", sc.url("admin_url"));
    let health = get_json(client, &url, None).await.expect("health answers");
    health["shipping"].clone()
}

/// What the control plane has stored from [`ENDPOINT`].
async fn cp_stats(client: &Client, cp: &Proc) -> Option<Value> {
    let url = format!(
        "{}/t1/service/sync/events?endpoint_id={ENDPOINT}",
        cp.url("control_plane_url")
    );
    get_json(client, &url, Some(ADMIN_TOKEN)).await
}

/// Waits until the control plane stored `n` entries of [`ENDPOINT`] and the sidecar's backlog
/// is empty.
async fn wait_shipped(client: &Client, cp: &Proc, sc: &Proc, n: u64) {
    let log = || format!("{}\n--- sidecar ---\n{}", cp.tail(), sc.tail());
    wait_for(
        &format!("{n} entries at the control plane"),
        log,
        || async {
            let stats = cp_stats(client, cp).await?;
            let ship = shipping(client, sc).await;
            (stats["accepted"] == n && ship["backlog"] == 0).then_some(())
        },
    )
    .await;
}

/// Creates a key of tenant t1 on the control plane; returns the plaintext.
async fn create_key(client: &Client, cp_url: &str, body: Value) -> String {
    let resp = client
        .post(format!("{cp_url}/t1/service/api-keys"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let v: Value = resp.json().await.unwrap();
    v["key"].as_str().unwrap().to_string()
}

/// POST /v1/enforce at the sidecar; returns the status.
async fn enforce(client: &Client, admin: &str, key: &str) -> StatusCode {
    client
        .post(format!("{admin}/v1/enforce"))
        .header("X-API-Key", key)
        .json(&common::request("crm.lookup"))
        .send()
        .await
        .unwrap()
        .status()
}

/// Every control-plane ledger record shipped from [`ENDPOINT`], read from its data dir (the
/// control plane must be stopped).
fn cp_records(cp_dir: &Path) -> Vec<Value> {
    let store = toolgate::store::Store::open(&cp_dir.join("data")).expect("open the CP store");
    let ledger = toolgate::ledger::Ledger::open(&store).unwrap();
    ledger
        .read_from(1, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.record)
        .filter(|r| r["source_endpoint_id"] == ENDPOINT)
        .collect()
}

#[tokio::test]
async fn an_outage_loses_no_event_and_each_arrives_once() {
    let client = common::http_client();
    let root = tempfile::tempdir().unwrap();
    let (cp_dir, sc_dir) = (root.path().join("cp"), root.path().join("sc"));
    std::fs::create_dir_all(&cp_dir).unwrap();
    std::fs::create_dir_all(&sc_dir).unwrap();

    // Phase 1: both up; events arrive.
    let cp = control_plane(&cp_dir);
    let cp_url = cp.url("control_plane_url");
    let link_key = create_key(
        &client,
        &cp_url,
        json!({"name": "sidecar", "scope_level": "organization", "permissions": ["read", "write"]}),
    )
    .await;
    let exec_key = create_key(
        &client,
        &cp_url,
        json!({"name": "agent", "scope_level": "organization", "permissions": ["execute"]}),
    )
    .await;
    let sc = sidecar(&sc_dir, &cp_url, &link_key);
    let admin = sc.url("admin_url");
    let mut ids: Vec<String> = (0..150).map(|i| format!("evt-a-{i}")).collect();
    let mut events: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| event(Some(id), i))
        .collect();
    events.push(event(None, 1000)); // a derived event_id
    ingest(&client, &admin, &events).await;
    wait_shipped(&client, &cp, &sc, 151).await;
    // The key snapshot and policy bundle reached the sidecar: enforcement works.
    wait_for(
        "enforcement at the sidecar",
        || sc.tail(),
        || async { (enforce(&client, &admin, &exec_key).await == StatusCode::OK).then_some(()) },
    )
    .await;

    // Phase 2: the control plane is down; the sidecar keeps enforcing and accepting events.
    cp.stop();
    let batch_b: Vec<String> = (0..120).map(|i| format!("evt-b-{i}")).collect();
    let events_b: Vec<Value> = batch_b
        .iter()
        .enumerate()
        .map(|(i, id)| event(Some(id), i))
        .collect();
    ingest(&client, &admin, &events_b).await;
    assert_eq!(enforce(&client, &admin, &exec_key).await, StatusCode::OK);
    ids.extend(batch_b);
    let ship = wait_for(
        "the backlog on /v1/health",
        || sc.tail(),
        || async {
            let s = shipping(&client, &sc).await;
            (s["backlog"] == 120 && s["last_error"].is_string()).then_some(s)
        },
    )
    .await;
    assert_eq!(ship["shipped_seq"], 151, "{ship}");

    // The outbox survives a sidecar restart while the control plane is still down.
    sc.stop();
    let sc = sidecar(&sc_dir, &cp_url, &link_key);
    let admin = sc.url("admin_url");
    assert_eq!(shipping(&client, &sc).await["backlog"], 120);
    let batch_c: Vec<String> = (0..30).map(|i| format!("evt-c-{i}")).collect();
    let events_c: Vec<Value> = batch_c
        .iter()
        .enumerate()
        .map(|(i, id)| event(Some(id), i))
        .collect();
    ingest(&client, &admin, &events_c).await;
    ids.extend(batch_c);
    assert_eq!(shipping(&client, &sc).await["backlog"], 150);
    sc.stop();

    // Phase 3: the control plane is back (same data dir, new port); so is the sidecar.
    let cp = control_plane(&cp_dir);
    let cp_url = cp.url("control_plane_url");
    let sc = sidecar(&sc_dir, &cp_url, &link_key);
    wait_shipped(&client, &cp, &sc, 301).await;
    let stats = cp_stats(&client, &cp).await.unwrap();
    assert_eq!(stats["last_seq"], 301, "{stats}");

    // A replayed shipment (by hand) stores nothing new.
    let entries: Vec<Value> = events[..10]
        .iter()
        .enumerate()
        .map(
            |(i, e)| json!({"seq": i + 1, "tenant_id": "t1", "kind": "TOOL_CALL_PRE", "record": e}),
        )
        .collect();
    let resp = client
        .post(format!("{cp_url}/t1/service/sync/events"))
        .bearer_auth(&link_key)
        .json(&json!({"endpoint_id": ENDPOINT, "entries": entries}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ack: Value = resp.json().await.unwrap();
    assert_eq!(
        ack,
        json!({"accepted": 0, "duplicates": 10, "last_seq": 10})
    );
    sc.stop();
    cp.stop();

    // Every event is stored exactly once, with its source.
    let records = cp_records(&cp_dir);
    assert_eq!(records.len(), 301);
    let mut count: HashMap<String, usize> = HashMap::new();
    for r in &records {
        *count
            .entry(r["event_id"].as_str().unwrap().to_string())
            .or_default() += 1;
        assert!(
            r["source_seq"].is_u64() && r["source_hash"].is_string(),
            "{r}"
        );
    }
    assert_eq!(count.len(), 301, "distinct event ids");
    for id in &ids {
        assert_eq!(count.get(id), Some(&1), "{id}");
    }
}

/// A shipment of `n` events with ids `<prefix>-<i>`.
fn shipment(prefix: &str, n: usize) -> Value {
    let entries: Vec<Value> = (0..n)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            json!({"seq": i + 1, "tenant_id": "t1", "kind": "TOOL_CALL_PRE",
                   "record": event(Some(&id), i), "recorded_at": "2026-11-21T10:00:00.000Z"})
        })
        .collect();
    json!({"endpoint_id": ENDPOINT, "entries": entries})
}

#[tokio::test]
async fn concurrent_identical_shipments_store_each_event_once() {
    let app = TestApp::start().await;
    let body = shipment("evt-par", 500);
    let send = || app.cp_post("/t1/service/sync/events", ADMIN_TOKEN, &body);
    let (a, b) = tokio::join!(send(), send());
    let a: Value = a.json().await.unwrap();
    let b: Value = b.json().await.unwrap();
    assert_eq!(
        a["accepted"].as_u64().unwrap() + b["accepted"].as_u64().unwrap(),
        500,
        "{a} {b}"
    );
    assert_eq!(
        a["duplicates"].as_u64().unwrap() + b["duplicates"].as_u64().unwrap(),
        500
    );
    let core = &app.bound.as_ref().unwrap().core;
    assert_eq!(core.ledger.len(), 500);
    let stored = core.ledger.read_from(1, 1).unwrap().remove(0);
    assert_eq!(stored.kind, "TOOL_CALL_PRE");
    assert_eq!(stored.record["source_endpoint_id"], ENDPOINT);
    assert_eq!(stored.record["event_id"], "evt-par-0");
    app.stop().await;
}

#[tokio::test]
async fn entries_without_an_event_id_are_deduped_by_endpoint_and_seq() {
    let app = TestApp::start().await;
    let body = json!({"endpoint_id": ENDPOINT, "entries": [
        {"seq": 4, "tenant_id": "t1", "kind": "proxy.note", "record": {"tenant_id": "t1", "n": 1}},
        {"seq": 5, "tenant_id": "t1", "kind": "proxy.note", "record": {"n": 2}},
    ]});
    let first: Value = app
        .cp_post("/t1/service/sync/events", ADMIN_TOKEN, &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        first,
        json!({"accepted": 2, "duplicates": 0, "last_seq": 5})
    );
    let again: Value = app
        .cp_post("/t1/service/sync/events", ADMIN_TOKEN, &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        again,
        json!({"accepted": 0, "duplicates": 2, "last_seq": 5})
    );
    let stats: Value = app
        .cp_get(
            &format!("/t1/service/sync/events?endpoint_id={ENDPOINT}"),
            ADMIN_TOKEN,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(stats["accepted"], 2);
    assert_eq!(stats["duplicates"], 2);
    assert_eq!(stats["last_seq"], 5);
    app.stop().await;
}

#[tokio::test]
async fn shipments_are_checked_for_tenant_size_and_credentials() {
    let app = TestApp::start().await;
    let path = "/t1/service/sync/events";
    let writer = app
        .key("t1", "organization", None, &["read", "write"])
        .await;
    let reader = app.key("t1", "organization", None, &["read"]).await;
    let own_endpoint = app.key("t1", "endpoint", Some(ENDPOINT), &["write"]).await;
    let other_endpoint = app
        .key("t1", "endpoint", Some("ep-other"), &["write"])
        .await;
    let other_tenant = app
        .key("t2", "organization", None, &["read", "write"])
        .await;

    let ok = shipment("evt-auth", 2);
    for (cred, status) in [
        (writer.as_str(), StatusCode::OK),
        (own_endpoint.as_str(), StatusCode::OK),
        (reader.as_str(), StatusCode::FORBIDDEN),
        (other_endpoint.as_str(), StatusCode::FORBIDDEN),
        (other_tenant.as_str(), StatusCode::FORBIDDEN),
        ("not-a-key", StatusCode::UNAUTHORIZED),
    ] {
        assert_eq!(
            app.cp_post(path, cred, &ok).await.status(),
            status,
            "{cred}"
        );
    }

    let mut foreign = shipment("evt-foreign", 3);
    foreign["entries"][1]["record"]["tenant_id"] = json!("t2");
    common::assert_detail(
        app.cp_post(path, &writer, &foreign).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "entries[1] belongs to tenant t2",
    )
    .await;
    let mut foreign = shipment("evt-foreign", 3);
    foreign["entries"][2]["tenant_id"] = json!("t2");
    common::assert_detail(
        app.cp_post(path, &writer, &foreign).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "entries[2] belongs to tenant t2",
    )
    .await;
    let too_many = shipment("evt-many", 10_001);
    common::assert_detail(
        app.cp_post(path, &writer, &too_many).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "at most 10000",
    )
    .await;
    let no_endpoint = json!({"entries": []});
    assert_eq!(
        app.cp_post(path, &writer, &no_endpoint).await.status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let core = &app.bound.as_ref().unwrap().core;
    assert_eq!(
        core.ledger.len(),
        2,
        "only the accepted shipment was stored"
    );
    app.stop().await;
}
