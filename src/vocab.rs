//! The closed vocabularies of SPEC.md: decisions, authorization outcomes, enforcement modes,
//! severities, action classifications and `decision_reason_code` values.
//!
//! Every enum serializes to the exact wire string SPEC.md uses; the lists are closed, so an
//! unknown value in a request is a 422 naming the field and the allowed values.

use serde::{Deserialize, Serialize};

/// Generates a closed string enum with `as_str`, `ALL`, serde in the given case, and `FromStr`.
macro_rules! closed_enum {
    ($(#[$meta:meta])* $name:ident, $case:literal, { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = $case)]
        pub enum $name { $($(#[$vmeta])* #[serde(rename = $text)] $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The wire string.
            pub fn as_str(self) -> &'static str { match self { $($name::$variant => $text),+ } }
            /// The allowed wire strings joined with ", " (for error texts).
            pub fn allowed() -> String {
                Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.as_str()) }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s { $($text => Ok($name::$variant),)+ _ => Err(format!("unknown value `{s}`; expected one of: {}", Self::allowed())) }
            }
        }
    };
}

closed_enum!(
    /// `EnforcementDecision.decision` (SPEC.md, EnforcementDecision): the verdict to act on.
    Decision, "SCREAMING_SNAKE_CASE", {
        /// Run the tool (with `modified_tool_args` when authorization_decision is MODIFY).
        Allow => "ALLOW",
        /// Hold: poll the hold_token until it resolves.
        StepUp => "STEP_UP",
        /// Refusal: surface `reason`, keep `violation_id`.
        Block => "BLOCK",
    }
);

closed_enum!(
    /// `authorization_decision` (SPEC.md): the normalized outcome recorded in evidence.
    /// Ordered from least to most restrictive, so `max` picks the stricter one.
    AuthorizationDecision, "SCREAMING_SNAKE_CASE", {
        /// Run with the original arguments.
        Allow => "ALLOW",
        /// Run with `modified_tool_args`.
        Modify => "MODIFY",
        /// A policy deferral: returned as decision STEP_UP.
        Defer => "DEFER",
        /// Hold for a person's approval.
        StepUp => "STEP_UP",
        /// Refusal (decision BLOCK).
        Deny => "DENY",
    }
);

impl AuthorizationDecision {
    /// The `decision` this outcome is returned as (SPEC.md's correlation table).
    pub fn decision(self) -> Decision {
        match self {
            AuthorizationDecision::Allow | AuthorizationDecision::Modify => Decision::Allow,
            AuthorizationDecision::Defer | AuthorizationDecision::StepUp => Decision::StepUp,
            AuthorizationDecision::Deny => Decision::Block,
        }
    }
}

closed_enum!(
    /// `enforcement_mode` (SPEC.md, EnforcementRequest). How it shapes a verdict: DESIGN.md,
    /// decision algorithm step 4.
    EnforcementMode, "snake_case", {
        /// Always ALLOW; record what would have happened.
        Observe => "observe",
        /// BLOCK only for high/critical findings; step the rest up.
        Progressive => "progressive",
        /// Turn every BLOCK into STEP_UP.
        StepUp => "step_up",
        /// Keep the raw verdict.
        Block => "block",
    }
);

closed_enum!(
    /// Severity of a finding or explanation (SPEC.md leaves the values open; this is toolgate's list).
    Severity, "snake_case", {
        /// Informational.
        Low => "low",
        /// Worth a look.
        Medium => "medium",
        /// Stops the call in `progressive` mode.
        High => "high",
        /// Stops the call in `progressive` mode; page someone.
        Critical => "critical",
    }
);

closed_enum!(
    /// `action_classification`: what kind of action a call is; selects explanation wording.
    ActionClassification, "snake_case", {
        /// Deletes, overwrites or reconfigures something (rm -rf, DROP TABLE, writes under /etc).
        DestructiveAction => "destructive_action",
        /// Moves data out of its boundary (uploads, outbound copies).
        DataExfiltration => "data_exfiltration",
        /// Personal or secret data in arguments (caught by DLP).
        SensitiveDataExposure => "sensitive_data_exposure",
        /// Moves money (payments, refunds, transfers).
        FinancialTransaction => "financial_transaction",
        /// Grants or uses elevated rights (sudo, IAM changes).
        PrivilegeEscalation => "privilege_escalation",
        /// Talks to people or systems outside (email, chat, webhooks).
        ExternalCommunication => "external_communication",
        /// Source-control writes (push, merge, force-push).
        CodeChange => "code_change",
        /// A tool outside the session's approved scope or intent.
        ScopeViolation => "scope_violation",
        /// Token or spend budgets.
        CostControl => "cost_control",
        /// Model or provider outside the allowlists.
        ModelGovernance => "model_governance",
        /// Identity binding stale, expired or mismatched.
        IdentityRisk => "identity_risk",
        /// Delegation chain too deep or cyclic (confused deputy).
        DelegationRisk => "delegation_risk",
        /// Any other policy rule.
        PolicyViolation => "policy_violation",
        /// An ordinary, allowed action.
        Routine => "routine",
    }
);

closed_enum!(
    /// `decision_reason_code`: the stable machine-readable reason (SPEC.md, Errors: "Decision reason
    /// codes seen"). Closed list, documented in docs/reference.md.
    ReasonCode, "snake_case", {
        /// No control or rule objected.
        PolicyAllow => "policy_allow",
        /// DLP found sensitive data and redacted it (MODIFY).
        OutboundDlpRedaction => "outbound_dlp_redaction",
        /// DLP found sensitive data and the pack blocks instead of redacting.
        OutboundDlpBlock => "outbound_dlp_block",
        /// tool_name is not in approved_scope.
        ScopeViolation => "scope_violation",
        /// token_count over the per-call limit.
        TokenBudgetExceeded => "token_budget_exceeded",
        /// estimated_cost_usd over the per-call limit.
        CostBudgetExceeded => "cost_budget_exceeded",
        /// The session's spend would pass its budget.
        SessionBudgetExceeded => "session_budget_exceeded",
        /// model_provider not in the allowlist.
        ModelProviderNotAllowed => "model_provider_not_allowed",
        /// model_name not in the allowlist (or on the denylist).
        ModelNotAllowed => "model_not_allowed",
        /// tool_name is not among the minimum-necessary tools of session_intent.
        IntentMismatch => "intent_mismatch",
        /// purpose is not permitted for data_classification.
        PurposeNotPermitted => "purpose_not_permitted",
        /// delegation chain longer than the pack allows.
        DelegationDepthExceeded => "delegation_depth_exceeded",
        /// an agent appears twice in the delegation chain.
        DelegationCycle => "delegation_cycle",
        /// identity_binding names another user, agent or session than the request.
        IdentityMismatch => "identity_mismatch",
        /// identity_binding has expired.
        IdentityExpired => "identity_expired",
        /// identity_binding is older than the pack's freshness window.
        IdentityStale => "identity_stale",
        /// A CEL rule with effect block matched.
        RuleBlock => "rule_block",
        /// A CEL rule with effect step_up matched.
        RuleStepUp => "rule_step_up",
        /// A CEL rule with effect defer matched.
        RuleDefer => "rule_defer",
        /// risk_score reached the pack's step_up_at threshold.
        RiskThresholdStepUp => "risk_threshold_step_up",
        /// risk_score reached the pack's block_at threshold.
        RiskThresholdBlock => "risk_threshold_block",
        /// observe mode: allowed although the policy would have objected.
        ObserveMode => "observe_mode",
        /// A hold was approved by a person.
        HoldApproved => "hold_approved",
        /// A hold was denied by a person.
        HoldDenied => "hold_denied",
        /// A hold's lifetime passed with no approval.
        HoldTimeout => "hold_timeout",
        /// Forward proxy: an intercepted tool call could not be read (e.g. a `tools/call` without
        /// a tool name), so it was refused without a policy decision.
        MalformedToolCall => "malformed_tool_call",
        /// Forward proxy: another call of the same JSON-RPC batch was refused, so none was sent.
        BatchRefused => "batch_refused",
        /// Forward proxy: the policy check itself failed (fail closed: the call was not sent).
        EnforcementFailed => "enforcement_failed",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip_through_serde_and_from_str() {
        for code in ReasonCode::ALL {
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(code.as_str().parse::<ReasonCode>().unwrap(), *code);
        }
        assert_eq!(
            serde_json::to_string(&Decision::StepUp).unwrap(),
            "\"STEP_UP\""
        );
        assert!("nope"
            .parse::<EnforcementMode>()
            .unwrap_err()
            .contains("observe"));
    }

    #[test]
    fn authorization_decision_orders_by_restrictiveness_and_maps_to_decision() {
        use AuthorizationDecision::*;
        assert!(Deny > StepUp && StepUp > Defer && Defer > Modify && Modify > Allow);
        assert_eq!(Defer.decision(), Decision::StepUp);
        assert_eq!(Modify.decision(), Decision::Allow);
        assert_eq!(Deny.decision(), Decision::Block);
    }
}
