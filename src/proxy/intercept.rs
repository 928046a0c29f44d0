//! One intercepted request (plain `http://` or decrypted from a CONNECT tunnel): read the body
//! (bounded: a body that cannot be inspected is not forwarded), classify it, and hand it to the
//! verdict phase in `apply`.

use super::apply::{self, Intercepted};
use super::classify::{classify, Classified, RequestView};
use super::identity::{self, Identity};
use super::{Proxy, Target};
use crate::api::ApiError;
use axum::body::{Body, Bytes};
use axum::response::IntoResponse;
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;

/// Handles one request to `target` from `identity`; every error becomes its `{"detail"}` reply.
pub async fn handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
    target: Target,
    identity: Identity,
) -> Response<Body> {
    match run(&proxy, req, target, identity).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(
    proxy: &Proxy,
    req: Request<Incoming>,
    target: Target,
    identity: Identity,
) -> Result<Response<Body>, ApiError> {
    let snapshot = proxy.core.policy.current();
    let (parts, body) = req.into_parts();
    let ctx = identity::call_context(&identity, &parts.headers, &snapshot);
    let bytes = read_body(body, proxy.core.config.proxy_max_body_bytes).await?;
    if proxy.mcp_sessions.is_session_request(&parts, &target) {
        // GET (the server's event stream) or DELETE (end of session) of an MCP session the
        // server itself issued: part of the protocol, not a tool call.
        return proxy.upstream.send(parts, Body::from(bytes), &target).await;
    }
    let json: Option<Value> = if bytes.is_empty() {
        None
    } else {
        serde_json::from_slice(&bytes).ok()
    };
    let classified = classify(
        snapshot.proxy(),
        &RequestView {
            host: &target.host,
            port: target.port,
            https: target.https,
            method: &parts.method,
            path: parts.uri.path(),
            query: parts.uri.query(),
            body: json.as_ref(),
        },
    );
    let it = Intercepted {
        parts,
        bytes,
        json,
        target,
        identity,
        ctx,
    };
    match classified {
        Classified::Mcp(calls) => apply::mcp(proxy, it, calls).await,
        Classified::McpOther { tools_list } => apply::mcp_other(proxy, it, tools_list).await,
        Classified::Rest(rest) => {
            let call = rest.call.clone();
            apply::single(proxy, it, call, apply::Kind::Rest(rest)).await
        }
        Classified::Llm(llm) => {
            let call = llm.call.clone();
            apply::single(proxy, it, call, apply::Kind::Llm(llm)).await
        }
        Classified::Host(call) => apply::single(proxy, it, call, apply::Kind::Host).await,
    }
}

/// The whole request body, at most `limit` bytes. Errors: 413 beyond the limit, 400 when the
/// client's body fails mid-way.
async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::PayloadTooLarge(format!(
            "request body exceeds the proxy's inspection limit of {limit} bytes (proxy_max_body_bytes); it was not forwarded"
        ))),
        Err(e) => Err(ApiError::BadRequest(format!("could not read the request body: {e}"))),
    }
}
