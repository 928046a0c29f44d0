//! Unit tests of request classification: shared fixtures, the classification order and
//! host-level calls; `tests/` holds the MCP, REST and LLM tables.

mod llm;
mod mcp;
mod rest;

use super::*;
use crate::policy::PolicySnapshot;
use serde_json::json;

/// The pack section the classification tests share: an aliased MCP server, an LLM provider
/// override and three routes.
const PACK: &str = "name = \"t\"\nversion = \"1\"\n\
    [proxy.mcp_servers.\"mcp.internal.example:8443\"]\nalias = \"crm\"\n\
    [proxy.llm_providers]\n\"llm.internal.example\" = \"vllm\"\n";

const ROUTES: &str = r#"
[[route]]
id = "merge"
host = "api.github.com"
method = "PUT"
path = "/repos/{owner}/{repo}/pulls/{number}/merge"
tool = "git.merge"

[[route]]
id = "transfer"
host = "api.stripe.com"
method = "POST"
path = "/v1/transfers/**"
tool = "payments.transfer"

[[route]]
id = "openai-files"
host = "api.openai.com"
method = "*"
path = "/v1/files/**"
tool = "llm.files"
"#;

/// The compiled proxy section of [`PACK`] with [`ROUTES`].
pub(super) fn policy() -> ProxyPolicy {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pack.toml"), PACK).unwrap();
    std::fs::create_dir(dir.path().join("routes")).unwrap();
    std::fs::write(dir.path().join("routes/r.toml"), ROUTES).unwrap();
    PolicySnapshot::load(dir.path()).unwrap().proxy().clone()
}

/// A request view; `target` is `host[:port]` (port 443 by default), `uri` path[?query].
pub(super) fn classify_req(
    method: Method,
    target: &str,
    uri: &str,
    body: Option<&Value>,
) -> Classified {
    let (host, port) = match target.split_once(':') {
        Some((h, p)) => (h, p.parse().unwrap()),
        None => (target, 443),
    };
    let (path, query) = match uri.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (uri, None),
    };
    let view = RequestView {
        host,
        port,
        https: port != 80,
        method: &method,
        path,
        query,
        body,
    };
    classify(&policy(), &view)
}

/// The `Classified` variant's name.
fn kind(c: &Classified) -> &'static str {
    match c {
        Classified::Mcp(_) => "mcp",
        Classified::McpOther { .. } => "mcp-other",
        Classified::Rest(_) => "rest",
        Classified::Llm(_) => "llm",
        Classified::Host(_) => "host",
    }
}

#[test]
fn classification_order_is_mcp_route_llm_host() {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}});
    let chat = json!({"model": "gpt-4o", "messages": []});
    let cases: [(Method, &str, &str, Option<&Value>, &str); 9] = [
        // An MCP body wins even on a routed path.
        (
            Method::POST,
            "api.stripe.com",
            "/v1/transfers",
            Some(&call),
            "mcp",
        ),
        (
            Method::POST,
            "api.stripe.com",
            "/v1/transfers",
            Some(&chat),
            "rest",
        ),
        (
            Method::POST,
            "api.stripe.com",
            "/v1/transfers",
            None,
            "rest",
        ),
        // A route wins over LLM detection.
        (
            Method::POST,
            "api.openai.com",
            "/v1/files/chat/completions",
            Some(&chat),
            "rest",
        ),
        (
            Method::POST,
            "api.openai.com",
            "/v1/chat/completions",
            Some(&chat),
            "llm",
        ),
        (
            Method::GET,
            "api.openai.com",
            "/v1/chat/completions",
            Some(&chat),
            "host",
        ),
        (
            Method::POST,
            "api.openai.com",
            "/v1/chat/completions",
            None,
            "host",
        ),
        (
            Method::POST,
            "example.com",
            "/upload",
            Some(&json!([1, 2])),
            "host",
        ),
        (Method::GET, "example.com", "/", None, "host"),
    ];
    for (method, host, path, body, want) in cases {
        let got = classify_req(method.clone(), host, path, body);
        assert_eq!(kind(&got), want, "{method} {host}{path}");
    }
}

#[test]
fn a_plain_http_call_on_another_port_keeps_its_scheme_in_the_url() {
    let view = RequestView {
        host: "127.0.0.1",
        port: 8080,
        https: false,
        method: &Method::GET,
        path: "/allowed",
        query: Some("page=2"),
        body: None,
    };
    let call = host_call(&view);
    assert_eq!(
        call.tool_args["url"],
        "http://127.0.0.1:8080/allowed?page=2"
    );
    let tls = RequestView {
        https: true,
        port: 443,
        ..view
    };
    assert_eq!(
        host_call(&tls).tool_args["url"],
        "https://127.0.0.1/allowed?page=2"
    );
}

#[test]
fn host_level_calls_carry_host_method_path_query_and_url() {
    let cases = [
        (
            "Example.COM.",
            "/a/b?x=1&y=2",
            json!({"host": "example.com", "method": "GET", "path": "/a/b", "query": "x=1&y=2", "url": "https://example.com/a/b?x=1&y=2"}),
        ),
        (
            "example.com:80",
            "/",
            json!({"host": "example.com", "method": "GET", "path": "/", "url": "http://example.com/"}),
        ),
        (
            "169.254.169.254:8080",
            "/latest?",
            json!({"host": "169.254.169.254", "method": "GET", "path": "/latest", "url": "https://169.254.169.254:8080/latest"}),
        ),
        (
            "example.com",
            "",
            json!({"host": "example.com", "method": "GET", "path": "/", "url": "https://example.com/"}),
        ),
    ];
    for (target, uri, want) in cases {
        let Classified::Host(call) = classify_req(Method::GET, target, uri, None) else {
            panic!("{target}{uri}: not host-level");
        };
        assert_eq!(call.tool_name, "http.request");
        assert_eq!(Value::Object(call.tool_args), want, "{target}{uri}");
    }
}

#[test]
fn the_default_packs_routes_feed_its_rules() {
    use crate::policy::{DecideContext, EnforcementRequest};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    let snap = PolicySnapshot::load(&dir).unwrap();
    let force_push = json!({"sha": "abc", "force": true});
    let cases = [
        (
            Method::PATCH,
            "/repos/acme/app/git/refs/heads/main",
            Some(&force_push),
            "git.push",
            "BLOCK",
        ),
        (
            Method::PATCH,
            "/repos/acme/app/git/refs/heads/feature/x",
            Some(&force_push),
            "git.push",
            "ALLOW",
        ),
        (
            Method::PUT,
            "/repos/acme/app/pulls/7/merge",
            None,
            "git.merge",
            "ALLOW",
        ),
        (
            Method::POST,
            "/v1/transfers",
            None,
            "payments.transfer",
            "STEP_UP",
        ),
    ];
    for (method, path, body, tool, decision) in cases {
        let host = if tool.starts_with("payments") {
            "api.stripe.com"
        } else {
            "api.github.com"
        };
        let view = RequestView {
            host,
            port: 443,
            https: true,
            method: &method,
            path,
            query: None,
            body,
        };
        let Classified::Rest(rest) = classify(snap.proxy(), &view) else {
            panic!("{path}: not REST");
        };
        assert_eq!(rest.call.tool_name, tool, "{path}");
        let req: EnforcementRequest = serde_json::from_value(json!({
            "agent_id": "a", "tenant_id": "t", "session_id": "s", "user_id": "u",
            "tool_name": tool, "tool_args": rest.call.tool_args, "approved_scope": ["*"],
            "session_tool_calls": [], "enforcement_mode": "block", "environment": "dev",
        }))
        .unwrap();
        let verdict = snap.decide(&req, &DecideContext::fresh(chrono::Utc::now()));
        assert_eq!(verdict.decision.as_str(), decision, "{path}: {verdict:?}");
    }
}
