//! MCP over HTTP: recognizing JSON-RPC 2.0 messages, extracting their `tools/call` requests,
//! writing redacted arguments back, refusing one call with an MCP error result, and filtering
//! `tools/list` answers.
//!
//! A body is a JSON-RPC message when it is
//! * an object with `"jsonrpc": "2.0"` and a string `method` (request or notification), or
//!   with `"jsonrpc": "2.0"` and a `result` or `error` (a response the client sends back);
//! * an object whose `method` is `"tools/call"`, even without `jsonrpc` (a lenient server
//!   might run it, so it is checked rather than passed as plain HTTP);
//! * a non-empty array in which at least one element is one of the above (a batch).
//!
//! Every `tools/call` request in it, notifications (no `id`) included, becomes an
//! [`McpCall`]. A call with no string `params.name`, or whose `params.arguments` is present
//! but neither an object nor null, is still returned, with an empty `tool_name` and empty
//! `tool_args`: the caller must refuse it (for example with [`mcp_error_result`]).
//!
//! Only MCP's own methods pass through unchecked (`McpOther`): `initialize`, `ping`,
//! `tools/list`, `resources/*` and `prompts/*` requests of the specification,
//! `completion/complete`, `logging/setLevel`, `notifications/*`, and responses. A message
//! whose requests use other methods is not MCP (JSON-RPC APIs such as blockchain nodes are
//! then checked as route, LLM or host-level calls). In a message that has `tools/call`
//! requests, a request with another method becomes a malformed call (empty `tool_name`), so
//! that the caller refuses the message instead of passing the unknown request unchecked.

use super::{Classified, RequestView, ToolCall};
use crate::policy::ProxyPolicy;
use serde_json::{json, Map, Value};

/// The `tools/call` requests of one JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCalls {
    /// The message is a batch (a JSON array).
    pub batch: bool,
    /// The `tools/call` requests, in message order (at least one).
    pub calls: Vec<McpCall>,
    /// The same message also contains a `tools/list` request.
    pub tools_list: bool,
}

/// One `tools/call` request.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCall {
    /// Position in the batch array; 0 for a single message.
    pub index: usize,
    /// The JSON-RPC `id` (null for a notification).
    pub id: Value,
    /// `params.name` (prefixed `<alias>.` when the server has an alias) and
    /// `params.arguments`; empty `tool_name` when malformed (module docs).
    pub call: ToolCall,
}

/// The MCP classification of `body`, or None when it is no JSON-RPC message.
pub(super) fn classify(
    policy: &ProxyPolicy,
    req: &RequestView,
    body: &Value,
) -> Option<Classified> {
    let (batch, items): (bool, Vec<&Value>) = match body {
        Value::Array(items) if items.iter().any(is_message) => (true, items.iter().collect()),
        Value::Object(_) if is_message(body) => (false, vec![body]),
        _ => return None,
    };
    let alias = policy.mcp_alias(req.host, req.port);
    let mut calls = Vec::new();
    let mut foreign = Vec::new();
    let mut tools_list = false;
    for (index, item) in items.into_iter().enumerate() {
        let id = || item.get("id").cloned().unwrap_or(Value::Null);
        match item.get("method").and_then(Value::as_str) {
            Some("tools/call") => calls.push(McpCall {
                index,
                id: id(),
                call: tool_call(alias, item.get("params")),
            }),
            Some("tools/list") => tools_list = true,
            Some(method) if !is_mcp_method(method) => foreign.push(McpCall {
                index,
                id: id(),
                call: malformed(),
            }),
            _ => {}
        }
    }
    if calls.is_empty() {
        return foreign
            .is_empty()
            .then_some(Classified::McpOther { tools_list });
    }
    calls.extend(foreign);
    calls.sort_by_key(|c| c.index);
    Some(Classified::Mcp(McpCalls {
        batch,
        calls,
        tools_list,
    }))
}

/// The client-to-server methods of the MCP specification that pass without a decision
/// (besides `tools/call`, which is decided, and `tools/list`).
fn is_mcp_method(method: &str) -> bool {
    const METHODS: [&str; 11] = [
        "initialize",
        "ping",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
    ];
    METHODS.contains(&method) || method.starts_with("notifications/")
}

/// A JSON-RPC 2.0 request, notification or response, or any `tools/call` request.
fn is_message(v: &Value) -> bool {
    let Some(obj) = v.as_object() else {
        return false;
    };
    let method = obj.get("method").and_then(Value::as_str);
    if method == Some("tools/call") {
        return true;
    }
    obj.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && (method.is_some() || obj.contains_key("result") || obj.contains_key("error"))
}

/// The tool call of `params`; empty name and arguments when malformed.
fn tool_call(alias: Option<&str>, params: Option<&Value>) -> ToolCall {
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let args = match params.and_then(|p| p.get("arguments")) {
        None | Some(Value::Null) => Some(Map::new()),
        Some(Value::Object(args)) => Some(args.clone()),
        Some(_) => None,
    };
    match args {
        Some(tool_args) if !name.is_empty() => ToolCall {
            tool_name: mcp_tool_name(alias, name),
            tool_args,
        },
        _ => malformed(),
    }
}

/// A call the caller must refuse: empty name and arguments.
fn malformed() -> ToolCall {
    ToolCall {
        tool_name: String::new(),
        tool_args: Map::new(),
    }
}

/// The policy's name for tool `name` of an MCP server: `<alias>.<name>` when the server has
/// an alias (`[proxy.mcp_servers]`), else `name` as the server spells it. An empty `name`
/// stays empty.
pub fn mcp_tool_name(alias: Option<&str>, name: &str) -> String {
    match alias {
        Some(alias) if !name.is_empty() => format!("{alias}.{name}"),
        _ => name.to_string(),
    }
}

/// Sets `params.arguments` of the request at `call.index` of `body` (the array element for a
/// batch, `body` itself otherwise) to `args`. Returns false, changing nothing, when that
/// request has no `params` object (a malformed call, which the caller refuses anyway).
pub fn rewrite_mcp_arguments(body: &mut Value, call: &McpCall, args: &Map<String, Value>) -> bool {
    let target = match body {
        Value::Array(items) => items.get_mut(call.index),
        other if call.index == 0 => Some(other),
        _ => None,
    };
    match target
        .and_then(|t| t.get_mut("params"))
        .and_then(Value::as_object_mut)
    {
        Some(params) => {
            params.insert("arguments".into(), Value::Object(args.clone()));
            true
        }
        None => false,
    }
}

/// The JSON-RPC response that refuses one `tools/call` the MCP way, as a tool error the
/// model can read: `{"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text",
/// "text":text}],"isError":true}}`.
pub fn mcp_error_result(id: &Value, text: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"content": [{"type": "text", "text": text}], "isError": true},
    })
}

/// The `tools` arrays of the results in `response` (one JSON-RPC response or a batch).
fn tool_lists(response: &mut Value) -> Vec<&mut Vec<Value>> {
    let items: Vec<&mut Value> = match response {
        Value::Array(items) => items.iter_mut().collect(),
        single => vec![single],
    };
    items
        .into_iter()
        .filter_map(|item| item.get_mut("result")?.get_mut("tools")?.as_array_mut())
        .collect()
}

/// Drops from the `tools/list` result(s) in `response` (a JSON-RPC response object or a
/// batch array) every tool whose `name` fails `keep`; a tool without a string name is judged
/// as `""`. Names are passed as the server lists them (apply the alias with
/// [`mcp_tool_name`]). Returns how many tools were dropped. Responses without a
/// `result.tools` array are left alone; call this only on answers to `tools/list` requests.
pub fn filter_tools_list(response: &mut Value, keep: impl Fn(&str) -> bool) -> usize {
    let mut dropped = 0;
    for tools in tool_lists(response) {
        let before = tools.len();
        tools.retain(|tool| keep(tool.get("name").and_then(Value::as_str).unwrap_or("")));
        dropped += before - tools.len();
    }
    dropped
}

/// The tool names listed in the `tools/list` result(s) of `response`, in order, as the
/// server spells them; tools without a string name are skipped.
pub fn tool_names_in_list(response: &Value) -> Vec<String> {
    let items: Vec<&Value> = match response {
        Value::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    items
        .into_iter()
        .filter_map(|item| item.get("result")?.get("tools")?.as_array())
        .flatten()
        .filter_map(|tool| tool.get("name")?.as_str().map(str::to_string))
        .collect()
}
