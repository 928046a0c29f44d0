//! `EnforcementRequest`, the body of POST /v1/enforce (SPEC.md, "EnforcementRequest"), and its
//! validation beyond what serde checks.
//!
//! Serde rejects a missing required field or a wrong type (the API maps that to 422 naming the
//! field); [`EnforcementRequest::validate`] then checks lengths and shapes and also answers 422.
//! Unknown fields are ignored, so newer SDKs keep working.

use super::history::{write_json_with_kept_history, ToolCallHistory};
use crate::vocab::EnforcementMode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Longest identifier (agent_id, tenant_id, tool_name, session_id, user_id, …), in bytes.
pub const MAX_ID_LEN: usize = 256;
/// Most entries in `approved_scope` or `session_tool_calls`.
pub const MAX_LIST_LEN: usize = 1000;

/// A proposed tool call. Required fields are plain; optional fields are `Option`.
/// The inner shapes of `identity_binding`, `auth_context` and `delegation_context` are documented
/// in docs/reference.md ("Context objects"); they are kept as JSON objects here and read by the
/// controls that use them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EnforcementRequest {
    /// Agent identifier.
    pub agent_id: String,
    /// Tenant identifier; must be the API key's tenant.
    pub tenant_id: String,
    /// Tool the agent wants to call.
    pub tool_name: String,
    /// Current session.
    pub session_id: String,
    /// User who initiated the action.
    pub user_id: String,
    /// Tool names intended for this session (not an authorization grant). Entries may end in `*`.
    pub approved_scope: Vec<String>,
    /// Tool names already called in this session, in order. Shared (`Arc`): the proxy hands
    /// every call of a session the same list it keeps (`proxy::calls::SessionCalls`) instead
    /// of a copy, with its JSON text kept ([`ToolCallHistory`]); it serializes as a plain JSON
    /// array.
    pub session_tool_calls: Arc<ToolCallHistory>,
    /// How the verdict is shaped (DESIGN.md, decision algorithm step 4).
    pub enforcement_mode: EnforcementMode,
    /// Proposed arguments (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_args: Option<Map<String, Value>>,
    /// Policy environment tag; `prod` when absent (see [`EnforcementRequest::environment`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Declared workflow intent for minimum-necessary checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_intent: Option<String>,
    /// Declared purpose for purpose-aware filtering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Declared data class used by policy controls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_classification: Option<String>,
    /// Endpoint or workstation identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_id: Option<String>,
    /// Fleet identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_id: Option<String>,
    /// Correlation identifier carried into decision evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement_trace_id: Option<String>,
    /// Identity tuple for identity and freshness enforcement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_binding: Option<Map<String, Value>>,
    /// Canonical auth context for attribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_context: Option<Map<String, Value>>,
    /// Delegation-chain context for confused-deputy protection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_context: Option<Map<String, Value>>,
    /// Model identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// Model provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_provider: Option<String>,
    /// Planned token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_count: Option<f64>,
    /// Planned spend in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost_usd: Option<f64>,
    /// Extra context propagated to decision evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl EnforcementRequest {
    /// Appends the request's JSON to `out`: exactly `serde_json::to_writer`'s bytes (struct
    /// field order, optional fields absent when `None`), but the text of a history the proxy
    /// keeps is copied instead of serialized again (`request_hash` runs this on every call).
    /// `session_tool_calls` follows only string and string-list fields, which the splice in
    /// [`write_json_with_kept_history`] relies on.
    ///
    /// Errors: what `serde_json` reports (a non-finite number in `tool_args` and the like).
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        write_json_with_kept_history(self, "session_tool_calls", &self.session_tool_calls, out)
    }

    /// The environment tag, `prod` when absent.
    pub fn environment(&self) -> &str {
        self.environment.as_deref().unwrap_or("prod")
    }

    /// Checks what serde cannot: non-empty identifiers, lengths, list sizes, non-negative numbers.
    ///
    /// Errors: a message naming the field, e.g. `tool_name must not be empty` (the API answers 422).
    pub fn validate(&self) -> Result<(), String> {
        self.validate_parts()?;
        check_list("session_tool_calls", &self.session_tool_calls)
    }

    /// [`validate`](Self::validate) for a request whose `session_tool_calls` its caller built
    /// from the `tool_name`s of earlier requests that each passed `validate` (the forward
    /// proxy's per-session history, `proxy/calls.rs`): the list's length is still checked, its
    /// entries (up to 256 names, on every call) are not checked again.
    ///
    /// Errors: as [`validate`](Self::validate).
    pub fn validate_with_known_history(&self) -> Result<(), String> {
        self.validate_parts()?;
        check_len("session_tool_calls", &self.session_tool_calls)
    }

    /// Every check but the entries of `session_tool_calls`.
    fn validate_parts(&self) -> Result<(), String> {
        let ids = [
            ("agent_id", &self.agent_id),
            ("tenant_id", &self.tenant_id),
            ("tool_name", &self.tool_name),
            ("session_id", &self.session_id),
            ("user_id", &self.user_id),
        ];
        for (field, value) in ids {
            check_id(field, value)?;
        }
        let optional_ids = [
            ("environment", &self.environment),
            ("session_intent", &self.session_intent),
            ("purpose", &self.purpose),
            ("data_classification", &self.data_classification),
            ("endpoint_id", &self.endpoint_id),
            ("fleet_id", &self.fleet_id),
            ("enforcement_trace_id", &self.enforcement_trace_id),
            ("model_name", &self.model_name),
            ("model_provider", &self.model_provider),
        ];
        for (field, value) in optional_ids {
            if let Some(v) = value {
                check_id(field, v)?;
            }
        }
        check_list("approved_scope", &self.approved_scope)?;
        check_amount("token_count", self.token_count)?;
        check_amount("estimated_cost_usd", self.estimated_cost_usd)
    }
}

fn check_id(field: &str, value: &str) -> Result<(), String> {
    match id_problem(value) {
        Some(problem) => Err(format!("{field} {problem}")),
        None => Ok(()),
    }
}

/// What is wrong with an identifier, as the end of a sentence that starts with its field name.
fn id_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("must not be empty".into());
    }
    if value.len() > MAX_ID_LEN {
        return Some(format!("is longer than {MAX_ID_LEN} bytes"));
    }
    // Printable ASCII (almost every identifier) is settled in one pass over the bytes; anything
    // else is checked char by char, which also finds the C1 controls (U+0080..U+009F).
    let printable_ascii = value.bytes().all(|b| (0x20..0x7f).contains(&b));
    if !printable_ascii && value.chars().any(char::is_control) {
        return Some("must not contain control characters".into());
    }
    None
}

fn check_len(field: &str, list: &[String]) -> Result<(), String> {
    if list.len() > MAX_LIST_LEN {
        return Err(format!("{field} has more than {MAX_LIST_LEN} entries"));
    }
    Ok(())
}

fn check_list(field: &str, list: &[String]) -> Result<(), String> {
    check_len(field, list)?;
    // No allocation unless an entry is bad: this runs on every call, over up to
    // MAX_LIST_LEN entries.
    for (i, item) in list.iter().enumerate() {
        if let Some(problem) = id_problem(item) {
            return Err(format!("{field}[{i}] {problem}"));
        }
    }
    Ok(())
}

fn check_amount(field: &str, value: Option<f64>) -> Result<(), String> {
    match value {
        Some(v) if !v.is_finite() || v < 0.0 => {
            Err(format!("{field} must be a non-negative number"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "agent_id": "a", "tenant_id": "t", "tool_name": "crm.lookup", "session_id": "s",
            "user_id": "u", "approved_scope": ["crm.lookup"], "session_tool_calls": [],
            "enforcement_mode": "block"
        })
    }

    #[test]
    fn minimal_request_parses_and_validates() {
        let r: EnforcementRequest = serde_json::from_value(base()).unwrap();
        r.validate().unwrap();
        assert_eq!(r.environment(), "prod");
    }

    #[test]
    fn bad_values_name_the_field() {
        let cases = [
            ("tool_name", json!("")),
            ("estimated_cost_usd", json!(-1.0)),
            ("approved_scope", json!(["ok", ""])),
        ];
        for (field, value) in cases {
            let mut v = base();
            v[field] = value;
            let r: EnforcementRequest = serde_json::from_value(v).unwrap();
            assert!(r.validate().unwrap_err().starts_with(field), "{field}");
        }
        let mut v = base();
        v["enforcement_mode"] = json!("yolo");
        assert!(serde_json::from_value::<EnforcementRequest>(v).is_err());
    }

    #[test]
    fn identifiers_with_control_characters_are_refused_and_other_text_is_not() {
        for bad in [
            "tab\there",
            "nul\u{0}",
            "del\u{7f}",
            "c1\u{85}x",
            "\u{9f}",
            "a\u{e9}\nb",
        ] {
            let problem = id_problem(bad).unwrap_or_default();
            assert_eq!(problem, "must not contain control characters", "{bad:?}");
            let mut v = base();
            v["session_tool_calls"] = json!(["fine", bad]);
            let r: EnforcementRequest = serde_json::from_value(v).unwrap();
            let err = r.validate().unwrap_err();
            assert!(err.starts_with("session_tool_calls[1] "), "{err}");
            // A history its caller built from validated tool names is not checked again.
            r.validate_with_known_history().unwrap();
        }
        let mut v = base();
        v["session_tool_calls"] = json!(vec!["x.y"; MAX_LIST_LEN + 1]);
        let r: EnforcementRequest = serde_json::from_value(v).unwrap();
        for err in [r.validate(), r.validate_with_known_history()] {
            assert!(err
                .unwrap_err()
                .starts_with("session_tool_calls has more than"));
        }
        for good in [
            "crm.lookup",
            "~!@#$%^&*()_+ {}|:<>?",
            "caf\u{e9}.\u{1f600}",
            "\u{a0}nbsp",
        ] {
            assert_eq!(id_problem(good), None, "{good:?}");
        }
    }
}
