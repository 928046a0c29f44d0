//! The delegation control (`[controls.delegation]`, confused-deputy protection). Classification
//! `delegation_risk`, severity high, risk 25 by default.
//!
//! Accepted `delegation_context` shape (other keys are ignored):
//! ```json
//! {"chain": ["planner-agent", {"agent_id": "research-agent", "...": "..."}]}
//! ```
//! `chain` lists the agents that delegated, from the first to the one that handed the task to
//! the requesting `agent_id` (which is not repeated in the chain). Entries are agent id strings
//! or objects with a string `agent_id`. Depth = chain length.
//! * An agent appearing twice in chain + agent_id → DENY `delegation_cycle` (checked first).
//! * Depth above `max_depth` (key, default 3) → DENY `delegation_depth_exceeded`.
//! * A chain that is not an array, or an entry without an agent id, cannot be verified and is
//!   treated as too deep (fail closed): DENY `delegation_depth_exceeded`.
//!
//! No `delegation_context`, or one without `chain`, raises nothing.

use super::Objection;
use crate::policy::EnforcementRequest;
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;

/// The own keys of `[controls.delegation]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Delegation {
    /// Longest chain allowed; default 3.
    #[serde(default = "default_max_depth")]
    max_depth: usize,
}

fn default_max_depth() -> usize {
    3
}

/// The chain's length, the risk score's delegation depth (0 without a chain; a malformed
/// chain counts its entries, or 0 when it is not an array).
pub(crate) fn chain_depth(req: &EnforcementRequest) -> usize {
    req.delegation_context
        .as_ref()
        .and_then(|c| c.get("chain"))
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

impl Delegation {
    /// Accepts any max_depth.
    pub fn new(config: Delegation) -> Result<Delegation, String> {
        Ok(config)
    }

    /// Objects to a cyclic, too deep or malformed chain.
    pub fn check(&self, req: &EnforcementRequest) -> Option<Objection> {
        let chain = req.delegation_context.as_ref()?.get("chain")?;
        let agents = match agent_ids(chain) {
            Ok(agents) => agents,
            Err(problem) => {
                return Some(refuse(
                    ReasonCode::DelegationDepthExceeded,
                    format!("The delegation chain cannot be verified: {problem}."),
                ))
            }
        };
        let mut seen = HashSet::new();
        let all = agents
            .iter()
            .copied()
            .chain(std::iter::once(req.agent_id.as_str()));
        if let Some(again) = all.into_iter().find(|a| !seen.insert(*a)) {
            return Some(refuse(
                ReasonCode::DelegationCycle,
                format!("Agent `{again}` appears twice in the delegation chain."),
            ));
        }
        (agents.len() > self.max_depth).then(|| {
            refuse(
                ReasonCode::DelegationDepthExceeded,
                format!(
                    "The call was delegated through {} agents; the pack allows at most {}.",
                    agents.len(),
                    self.max_depth
                ),
            )
        })
    }
}

/// The agent ids of a chain, or what is wrong with it.
fn agent_ids(chain: &Value) -> Result<Vec<&str>, String> {
    let entries = chain.as_array().ok_or("`chain` is not an array")?;
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| match entry {
            Value::String(id) => Ok(id.as_str()),
            Value::Object(o) => o
                .get("agent_id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("chain[{i}] has no string `agent_id`")),
            _ => Err(format!("chain[{i}] is neither an agent id nor an object")),
        })
        .collect()
}

fn refuse(code: ReasonCode, reason: String) -> Objection {
    Objection {
        effect: AuthorizationDecision::Deny,
        code,
        severity: Severity::High,
        classification: ActionClassification::DelegationRisk,
        risk: 25.0,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;
    use serde_json::json;

    #[test]
    fn delegation_table() {
        let control = Delegation::new(toml::from_str("max_depth = 2").unwrap()).unwrap();
        let cases = [
            (json!({}), None),
            (json!({"chain": []}), None),
            (json!({"chain": ["a", {"agent_id": "b"}]}), None),
            (
                json!({"chain": ["a", "b", "c"]}),
                Some(ReasonCode::DelegationDepthExceeded),
            ),
            (
                json!({"chain": ["a", "a"]}),
                Some(ReasonCode::DelegationCycle),
            ),
            (json!({"chain": ["bot"]}), Some(ReasonCode::DelegationCycle)),
            (
                json!({"chain": "a,b"}),
                Some(ReasonCode::DelegationDepthExceeded),
            ),
            (
                json!({"chain": [{"name": "a"}]}),
                Some(ReasonCode::DelegationDepthExceeded),
            ),
            (
                json!({"chain": [7]}),
                Some(ReasonCode::DelegationDepthExceeded),
            ),
        ];
        for (context, want) in cases {
            let mut req = request("crm.lookup");
            req.agent_id = "bot".into();
            req.delegation_context = context.as_object().cloned();
            assert_eq!(control.check(&req).map(|o| o.code), want, "{context}");
            assert_eq!(
                chain_depth(&req),
                context["chain"].as_array().map_or(0, Vec::len)
            );
        }
        let default: Delegation = toml::from_str("").unwrap();
        assert_eq!(default.max_depth, 3);
    }
}
