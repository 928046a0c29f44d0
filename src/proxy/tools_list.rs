//! `[proxy] filter_tools_list`: an MCP `tools/list` answer loses the tools the policy would
//! block outright for this agent, so the model is not offered what it may not use. The check is
//! the pure `PolicySnapshot::decide` with empty arguments (no receipt, no hold); tools that
//! would be held or redacted stay listed. JSON and SSE (`text/event-stream`) answers are both
//! filtered; the answer is read whole (bounded by `proxy_max_body_bytes`), which is fine for a
//! listing.

use super::calls::{enforcement_request, Situation};
use super::classify::{self, ToolCall};
use super::identity::{CallContext, Identity};
use super::{Proxy, Target};
use crate::api::ApiError;
use crate::vocab::Decision;
use axum::body::{Body, Bytes};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Response};
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value};

/// Filters a tools/list response. Errors: 502 when the upstream's answer cannot be read.
pub async fn filter(
    proxy: &Proxy,
    resp: Response<Body>,
    identity: &Identity,
    ctx: &CallContext,
    target: &Target,
) -> Result<Response<Body>, ApiError> {
    let (mut parts, body) = resp.into_parts();
    let limit = proxy.core.config.proxy_max_body_bytes;
    let bytes = Limited::new(body, limit)
        .collect()
        .await
        .map_err(|e| ApiError::BadGateway(format!("tools/list answer could not be read: {e}")))?
        .to_bytes();
    let keep = |name: &str| allowed(proxy, identity, ctx, target, name);
    let sse = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let out = if sse {
        filter_sse(&bytes, &keep)
    } else {
        filter_json(&bytes, &keep)
    };
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(out.len()));
    Ok(Response::from_parts(parts, Body::from(out)))
}

fn allowed(
    proxy: &Proxy,
    identity: &Identity,
    ctx: &CallContext,
    target: &Target,
    name: &str,
) -> bool {
    if !proxy
        .core
        .policy_ready
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return false;
    }
    let snapshot = proxy.core.policy.current();
    let tool_name = match snapshot.proxy().mcp_alias(&target.host, target.port) {
        Some(alias) => format!("{alias}.{name}"),
        None => name.to_string(),
    };
    let s = Situation {
        identity,
        ctx,
        target,
        method: "POST",
        path: "/",
        kind: "mcp",
    };
    let call = ToolCall {
        tool_name,
        tool_args: Map::new(),
    };
    let req = enforcement_request(proxy, &s, &call);
    let dctx = proxy
        .core
        .sessions
        .context(&req.tenant_id, &req.session_id, crate::ids::now());
    snapshot.decide(&req, &dctx).decision != Decision::Block
}

fn filter_json(bytes: &Bytes, keep: &dyn Fn(&str) -> bool) -> Bytes {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(mut v) => {
            classify::filter_tools_list(&mut v, keep);
            Bytes::from(v.to_string())
        }
        Err(_) => bytes.clone(),
    }
}

/// Rewrites each `data:` line that holds JSON; every other line is kept as it was.
fn filter_sse(bytes: &Bytes, keep: &dyn Fn(&str) -> bool) -> Bytes {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return bytes.clone();
    };
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        let ending = &line[body.len()..];
        match body
            .strip_prefix("data:")
            .map(|d| (d, serde_json::from_str::<Value>(d.trim())))
        {
            Some((_, Ok(mut v))) => {
                classify::filter_tools_list(&mut v, keep);
                out.push_str("data: ");
                out.push_str(&v.to_string());
                out.push_str(ending);
            }
            _ => out.push_str(line),
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_data_lines_are_filtered_and_the_rest_kept() {
        let text = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"add\"},{\"name\":\"run_shell\"}]}}\r\n\r\n";
        let out = filter_sse(&Bytes::from(text), &|n| n != "run_shell");
        let out = std::str::from_utf8(&out).unwrap();
        assert!(out.starts_with("event: message\r\ndata: "), "{out}");
        assert!(
            out.contains("\"add\"") && !out.contains("run_shell"),
            "{out}"
        );
        assert!(out.ends_with("\r\n\r\n"));
    }
}
