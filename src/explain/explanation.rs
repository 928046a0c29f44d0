//! The explanation object (SPEC.md, "Explanation", object table): its exact wire shape, and how
//! the rendered template sections and the request echoes are put together.

use super::context::{effective_severity, request_url};
use super::request::{ExplainDecision, ExplainRequest};
use super::templates::Sections;
use super::Organization;
use crate::vocab::{ActionClassification, Severity};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The explanation returned by POST /v1/explain and GET /v1/explain/{violation_id}.
///
/// Exactly SPEC.md's fields, in its order. Echoed scalars the request left out serialize as
/// `null` and echoed lists as `[]`; nothing is skipped. `decision` is the effective decision
/// (BLOCK when the request had none). `regulatory_context` is `null` when no regime applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// What the agent tried and when.
    pub what_happened: String,
    /// Why policy stopped (held, modified, allowed) it.
    pub why_it_was_blocked: String,
    /// Next steps, including how to request an exception.
    pub what_to_do_next: String,
    /// The risk the policy guards against.
    pub business_impact: String,
    /// Exception link; `""` when no dashboard is configured (see docs/explanations.md).
    pub request_url: String,
    /// The request's severity, else derived from risk_score, else `medium`.
    pub severity: Severity,
    /// A sentence naming each regime; `null` when `regulatory_regimes` is empty.
    pub regulatory_context: Option<String>,
    /// Creation time, RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    /// Echoed from the request.
    pub violation_id: Option<String>,
    /// Echoed from the request.
    pub tenant_id: Option<String>,
    /// Echoed from the request.
    pub session_id: Option<String>,
    /// Echoed from the request.
    pub agent_id: Option<String>,
    /// Echoed from the request.
    pub user_id: Option<String>,
    /// Echoed from the request.
    pub tool_name: Option<String>,
    /// The effective decision (default BLOCK).
    pub decision: ExplainDecision,
    /// Echoed from the request.
    pub decision_reason_code: Option<String>,
    /// Echoed from the request.
    pub action_classification: Option<ActionClassification>,
    /// Echoed from the request (normalized so it survives a JSON round trip unchanged).
    pub risk_score: Option<f64>,
    /// Echoed from the request.
    pub regulatory_regimes: Vec<String>,
    /// Echoed from the request.
    pub matched_rule_ids: Vec<String>,
    /// Echoed from the request.
    pub matched_control_ids: Vec<String>,
    /// Echoed from the request.
    pub policy_references: Vec<String>,
}

impl Explanation {
    /// Puts the rendered `sections` and the request echoes together. `now` is the creation time.
    pub(crate) fn assemble(
        req: &ExplainRequest,
        org: &Organization,
        sections: Sections,
        now: DateTime<Utc>,
    ) -> Explanation {
        let regulatory_context = if req.regulatory_regimes.is_empty() {
            None
        } else {
            Some(sections.regulatory_context)
        };
        Explanation {
            what_happened: sections.what_happened,
            why_it_was_blocked: sections.why_it_was_blocked,
            what_to_do_next: sections.what_to_do_next,
            business_impact: sections.business_impact,
            request_url: request_url(org, req),
            severity: effective_severity(req),
            regulatory_context,
            timestamp: crate::ids::rfc3339(now),
            violation_id: req.violation_id.clone(),
            tenant_id: req.tenant_id.clone(),
            session_id: req.session_id.clone(),
            agent_id: req.agent_id.clone(),
            user_id: req.user_id.clone(),
            tool_name: req.tool_name.clone(),
            decision: req.decision,
            decision_reason_code: req.decision_reason_code.clone(),
            action_classification: req.action_classification,
            risk_score: req.risk_score.map(json_stable),
            regulatory_regimes: req.regulatory_regimes.clone(),
            matched_rule_ids: req.matched_rule_ids.clone(),
            matched_control_ids: req.matched_control_ids.clone(),
            policy_references: req.policy_references.clone(),
        }
    }
}

/// The nearest value that serde_json writes and reads back unchanged.
///
/// serde_json (without its `float_roundtrip` feature) reads some 17-digit numbers one unit in
/// the last place off, so a stored explanation could read back different from the one returned
/// at creation. One or two round trips reach a value that is stable; bounded at four.
fn json_stable(mut x: f64) -> f64 {
    for _ in 0..4 {
        let next = serde_json::to_string(&x)
            .ok()
            .and_then(|s| serde_json::from_str::<f64>(&s).ok())
            .unwrap_or(x);
        if next == x {
            break;
        }
        x = next;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_scores_survive_a_json_round_trip() {
        let mut unstable_before = 0;
        for i in 0..20_000u32 {
            let x = f64::from(i) * 0.1 + 1.0 / 3.0;
            let once: f64 = serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap();
            unstable_before += usize::from(once != x);
            let s = json_stable(x);
            let back: f64 = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
            assert_eq!(back, s, "{x}");
            assert!((s - x).abs() < 1e-9);
        }
        assert!(
            unstable_before > 0,
            "the sample no longer exercises the normalization"
        );
    }

    #[test]
    fn unsupplied_fields_serialize_as_null_and_empty_lists() {
        let sections = Sections::default();
        let e = Explanation::assemble(
            &ExplainRequest::default(),
            &Organization::default(),
            sections,
            DateTime::<Utc>::UNIX_EPOCH,
        );
        let v = serde_json::to_value(&e).unwrap();
        for key in [
            "violation_id",
            "tenant_id",
            "session_id",
            "agent_id",
            "user_id",
            "tool_name",
            "decision_reason_code",
            "action_classification",
            "risk_score",
            "regulatory_context",
        ] {
            assert!(v.get(key).is_some_and(|x| x.is_null()), "{key}: {v}");
        }
        for key in [
            "regulatory_regimes",
            "matched_rule_ids",
            "matched_control_ids",
            "policy_references",
        ] {
            assert_eq!(v[key], serde_json::json!([]), "{key}");
        }
        assert_eq!(v["decision"], "BLOCK");
        assert_eq!(v["severity"], "medium");
        assert_eq!(v["request_url"], "");
        assert_eq!(v["timestamp"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v.as_object().unwrap().len(), 22);
    }
}
