//! The budget control (`[controls.budget]`): token and spend limits per call and per session.
//! Classification `cost_control`, severity medium, risk 20 by default.
//!
//! Keys (all optional; an absent limit is not checked), checked in this order, the first one
//! exceeded decides:
//! * `max_tokens_per_call`: token_count above it → `token_budget_exceeded`.
//! * `max_tokens_per_session`: session tokens so far + token_count above it →
//!   `token_budget_exceeded`.
//! * `max_cost_usd_per_call`: estimated_cost_usd above it → `cost_budget_exceeded`.
//! * `max_cost_usd_per_session`: session spend so far + estimated_cost_usd (0 when absent)
//!   above it → `session_budget_exceeded`. A session already over budget is refused even for
//!   a call that carries no estimate.

use super::Objection;
use crate::policy::{DecideContext, EnforcementRequest};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::Deserialize;

/// The own keys of `[controls.budget]`; every limit is a non-negative number.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Budget {
    max_tokens_per_call: Option<f64>,
    max_tokens_per_session: Option<f64>,
    max_cost_usd_per_call: Option<f64>,
    max_cost_usd_per_session: Option<f64>,
}

impl Budget {
    /// Validates the limits (finite, non-negative).
    pub fn new(config: Budget) -> Result<Budget, String> {
        let limits = [
            ("max_tokens_per_call", config.max_tokens_per_call),
            ("max_tokens_per_session", config.max_tokens_per_session),
            ("max_cost_usd_per_call", config.max_cost_usd_per_call),
            ("max_cost_usd_per_session", config.max_cost_usd_per_session),
        ];
        for (field, limit) in limits {
            if let Some(v) = limit {
                if !v.is_finite() || v < 0.0 {
                    return Err(format!("{field}: must be a non-negative number, got {v}"));
                }
            }
        }
        Ok(config)
    }

    /// The first limit the call would pass, if any.
    pub fn check(&self, req: &EnforcementRequest, ctx: &DecideContext) -> Option<Objection> {
        let tokens = req.token_count;
        let cost = req.estimated_cost_usd;
        if let (Some(used), Some(max)) = (tokens, self.max_tokens_per_call) {
            if used > max {
                return Some(over(
                    ReasonCode::TokenBudgetExceeded,
                    format!("The call plans {used} tokens, over the per-call limit of {max}."),
                ));
            }
        }
        if let (Some(used), Some(max)) = (tokens, self.max_tokens_per_session) {
            let total = ctx.session_tokens + used;
            if total > max {
                return Some(over(
                    ReasonCode::TokenBudgetExceeded,
                    format!("The session would use {total} tokens, over its limit of {max}."),
                ));
            }
        }
        if let (Some(spend), Some(max)) = (cost, self.max_cost_usd_per_call) {
            if spend > max {
                return Some(over(
                    ReasonCode::CostBudgetExceeded,
                    format!("The call's estimated cost of ${spend:.2} is over the per-call limit of ${max:.2}."),
                ));
            }
        }
        let max = self.max_cost_usd_per_session?;
        let total = ctx.session_spent_usd + cost.unwrap_or(0.0);
        (total > max).then(|| {
            over(
                ReasonCode::SessionBudgetExceeded,
                format!(
                    "The session's spend would reach ${total:.2}, over its budget of ${max:.2}."
                ),
            )
        })
    }
}

fn over(code: ReasonCode, reason: String) -> Objection {
    Objection {
        effect: AuthorizationDecision::Deny,
        code,
        severity: Severity::Medium,
        classification: ActionClassification::CostControl,
        risk: 20.0,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::{ctx, request};

    #[test]
    fn budget_table() {
        let budget = Budget::new(
            toml::from_str(
                "max_tokens_per_call = 1000\nmax_tokens_per_session = 5000\n\
                 max_cost_usd_per_call = 1.0\nmax_cost_usd_per_session = 10.0",
            )
            .unwrap(),
        )
        .unwrap();
        // (tokens, cost, session tokens, session spend, expected)
        let cases = [
            (None, None, 0.0, 0.0, None),
            (Some(1000.0), Some(1.0), 0.0, 0.0, None),
            (
                Some(1001.0),
                None,
                0.0,
                0.0,
                Some(ReasonCode::TokenBudgetExceeded),
            ),
            (
                Some(10.0),
                None,
                4995.0,
                0.0,
                Some(ReasonCode::TokenBudgetExceeded),
            ),
            (
                None,
                Some(1.5),
                0.0,
                0.0,
                Some(ReasonCode::CostBudgetExceeded),
            ),
            (
                None,
                Some(0.5),
                0.0,
                9.6,
                Some(ReasonCode::SessionBudgetExceeded),
            ),
            (None, Some(0.5), 0.0, 9.5, None),
            (
                None,
                None,
                0.0,
                10.5,
                Some(ReasonCode::SessionBudgetExceeded),
            ),
            (
                Some(2000.0),
                Some(5.0),
                0.0,
                50.0,
                Some(ReasonCode::TokenBudgetExceeded),
            ),
        ];
        for (tokens, cost, s_tokens, spent, want) in cases {
            let mut req = request("llm.complete");
            req.token_count = tokens;
            req.estimated_cost_usd = cost;
            let mut c = ctx();
            c.session_tokens = s_tokens;
            c.session_spent_usd = spent;
            let got = budget.check(&req, &c);
            assert_eq!(
                got.as_ref().map(|o| o.code),
                want,
                "{tokens:?} {cost:?} {s_tokens} {spent}"
            );
            if let Some(o) = got {
                assert_eq!(o.classification, ActionClassification::CostControl);
                assert_eq!(o.effect, AuthorizationDecision::Deny);
            }
        }
    }

    #[test]
    fn no_limits_no_findings_and_bad_limits_are_refused() {
        let mut req = request("llm.complete");
        req.token_count = Some(1e12);
        assert!(Budget::default().check(&req, &ctx()).is_none());
        let bad: Budget = toml::from_str("max_cost_usd_per_call = -1.0").unwrap();
        assert!(Budget::new(bad)
            .unwrap_err()
            .starts_with("max_cost_usd_per_call"));
    }
}
