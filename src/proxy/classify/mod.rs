//! What an intercepted request is (DESIGN.md, "proxy/"; docs/policy.md, "Forward proxy"): an
//! MCP JSON-RPC message, a call matched by a REST route, an LLM API call, or a plain HTTP
//! request, each turned into the tool call(s) the policy decides. Pure functions, no I/O.
//!
//! [`classify`] tries, in this order: MCP (`mcp.rs`) → REST route (`rest.rs`) → LLM
//! (`llm.rs`) → host-level. The helpers that write a verdict back ([`rewrite_mcp_arguments`],
//! [`rewrite_rest`]), refuse an MCP call ([`mcp_error_result`]), filter `tools/list`
//! answers ([`filter_tools_list`]) and read LLM token usage ([`llm_usage`]) live beside the
//! classifier of their kind.

mod llm;
mod mcp;
mod rest;

pub use llm::{llm_usage, LlmCall, LlmUsage};
pub use mcp::{
    filter_tools_list, mcp_error_result, mcp_tool_name, rewrite_mcp_arguments, tool_names_in_list,
    McpCall, McpCalls,
};
pub use rest::{rewrite_rest, ArgSource, RestCall};

use crate::policy::proxy::normalize_host;
use crate::policy::ProxyPolicy;
use hyper::Method;
use serde_json::{Map, Value};

/// The parts of one intercepted request that classification reads.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// Upstream host (the CONNECT target's, or the absolute URI's), without port; IPv6
    /// literals in brackets. Compared case-insensitively.
    pub host: &'a str,
    /// Upstream port.
    pub port: u16,
    /// True for HTTPS (a decrypted CONNECT tunnel), false for a plain `http://` request.
    pub https: bool,
    /// Request method.
    pub method: &'a Method,
    /// Request path as sent (percent-encoded), without the query.
    pub path: &'a str,
    /// Raw query string (without `?`), when the URI has one.
    pub query: Option<&'a str>,
    /// The request body parsed as JSON, when it is JSON.
    pub body: Option<&'a Value>,
}

/// One tool call for the policy: the `tool_name` and `tool_args` of an EnforcementRequest.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Tool name; empty for a malformed MCP `tools/call` (the caller refuses it).
    pub tool_name: String,
    /// Tool arguments.
    pub tool_args: Map<String, Value>,
}

/// What a request is.
#[derive(Debug, Clone, PartialEq)]
pub enum Classified {
    /// A JSON-RPC message (object or batch array) with at least one `tools/call` request.
    /// Requests with non-MCP methods beside them are listed as malformed calls.
    Mcp(McpCalls),
    /// A JSON-RPC message of MCP's own methods without `tools/call` (initialize,
    /// notifications, `tools/list`, resources, prompts, responses, ...): it passes through.
    /// A message with other methods is not MCP and is classified further.
    McpOther {
        /// The message contains a `tools/list` request (its answer may be filtered).
        tools_list: bool,
    },
    /// A call matched by a route of `routes/*.toml`.
    Rest(RestCall),
    /// An LLM API call (OpenAI- or Anthropic-style).
    Llm(LlmCall),
    /// Anything else: tool `http.request` with `host`, `method`, `path`, `url` and, when the
    /// URI has a non-empty query, `query` (see [`host_call`]).
    Host(ToolCall),
}

/// Classifies one request: MCP (the body is a JSON-RPC message, see [`McpCalls`]) → the first
/// matching route → an LLM call → host-level. Never fails: whatever is not recognized is a
/// host-level call, which the policy still decides.
pub fn classify(policy: &ProxyPolicy, req: &RequestView) -> Classified {
    if let Some(found) = req.body.and_then(|body| mcp::classify(policy, req, body)) {
        return found;
    }
    if let Some(route) = policy.route(req.host, req.method, req.path) {
        return Classified::Rest(rest::call(&route, req));
    }
    if let Some(call) = llm::classify(policy, req) {
        return Classified::Llm(call);
    }
    Classified::Host(host_call(req))
}

/// The host-level tool call: `http.request` with `host` (lowercased, no trailing dot),
/// `method`, `path` (as sent), `query` (raw, only when non-empty) and `url`
/// (`<scheme>://<host>[:port]<path>[?query]`, the scheme the request used, port shown when
/// it is not the scheme's default). `url` is what the default
/// pack's `http.request` rules (exfiltration destinations, cloud metadata) read.
pub fn host_call(req: &RequestView) -> ToolCall {
    let host = normalize_host(req.host);
    let path = if req.path.is_empty() { "/" } else { req.path };
    let query = req.query.filter(|q| !q.is_empty());
    let (scheme, default_port) = if req.https {
        ("https", 443)
    } else {
        ("http", 80)
    };
    let port = if req.port == default_port {
        String::new()
    } else {
        format!(":{}", req.port)
    };
    let mut url = format!("{scheme}://{host}{port}{path}");
    let mut args = Map::new();
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
        args.insert("query".into(), Value::from(q));
    }
    args.insert("host".into(), Value::from(host));
    args.insert("method".into(), Value::from(req.method.as_str()));
    args.insert("path".into(), Value::from(path));
    args.insert("url".into(), Value::from(url));
    ToolCall {
        tool_name: "http.request".into(),
        tool_args: args,
    }
}

#[cfg(test)]
mod tests;
