//! POST /v1/enforce (SPEC.md, "POST /v1/enforce"): authenticate, validate, decide, issue the
//! receipt, open a hold for STEP_UP, and answer the `EnforcementDecision` with 200 (BLOCK too).

use crate::api::{ApiError, ApiJson};
use crate::auth::scope::RuntimeTarget;
use crate::auth::{Caller, Permission};
use crate::holds::{approver_args, NewHold};
use crate::ids;
use crate::ledger::{ChainedReceipt, Receipt, ReceiptBody, ReceiptKind};
use crate::policy::{EnforcementRequest, PolicyVersion, ScoreComponent, Verdict};
use crate::state::AppState;
use crate::vocab::{ActionClassification, Severity};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::time::Instant;

/// `decision_envelope_version` of every decision this build returns.
pub const DECISION_ENVELOPE_VERSION: &str = "2026-11-01";

/// The response body (SPEC.md, "EnforcementDecision"); optional fields are left out when empty.
///
/// `R` is the receipt: the signed [`Receipt`] in every /v1/enforce answer; the receipt_id
/// (`String`) in the forward proxy's decisions ([`evaluate_chained`]), which act on a receipt
/// as soon as it is chained and never send this body to anyone.
#[derive(Debug, Serialize)]
pub struct EnforcementDecision<R = Receipt> {
    /// ALLOW / STEP_UP / BLOCK.
    pub decision: Decision,
    /// Envelope version.
    pub decision_envelope_version: &'static str,
    /// ALLOW / DENY / MODIFY / STEP_UP / DEFER.
    pub authorization_decision: AuthorizationDecision,
    /// Plain-language reason.
    pub reason: String,
    /// Stable reason code.
    pub decision_reason_code: ReasonCode,
    /// With MODIFY only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_tool_args: Option<Map<String, Value>>,
    /// With MODIFY only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modification_reason: Option<String>,
    /// With STEP_UP only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_token: Option<String>,
    /// With STEP_UP only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_up_timeout_seconds: Option<u64>,
    /// With BLOCK only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation_id: Option<String>,
    /// 0..=100.
    pub risk_score: f64,
    /// Evaluation time, milliseconds.
    pub latency_ms: f64,
    /// The caller's correlation id, or one generated for this decision.
    pub enforcement_trace_id: String,
    /// Signed, hash-chained receipt (see `R`).
    pub receipt: R,
    /// Findings, CEL errors, raw verdict, mode and request hash.
    pub decision_evidence: DecisionEvidence,
    /// Every part of the risk score.
    pub score_components: Vec<ScoreComponent>,
    /// The three largest parts.
    pub top_contributors: Vec<ScoreComponent>,
    /// Matched CEL rules.
    pub matched_rule_ids: Vec<String>,
    /// Matched control ids.
    pub matched_control_ids: Vec<String>,
    /// Policy references.
    pub policy_references: Vec<String>,
    /// `<pack version>+<digest prefix>`.
    pub policy_version: String,
    /// Pack name, version and full digest.
    pub policy_pack: PolicyVersion,
}

/// `decision_evidence` of a decision (docs/reference.md, "EnforcementDecision extras"); keys in
/// alphabetical order.
#[derive(Debug, Serialize)]
pub struct DecisionEvidence {
    /// Normalized classification of the deciding finding.
    pub action_classification: ActionClassification,
    /// The request's `enforcement_mode`.
    pub enforcement_mode: crate::vocab::EnforcementMode,
    /// CEL evaluation errors (`<rule id>: <message>`).
    pub evaluation_errors: Vec<String>,
    /// Every finding, in evaluation order.
    pub findings: Vec<crate::policy::Finding>,
    /// The request's `metadata` (`null` when absent).
    pub metadata: Option<Map<String, Value>>,
    /// The verdict before `enforcement_mode` shaped it.
    pub raw_authorization_decision: AuthorizationDecision,
    /// Hex SHA-256 of the canonical request (as in the receipt).
    pub request_hash: String,
    /// Severity of the deciding finding.
    pub severity: Severity,
}

/// Initial capacity of the response buffer, bytes: a typical decision is about 2 KB (more
/// with findings or a long checkpoint path), so one allocation usually holds it.
const RESPONSE_CAPACITY: usize = 4096;

impl IntoResponse for EnforcementDecision {
    /// 200 with the JSON body, serialized once into a buffer sized for a typical decision.
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(RESPONSE_CAPACITY);
        if let Err(e) = serde_json::to_writer(&mut body, &self) {
            return ApiError::Internal(format!("decision does not encode: {e}")).into_response();
        }
        let json = HeaderValue::from_static("application/json");
        ([(header::CONTENT_TYPE, json)], body).into_response()
    }
}

/// Handler of POST /v1/enforce.
pub async fn enforce(
    State(core): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<EnforcementRequest>,
) -> Result<EnforcementDecision, ApiError> {
    caller.require(Permission::Execute)?;
    req.validate().map_err(ApiError::Unprocessable)?;
    caller.check_scope(RuntimeTarget {
        tenant_id: &req.tenant_id,
        agent_id: &req.agent_id,
        fleet_id: req.fleet_id.as_deref().or(core.config.fleet_id.as_deref()),
        endpoint_id: req
            .endpoint_id
            .as_deref()
            .or(core.config.endpoint_id.as_deref()),
    })?;
    evaluate(&core, req).await
}

/// Decides a validated, authorized request: `decide` over the current snapshot, the signed
/// receipt, the hold of a STEP_UP, the session spend of an ALLOW. POST /v1/enforce answers
/// this; the forward proxy uses [`evaluate_chained`], the same decision without waiting for
/// the receipt's signature (DESIGN.md, "The three roles, one binary").
///
/// Errors: 503 when no policy bundle is installed yet or a STEP_UP would exceed the
/// pending-hold cap; 500 on storage failure or a stopped receipt signer.
pub async fn evaluate(
    core: &AppState,
    req: EnforcementRequest,
) -> Result<EnforcementDecision, ApiError> {
    let (decided, chained) = decide(core, req, true)?;
    let receipt = chained.signed().await?;
    if decided.verdict.decision == Decision::StepUp {
        open_hold(core, &decided, &receipt).await?;
    }
    Ok(conclude(core, decided, receipt))
}

/// [`evaluate`] for the forward proxy: the same verdict, receipt and hold, but an ALLOW or
/// BLOCK returns as soon as its receipt is on the chain; the signer covers it with its next
/// checkpoint (`ReceiptLog::chain` says why that is no less durable). A STEP_UP still waits for
/// the signed receipt, which its hold carries. The decision's `receipt` is the receipt_id.
///
/// Errors: as [`evaluate`].
pub async fn evaluate_chained(
    core: &AppState,
    req: EnforcementRequest,
) -> Result<EnforcementDecision<String>, ApiError> {
    let (decided, chained) = decide(core, req, false)?;
    let receipt_id = chained.receipt_id.clone();
    if decided.verdict.decision == Decision::StepUp {
        let receipt = chained.signed().await?;
        open_hold(core, &decided, &receipt).await?;
    }
    Ok(conclude(core, decided, receipt_id))
}

/// A decision whose receipt is chained: what [`conclude`] turns into the answer.
struct Decided {
    req: EnforcementRequest,
    verdict: Verdict,
    policy_version: String,
    /// hold_token, violation_id or decision id (the receipt's subject).
    subject: String,
    request_hash: String,
    started: Instant,
    now: chrono::DateTime<chrono::Utc>,
}

/// The synchronous part of a decision: the policy check, the hold capacity of a STEP_UP and
/// the receipt appended to the chain. `wait_for_signature`: the caller awaits the signed
/// receipt (always for a STEP_UP, whose hold carries it).
fn decide(
    core: &AppState,
    req: EnforcementRequest,
    wait_for_signature: bool,
) -> Result<(Decided, ChainedReceipt), ApiError> {
    if !core.policy_ready.load(std::sync::atomic::Ordering::Acquire) {
        return Err(ApiError::Unavailable(
            "no policy bundle from the control plane yet; failing closed until the first sync"
                .into(),
        ));
    }
    let started = Instant::now();
    let now = ids::now();
    let ctx = core.sessions.context(&req.tenant_id, &req.session_id, now);
    let snapshot = core.policy.current();
    let mut verdict = snapshot.decide(&req, &ctx);
    if verdict.decision == Decision::StepUp && verdict.step_up_timeout_seconds.is_none() {
        verdict.step_up_timeout_seconds = Some(snapshot.default_step_up_timeout_seconds());
    }
    if verdict.decision == Decision::StepUp {
        // Refuse before the receipt: a STEP_UP receipt must always have a hold behind it.
        core.holds.ensure_capacity()?;
    }
    let policy_version = verdict.policy.label();
    let request_hash = request_hash(&req)?;
    let subject = subject_id(verdict.decision);
    let body = receipt_body(&req, &verdict, &subject, &request_hash, &policy_version);
    let will_wait = wait_for_signature || verdict.decision == Decision::StepUp;
    let chained = core.receipts.chain(body, will_wait)?;
    let decided = Decided {
        req,
        verdict,
        policy_version,
        subject,
        request_hash,
        started,
        now,
    };
    Ok((decided, chained))
}

/// Records the session spend of an ALLOW and the activity counters, and assembles the answer.
fn conclude<R>(core: &AppState, d: Decided, receipt: R) -> EnforcementDecision<R> {
    if d.verdict.decision == Decision::Allow {
        record_spend(core, &d.req, d.now);
    }
    core.activity.record(
        &d.req.agent_id,
        &d.req.session_id,
        d.verdict.decision,
        d.verdict.risk_score,
    );
    let latency_ms = d.started.elapsed().as_secs_f64() * 1000.0;
    respond(d, receipt, latency_ms)
}

/// Hex SHA-256 of the request's canonical JSON (struct field order; object keys sorted).
///
/// Errors: [`ApiError::Internal`] if the request cannot be encoded (it always can).
pub fn request_hash(req: &EnforcementRequest) -> Result<String, ApiError> {
    // Encoded into one buffer and hashed in one pass: feeding the hasher token by token (a
    // quote, a name, a comma, …) cost about twice as much for a 256-name session history. The
    // proxy's histories keep their JSON text, which `write_json` copies (same bytes).
    let mut json = Vec::with_capacity(4096);
    req.write_json(&mut json)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(hex::encode(Sha256::digest(&json)))
}

/// The id the receipt attests: a hold token for STEP_UP, a violation_id for BLOCK, a decision id
/// for ALLOW.
fn subject_id(decision: Decision) -> String {
    match decision {
        Decision::StepUp => ids::secret_token("hold", 32),
        Decision::Block => ids::new_id("vio"),
        Decision::Allow => ids::new_id("dec"),
    }
}

fn receipt_body(
    req: &EnforcementRequest,
    v: &Verdict,
    subject: &str,
    hash: &str,
    policy_version: &str,
) -> ReceiptBody {
    ReceiptBody {
        kind: ReceiptKind::Decision,
        tenant_id: req.tenant_id.clone(),
        subject_id: subject.to_string(),
        request_hash: hash.to_string(),
        decision: v.decision,
        authorization_decision: v.authorization_decision,
        decision_reason_code: v.decision_reason_code,
        policy_version: policy_version.to_string(),
    }
}

/// Opens the hold of a STEP_UP decision; the token is the receipt's subject.
async fn open_hold(core: &AppState, d: &Decided, receipt: &Receipt) -> Result<(), ApiError> {
    let (req, v) = (&d.req, &d.verdict);
    let hold = NewHold {
        token: d.subject.clone(),
        tenant_id: req.tenant_id.clone(),
        agent_id: req.agent_id.clone(),
        tool_name: req.tool_name.clone(),
        session_id: req.session_id.clone(),
        user_id: req.user_id.clone(),
        step_up_timeout_seconds: v.step_up_timeout_seconds.unwrap_or(0),
        authorization_decision: v.authorization_decision,
        decision_reason: v.reason.clone(),
        decision_reason_code: v.decision_reason_code,
        risk_score: v.risk_score,
        tool_args: approver_args(req.tool_args.as_ref(), v.modified_tool_args.as_ref()),
        request_hash: d.request_hash.clone(),
        policy_version: d.policy_version.clone(),
        enforcement_trace_id: req.enforcement_trace_id.clone(),
        created_at: ids::now(),
    };
    core.holds.create(hold, receipt.clone()).await?;
    Ok(())
}

fn record_spend(core: &AppState, req: &EnforcementRequest, now: chrono::DateTime<chrono::Utc>) {
    let cost = req.estimated_cost_usd.unwrap_or(0.0);
    let tokens = req.token_count.unwrap_or(0.0);
    core.sessions
        .record(&req.tenant_id, &req.session_id, cost, tokens, now);
}

/// Assembles the response, moving every part out of the decision and the receipt.
fn respond<R>(d: Decided, receipt: R, latency_ms: f64) -> EnforcementDecision<R> {
    let Decided {
        req,
        verdict: v,
        policy_version,
        subject,
        request_hash,
        ..
    } = d;
    let is_modify = v.authorization_decision == AuthorizationDecision::Modify;
    let is = |d: Decision| v.decision == d;
    let decision_evidence = DecisionEvidence {
        action_classification: v.action_classification,
        enforcement_mode: req.enforcement_mode,
        evaluation_errors: v.evaluation_errors,
        findings: v.findings,
        metadata: req.metadata,
        raw_authorization_decision: v.raw_authorization_decision,
        request_hash,
        severity: v.severity,
    };
    let (hold_token, violation_id) = match v.decision {
        Decision::StepUp => (Some(subject), None),
        Decision::Block => (None, Some(subject)),
        Decision::Allow => (None, None),
    };
    EnforcementDecision {
        decision: v.decision,
        decision_envelope_version: DECISION_ENVELOPE_VERSION,
        authorization_decision: v.authorization_decision,
        reason: v.reason,
        decision_reason_code: v.decision_reason_code,
        modified_tool_args: v.modified_tool_args.filter(|_| is_modify),
        modification_reason: v.modification_reason.filter(|_| is_modify),
        hold_token,
        step_up_timeout_seconds: v.step_up_timeout_seconds.filter(|_| is(Decision::StepUp)),
        violation_id,
        risk_score: v.risk_score,
        latency_ms,
        enforcement_trace_id: req
            .enforcement_trace_id
            .unwrap_or_else(|| ids::new_id("trace")),
        receipt,
        decision_evidence,
        score_components: v.score_components,
        top_contributors: v.top_contributors,
        matched_rule_ids: v.matched_rule_ids,
        matched_control_ids: v.matched_control_ids,
        policy_references: v.policy_references,
        policy_version,
        policy_pack: v.policy,
    }
}
