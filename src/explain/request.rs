//! The body of POST /v1/explain (SPEC.md, "Explanation", request table): its serde shape,
//! defaults, and the validation every request passes before an explanation is built.

use crate::vocab::{ActionClassification, Severity};
use serde::{Deserialize, Deserializer, Serialize};

/// Longest identifier (and list entry) accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Most entries accepted in one list field.
pub const MAX_LIST_ENTRIES: usize = 100;

/// The decision an explanation is about (SPEC.md, Explanation request: `decision`).
///
/// Wider than [`crate::vocab::Decision`]: callers may name the authorization outcome (MODIFY,
/// DEFER) directly, because the wording differs. Default: `BLOCK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ExplainDecision {
    /// The call ran with its original arguments.
    Allow,
    /// The call is held until a person approves it.
    StepUp,
    /// The call ran with redacted arguments (`modified_tool_args`).
    Modify,
    /// Policy deferred the call to a person (returned as STEP_UP with DEFER).
    Defer,
    /// The call was refused.
    #[default]
    Block,
}

impl ExplainDecision {
    /// Every value, in declaration order.
    pub const ALL: [ExplainDecision; 5] = [
        ExplainDecision::Allow,
        ExplainDecision::StepUp,
        ExplainDecision::Modify,
        ExplainDecision::Defer,
        ExplainDecision::Block,
    ];

    /// The wire string (`"STEP_UP"`), also the value of the template variable `decision`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExplainDecision::Allow => "ALLOW",
            ExplainDecision::StepUp => "STEP_UP",
            ExplainDecision::Modify => "MODIFY",
            ExplainDecision::Defer => "DEFER",
            ExplainDecision::Block => "BLOCK",
        }
    }
}

/// Body of POST /v1/explain (SPEC.md, "Explanation"). Every field is optional.
///
/// Defaults: `decision` is BLOCK, lists are empty, `occurred_at` is the creation time. An
/// explicit JSON `null` is the same as leaving a field out. Unknown fields are ignored; an
/// unknown `decision`, `action_classification` or `severity` value is rejected by serde (the API
/// answers 422 naming the field). Lengths and timestamps are checked by [`ExplainRequest::validate`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ExplainRequest {
    /// Tenant identifier, echoed back.
    pub tenant_id: Option<String>,
    /// From a BLOCK decision; with the caller's tenant, the storage and retrieval key.
    pub violation_id: Option<String>,
    /// Session of the call.
    pub session_id: Option<String>,
    /// Agent that made the call.
    pub agent_id: Option<String>,
    /// User on whose behalf the agent acted.
    pub user_id: Option<String>,
    /// Tool the agent tried to call.
    pub tool_name: Option<String>,
    /// The decision to explain; default BLOCK.
    #[serde(deserialize_with = "null_as_default")]
    pub decision: ExplainDecision,
    /// Machine-readable reason; a free string (SDKs may send codes from other versions).
    pub decision_reason_code: Option<String>,
    /// Kind of action; selects the template (`policy/explanations/<value>.j2`).
    pub action_classification: Option<ActionClassification>,
    /// Risk score, 0 to 100.
    pub risk_score: Option<f64>,
    /// Severity to report; derived from `risk_score` when absent.
    pub severity: Option<Severity>,
    /// Regimes named in `regulatory_context`.
    #[serde(deserialize_with = "null_as_default")]
    pub regulatory_regimes: Vec<String>,
    /// Rules that matched, echoed back.
    #[serde(deserialize_with = "null_as_default")]
    pub matched_rule_ids: Vec<String>,
    /// Controls that matched, echoed back.
    #[serde(deserialize_with = "null_as_default")]
    pub matched_control_ids: Vec<String>,
    /// Policy references, echoed back.
    #[serde(deserialize_with = "null_as_default")]
    pub policy_references: Vec<String>,
    /// Tool names the original call declared for its session (used in scope wording).
    #[serde(deserialize_with = "null_as_default")]
    pub approved_scope: Vec<String>,
    /// Hold lifetime of a STEP_UP/DEFER decision, in seconds.
    pub step_up_timeout_seconds: Option<u64>,
    /// When the call happened, ISO 8601 / RFC 3339; default: the creation time.
    pub occurred_at: Option<String>,
}

/// Reads an explicit `null` as the type's default.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

impl ExplainRequest {
    /// Checks lengths, characters, `risk_score` and `occurred_at`.
    ///
    /// Rules: every string field and list entry is 1–256 bytes without control characters (the
    /// storage key separator is a control character, and section markers must not be forgeable);
    /// lists hold at most 100 entries; `risk_score` is a number from 0 to 100; `occurred_at`
    /// parses as RFC 3339. Errors: the message of [`super::ExplainError::Invalid`], starting with
    /// the field name (`occurred_at: ...`, `matched_rule_ids[3]: ...`).
    pub fn validate(&self) -> Result<(), String> {
        let scalars = [
            ("tenant_id", &self.tenant_id),
            ("violation_id", &self.violation_id),
            ("session_id", &self.session_id),
            ("agent_id", &self.agent_id),
            ("user_id", &self.user_id),
            ("tool_name", &self.tool_name),
            ("decision_reason_code", &self.decision_reason_code),
            ("occurred_at", &self.occurred_at),
        ];
        for (field, value) in scalars {
            if let Some(v) = value {
                check_text(v).map_err(|e| format!("{field}: {e}"))?;
            }
        }
        let lists = [
            ("regulatory_regimes", &self.regulatory_regimes),
            ("matched_rule_ids", &self.matched_rule_ids),
            ("matched_control_ids", &self.matched_control_ids),
            ("policy_references", &self.policy_references),
            ("approved_scope", &self.approved_scope),
        ];
        for (field, list) in lists {
            check_list(field, list)?;
        }
        self.check_numbers_and_time()
    }

    fn check_numbers_and_time(&self) -> Result<(), String> {
        if let Some(r) = self.risk_score {
            if !(0.0..=100.0).contains(&r) {
                return Err(format!("risk_score: {r} is outside 0 to 100"));
            }
        }
        if let Some(t) = &self.occurred_at {
            crate::ids::parse_rfc3339(t).map_err(|e| format!("occurred_at: {e}"))?;
        }
        Ok(())
    }
}

/// One identifier or list entry: non-empty, at most [`MAX_ID_BYTES`], no control characters.
pub(crate) fn check_text(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err("must not be empty".into());
    }
    if v.len() > MAX_ID_BYTES {
        return Err(format!("longer than {MAX_ID_BYTES} bytes"));
    }
    if v.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(())
}

fn check_list(field: &str, list: &[String]) -> Result<(), String> {
    if list.len() > MAX_LIST_ENTRIES {
        return Err(format!("{field}: more than {MAX_LIST_ENTRIES} entries"));
    }
    for (i, v) in list.iter().enumerate() {
        check_text(v).map_err(|e| format!("{field}[{i}]: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_body_and_nulls_take_the_defaults() {
        let a: ExplainRequest = serde_json::from_value(json!({})).unwrap();
        let b: ExplainRequest =
            serde_json::from_value(json!({"decision": null, "matched_rule_ids": null})).unwrap();
        assert_eq!(a, ExplainRequest::default());
        assert_eq!(b, a);
        assert_eq!(a.decision, ExplainDecision::Block);
        assert!(a.validate().is_ok());
    }

    #[test]
    fn closed_lists_reject_unknown_values() {
        for (field, value) in [
            ("decision", "DENY"),
            ("action_classification", "nuclear_launch"),
            ("severity", "urgent"),
        ] {
            let err =
                serde_json::from_value::<ExplainRequest>(json!({ field: value })).unwrap_err();
            assert!(
                err.to_string().contains("unknown variant"),
                "{field}: {err}"
            );
        }
        let ok: ExplainRequest =
            serde_json::from_value(json!({"decision": "DEFER", "severity": "high"})).unwrap();
        assert_eq!(ok.decision, ExplainDecision::Defer);
        assert_eq!(ok.decision.as_str(), "DEFER");
    }

    #[test]
    fn validation_names_the_field() {
        let cases: Vec<(ExplainRequest, &str)> = vec![
            (
                ExplainRequest {
                    occurred_at: Some("yesterday".into()),
                    ..Default::default()
                },
                "occurred_at: ",
            ),
            (
                ExplainRequest {
                    agent_id: Some("a".repeat(257)),
                    ..Default::default()
                },
                "agent_id: longer than 256 bytes",
            ),
            (
                ExplainRequest {
                    violation_id: Some("v\u{1f}x".into()),
                    ..Default::default()
                },
                "violation_id: must not contain control characters",
            ),
            (
                ExplainRequest {
                    tenant_id: Some(String::new()),
                    ..Default::default()
                },
                "tenant_id: must not be empty",
            ),
            (
                ExplainRequest {
                    matched_rule_ids: vec!["r".into(); 101],
                    ..Default::default()
                },
                "matched_rule_ids: more than 100 entries",
            ),
            (
                ExplainRequest {
                    policy_references: vec!["ok".into(), "x\ny".into()],
                    ..Default::default()
                },
                "policy_references[1]: must not contain control characters",
            ),
            (
                ExplainRequest {
                    risk_score: Some(101.0),
                    ..Default::default()
                },
                "risk_score: 101 is outside 0 to 100",
            ),
        ];
        for (req, want) in cases {
            let err = req.validate().unwrap_err();
            assert!(err.starts_with(want), "{err} should start with {want}");
        }
    }

    #[test]
    fn limits_are_inclusive() {
        let req = ExplainRequest {
            agent_id: Some("a".repeat(256)),
            approved_scope: vec!["t".into(); 100],
            risk_score: Some(100.0),
            occurred_at: Some("2026-11-21T10:00:00+01:00".into()),
            ..Default::default()
        };
        assert_eq!(req.validate(), Ok(()));
    }
}
