//! `Verdict`, what [`crate::policy::PolicySnapshot::decide`] returns: the decision and all the
//! evidence the API turns into an `EnforcementDecision` (SPEC.md, "EnforcementDecision").

use crate::vocab::{ActionClassification, AuthorizationDecision, Decision, ReasonCode, Severity};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One objection (or note) raised by a built-in control or a CEL rule.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Finding {
    /// `control:<name>` for built-in controls, the rule id for CEL rules.
    pub id: String,
    /// What this finding asks for.
    pub effect: AuthorizationDecision,
    /// Reason code reported when this finding decides.
    pub reason_code: ReasonCode,
    /// Severity (used by `progressive` mode).
    pub severity: Severity,
    /// Classification (selects explanation wording).
    pub classification: ActionClassification,
    /// Risk points this finding adds (0..=100).
    pub risk: f64,
    /// Plain-language reason.
    pub reason: String,
    /// True when the finding keeps its verdict in every enforcement mode.
    #[serde(default)]
    pub always: bool,
    /// Hold lifetime this finding asks for, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_up_timeout_seconds: Option<u64>,
}

/// A named part of the risk score.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScoreComponent {
    /// Component name, e.g. `tool_sensitivity`, `finding:scope`, `environment`.
    pub name: String,
    /// Points contributed (before the 0..=100 bound is applied to the sum).
    pub value: f64,
}

/// Name, declared version and content digest of the policy pack a decision used.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PolicyVersion {
    /// `name` from pack.toml.
    pub name: String,
    /// `version` from pack.toml.
    pub version: String,
    /// Hex SHA-256 over every file of the pack, in path order.
    pub digest: String,
}

impl PolicyVersion {
    /// `<version>+<first 12 hex of digest>`, the short form carried in receipts.
    pub fn label(&self) -> String {
        format!(
            "{}+{}",
            self.version,
            &self.digest[..self.digest.len().min(12)]
        )
    }
}

/// The outcome of one evaluation. Pure data; no ids or receipts (the API adds those).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    /// What the caller acts on.
    pub decision: Decision,
    /// Normalized outcome.
    pub authorization_decision: AuthorizationDecision,
    /// Plain-language reason.
    pub reason: String,
    /// Stable reason code.
    pub decision_reason_code: ReasonCode,
    /// Severity of the deciding finding (`low` for a clean ALLOW).
    pub severity: Severity,
    /// Classification of the deciding finding (`routine` for a clean ALLOW).
    pub action_classification: ActionClassification,
    /// With MODIFY: the arguments to use instead.
    pub modified_tool_args: Option<Map<String, Value>>,
    /// With MODIFY: why they were changed.
    pub modification_reason: Option<String>,
    /// With STEP_UP: hold lifetime in seconds.
    pub step_up_timeout_seconds: Option<u64>,
    /// 0..=100.
    pub risk_score: f64,
    /// Every part of the score.
    pub score_components: Vec<ScoreComponent>,
    /// The three largest parts, largest first.
    pub top_contributors: Vec<ScoreComponent>,
    /// Ids of CEL rules that matched.
    pub matched_rule_ids: Vec<String>,
    /// Control ids (e.g. `CC6.1`) of matched rules and controls.
    pub matched_control_ids: Vec<String>,
    /// Policy references of matched rules and controls.
    pub policy_references: Vec<String>,
    /// Every finding, in evaluation order.
    pub findings: Vec<Finding>,
    /// CEL evaluation errors (`<rule id>: <message>`); such a rule did not match.
    pub evaluation_errors: Vec<String>,
    /// The verdict before enforcement_mode shaped it.
    pub raw_authorization_decision: AuthorizationDecision,
    /// The pack that decided.
    pub policy: PolicyVersion,
}

/// Facts about the world that `decide` needs but the request does not carry, so that `decide`
/// stays a pure function of (snapshot, request, context).
#[derive(Debug, Clone, PartialEq)]
pub struct DecideContext {
    /// Evaluation time (identity freshness).
    pub now: chrono::DateTime<chrono::Utc>,
    /// USD already spent in this session by allowed calls.
    pub session_spent_usd: f64,
    /// Tokens already used in this session by allowed calls.
    pub session_tokens: f64,
}

impl DecideContext {
    /// A context at `now` with nothing spent.
    pub fn fresh(now: chrono::DateTime<chrono::Utc>) -> Self {
        DecideContext {
            now,
            session_spent_usd: 0.0,
            session_tokens: 0.0,
        }
    }
}
