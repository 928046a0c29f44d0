//! `PolicySnapshot::decide`: the decision algorithm (DESIGN.md, "Decision algorithm";
//! docs/policy.md, "How a decision is made"). Pure and synchronous: the same snapshot,
//! request and context always give the same verdict.
//!
//! 1. Built-in controls (fixed order: scope, dlp, budget, models, intent, purpose, delegation,
//!    identity), then CEL rules (file path order, then file order) yield findings.
//! 2. risk_score = bounded sum of components ([`super::risk`]).
//! 3. Raw verdict = the most restrictive finding (DENY > STEP_UP > DEFER > MODIFY > ALLOW),
//!    raised by the pack's risk thresholds (`risk_threshold_step_up` / `risk_threshold_block`).
//! 4. enforcement_mode shapes each finding ([`super::mode`]); `always` findings keep their
//!    effect. In observe mode the verdict is ALLOW with reason code `observe_mode` and a reason
//!    saying what would have happened.
//! 5. DEFER is returned as decision STEP_UP with authorization_decision DEFER; `decision` is
//!    always `authorization_decision.decision()`.
//!
//! The deciding finding gives reason, reason code, severity, classification and hold lifetime
//! (pack default when it names none; only with STEP_UP). A clean ALLOW is `policy_allow`,
//! severity low, classification routine. DLP's redacted arguments come with MODIFY, and also
//! with STEP_UP and BLOCK when DLP fired, so approvers see what would be sent; never with ALLOW.

use super::controls::dlp::Redaction;
use super::mode::{self, Outcome};
use super::risk::Score;
use super::{DecideContext, EnforcementRequest, Finding, PolicySnapshot, Verdict};
use crate::vocab::{ActionClassification, AuthorizationDecision, Decision, ReasonCode, Severity};

/// A finding with the control ids and references of the control or rule that raised it.
#[derive(Debug, Clone)]
pub(crate) struct Raised<'s> {
    /// The finding.
    pub finding: Finding,
    /// Control ids (e.g. `CC6.1`) for matched_control_ids.
    pub controls: &'s [String],
    /// References for policy_references.
    pub references: &'s [String],
}

/// Reason of a clean ALLOW.
const CLEAN_ALLOW: &str = "No policy objected to this call.";

/// Runs the algorithm. Never panics.
pub(crate) fn decide(
    snap: &PolicySnapshot,
    req: &EnforcementRequest,
    ctx: &DecideContext,
) -> Verdict {
    let mut raised: Vec<Raised<'_>> = Vec::with_capacity(8);
    let mut errors = Vec::new();
    let redaction = snap.controls.evaluate(req, ctx, &mut raised);
    snap.rules.evaluate(req, &mut raised, &mut errors);
    let score = snap.risk.score(req, &raised);
    if let Some(t) = snap.risk.threshold(score.total, &raised) {
        raised.push(Raised {
            finding: t,
            controls: &[],
            references: &[],
        });
    }
    let outcome = mode::shape(raised.iter().map(|r| &r.finding), req.enforcement_mode);
    let mut verdict = explain(snap, &raised, outcome, score, errors);
    attach_redaction(&mut verdict, redaction);
    verdict.findings = raised.into_iter().map(|r| r.finding).collect();
    verdict
}

/// The headline of a verdict: reason, reason code, severity and classification.
struct Headline {
    reason: String,
    code: ReasonCode,
    severity: Severity,
    classification: ActionClassification,
}

impl Headline {
    /// From the deciding finding; in observe mode (nothing decides, but the raw verdict had a
    /// finding) from the raw one, saying what would have happened; else a clean ALLOW.
    fn of(deciding: Option<&Finding>, raw_deciding: Option<&Finding>) -> Headline {
        match (deciding, raw_deciding) {
            (Some(f), _) => Headline {
                reason: f.reason.clone(),
                code: f.reason_code,
                severity: f.severity,
                classification: f.classification,
            },
            (None, Some(raw)) => Headline {
                reason: format!(
                    "Observe mode: allowed, but the policy would have returned {} ({}): {}",
                    raw.effect, raw.reason_code, raw.reason
                ),
                code: ReasonCode::ObserveMode,
                severity: raw.severity,
                classification: raw.classification,
            },
            (None, None) => Headline {
                reason: CLEAN_ALLOW.to_string(),
                code: ReasonCode::PolicyAllow,
                severity: Severity::Low,
                classification: ActionClassification::Routine,
            },
        }
    }
}

/// Builds the verdict from the outcome (everything except the findings list and DLP args).
fn explain(
    snap: &PolicySnapshot,
    raised: &[Raised<'_>],
    outcome: Outcome,
    score: Score,
    errors: Vec<String>,
) -> Verdict {
    let finding_at = |i: Option<usize>| i.and_then(|i| raised.get(i)).map(|r| &r.finding);
    let deciding = finding_at(outcome.deciding);
    let head = Headline::of(deciding, finding_at(outcome.raw_deciding));
    let decision = outcome.decision.decision();
    let timeout = (decision == Decision::StepUp).then(|| {
        deciding
            .and_then(|f| f.step_up_timeout_seconds)
            .unwrap_or(snap.default_timeout)
    });
    let top_contributors = score.top_contributors();
    let (matched_control_ids, policy_references) = evidence_lists(raised);
    let rule_ids = raised.iter().filter(|r| is_rule(&r.finding));
    Verdict {
        decision,
        authorization_decision: outcome.decision,
        reason: head.reason,
        decision_reason_code: head.code,
        severity: head.severity,
        action_classification: head.classification,
        modified_tool_args: None,
        modification_reason: None,
        step_up_timeout_seconds: timeout,
        risk_score: score.total,
        score_components: score.components,
        top_contributors,
        matched_rule_ids: rule_ids.map(|r| r.finding.id.clone()).collect(),
        matched_control_ids,
        policy_references,
        findings: Vec::new(),
        evaluation_errors: errors,
        raw_authorization_decision: outcome.raw,
        policy: snap.version.clone(),
    }
}

/// Rule findings are the ones not raised by a control (`control:…`) or a threshold (`risk:…`).
fn is_rule(f: &Finding) -> bool {
    !f.id.starts_with("control:") && !f.id.starts_with("risk:")
}

/// The union of the raised findings' control ids and references, first-seen order, no
/// duplicates.
fn evidence_lists(raised: &[Raised<'_>]) -> (Vec<String>, Vec<String>) {
    let mut controls: Vec<String> = Vec::new();
    let mut references: Vec<String> = Vec::new();
    for r in raised {
        for c in r.controls {
            if !controls.contains(c) {
                controls.push(c.clone());
            }
        }
        for p in r.references {
            if !references.contains(p) {
                references.push(p.clone());
            }
        }
    }
    (controls, references)
}

/// Adds DLP's redacted arguments to every verdict but ALLOW.
fn attach_redaction(verdict: &mut Verdict, redaction: Option<Redaction>) {
    let Some(r) = redaction else {
        return;
    };
    if verdict.authorization_decision != AuthorizationDecision::Allow {
        verdict.modified_tool_args = Some(r.args);
        verdict.modification_reason = Some(format!("DLP redacted sensitive data: {}", r.reason));
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
