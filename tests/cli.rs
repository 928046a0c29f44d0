//! The real `toolgate` binary: the CLI contract (ready file, exit 64, SIGTERM → 0), a restart
//! that keeps a pending hold, the generated admin token, and the policy and ledger tools.

mod common;

use common::procs::{Proc, BIN};
use common::{call, copy_dir, default_pack, request, test_pack};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

fn pack_in(dir: &Path) -> std::path::PathBuf {
    let pack = dir.join("pack");
    copy_dir(&test_pack(), &pack);
    copy_dir(
        &default_pack().join("explanations"),
        &pack.join("explanations"),
    );
    pack
}

#[tokio::test]
async fn ready_file_names_the_bound_listeners_and_sigterm_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::up(
        dir.path(),
        &pack_in(dir.path()),
        &[("TOOLGATE_ADMIN_TOKEN", "t0ken-for-test")],
    );
    let admin = p.url("admin_url");
    assert!(
        admin.starts_with("http://127.0.0.1:") && !admin.ends_with(":0"),
        "{admin}"
    );
    assert!(p.url("control_plane_url").starts_with("http://127.0.0.1:"));
    assert!(p.url("proxy_url").starts_with("http://127.0.0.1:"));
    assert!(
        dir.path().join("certs/ca.pem").exists(),
        "the proxy's CA is created at first start"
    );
    let health: Value = common::http_client()
        .get(format!("{admin}/v1/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert!(
        !dir.path().join("data/admin-token").exists(),
        "no token file when TOOLGATE_ADMIN_TOKEN is set"
    );
    assert_eq!(p.terminate(), 0);
}

#[test]
fn bad_configuration_exits_64_with_one_line_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 2] = [
        (&["up", "--admin-listen", "not-an-address"], "admin_listen"),
        (
            &[
                "up",
                "--policy",
                "/nonexistent/pack",
                "--admin-listen",
                "127.0.0.1:0",
                "--control-plane-listen",
                "127.0.0.1:0",
            ],
            "policy",
        ),
    ];
    for (args, field) in cases {
        let out = Command::new(BIN)
            .args(args)
            .arg("--data-dir")
            .arg(dir.path().join("d"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("");
        assert!(
            last.starts_with("toolgate: invalid configuration") && last.contains(field),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn a_pending_hold_survives_a_restart_and_can_be_approved_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let pack = pack_in(dir.path());
    let client = common::http_client();
    let p = Proc::up(dir.path(), &pack, &[]);
    let token_path = dir.path().join("data/admin-token");
    let admin_token = std::fs::read_to_string(&token_path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&token_path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (cp, admin) = (p.url("control_plane_url"), p.url("admin_url"));
    let key_body = json!({"scope_level": "organization", "permissions": ["execute"]});
    let created = call(
        client
            .post(format!("{cp}/t1/service/api-keys"))
            .json(&key_body),
        &admin_token,
    )
    .await
    .1;
    let key = created["key"].as_str().unwrap().to_string();
    let d = call(
        client
            .post(format!("{admin}/v1/enforce"))
            .json(&request("deploy.run")),
        &key,
    )
    .await
    .1;
    let hold = d["hold_token"].as_str().expect("STEP_UP").to_string();
    assert_eq!(p.terminate(), 0);

    let p = Proc::up(dir.path(), &pack, &[]);
    let saved = std::fs::read_to_string(&token_path).unwrap();
    assert_eq!(saved, admin_token, "the admin token is kept");
    let (cp, admin) = (p.url("control_plane_url"), p.url("admin_url"));
    let poll = format!("{admin}/v1/enforce/hold/{hold}");
    let pending = call(client.get(&poll), &key).await.1;
    assert_eq!(pending["resolved"], false, "{pending}");
    let approve = client
        .post(format!("{cp}/t1/service/approvals/{hold}/approve"))
        .json(&json!({"approver": "carol"}));
    assert_eq!(call(approve, &admin_token).await.0, StatusCode::OK);
    let done = call(client.get(&poll), &key).await.1;
    assert_eq!(done["resolution"], "ALLOW");
    assert_eq!(p.terminate(), 0);

    let out = Command::new(BIN)
        .args(["ledger", "verify", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_default_pack_checks_and_its_tests_pass() {
    for sub in ["check", "test"] {
        let out = Command::new(BIN)
            .args(["policy", sub, "--policy"])
            .arg(default_pack())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "policy {sub}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if sub == "test" {
            assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
        }
    }
}

#[test]
fn a_failing_policy_test_fails_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let pack = pack_in(dir.path());
    std::fs::create_dir_all(pack.join("tests")).unwrap();
    let t = r#"
[[test]]
name = "deploy is allowed (wrong on purpose)"
decision = "ALLOW"
[test.request]
agent_id = "a"
tenant_id = "t"
tool_name = "deploy.run"
session_id = "s"
user_id = "u"
approved_scope = ["deploy.run"]
session_tool_calls = []
enforcement_mode = "block"
"#;
    std::fs::write(pack.join("tests/wrong.toml"), t).unwrap();
    let out = Command::new(BIN)
        .args(["policy", "test", "--policy"])
        .arg(&pack)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL"));
}

#[tokio::test]
async fn serve_and_control_plane_run_only_their_own_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let pack = pack_in(dir.path());
    let env = [("TOOLGATE_ADMIN_TOKEN", "t0ken-for-test")];
    for (role, expected) in [
        ("serve", vec!["admin_url", "proxy_url"]),
        ("control-plane", vec!["control_plane_url"]),
    ] {
        let p = Proc::start(role, dir.path(), &pack, &env);
        let keys: Vec<&String> = p.ready.as_object().unwrap().keys().collect();
        assert_eq!(keys, expected, "{role}");
        assert_eq!(p.terminate(), 0, "{role}");
    }
}

/// Waits (bounded) until GET /v1/health reports a policy version other than `old`.
async fn next_policy_version(client: &Client, admin: &str, old: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let health = call(client.get(format!("{admin}/v1/health")), "").await.1;
        let version = health["policy_version"].as_str().unwrap().to_string();
        if version != old {
            return version;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "policy was not reloaded"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn sighup_reloads_the_pack_and_a_broken_pack_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pack = pack_in(dir.path());
    let p = Proc::up(dir.path(), &pack, &[("TOOLGATE_ADMIN_TOKEN", "adm")]);
    let (client, admin, cp) = (
        common::http_client(),
        p.url("admin_url"),
        p.url("control_plane_url"),
    );
    let key_body = json!({"scope_level": "organization", "permissions": ["execute"]});
    let created = call(
        client
            .post(format!("{cp}/t1/service/api-keys"))
            .json(&key_body),
        "adm",
    )
    .await
    .1;
    let key = created["key"].as_str().unwrap().to_string();
    let decide = || {
        call(
            client
                .post(format!("{admin}/v1/enforce"))
                .json(&request("crm.lookup")),
            &key,
        )
    };
    let before = decide().await.1;
    assert_eq!(before["decision"], "ALLOW");

    let rule = "[[rule]]\nid = \"crm-frozen\"\ndescription = \"CRM is frozen\"\nwhen = 'tool_name == \"crm.lookup\"'\neffect = \"block\"\nseverity = \"high\"\n";
    std::fs::write(pack.join("rules/freeze.toml"), rule).unwrap();
    p.signal("-HUP");
    let v2 = next_policy_version(&client, &admin, before["policy_version"].as_str().unwrap()).await;
    let after = decide().await.1;
    assert_eq!(after["decision"], "BLOCK", "{after}");
    assert_eq!(after["matched_rule_ids"], json!(["crm-frozen"]));

    std::fs::write(pack.join("rules/broken.toml"), "[[rule]]\nid = 3\n").unwrap();
    p.signal("-HUP");
    p.wait_for_log("policy reload refused");
    assert_eq!(
        decide().await.1["decision"],
        "BLOCK",
        "the previous pack stays"
    );
    std::fs::remove_file(pack.join("rules/freeze.toml")).unwrap();
    std::fs::remove_file(pack.join("rules/broken.toml")).unwrap();
    p.signal("-HUP");
    let v3 = next_policy_version(&client, &admin, &v2).await;
    assert_eq!(
        v3,
        before["policy_version"].as_str().unwrap(),
        "the good pack is back"
    );
    assert_eq!(decide().await.1["decision"], "ALLOW");
    assert_eq!(p.terminate(), 0);
}

#[test]
fn ca_init_creates_a_private_key_and_refuses_to_overwrite_without_force() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("certs");
    let init = |extra: &[&str]| {
        Command::new(BIN)
            .args(["ca", "init", "--dir"])
            .arg(&ca_dir)
            .args(extra)
            .output()
            .unwrap()
    };
    let first = init(&[]);
    assert!(first.status.success(), "{first:?}");
    let key_mode = std::fs::metadata(ca_dir.join("ca-key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(key_mode & 0o777, 0o600);
    let pem = std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let again = init(&[]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap(), pem);
    let forced = init(&["--force"]);
    assert!(forced.status.success(), "{forced:?}");
    assert_ne!(std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap(), pem);
}
