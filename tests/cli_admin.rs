//! The operator CLI end to end: the real `toolgate up` with every listener on port 0, and
//! `toolgate keys|holds|endpoints …` run as subprocesses against its control plane: tables, `--json`,
//! the API key shown once, the control plane's `{"detail"}` on errors (exit 1), an unreachable
//! control plane (exit 1), usage errors (exit 2) and a missing admin token (exit 64).

mod common;

use common::{copy_dir, default_pack, http_client, request, test_pack};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
const TOKEN: &str = "cli-admin-token-0123456789";

/// A running `toolgate up`; killed (by its pid) when dropped.
struct Up {
    child: Child,
    cp: String,
    admin: String,
    dir: tempfile::TempDir,
}

impl Up {
    /// Starts `up` in a temp dir with its data in `<dir>/toolgate-data`; `token` is
    /// TOOLGATE_ADMIN_TOKEN (None: `up` generates `<dir>/toolgate-data/admin-token`).
    fn start(token: Option<&str>) -> Up {
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("pack");
        copy_dir(&test_pack(), &pack);
        copy_dir(
            &default_pack().join("explanations"),
            &pack.join("explanations"),
        );
        let ready_file = dir.path().join("ready.json");
        let mut cmd = Command::new(BIN);
        cmd.args(["up", "--admin-listen", "127.0.0.1:0"])
            .args(["--control-plane-listen", "127.0.0.1:0"])
            .args(["--proxy-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path().join("toolgate-data"))
            .arg("--policy")
            .arg(&pack)
            .arg("--ready-file")
            .arg(&ready_file)
            .arg("--ca-dir")
            .arg(dir.path().join("certs"))
            .env_remove("TOOLGATE_ADMIN_TOKEN")
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        if let Some(t) = token {
            cmd.env("TOOLGATE_ADMIN_TOKEN", t);
        }
        let mut child = cmd.spawn().expect("spawn toolgate up");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            assert!(!line.contains("toolgate: "), "startup failed: {line}");
            if line.contains("toolgate ready") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        let ready: Value =
            serde_json::from_str(&std::fs::read_to_string(&ready_file).expect("ready file"))
                .unwrap();
        let url = |k: &str| ready[k].as_str().unwrap().to_string();
        Up {
            cp: url("control_plane_url"),
            admin: url("admin_url"),
            child,
            dir,
        }
    }

    /// `toolgate <args> --control-plane <cp> --tenant t1` with TOOLGATE_ADMIN_TOKEN set.
    fn cli(&self, args: &[&str]) -> Out {
        let mut all = args.to_vec();
        all.extend(["--control-plane", &self.cp, "--tenant", "t1"]);
        run(self.dir.path(), &[("TOOLGATE_ADMIN_TOKEN", TOKEN)], &all)
    }

    /// Creates an API key through the CLI (`--json`); returns the answer.
    fn key(&self, extra: &[&str]) -> Value {
        let mut args = vec!["keys", "create", "--json"];
        args.extend(extra);
        let out = self.cli(&args);
        assert_eq!(out.code, 0, "{out:?}");
        serde_json::from_str(&out.stdout).expect("keys create --json prints JSON")
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a CLI run left: exit code, stdout, stderr.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `toolgate args` in `cwd` with only `env` of the TOOLGATE_* variables the CLI reads.
fn run(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd);
    for k in [
        "TOOLGATE_ADMIN_TOKEN",
        "TOOLGATE_TENANT",
        "TOOLGATE_CONTROL_PLANE",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run toolgate");
    Out {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The value cell of the field/value table row named `name`.
fn row(table: &str, name: &str) -> String {
    table
        .lines()
        .map(|l| {
            l.split(['│', '┆'])
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.first() == Some(&name))
        .and_then(|cells| cells.get(1).map(|c| c.to_string()))
        .unwrap_or_else(|| panic!("no row {name:?} in\n{table}"))
}

/// The words of `text` starting with `prefix`.
fn words<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.split(|c: char| c.is_whitespace() || c == '│' || c == '┆')
        .filter(|w| w.starts_with(prefix))
        .collect()
}

#[test]
fn keys_create_list_authorize_and_revoke() {
    let up = Up::start(Some(TOKEN));

    let created = up.cli(&[
        "keys",
        "create",
        "--name",
        "support-bot",
        "--scope",
        "organization",
        "--permissions",
        "execute,read",
    ]);
    assert_eq!(created.code, 0, "{created:?}");
    let keys = words(&created.stdout, "tgk.");
    assert_eq!(keys.len(), 1, "the key is shown once: {}", created.stdout);
    let key = keys[0].to_string();
    let key_id = row(&created.stdout, "key_id");
    assert!(key_id.starts_with("key_") && key.contains(&key_id));
    assert_eq!(row(&created.stdout, "permissions"), "read, execute");
    assert_eq!(row(&created.stdout, "status"), "active");
    assert!(
        created.stdout.contains("only time the key is shown"),
        "{}",
        created.stdout
    );
    assert!(!created.stdout.contains(TOKEN) && !created.stderr.contains(TOKEN));

    let agent = up.key(&[
        "--scope",
        "agent",
        "--target",
        "support-bot",
        "--permissions",
        "execute",
        "--expires-in-days",
        "30",
    ]);
    assert!(agent["key"].as_str().unwrap().starts_with("tgk."));
    assert_eq!(agent["scope_target_id"], "support-bot");
    let agent_id = agent["key_id"].as_str().unwrap();

    let list = up.cli(&["keys", "list"]);
    assert_eq!(list.code, 0, "{list:?}");
    for needle in [
        key_id.as_str(),
        agent_id,
        "agent:support-bot",
        "organization",
    ] {
        assert!(list.stdout.contains(needle), "{needle} in\n{}", list.stdout);
    }
    let secret = key.rsplit('.').next().unwrap();
    assert!(words(&list.stdout, "tgk.").is_empty() && !list.stdout.contains(secret));
    let json_list: Value =
        serde_json::from_str(&up.cli(&["keys", "list", "--json"]).stdout).unwrap();
    let items = json_list["api_keys"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let text = json_list.to_string();
    assert!(!text.contains("tgk.") && !text.contains("secret_hash") && !text.contains(secret));

    let check = up.cli(&[
        "keys",
        "authorize",
        &key_id,
        "--api-key",
        &key,
        "--permission",
        "execute",
    ]);
    assert_eq!(check.code, 0, "{check:?}");
    for field in ["valid", "permission_allowed", "scope_allowed"] {
        assert_eq!(row(&check.stdout, field), "true", "{}", check.stdout);
    }
    let agent_key = agent["key"].as_str().unwrap();
    let other = up.cli(&[
        "keys",
        "authorize",
        agent_id,
        "--api-key",
        agent_key,
        "--permission",
        "write",
        "--resource-type",
        "agent",
        "--resource-id",
        "ops-bot",
        "--json",
    ]);
    let other: Value = serde_json::from_str(&other.stdout).unwrap();
    assert_eq!(
        (
            other["valid"].clone(),
            other["permission_allowed"].clone(),
            other["scope_allowed"].clone()
        ),
        (json!(true), json!(false), json!(false))
    );

    let revoked = up.cli(&["keys", "revoke", &key_id]);
    assert_eq!(revoked.code, 0, "{revoked:?}");
    assert_eq!(row(&revoked.stdout, "status"), "revoked");
    let after = up.cli(&[
        "keys",
        "authorize",
        &key_id,
        "--api-key",
        &key,
        "--permission",
        "execute",
    ]);
    assert_eq!(after.code, 0, "{after:?}");
    assert_eq!(row(&after.stdout, "valid"), "false");

    let unknown = up.cli(&["keys", "revoke", "key_nope"]);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(
        unknown.stderr.starts_with("toolgate: 404 Not Found: "),
        "{}",
        unknown.stderr
    );

    let usage = up.cli(&[
        "keys",
        "create",
        "--scope",
        "agent",
        "--permissions",
        "execute",
    ]);
    assert_eq!(
        usage.code, 2,
        "--target is required for agent keys: {usage:?}"
    );
    let bad = up.cli(&[
        "keys",
        "create",
        "--scope",
        "organization",
        "--permissions",
        "root",
    ]);
    assert_eq!(bad.code, 2, "{bad:?}");
}

/// Holds a `deploy.run` call (the test pack steps it up) and returns the hold token.
async fn step_up(up: &Up, key: &str, session: &str) -> String {
    let mut body = request("deploy.run");
    body["session_id"] = json!(session);
    body["tool_args"] = json!({"target": "prod"});
    let d: Value = http_client()
        .post(format!("{}/v1/enforce", up.admin))
        .header("X-API-Key", key)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(d["decision"], "STEP_UP", "{d}");
    d["hold_token"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn holds_list_approve_deny_with_the_generated_token_file() {
    let up = Up::start(None);
    let dir = up.dir.path().to_path_buf();
    // `up` generated toolgate-data/admin-token in the CLI's working directory: the default file.
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--control-plane", &up.cp, "--tenant", "t1"]);
        run(&dir, &[], &all)
    };
    let created = cli(&[
        "keys",
        "create",
        "--scope",
        "organization",
        "--permissions",
        "execute",
        "--json",
    ]);
    assert_eq!(created.code, 0, "{created:?}");
    let key: Value = serde_json::from_str(&created.stdout).unwrap();
    let key = key["key"].as_str().unwrap();

    assert!(cli(&["holds", "list"]).stdout.contains("no pending holds"));
    let first = step_up(&up, key, "sess-a").await;
    let second = step_up(&up, key, "sess-b").await;

    let list = cli(&["holds", "list"]);
    assert_eq!(list.code, 0, "{list:?}");
    for needle in [
        first.as_str(),
        second.as_str(),
        "deploy.run",
        "agent-1",
        "sess-a",
        "sess-b",
    ] {
        assert!(list.stdout.contains(needle), "{needle} in\n{}", list.stdout);
    }
    for header in [
        "hold_token",
        "tool_name",
        "agent_id",
        "session_id",
        "risk_score",
        "expires_at",
        "reason",
    ] {
        assert!(list.stdout.contains(header), "{header}");
    }
    let json_list: Value = serde_json::from_str(&cli(&["holds", "list", "--json"]).stdout).unwrap();
    assert_eq!(json_list["approvals"].as_array().unwrap().len(), 2);

    let approved = cli(&[
        "holds",
        "approve",
        &first,
        "--approver",
        "alice@example.com",
        "--reason",
        "CHG-1",
    ]);
    assert_eq!(approved.code, 0, "{approved:?}");
    assert_eq!(row(&approved.stdout, "resolution"), "ALLOW");
    assert_eq!(row(&approved.stdout, "resolved_by"), "alice@example.com");
    assert_eq!(row(&approved.stdout, "resolved"), "true");

    let denied = cli(&["holds", "deny", &second, "--approver", "bob", "--json"]);
    assert_eq!(denied.code, 0, "{denied:?}");
    let denied: Value = serde_json::from_str(&denied.stdout).unwrap();
    assert_eq!(
        (
            denied["resolution"].as_str(),
            denied["resolved_by"].as_str()
        ),
        (Some("BLOCK"), Some("bob"))
    );

    let again = cli(&["holds", "approve", &first, "--approver", "carol"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert_eq!(
        again.stderr.trim(),
        "toolgate: 409 Conflict: hold already resolved as ALLOW"
    );
    assert!(cli(&["holds", "list"]).stdout.contains("no pending holds"));

    let poll: Value = http_client()
        .get(format!("{}/v1/enforce/hold/{first}", up.admin))
        .header("X-API-Key", key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (poll["resolved"].as_bool(), poll["resolution"].as_str()),
        (Some(true), Some("ALLOW"))
    );

    // An explicit --admin-token-file is read too.
    let file: PathBuf = dir.join("toolgate-data/admin-token");
    let elsewhere = tempfile::tempdir().unwrap();
    let out = run(
        elsewhere.path(),
        &[
            ("TOOLGATE_CONTROL_PLANE", &up.cp),
            ("TOOLGATE_TENANT", "t1"),
        ],
        &[
            "holds",
            "list",
            "--admin-token-file",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
}

#[tokio::test]
async fn endpoints_list_shows_the_registered_endpoints() {
    let up = Up::start(Some(TOKEN));
    assert!(up
        .cli(&["endpoints", "list"])
        .stdout
        .contains("no endpoints"));
    let client = http_client();
    let post = |path: String, body: Value| {
        client
            .post(format!("{}/t1/service/{path}", up.cp))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
    };
    for id in ["e-1", "e-2"] {
        let r = post(
            "endpoints".into(),
            json!({"endpoint_id": id, "hostname": format!("laptop-{id}"),
                "employee_email": "dana@acme.example", "enrollment": "mdm", "environment": "prod",
                "proxy_version": "0.9.0", "agent_ids": ["support-bot"]}),
        )
        .await
        .unwrap();
        assert!(r.status().is_success(), "{:?}", r.text().await);
    }
    let checkin = json!({"proxy_version": "1.0.1", "agent_ids": ["support-bot", "ops-bot"],
        "risk_score": 42.5, "violations_today": 3, "sessions_today": 9});
    let r = post("endpoints/e-1/checkin".into(), checkin).await.unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);

    let list = up.cli(&["endpoints", "list"]);
    assert_eq!(list.code, 0, "{list:?}");
    let line = |id: &str| {
        list.stdout
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("no {id} in\n{}", list.stdout))
            .to_string()
    };
    let e1 = line("e-1");
    for needle in [
        "laptop-e-1",
        "1.0.1",
        "support-bot, ops-bot",
        "42.5",
        "3",
        "false",
    ] {
        assert!(e1.contains(needle), "{needle} in {e1}");
    }
    assert!(line("e-2").contains("never"), "{}", line("e-2"));
    for header in [
        "endpoint_id",
        "hostname",
        "proxy_version",
        "agents",
        "last_checkin_at",
        "risk",
        "violations_today",
        "stale",
    ] {
        assert!(list.stdout.contains(header), "{header}");
    }
    let json_list: Value =
        serde_json::from_str(&up.cli(&["endpoints", "list", "--json"]).stdout).unwrap();
    assert_eq!(json_list["endpoints"][0]["endpoint_id"], "e-1");
    assert_eq!(
        json_list["endpoints"][0]["agent_ids"],
        json!(["support-bot", "ops-bot"])
    );
}

#[test]
fn errors_name_the_status_the_url_or_the_missing_token() {
    let up = Up::start(Some(TOKEN));
    let cwd = up.dir.path();

    let wrong = run(
        cwd,
        &[
            ("TOOLGATE_ADMIN_TOKEN", "not-the-token"),
            ("TOOLGATE_TENANT", "t1"),
        ],
        &["keys", "list", "--control-plane", &up.cp],
    );
    assert_eq!(wrong.code, 1, "{wrong:?}");
    assert_eq!(
        wrong.stderr.trim(),
        "toolgate: 401 Unauthorized: invalid API key"
    );
    assert!(wrong.stdout.is_empty() && !wrong.stderr.contains("not-the-token"));

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = run(
        cwd,
        &[
            ("TOOLGATE_ADMIN_TOKEN", TOKEN),
            ("TOOLGATE_CONTROL_PLANE", &dead),
        ],
        &["holds", "list", "--tenant", "t1"],
    );
    assert_eq!(unreachable.code, 1, "{unreachable:?}");
    let line = unreachable.stderr.trim();
    assert!(
        line.starts_with(&format!(
            "toolgate: cannot reach the control plane at {dead}: "
        )) && line.lines().count() == 1,
        "{line}"
    );

    let empty = tempfile::tempdir().unwrap();
    let no_token = run(
        empty.path(),
        &[("TOOLGATE_CONTROL_PLANE", &up.cp)],
        &["endpoints", "list", "--tenant", "t1"],
    );
    assert_eq!(no_token.code, 64, "{no_token:?}");
    assert!(
        no_token
            .stderr
            .contains("set TOOLGATE_ADMIN_TOKEN or pass --admin-token-file"),
        "{}",
        no_token.stderr
    );

    let no_tenant = run(cwd, &[("TOOLGATE_ADMIN_TOKEN", TOKEN)], &["keys", "list"]);
    assert_eq!(no_tenant.code, 2, "{no_tenant:?}");
    let bad_url = run(
        cwd,
        &[("TOOLGATE_ADMIN_TOKEN", TOKEN)],
        &[
            "keys",
            "list",
            "--tenant",
            "t1",
            "--control-plane",
            "ftp://x",
        ],
    );
    assert_eq!(bad_url.code, 2, "{bad_url:?}");
}
