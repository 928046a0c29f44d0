//! Helpers shared by the policy engine's unit tests: a baseline request and context, raised
//! findings, and throwaway pack directories.

use super::decide::Raised;
use super::{DecideContext, EnforcementRequest, Finding};
use crate::vocab::{
    ActionClassification, AuthorizationDecision, EnforcementMode, ReasonCode, Severity,
};
use chrono::{TimeZone, Utc};

/// The smallest valid pack.toml (name `test`), with a trailing newline.
pub const MINIMAL_PACK: &str = "name = \"test\"\nversion = \"1\"\n";

/// A request for `tool` by agent `bot-1`, user `u-1`, session `s-1`, tenant `t-1`, in block
/// mode, with `tool` in approved_scope and every optional field absent.
pub fn request(tool: &str) -> EnforcementRequest {
    EnforcementRequest {
        agent_id: "bot-1".into(),
        tenant_id: "t-1".into(),
        tool_name: tool.into(),
        session_id: "s-1".into(),
        user_id: "u-1".into(),
        approved_scope: vec![tool.into()],
        session_tool_calls: Default::default(),
        enforcement_mode: EnforcementMode::Block,
        tool_args: None,
        environment: None,
        session_intent: None,
        purpose: None,
        data_classification: None,
        endpoint_id: None,
        fleet_id: None,
        enforcement_trace_id: None,
        identity_binding: None,
        auth_context: None,
        delegation_context: None,
        model_name: None,
        model_provider: None,
        token_count: None,
        estimated_cost_usd: None,
        metadata: None,
    }
}

/// A context at 2026-11-20T12:00:00Z with nothing spent.
pub fn ctx() -> DecideContext {
    let now = Utc
        .with_ymd_and_hms(2026, 11, 20, 12, 0, 0)
        .single()
        .unwrap_or_default();
    DecideContext::fresh(now)
}

/// A raised finding `id` with `effect` and `risk` (severity medium, no lists).
pub fn finding(id: &str, effect: AuthorizationDecision, risk: f64) -> Raised<'static> {
    Raised {
        finding: Finding {
            id: id.into(),
            effect,
            reason_code: ReasonCode::RuleBlock,
            severity: Severity::Medium,
            classification: ActionClassification::PolicyViolation,
            risk,
            reason: format!("finding {id}"),
            always: false,
            step_up_timeout_seconds: None,
        },
        controls: &[],
        references: &[],
    }
}

/// A temporary pack directory with `pack` as pack.toml and `rules` as (file name, text) under
/// rules/. Removed when dropped.
pub fn pack_dir(pack: &str, rules: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pack.toml"), pack).unwrap();
    std::fs::create_dir_all(dir.path().join("rules")).unwrap();
    for (name, text) in rules {
        std::fs::write(dir.path().join("rules").join(name), text).unwrap();
    }
    dir
}
