//! MCP: single and batch `tools/call`, aliases, other methods, notifications, malformed
//! params, argument write-back, error results and `tools/list` filtering.

use super::super::*;
use super::{classify_req, kind};
use serde_json::json;

const ALIASED: &str = "mcp.internal.example:8443";

fn mcp(target: &str, body: Value) -> Classified {
    classify_req(Method::POST, target, "/mcp", Some(&body))
}

/// (index, id, tool_name, tool_args) of each call.
fn calls(c: &Classified) -> (bool, Vec<(usize, Value, String, Value)>) {
    let Classified::Mcp(m) = c else {
        panic!("not MCP: {c:?}")
    };
    let list = m.calls.iter().map(|c| {
        (
            c.index,
            c.id.clone(),
            c.call.tool_name.clone(),
            Value::Object(c.call.tool_args.clone()),
        )
    });
    (m.batch, list.collect())
}

fn req(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[test]
fn tools_call_single_batch_and_aliased() {
    let lookup = json!({"name": "lookup", "arguments": {"email": "a@b.c"}});
    type Case = (
        &'static str,
        Value,
        bool,
        Vec<(usize, Value, &'static str, Value)>,
    );
    let cases: Vec<Case> = vec![
        (
            "mcp.example",
            req(json!(7), "tools/call", lookup.clone()),
            false,
            vec![(0, json!(7), "lookup", json!({"email": "a@b.c"}))],
        ),
        (
            ALIASED,
            req(json!("a"), "tools/call", lookup.clone()),
            false,
            vec![(0, json!("a"), "crm.lookup", json!({"email": "a@b.c"}))],
        ),
        // The alias needs the port of the key.
        (
            "mcp.internal.example",
            req(json!(1), "tools/call", lookup.clone()),
            false,
            vec![(0, json!(1), "lookup", json!({"email": "a@b.c"}))],
        ),
        (
            ALIASED,
            json!([
                req(json!(1), "tools/list", json!({})),
                req(json!(2), "tools/call", json!({"name": "note", "arguments": {"text": "hi"}})),
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "delete"}},
            ]),
            true,
            vec![
                (1, json!(2), "crm.note", json!({"text": "hi"})),
                (3, Value::Null, "crm.delete", json!({})),
            ],
        ),
        // Without `jsonrpc`, a tools/call is still checked; junk beside it does not hide it.
        (
            "h",
            json!({"method": "tools/call", "params": {"name": "x"}}),
            false,
            vec![(0, Value::Null, "x", json!({}))],
        ),
        (
            "h",
            json!([1, {"method": "tools/call", "id": 5, "params": {"name": "x", "arguments": null}}]),
            true,
            vec![(1, json!(5), "x", json!({}))],
        ),
    ];
    for (target, body, batch, want) in cases {
        let got = calls(&mcp(target, body.clone()));
        let want: Vec<_> = want
            .into_iter()
            .map(|(i, id, n, a)| (i, id, n.to_string(), a))
            .collect();
        assert_eq!(got, (batch, want), "{body}");
    }
}

#[test]
fn malformed_tools_calls_have_an_empty_tool_name() {
    let bodies = [
        req(json!(1), "tools/call", json!({"arguments": {}})),
        req(json!(1), "tools/call", json!({"name": 5})),
        req(json!(1), "tools/call", json!({"name": ""})),
        req(
            json!(1),
            "tools/call",
            json!({"name": "x", "arguments": [1]}),
        ),
        req(
            json!(1),
            "tools/call",
            json!({"name": "x", "arguments": "a=1"}),
        ),
        req(json!(1), "tools/call", json!("x")),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
    ];
    for body in bodies {
        let (_, got) = calls(&mcp(ALIASED, body.clone()));
        assert_eq!(got, vec![(0, json!(1), String::new(), json!({}))], "{body}");
    }
}

#[test]
fn foreign_methods_beside_tools_call_are_malformed_calls() {
    let body = json!([
        req(json!(1), "eth_sendTransaction", json!({})),
        req(json!(2), "tools/call", json!({"name": "x"})),
        req(json!(3), "ping", json!({})),
    ]);
    let (batch, got) = calls(&mcp("h", body));
    assert!(batch);
    assert_eq!(
        got,
        vec![
            (0, json!(1), String::new(), json!({})),
            (1, json!(2), "x".into(), json!({}))
        ]
    );
}

#[test]
fn other_json_rpc_messages_pass_through() {
    let cases = [
        (req(json!(1), "initialize", json!({})), false),
        (
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            false,
        ),
        (req(json!(1), "tools/list", json!({})), true),
        (
            json!([
                req(json!(1), "tools/list", json!({})),
                req(json!(2), "ping", json!({}))
            ]),
            true,
        ),
        (json!({"jsonrpc": "2.0", "id": 3, "result": {}}), false),
        (
            json!([{"jsonrpc": "2.0", "id": 3, "error": {"code": 1}}]),
            false,
        ),
    ];
    for (body, want) in cases {
        assert_eq!(
            mcp("h", body.clone()),
            Classified::McpOther { tools_list: want },
            "{body}"
        );
    }
    let not_mcp = [
        json!({"jsonrpc": "1.0", "method": "x"}),
        json!({"jsonrpc": "2.0"}),
        json!([]),
        json!([1]),
        json!({"method": "x"}),
    ];
    for body in not_mcp {
        assert_eq!(kind(&mcp("h", body.clone())), "host", "{body}");
    }
    let mixed = mcp(
        "h",
        json!([
            req(json!(1), "tools/list", json!({})),
            req(json!(2), "tools/call", json!({"name": "x"}))
        ]),
    );
    let Classified::Mcp(m) = mixed else { panic!() };
    assert!(m.tools_list && m.batch);
}

#[test]
fn arguments_are_written_back_into_single_and_batch_messages() {
    let new_args = json!({"email": "[REDACTED:email]"})
        .as_object()
        .unwrap()
        .clone();
    let single = req(
        json!(1),
        "tools/call",
        json!({"name": "lookup", "arguments": {"email": "a@b.c"}}),
    );
    let batch = json!([req(json!(1), "ping", json!({})), single.clone()]);
    for body in [single, batch] {
        let mut written = body.clone();
        let Classified::Mcp(m) = mcp("h", body) else {
            panic!()
        };
        assert!(rewrite_mcp_arguments(&mut written, &m.calls[0], &new_args));
        let target = if written.is_array() {
            &written[1]
        } else {
            &written
        };
        assert_eq!(
            target["params"],
            json!({"name": "lookup", "arguments": new_args})
        );
    }
    let mut bad = req(json!(1), "tools/call", json!("x"));
    let Classified::Mcp(m) = mcp("h", bad.clone()) else {
        panic!()
    };
    assert!(!rewrite_mcp_arguments(&mut bad, &m.calls[0], &new_args));
}

#[test]
fn error_results_are_mcp_tool_errors() {
    assert_eq!(
        mcp_error_result(&json!(9), "Blocked by policy"),
        json!({"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "Blocked by policy"}], "isError": true}})
    );
    assert_eq!(mcp_tool_name(Some("crm"), "x"), "crm.x");
    assert_eq!(mcp_tool_name(Some("crm"), ""), "");
    assert_eq!(mcp_tool_name(None, "x"), "x");
}

#[test]
fn tools_list_results_are_filtered() {
    let tools = json!([{"name": "lookup"}, {"name": "delete"}, {"description": "nameless"}, {"name": "export"}]);
    let single = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools, "nextCursor": "c"}});
    assert_eq!(tool_names_in_list(&single), ["lookup", "delete", "export"]);
    let keep = |name: &str| name == "lookup" || name == "export";
    let mut filtered = single.clone();
    assert_eq!(filter_tools_list(&mut filtered, keep), 2);
    assert_eq!(
        filtered["result"],
        json!({"tools": [{"name": "lookup"}, {"name": "export"}], "nextCursor": "c"})
    );
    let mut batch = json!([single, {"jsonrpc": "2.0", "id": 2, "result": {"content": []}}, {"jsonrpc": "2.0", "id": 3, "error": {}}]);
    let untouched = batch[1].clone();
    assert_eq!(filter_tools_list(&mut batch, keep), 2);
    assert_eq!(batch[0]["result"]["tools"].as_array().unwrap().len(), 2);
    assert_eq!(batch[1], untouched);
    let mut other = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text"}]}});
    assert_eq!(filter_tools_list(&mut other, |_| false), 0);
    assert!(tool_names_in_list(&other).is_empty());
}
