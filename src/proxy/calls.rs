//! From an intercepted tool call to a settled outcome: the `EnforcementRequest` the proxy builds
//! (so the proxy and POST /v1/enforce decide identically), the decision, the wait on a STEP_UP
//! hold, the explanation of a refusal, and the per-session list of calls already made.

use super::classify::ToolCall;
use super::identity::{CallContext, Identity};
use super::{Proxy, Target};
use crate::api::enforce::{evaluate_chained, EnforcementDecision};
use crate::api::ApiError;
use crate::explain::{ExplainDecision, ExplainRequest};
use crate::holds::HoldRecord;
use crate::policy::history::ToolCallHistory;
use crate::policy::EnforcementRequest;
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sessions whose call history is kept; the least recently used beyond this is forgotten.
const SESSION_CAPACITY: usize = 10_000;
/// Calls remembered per session (the oldest are dropped).
const CALLS_PER_SESSION: usize = 256;

/// `session_tool_calls` as the proxy saw them: tool names of forwarded calls per
/// (tenant, session), bounded in sessions and in calls per session.
///
/// Each session's list is shared copy-on-write: [`SessionCalls::history`] hands out the list
/// itself (an `Arc`, no copy of up to 256 names per call), and [`SessionCalls::record`] appends
/// in place unless a call still holds the previous list, which then keeps its snapshot.
pub struct SessionCalls {
    cache: quick_cache::sync::Cache<String, Arc<Mutex<Arc<ToolCallHistory>>>>,
}

impl Default for SessionCalls {
    fn default() -> Self {
        SessionCalls {
            cache: quick_cache::sync::Cache::new(SESSION_CAPACITY),
        }
    }
}

impl SessionCalls {
    fn key(tenant: &str, session: &str) -> String {
        format!("{tenant}\u{1f}{session}")
    }

    /// Tool names already forwarded in this session, oldest first (at most
    /// `CALLS_PER_SESSION`, 256).
    pub fn history(&self, tenant: &str, session: &str) -> Arc<ToolCallHistory> {
        match self.cache.get(&Self::key(tenant, session)) {
            Some(list) => list.lock().map(|l| l.clone()).unwrap_or_default(),
            None => Arc::default(),
        }
    }

    /// Records a forwarded call.
    pub fn record(&self, tenant: &str, session: &str, tool: &str) {
        let list = self
            .cache
            .get_or_insert_with(&Self::key(tenant, session), || {
                Ok::<_, std::convert::Infallible>(Arc::new(Mutex::new(Arc::new(
                    ToolCallHistory::kept(),
                ))))
            })
            .unwrap_or_default();
        if let Ok(mut shared) = list.lock() {
            Arc::make_mut(&mut shared).push_bounded(tool.to_string(), CALLS_PER_SESSION);
        };
    }
}

/// What the proxy knows about a request besides the tool call itself.
pub struct Situation<'a> {
    /// The caller.
    pub identity: &'a Identity,
    /// Headers and agent defaults.
    pub ctx: &'a CallContext,
    /// Upstream.
    pub target: &'a Target,
    /// HTTP method.
    pub method: &'a str,
    /// Request path (without the query).
    pub path: &'a str,
    /// `mcp`, `rest`, `llm` or `host`.
    pub kind: &'static str,
}

/// The EnforcementRequest for one intercepted call.
pub fn enforcement_request(
    proxy: &Proxy,
    s: &Situation<'_>,
    call: &ToolCall,
) -> EnforcementRequest {
    let cfg = &proxy.core.config;
    let mut metadata = Map::new();
    metadata.insert("source".into(), "proxy".into());
    metadata.insert("intercepted_as".into(), s.kind.into());
    metadata.insert("host".into(), s.target.host.clone().into());
    metadata.insert("method".into(), s.method.into());
    metadata.insert("path".into(), s.path.into());
    EnforcementRequest {
        agent_id: s.identity.agent_id.clone(),
        tenant_id: s.identity.tenant_id.clone(),
        tool_name: call.tool_name.clone(),
        session_id: s.ctx.session_id.clone(),
        user_id: s.ctx.user_id.clone(),
        approved_scope: s.ctx.approved_scope.clone(),
        session_tool_calls: proxy
            .sessions
            .history(&s.identity.tenant_id, &s.ctx.session_id),
        enforcement_mode: s.ctx.enforcement_mode,
        tool_args: Some(call.tool_args.clone()),
        environment: None,
        session_intent: s.ctx.session_intent.clone(),
        purpose: s.ctx.purpose.clone(),
        data_classification: None,
        endpoint_id: cfg.endpoint_id.clone(),
        fleet_id: cfg.fleet_id.clone(),
        enforcement_trace_id: None,
        identity_binding: None,
        auth_context: None,
        delegation_context: None,
        model_name: None,
        model_provider: None,
        token_count: None,
        estimated_cost_usd: None,
        metadata: Some(metadata),
    }
}

/// The proxy's decisions carry the receipt_id: ALLOW and BLOCK act on a receipt as soon as it
/// is chained (`api::enforce::evaluate_chained`).
pub type ProxyDecision = EnforcementDecision<String>;

/// A call that may go upstream: the arguments to send when the policy modified them.
pub struct Pass {
    /// `modified_tool_args` of a MODIFY verdict.
    pub modified_args: Option<Map<String, Value>>,
    /// The decision (ALLOW, or the STEP_UP whose hold was approved).
    pub decision: ProxyDecision,
}

/// A call that must not go upstream, and why.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// Plain-language reason.
    pub reason: String,
    /// Stable reason code.
    pub code: ReasonCode,
    /// The BLOCK decision's violation_id (explanation stored under it).
    pub violation_id: Option<String>,
    /// The hold of a denied or timed-out STEP_UP.
    pub hold_token: Option<String>,
    /// The explanation's text (what happened, why, what to do next).
    pub explanation: String,
}

impl Refusal {
    /// A refusal without a policy decision (malformed call, failed check).
    pub fn plain(code: ReasonCode, reason: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            code,
            violation_id: None,
            hold_token: None,
            explanation: String::new(),
        }
    }

    /// One line: reason, reason code, violation_id / hold_token (the REST `detail`).
    pub fn summary(&self) -> String {
        let mut t = format!(
            "toolgate refused this tool call: {} (decision_reason_code: {}",
            self.reason,
            self.code.as_str()
        );
        if let Some(v) = &self.violation_id {
            t.push_str(&format!("; violation_id: {v}"));
        }
        if let Some(h) = &self.hold_token {
            t.push_str(&format!("; hold_token: {h}"));
        }
        t.push(')');
        t
    }

    /// The text a model reads in an MCP `isError` result: the summary, then the explanation.
    pub fn text(&self) -> String {
        let mut t = self.summary();
        if !self.explanation.is_empty() {
            t.push_str(". ");
            t.push_str(&self.explanation);
        }
        t
    }
}

/// Decides one call and settles it: ALLOW/MODIFY pass, BLOCK is refused (with its explanation
/// stored under the violation_id), STEP_UP waits for its hold. Any failure of the check itself
/// is a refusal (fail closed).
pub async fn settle(proxy: &Proxy, req: EnforcementRequest) -> Result<Pass, Refusal> {
    // The history is this proxy's own record of tool names that passed this check before.
    if let Err(e) = req.validate_with_known_history() {
        return Err(Refusal::plain(
            ReasonCode::MalformedToolCall,
            format!("the intercepted call is not a valid tool call: {e}"),
        ));
    }
    let explain_base = explain_request(&req);
    let decision = match evaluate_chained(&proxy.core, req).await {
        Ok(d) => d,
        Err(e) => {
            return Err(Refusal::plain(
                ReasonCode::EnforcementFailed,
                failure_text(&e),
            ))
        }
    };
    match decision.decision {
        Decision::Allow => Ok(Pass {
            modified_args: modified(&decision),
            decision,
        }),
        Decision::Block => Err(refuse_block(proxy, &decision, explain_base).await),
        Decision::StepUp => wait_for_hold(proxy, decision, explain_base).await,
    }
}

fn modified(d: &ProxyDecision) -> Option<Map<String, Value>> {
    (d.authorization_decision == AuthorizationDecision::Modify)
        .then(|| d.modified_tool_args.clone())
        .flatten()
}

fn failure_text(e: &ApiError) -> String {
    match e {
        ApiError::Internal(_) => "the policy check failed; the call was not sent".into(),
        other => format!("the policy check failed ({other}); the call was not sent"),
    }
}

async fn refuse_block(proxy: &Proxy, d: &ProxyDecision, mut ex: ExplainRequest) -> Refusal {
    ex.violation_id = d.violation_id.clone();
    ex.decision = ExplainDecision::Block;
    fill_from_decision(&mut ex, d);
    let tenant = ex.tenant_id.clone().unwrap_or_default();
    let explanation = match proxy.core.explainer.create(ex, &tenant).await {
        Ok(e) => format!(
            "{} {} {}",
            e.what_happened, e.why_it_was_blocked, e.what_to_do_next
        ),
        Err(e) => {
            tracing::warn!(error = %e, "explanation for a proxied BLOCK failed");
            String::new()
        }
    };
    Refusal {
        reason: d.reason.clone(),
        code: d.decision_reason_code,
        violation_id: d.violation_id.clone(),
        hold_token: None,
        explanation,
    }
}

async fn wait_for_hold(
    proxy: &Proxy,
    d: ProxyDecision,
    ex: ExplainRequest,
) -> Result<Pass, Refusal> {
    let token = d.hold_token.clone().unwrap_or_default();
    let Ok(_permit) = proxy.held.clone().try_acquire_owned() else {
        return Err(Refusal::plain(
            ReasonCode::EnforcementFailed,
            format!("too many calls are held for approval (max_held_requests = {}); hold {token} stays pending but this request was not kept open", proxy.core.config.max_held_requests),
        ));
    };
    let timeout = d.step_up_timeout_seconds.unwrap_or(0);
    // Resolution (approve, deny, or the hold's own timer) wakes the wait; it returns early only
    // when the process shuts down.
    let held = proxy
        .core
        .holds
        .wait(&token, Duration::from_secs(timeout + 2))
        .await;
    match held {
        Ok(rec) if rec.resolved => resolve(proxy, rec, d, ex).await,
        Ok(_) => Err(Refusal::plain(
            ReasonCode::EnforcementFailed,
            "toolgate is shutting down; the held call was not sent",
        )),
        Err(e) => Err(Refusal::plain(
            ReasonCode::EnforcementFailed,
            format!("the hold could not be read ({e})"),
        )),
    }
}

async fn resolve(
    proxy: &Proxy,
    rec: HoldRecord,
    d: ProxyDecision,
    mut ex: ExplainRequest,
) -> Result<Pass, Refusal> {
    if rec.resolution == Some(Decision::Allow) {
        return Ok(Pass {
            modified_args: modified(&d),
            decision: d,
        });
    }
    let timed_out = rec.resolved_by.as_deref() == Some("timeout");
    let code = if timed_out {
        ReasonCode::HoldTimeout
    } else {
        ReasonCode::HoldDenied
    };
    let by = rec.resolved_by.clone().unwrap_or_default();
    let reason = match (&rec.reason, timed_out) {
        (Some(r), true) => r.clone(),
        (Some(r), false) => format!("an approver ({by}) denied the held call: {r}"),
        (None, _) => format!("an approver ({by}) denied the held call"),
    };
    ex.decision = ExplainDecision::Block;
    ex.decision_reason_code = Some(code.as_str().to_string());
    fill_from_decision(&mut ex, &d);
    let explanation = proxy
        .core
        .explainer
        .build(&ex, crate::ids::now())
        .map(|e| format!("{} {}", e.what_happened, e.what_to_do_next))
        .unwrap_or_default();
    Err(Refusal {
        reason,
        code,
        violation_id: None,
        hold_token: Some(rec.call.token),
        explanation,
    })
}

fn explain_request(req: &EnforcementRequest) -> ExplainRequest {
    ExplainRequest {
        tenant_id: Some(req.tenant_id.clone()),
        session_id: Some(req.session_id.clone()),
        agent_id: Some(req.agent_id.clone()),
        user_id: Some(req.user_id.clone()),
        tool_name: Some(req.tool_name.clone()),
        approved_scope: req.approved_scope.clone(),
        ..ExplainRequest::default()
    }
}

fn fill_from_decision(ex: &mut ExplainRequest, d: &ProxyDecision) {
    if ex.decision_reason_code.is_none() {
        ex.decision_reason_code = Some(d.decision_reason_code.as_str().to_string());
    }
    ex.action_classification = Some(d.decision_evidence.action_classification);
    ex.risk_score = Some(d.risk_score);
    ex.severity = Some(d.decision_evidence.severity);
    ex.matched_rule_ids = d.matched_rule_ids.clone();
    ex.matched_control_ids = d.matched_control_ids.clone();
    ex.policy_references = d.policy_references.clone();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_a_snapshot_and_keeps_the_last_calls_per_session() {
        let calls = SessionCalls::default();
        calls.record("t1", "s1", "a");
        let before = calls.history("t1", "s1");
        for i in 0..CALLS_PER_SESSION + 10 {
            calls.record("t1", "s1", &format!("tool.{i}"));
        }
        // A call that took the list keeps what it saw.
        assert_eq!(**before, ["a"]);
        let now = calls.history("t1", "s1");
        assert_eq!(now.len(), CALLS_PER_SESSION);
        assert_eq!(now.first().map(String::as_str), Some("tool.10"));
        let last = format!("tool.{}", CALLS_PER_SESSION + 9);
        assert_eq!(now.last(), Some(&last));
        // Each snapshot keeps its own JSON text for request_hash.
        assert_eq!(before.kept_json(), Some("[\"a\"]"));
        let text = serde_json::to_string(&now.to_vec()).unwrap();
        assert_eq!(now.kept_json(), Some(text.as_str()));
        // Sessions and tenants are kept apart.
        assert!(calls.history("t2", "s1").is_empty());
        assert!(calls.history("t1", "s2").is_empty());
    }
}
