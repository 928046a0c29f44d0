//! Verdicts applied to the real request (the "Applying the verdict"):
//!
//! * ALLOW: forwarded untouched; the response streams back through a [`record::Capture`].
//! * MODIFY: forwarded with `modified_tool_args` written into the JSON-RPC `params.arguments` or
//!   the REST body/query (Content-Length set again). Arguments that cannot be written back
//!   (host-level and LLM calls) are refused instead: fail closed.
//! * STEP_UP: held open until the hold resolves (see `calls::settle`).
//! * BLOCK and every failure of the check: the upstream is never contacted. MCP gets HTTP 200
//!   with a JSON-RPC result `isError: true` whose text carries the reason, the violation_id and
//!   the explanation; everything else gets 403 `{"detail", "decision", "decision_reason_code",
//!   "violation_id", "hold_token", "reason", "explanation"}`.
//!
//! A JSON-RPC batch is all or nothing: if any `tools/call` in it is refused, none is sent, and
//! the calls that passed are answered with `batch_refused`. Batch calls are decided in order.

use super::calls::{self, Pass, Refusal, Situation};
use super::classify::{self, LlmCall, McpCalls, RestCall, ToolCall};
use super::identity::{CallContext, Identity};
use super::record::{self, EventBase};
use super::{Proxy, Target};
use crate::api::ApiError;
use crate::ledger::EventType;
use crate::vocab::ReasonCode;
use axum::body::{Body, Bytes};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// An intercepted request, read and parsed.
pub struct Intercepted {
    /// Method, URI, headers (not yet cleaned; `upstream` strips hop-by-hop and `X-Toolgate-*`).
    pub parts: Parts,
    /// The whole body.
    pub bytes: Bytes,
    /// The body as JSON, when it is JSON.
    pub json: Option<Value>,
    /// The upstream.
    pub target: Target,
    /// The caller.
    pub identity: Identity,
    /// Headers and agent defaults.
    pub ctx: CallContext,
}

impl Intercepted {
    fn situation(&self, kind: &'static str) -> Situation<'_> {
        Situation {
            identity: &self.identity,
            ctx: &self.ctx,
            target: &self.target,
            method: self.parts.method.as_str(),
            path: self.parts.uri.path(),
            kind,
        }
    }
}

/// The kinds of single (non-MCP) calls.
pub enum Kind {
    /// A route of the pack.
    Rest(RestCall),
    /// An LLM API call.
    Llm(LlmCall),
    /// Anything else (`http.request`).
    Host,
}

/// One REST, LLM or host-level call.
pub async fn single(
    proxy: &Proxy,
    it: Intercepted,
    call: ToolCall,
    kind: Kind,
) -> Result<Response<Body>, ApiError> {
    let name = match &kind {
        Kind::Rest(_) => "rest",
        Kind::Llm(_) => "llm",
        Kind::Host => "host",
    };
    let mut req = calls::enforcement_request(proxy, &it.situation(name), &call);
    let mut llm_provider = None;
    match &kind {
        Kind::Llm(l) => {
            req.model_name = l.model.clone();
            req.model_provider = Some(l.provider.clone());
            req.token_count = l.max_tokens;
            llm_provider = Some(l.provider.clone());
        }
        Kind::Rest(r) => {
            if let Some(m) = req.metadata.as_mut() {
                m.insert("route_id".into(), r.route_id.clone().into());
            }
        }
        Kind::Host => {}
    }
    let base = EventBase::of(&req);
    if let Some(refusal) = ambiguous(&kind) {
        return Ok(refuse_http(proxy, &base, &call.tool_args, &refusal));
    }
    let pass = match calls::settle(proxy, req).await {
        Ok(p) => p,
        Err(refusal) => return Ok(refuse_http(proxy, &base, &call.tool_args, &refusal)),
    };
    let (parts, bytes) = match (&pass.modified_args, &kind) {
        (None, _) => (it.parts, it.bytes),
        (Some(args), Kind::Rest(rest)) if writable(rest, &call.tool_args, args) => {
            rewrite_rest(it.parts, it.json, rest, args)?
        }
        (Some(_), _) => {
            let refusal = Refusal::plain(
                ReasonCode::OutboundDlpRedaction,
                "the policy redacted arguments that cannot be written back into this request \
                 (a URL path segment, or a host-level or LLM call), so it was not sent",
            );
            return Ok(refuse_http(proxy, &base, &call.tool_args, &refusal));
        }
    };
    let sent_args = match &pass.modified_args {
        Some(args) => args.clone(),
        None => call.tool_args,
    };
    passed(proxy, &base, sent_args, pass);
    forward(proxy, parts, bytes, &it.target, vec![base], llm_provider).await
}

/// A REST call that names one argument in more than one place (path, body, query) is refused:
/// only one of the values would be checked, while the upstream might read another.
fn ambiguous(kind: &Kind) -> Option<Refusal> {
    let Kind::Rest(rest) = kind else { return None };
    let keys = rest.conflicts();
    (!keys.is_empty()).then(|| {
        Refusal::plain(
            ReasonCode::MalformedToolCall,
            format!(
                "the request gives argument(s) {} in more than one place (path, body, query); \
                 send each once",
                keys.join(", ")
            ),
        )
    })
}

/// Modified arguments can be written back unless one that changed came from the URL path.
fn writable(rest: &RestCall, original: &Map<String, Value>, modified: &Map<String, Value>) -> bool {
    modified.iter().all(|(k, v)| {
        original.get(k) == Some(v) || rest.source(k) != Some(classify::ArgSource::Path)
    })
}

/// A JSON-RPC message with `tools/call` requests.
pub async fn mcp(
    proxy: &Proxy,
    it: Intercepted,
    calls: McpCalls,
) -> Result<Response<Body>, ApiError> {
    let mut passes = Vec::new();
    let mut refusals = Vec::new();
    for call in &calls.calls {
        if call.call.tool_name.is_empty() {
            let r = Refusal::plain(
                ReasonCode::MalformedToolCall,
                "tools/call without a tool name, or with arguments that are not an object",
            );
            refusals.push((call.id.clone(), r));
            continue;
        }
        let req = calls::enforcement_request(proxy, &it.situation("mcp"), &call.call);
        let base = EventBase::of(&req);
        match calls::settle(proxy, req).await {
            Ok(pass) => passes.push((call, base, pass)),
            Err(r) => {
                record_refusal(proxy, &base, &call.call.tool_args, &r);
                refusals.push((call.id.clone(), r));
            }
        }
    }
    if !refusals.is_empty() {
        for (call, base, _) in &passes {
            let r = Refusal::plain(ReasonCode::BatchRefused, "another tools/call in the same batch was refused, so no call of the batch was sent");
            record_refusal(proxy, base, &call.call.tool_args, &r);
            refusals.push((call.id.clone(), r));
        }
        return Ok(refuse_mcp(it.json.as_ref(), calls.batch, &refusals));
    }
    let mut json = it.json.unwrap_or(Value::Null);
    let mut rewritten = false;
    let mut bases = Vec::new();
    for (call, base, pass) in passes {
        if let Some(args) = &pass.modified_args {
            classify::rewrite_mcp_arguments(&mut json, call, args);
            rewritten = true;
        }
        let sent = pass
            .modified_args
            .clone()
            .unwrap_or_else(|| call.call.tool_args.clone());
        passed(proxy, &base, sent, pass);
        bases.push(base);
    }
    let bytes = if rewritten {
        Bytes::from(serde_json::to_vec(&json).map_err(|e| ApiError::Internal(e.to_string()))?)
    } else {
        it.bytes
    };
    forward(proxy, it.parts, bytes, &it.target, bases, None).await
}

/// A JSON-RPC message without `tools/call`: forwarded; a `tools/list` answer is filtered when
/// the pack asks for it.
pub async fn mcp_other(
    proxy: &Proxy,
    it: Intercepted,
    tools_list: bool,
) -> Result<Response<Body>, ApiError> {
    let filter = tools_list && proxy.core.policy.current().proxy().filter_tools_list();
    let situation_ctx = (it.identity.clone(), it.ctx.clone(), it.target.clone());
    let path = it.parts.uri.path().to_string();
    let resp = proxy
        .upstream
        .send(it.parts, Body::from(it.bytes), &it.target)
        .await?;
    proxy.mcp_sessions.learn(&it.target, &path, resp.headers());
    if !filter {
        return Ok(resp);
    }
    super::tools_list::filter(
        proxy,
        resp,
        &situation_ctx.0,
        &situation_ctx.1,
        &situation_ctx.2,
    )
    .await
}

/// PRE event and session history of a call that is about to be forwarded. The history is
/// recorded here (the next call sees it); the event is built on the recorder thread from the
/// values moved into its builder.
fn passed(proxy: &Proxy, base: &Arc<EventBase>, sent_args: Map<String, Value>, pass: Pass) {
    proxy
        .sessions
        .record(&base.tenant_id, &base.session_id, &base.tool_name);
    record::queue_call_event(
        &proxy.recorder,
        base,
        EventType::ToolCallPre,
        sent_args,
        || {
            let d = pass.decision;
            let mut extra = Map::new();
            extra.insert("decision".into(), json!(d.decision));
            extra.insert(
                "authorization_decision".into(),
                json!(d.authorization_decision),
            );
            extra.insert("decision_reason_code".into(), json!(d.decision_reason_code));
            extra.insert("enforcement_trace_id".into(), d.enforcement_trace_id.into());
            extra.insert("receipt_id".into(), d.receipt.into());
            if let Some(h) = d.hold_token {
                extra.insert("hold_token".into(), h.into());
            }
            extra
        },
    );
}

fn record_refusal(proxy: &Proxy, base: &Arc<EventBase>, args: &Map<String, Value>, r: &Refusal) {
    let mut extra = Map::new();
    extra.insert("decision".into(), "BLOCK".into());
    extra.insert("decision_reason_code".into(), r.code.as_str().into());
    extra.insert("reason".into(), r.reason.clone().into());
    if let Some(v) = &r.violation_id {
        extra.insert("violation_id".into(), v.clone().into());
    }
    if let Some(h) = &r.hold_token {
        extra.insert("hold_token".into(), h.clone().into());
    }
    let args = args.clone();
    record::queue_call_event(
        &proxy.recorder,
        base,
        EventType::ToolCallBlock,
        args,
        || extra,
    );
}

/// 403 for a refused REST, LLM or host-level call.
fn refuse_http(
    proxy: &Proxy,
    base: &Arc<EventBase>,
    args: &Map<String, Value>,
    r: &Refusal,
) -> Response<Body> {
    record_refusal(proxy, base, args, r);
    let body = json!({
        "detail": r.summary(),
        "decision": "BLOCK",
        "decision_reason_code": r.code,
        "violation_id": r.violation_id,
        "hold_token": r.hold_token,
        "reason": r.reason,
        "explanation": r.explanation,
    });
    json_response(StatusCode::FORBIDDEN, &body)
}

/// 200 with JSON-RPC answers for refused `tools/call`s (a batch answers every request in it).
fn refuse_mcp(
    message: Option<&Value>,
    batch: bool,
    refusals: &[(Value, Refusal)],
) -> Response<Body> {
    let answer = |id: &Value| {
        refusals
            .iter()
            .find(|(rid, _)| rid == id)
            .map(|(_, r)| classify::mcp_error_result(id, &r.text()))
    };
    if !batch {
        let (id, r) = &refusals[0];
        return json_response(StatusCode::OK, &classify::mcp_error_result(id, &r.text()));
    }
    let items = message
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let answers: Vec<Value> = items
        .iter()
        .filter_map(|item| item.get("id").filter(|_| item.get("method").is_some()))
        .map(|id| {
            answer(id).unwrap_or_else(|| {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32001, "message": "not sent: a tools/call in the same batch was refused by toolgate"}})
            })
        })
        .collect();
    json_response(StatusCode::OK, &Value::Array(answers))
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Writes modified REST arguments back into the body and query.
fn rewrite_rest(
    mut parts: Parts,
    json: Option<Value>,
    rest: &RestCall,
    args: &Map<String, Value>,
) -> Result<(Parts, Bytes), ApiError> {
    let mut body = json;
    let new_query = classify::rewrite_rest(body.as_mut(), parts.uri.query(), rest, args);
    if let Some(q) = new_query {
        let pq = if q.is_empty() {
            parts.uri.path().to_string()
        } else {
            format!("{}?{q}", parts.uri.path())
        };
        let mut uri = parts.uri.clone().into_parts();
        uri.path_and_query = Some(
            pq.parse()
                .map_err(|_| ApiError::BadRequest("rewritten query is invalid".into()))?,
        );
        parts.uri = http::Uri::from_parts(uri)
            .map_err(|_| ApiError::BadRequest("rewritten URI is invalid".into()))?;
    }
    let bytes = match body {
        Some(v) => {
            Bytes::from(serde_json::to_vec(&v).map_err(|e| ApiError::Internal(e.to_string()))?)
        }
        None => Bytes::new(),
    };
    Ok((parts, bytes))
}

/// Sends the (possibly rewritten) request and wraps the streaming response for the POST events.
async fn forward(
    proxy: &Proxy,
    mut parts: Parts,
    bytes: Bytes,
    target: &Target,
    bases: Vec<Arc<EventBase>>,
    llm: Option<String>,
) -> Result<Response<Body>, ApiError> {
    if !bytes.is_empty() || parts.headers.contains_key(CONTENT_LENGTH) {
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    let resp = proxy
        .upstream
        .send(parts, Body::from(bytes), target)
        .await?;
    let (p, body) = resp.into_parts();
    let body = record::after_response(proxy, bases, p.status.as_u16(), llm, body);
    Ok(Response::from_parts(p, body))
}
