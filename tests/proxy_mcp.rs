//! End to end with a real MCP client and server: the official MCP Python SDK (`mcp==2.3.0`,
//! installed by these tests into a virtual environment under the target dir, see
//! `common::proxy::mcp_python`) runs tests/mcp/server.py (streamable HTTP; tools add,
//! send_email, wire_transfer, run_shell; it records every tools/call it receives) and
//! tests/mcp/client.py, which reaches the server only through toolgate's proxy.
//!
//! Shown over plain HTTP and over HTTPS through the interception (the server's certificate comes
//! from a test CA that only toolgate trusts; the client trusts only toolgate's local CA): an
//! allowed call returns the server's result; a blocked call never reaches the server and the
//! client sees the explanation; an e-mail address in the arguments arrives redacted; a held call
//! completes after approval through the control plane and fails after denial.

mod common;

use common::proxy::{events, mcp_call, within, McpCall, McpServer, ProxyApp, TestCa, AGENT};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The violation id (`vio_` + 32 hex digits) in `text`, if any.
fn violation_id(text: &str) -> Option<String> {
    let re = regex::Regex::new(r"vio_[0-9a-f]{32}").unwrap();
    re.find(text).map(|m| m.as_str().to_string())
}

/// Calls through `tg` as [`AGENT`] to `url`, trusting `ca` for https.
fn via(tg: &ProxyApp, url: &str, ca: Option<PathBuf>, tool: &str, args: Value) -> McpCall {
    McpCall {
        url: url.to_string(),
        proxy: Some(tg.proxy_url(AGENT)),
        ca,
        tool: tool.to_string(),
        args,
        headers: vec!["X-Toolgate-Session-Id: mcp-session-1".into()],
    }
}

fn shell_args() -> Value {
    json!({"command": "rm -rf /var/lib/postgresql"})
}

fn email_args() -> Value {
    json!({
        "to": "alice@example.com",
        "subject": "Invoice",
        "body": "Questions? Write to bob@example.org."
    })
}

const REDACTED_EMAIL: &str =
    "sent to alice@example.com: Invoice / Questions? Write to [REDACTED:email].";

/// Allowed, blocked and redacted calls through `tg` to `server` at `url`; returns the
/// violation id of the blocked call.
async fn allow_block_redact(
    tg: &ProxyApp,
    server: &McpServer,
    url: &str,
    ca: Option<PathBuf>,
) -> String {
    let call = |tool: &str, args: Value| via(tg, url, ca.clone(), tool, args);

    let out = mcp_call(call("add", json!({"a": 2, "b": 3})))
        .await
        .unwrap();
    assert_eq!(
        out,
        json!({"isError": false, "text": "5"}),
        "{}",
        server.stderr()
    );

    let out = mcp_call(call("run_shell", shell_args())).await.unwrap();
    assert_eq!(out["isError"], true, "{out}");
    let text = out["text"].as_str().unwrap();
    assert!(
        text.contains("Agents may not run shell commands"),
        "the client sees the reason: {text}"
    );
    let vio = violation_id(text).unwrap_or_else(|| panic!("no violation id in {text:?}"));

    let out = mcp_call(call("send_email", email_args())).await.unwrap();
    assert_eq!(out, json!({"isError": false, "text": REDACTED_EMAIL}));

    assert!(
        server.received_calls("run_shell").is_empty(),
        "blocked calls never arrive"
    );
    let mails = server.received_calls("send_email");
    assert_eq!(mails.len(), 1);
    assert_eq!(
        mails[0]["arguments"],
        json!({
            "to": "alice@example.com",
            "subject": "Invoice",
            "body": "Questions? Write to [REDACTED:email]."
        }),
        "the address in the body arrives redacted; the recipient is exempt"
    );
    assert_eq!(
        server.received_calls("add"),
        vec![json!({"name": "add", "arguments": {"a": 2, "b": 3}})]
    );
    vio
}

/// A wire transfer held by the proxy: approved → the server's result; denied → an error result
/// and the server never sees it.
async fn held_approve_then_deny(tg: &ProxyApp, server: &McpServer, url: &str, ca: Option<PathBuf>) {
    let mut created = tg.holds_created();
    let transfer = |amount: f64| {
        via(
            tg,
            url,
            ca.clone(),
            "wire_transfer",
            json!({"amount": amount, "to_account": "DE89 3704 0044 0532 0130 00"}),
        )
    };

    let pending = tokio::spawn(mcp_call(transfer(2500.0)));
    let item = tg.wait_hold(&mut created, "wire_transfer").await;
    assert_eq!(item["tool_args"]["amount"].as_f64(), Some(2500.0), "{item}");
    assert!(
        server.received_calls("wire_transfer").is_empty(),
        "a held call has not reached the server"
    );
    let token = item["hold_token"].as_str().unwrap();
    assert_eq!(tg.resolve(token, "approve").await, StatusCode::OK);
    let out = within("the approved call", pending).await.unwrap().unwrap();
    assert_eq!(
        out,
        json!({"isError": false, "text": "transferred 2500.00 to DE89 3704 0044 0532 0130 00"})
    );
    assert_eq!(server.received_calls("wire_transfer").len(), 1);

    let pending = tokio::spawn(mcp_call(transfer(99.5)));
    let item = tg.wait_hold(&mut created, "wire_transfer").await;
    let token = item["hold_token"].as_str().unwrap();
    assert_eq!(tg.resolve(token, "deny").await, StatusCode::OK);
    let out = within("the denied call", pending).await.unwrap().unwrap();
    assert_eq!(out["isError"], true, "{out}");
    let text = out["text"].as_str().unwrap();
    assert!(
        text.contains("denied") && text.contains("hold_denied"),
        "the client sees why: {text}"
    );
    let transfers = server.received_calls("wire_transfer");
    assert_eq!(
        transfers.len(),
        1,
        "the denied call never arrived: {transfers:?}"
    );
    assert_eq!(transfers[0]["arguments"]["amount"].as_f64(), Some(2500.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_server_records_what_it_receives_when_called_directly() {
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(dir.path(), "direct", None).await;
    let direct = |tool: &str, args: Value| McpCall {
        url: server.http_url(),
        tool: tool.into(),
        args,
        ..McpCall::default()
    };
    let out = mcp_call(direct("run_shell", shell_args())).await.unwrap();
    assert_eq!(
        out,
        json!({"isError": false, "text": "ran rm -rf /var/lib/postgresql"})
    );
    let out = mcp_call(direct("send_email", email_args())).await.unwrap();
    assert_eq!(
        out["text"],
        "sent to alice@example.com: Invoice / Questions? Write to bob@example.org."
    );
    assert_eq!(
        server.received(),
        vec![
            json!({"name": "run_shell", "arguments": shell_args()}),
            json!({"name": "send_email", "arguments": email_args()}),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_allowed_calls_return_blocked_calls_never_arrive_and_addresses_are_redacted() {
    let tg = ProxyApp::start(None).await;
    let server = McpServer::start(tg.app.dir.path(), "plain", None).await;
    let vio = allow_block_redact(&tg, &server, &server.http_url(), None).await;

    let ledger = tg.stop_and_read_ledger().await;
    let blocked = events(&ledger, "TOOL_CALL_BLOCK", "run_shell");
    assert_eq!(blocked.len(), 1, "{ledger:?}");
    assert!(blocked[0].to_string().contains(&vio), "{}", blocked[0]);
    assert_eq!(blocked[0]["session_id"], "mcp-session-1");
    assert_eq!(blocked[0]["agent_id"], AGENT);
    assert_eq!(
        blocked[0]["user_id"], "agent-owner",
        "the pack's agent default"
    );
    let pre = events(&ledger, "TOOL_CALL_PRE", "send_email");
    assert_eq!(pre.len(), 1, "{ledger:?}");
    assert!(
        !pre[0].to_string().contains("bob@example.org"),
        "the ledger holds the redacted arguments: {}",
        pre[0]
    );
    assert!(events(&ledger, "TOOL_CALL_PRE", "run_shell").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_held_call_completes_after_approval_and_fails_after_denial() {
    let tg = ProxyApp::start(None).await;
    let server = McpServer::start(tg.app.dir.path(), "held", None).await;
    held_approve_then_deny(&tg, &server, &server.http_url(), None).await;
    tg.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_outside_its_scope_is_refused_in_its_mcp_session() {
    let tg = ProxyApp::start(None).await;
    let server = McpServer::start(tg.app.dir.path(), "scope", None).await;
    // No X-Toolgate-Session-Id: the session is the MCP server's Mcp-Session-Id.
    let call = McpCall {
        proxy: Some(tg.proxy_url("narrow-agent")),
        headers: vec![],
        ..via(&tg, &server.http_url(), None, "send_email", email_args())
    };
    let out = mcp_call(call).await.unwrap();
    assert_eq!(out["isError"], true, "{out}");
    let text = out["text"].as_str().unwrap();
    assert!(text.contains("scope_violation"), "{text}");
    let vio = violation_id(text).unwrap_or_else(|| panic!("no violation id in {text:?}"));
    assert!(server.received().is_empty());

    let log = server.stderr();
    let mcp_session = log
        .lines()
        .find_map(|l| l.split("Created new transport with session ID: ").nth(1))
        .unwrap_or_else(|| panic!("no session in the server's log:\n{log}"))
        .trim()
        .to_string();
    let ledger = tg.stop_and_read_ledger().await;
    let blocked = events(&ledger, "TOOL_CALL_BLOCK", "send_email");
    assert_eq!(blocked.len(), 1, "{ledger:?}");
    assert_eq!(blocked[0]["agent_id"], "narrow-agent");
    assert_eq!(
        blocked[0]["session_id"],
        mcp_session.as_str(),
        "{}",
        blocked[0]
    );
    assert!(blocked[0].to_string().contains(&vio));
    // The SDK's session GET/DELETE on /mcp belong to a session the server issued: they pass,
    // and are not refused as host-level `http.request` calls outside the narrow scope.
    let host_level = events(&ledger, "TOOL_CALL_BLOCK", "http.request");
    assert!(host_level.is_empty(), "{host_level:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_the_interception_enforces_the_same_with_toolgates_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("MCP upstream test CA");
    let upstream_ca = ca.write(dir.path(), "upstream-ca.pem");
    let cert = ca.server_cert(dir.path(), "mcp-server", &["localhost", "127.0.0.1"]);
    let tg = ProxyApp::start(Some(&upstream_ca)).await;
    let server = McpServer::start(dir.path(), "tls", Some(&cert)).await;
    let url = server.https_url();
    let trust = Some(tg.ca_pem.clone());

    allow_block_redact(&tg, &server, &url, trust.clone()).await;
    held_approve_then_deny(&tg, &server, &url, trust).await;

    // The client is served toolgate's leaf: trusting only the server's own CA, it fails.
    let wrong_trust = via(&tg, &url, Some(upstream_ca), "add", json!({"a": 1, "b": 1}));
    let err = mcp_call(wrong_trust).await.unwrap_err();
    assert!(err.contains("CERTIFICATE_VERIFY_FAILED"), "{err}");
    assert_eq!(
        server.received_calls("add").len(),
        1,
        "only the trusted call arrived"
    );
    tg.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_an_upstream_toolgate_does_not_trust_is_not_called() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("untrusted upstream CA");
    let cert = ca.server_cert(dir.path(), "mcp-server", &["localhost", "127.0.0.1"]);
    let tg = ProxyApp::start(None).await;
    let server = McpServer::start(dir.path(), "untrusted", Some(&cert)).await;
    let call = via(
        &tg,
        &server.https_url(),
        Some(tg.ca_pem.clone()),
        "add",
        json!({"a": 1, "b": 2}),
    );
    match mcp_call(call).await {
        Ok(out) => assert_eq!(out["isError"], true, "{out}"),
        Err(stderr) => assert!(!stderr.is_empty()),
    }
    assert!(server.received().is_empty());
    tg.stop().await;
}
