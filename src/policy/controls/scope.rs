//! The scope control (`[controls.scope]`): a tool_name that no `approved_scope` entry matches is
//! a `scope_violation` (DENY, severity high, risk 30 by default).
//!
//! Entries are globs (`crm.*` is a prefix wildcard, `*` matches every tool). An empty
//! approved_scope means nothing is in scope. approved_scope is the caller's statement of
//! intent, not a grant: being in scope only means this control does not object.

use super::Objection;
use crate::policy::glob;
use crate::policy::EnforcementRequest;
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::Deserialize;

/// Default risk points of a scope violation.
const DEFAULT_RISK: f64 = 30.0;

/// `[controls.scope]` has no keys of its own (only the common ones).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScopeConfig {}

/// The armed scope control.
#[derive(Debug)]
pub(crate) struct Scope;

impl Scope {
    /// Objects when tool_name is outside approved_scope.
    pub fn check(&self, req: &EnforcementRequest) -> Option<Objection> {
        if glob::any_matches(&req.approved_scope, &req.tool_name) {
            return None;
        }
        let reason = if req.approved_scope.is_empty() {
            format!(
                "Tool `{}` is outside the session's approved scope, which is empty.",
                req.tool_name
            )
        } else {
            format!(
                "Tool `{}` is outside the session's approved scope ({}).",
                req.tool_name,
                summarize(&req.approved_scope)
            )
        };
        Some(Objection {
            effect: AuthorizationDecision::Deny,
            code: ReasonCode::ScopeViolation,
            severity: Severity::High,
            classification: ActionClassification::ScopeViolation,
            risk: DEFAULT_RISK,
            reason,
        })
    }
}

/// The first few scope entries, joined, so a 1000-entry scope does not flood the reason.
fn summarize(scope: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = scope
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if scope.len() > SHOWN {
        text.push_str(&format!(", and {} more", scope.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;

    #[test]
    fn scope_table() {
        let cases: &[(&[&str], &str, bool)] = &[
            (&["crm.lookup"], "crm.lookup", false),
            (&["crm.*"], "crm.update", false),
            (&["crm.*"], "shell.exec", true),
            (&[], "crm.lookup", true),
            (&["*"], "shell.exec", false),
            (&["crm.lookup"], "crm.lookup.v2", true),
        ];
        for (scope, tool, objects) in cases {
            let mut req = request(tool);
            req.approved_scope = scope.iter().map(|s| s.to_string()).collect();
            let got = Scope.check(&req);
            assert_eq!(got.is_some(), *objects, "{scope:?} / {tool}");
            if let Some(o) = got {
                assert_eq!(o.code, ReasonCode::ScopeViolation);
                assert_eq!(o.effect, AuthorizationDecision::Deny);
                assert_eq!(o.severity, Severity::High);
                assert!(o.reason.contains(tool), "{}", o.reason);
            }
        }
    }

    #[test]
    fn long_scopes_are_summarized() {
        let scope: Vec<String> = (0..9).map(|i| format!("t{i}")).collect();
        assert_eq!(summarize(&scope), "t0, t1, t2, t3, t4, and 4 more");
    }
}
