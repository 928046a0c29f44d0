//! The stored hold (`HoldRecord`) and its two public views: SPEC.md's `Hold` (hold poll) and the
//! control plane's pending approval (`ApprovalView`).

use super::Resolution;
use crate::ids;
use crate::ledger::Receipt;
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the enforce path knows when it creates a hold; stored flattened inside [`HoldRecord`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NewHold {
    /// The unguessable hold token.
    pub token: String,
    /// Tenant of the call.
    pub tenant_id: String,
    /// Agent of the call.
    pub agent_id: String,
    /// Tool held.
    pub tool_name: String,
    /// Session of the call.
    pub session_id: String,
    /// User of the call.
    pub user_id: String,
    /// Hold lifetime, seconds.
    pub step_up_timeout_seconds: u64,
    /// STEP_UP or DEFER.
    pub authorization_decision: AuthorizationDecision,
    /// Why the policy held the call.
    pub decision_reason: String,
    /// Reason code of the STEP_UP decision.
    pub decision_reason_code: ReasonCode,
    /// Risk score of the decision.
    pub risk_score: f64,
    /// Arguments shown to approvers (DLP-redacted when the policy redacted them).
    pub tool_args: Option<Map<String, Value>>,
    /// Hash of the canonical request.
    pub request_hash: String,
    /// Policy version label.
    pub policy_version: String,
    /// Caller's correlation id.
    pub enforcement_trace_id: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// The stored hold: the call as it was held, its expiry, and its resolution.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HoldRecord {
    /// The held call (token, tenant, agent, tool, arguments, …), flattened into the same JSON
    /// object.
    #[serde(flatten)]
    pub call: NewHold,
    /// Expiry: `created_at + step_up_timeout_seconds`.
    pub expires_at: DateTime<Utc>,
    /// False while pending.
    pub resolved: bool,
    /// ALLOW or BLOCK once resolved.
    pub resolution: Option<Decision>,
    /// Approver identity or `timeout`.
    pub resolved_by: Option<String>,
    /// Resolution time.
    pub resolved_at: Option<DateTime<Utc>>,
    /// Resolution reason.
    pub reason: Option<String>,
    /// Receipt of the STEP_UP decision.
    pub initial_receipt: Receipt,
    /// Receipt of the resolution.
    pub terminal_receipt: Option<Receipt>,
}

/// Text of `reason` for a timed-out hold.
pub const TIMEOUT_REASON: &str =
    "step-up approval timed out: no approver answered before the hold expired";

impl HoldRecord {
    /// A pending record from what the enforce path knows.
    pub fn pending(call: NewHold, initial_receipt: Receipt) -> HoldRecord {
        let secs = i64::try_from(call.step_up_timeout_seconds).unwrap_or(i64::MAX / 2_000);
        HoldRecord {
            expires_at: call.created_at + Duration::seconds(secs),
            call,
            resolved: false,
            resolution: None,
            resolved_by: None,
            resolved_at: None,
            reason: None,
            initial_receipt,
            terminal_receipt: None,
        }
    }

    /// Applies a resolution (the caller guarantees it is the first).
    pub fn resolve(&mut self, how: Resolution, terminal: Receipt, at: DateTime<Utc>) {
        let (resolution, by, reason) = match how {
            Resolution::Approve { approver, reason } => (Decision::Allow, approver, reason),
            Resolution::Deny { approver, reason } => (Decision::Block, approver, reason),
            Resolution::Timeout => (
                Decision::Block,
                "timeout".to_string(),
                Some(TIMEOUT_REASON.to_string()),
            ),
        };
        self.resolved = true;
        self.resolution = Some(resolution);
        self.resolved_by = Some(by);
        self.resolved_at = Some(at);
        self.reason = reason;
        self.terminal_receipt = Some(terminal);
    }

    /// SPEC.md's Hold object.
    pub fn view(&self) -> HoldView {
        HoldView {
            token: self.call.token.clone(),
            tenant_id: self.call.tenant_id.clone(),
            agent_id: self.call.agent_id.clone(),
            tool_name: self.call.tool_name.clone(),
            session_id: self.call.session_id.clone(),
            expires_at: ids::rfc3339(self.expires_at),
            resolved: self.resolved,
            resolution: self.resolution,
            resolved_by: self.resolved_by.clone(),
            resolved_at: self.resolved_at.map(ids::rfc3339),
            reason: self.reason.clone(),
            step_up_timeout_seconds: Some(self.call.step_up_timeout_seconds),
            initial_receipt: self.initial_receipt.clone(),
            terminal_receipt: self.terminal_receipt.clone(),
        }
    }

    /// The control plane's approval view.
    pub fn approval(&self) -> ApprovalView {
        ApprovalView {
            hold_token: self.call.token.clone(),
            status: if self.resolved { "resolved" } else { "pending" },
            tenant_id: self.call.tenant_id.clone(),
            agent_id: self.call.agent_id.clone(),
            user_id: self.call.user_id.clone(),
            session_id: self.call.session_id.clone(),
            tool_name: self.call.tool_name.clone(),
            tool_args: self.call.tool_args.clone(),
            risk_score: self.call.risk_score,
            reason: self.call.decision_reason.clone(),
            decision_reason_code: self.call.decision_reason_code,
            authorization_decision: self.call.authorization_decision,
            created_at: ids::rfc3339(self.call.created_at),
            expires_at: ids::rfc3339(self.expires_at),
            step_up_timeout_seconds: self.call.step_up_timeout_seconds,
        }
    }
}

/// SPEC.md's Hold: only these fields; a pending hold leaves out the resolver fields.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HoldView {
    /// Hold token.
    pub token: String,
    /// Tenant.
    pub tenant_id: String,
    /// Agent.
    pub agent_id: String,
    /// Tool held.
    pub tool_name: String,
    /// Session.
    pub session_id: String,
    /// RFC 3339 expiry.
    pub expires_at: String,
    /// False while pending.
    pub resolved: bool,
    /// ALLOW or BLOCK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Decision>,
    /// Approver identity or `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    /// RFC 3339 resolution time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    /// Resolution reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Hold lifetime, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_up_timeout_seconds: Option<u64>,
    /// Receipt of the STEP_UP decision.
    pub initial_receipt: Receipt,
    /// Receipt of the resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal_receipt: Option<Receipt>,
}

/// A pending approval as listed by `GET /<tenant_id>/service/approvals?status=pending`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApprovalView {
    /// The hold token (approve/deny path parameter).
    pub hold_token: String,
    /// `pending` or `resolved`.
    pub status: &'static str,
    /// Tenant.
    pub tenant_id: String,
    /// Agent.
    pub agent_id: String,
    /// User.
    pub user_id: String,
    /// Session.
    pub session_id: String,
    /// Tool held.
    pub tool_name: String,
    /// Arguments, DLP-redacted when the policy redacted them.
    pub tool_args: Option<Map<String, Value>>,
    /// Risk score.
    pub risk_score: f64,
    /// Why the call was held.
    pub reason: String,
    /// Reason code of the STEP_UP decision.
    pub decision_reason_code: ReasonCode,
    /// STEP_UP or DEFER.
    pub authorization_decision: AuthorizationDecision,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub expires_at: String,
    /// Hold lifetime, seconds.
    pub step_up_timeout_seconds: u64,
}
