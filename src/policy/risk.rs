//! The risk score (decision algorithm step 2) and the risk thresholds (part of step 3).
//!
//! risk_score = sum of the components, bounded to 0..=100:
//! * `tool_sensitivity`: the `[tools]` glob that matches tool_name (longest pattern wins);
//! * `finding:<id>`: each finding's risk;
//! * `environment`: `[risk.environments]` for the request's environment (`prod` when absent);
//! * `delegation_depth`: `[risk] delegation_per_hop` × the delegation chain length;
//! * `data_classification`: `[risk.data_classes]` for the declared class.
//!
//! Only non-zero components are listed; `top_contributors` are the three largest, largest
//! first (ties keep listing order).

use super::controls::delegation::chain_depth;
use super::decide::Raised;
use super::glob;
use super::pack::PackFile;
use super::{EnforcementRequest, Finding, ScoreComponent};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use std::collections::BTreeMap;

/// How many components `top_contributors` lists.
const TOP: usize = 3;

/// The pack's risk weights and thresholds.
#[derive(Debug)]
pub(crate) struct RiskModel {
    tools: BTreeMap<String, f64>,
    environments: BTreeMap<String, f64>,
    data_classes: BTreeMap<String, f64>,
    per_hop: f64,
    step_up_at: Option<f64>,
    block_at: Option<f64>,
}

/// A computed score.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Score {
    /// 0..=100.
    pub total: f64,
    /// Non-zero components, in the order listed in the module doc.
    pub components: Vec<ScoreComponent>,
}

impl Score {
    /// The largest [`TOP`] components, largest first.
    pub fn top_contributors(&self) -> Vec<ScoreComponent> {
        let mut sorted = self.components.clone();
        sorted.sort_by(|a, b| b.value.total_cmp(&a.value));
        sorted.truncate(TOP);
        sorted
    }
}

impl RiskModel {
    /// Takes the weights from a validated pack.
    pub fn new(pack: &PackFile) -> RiskModel {
        RiskModel {
            tools: pack.tools.clone(),
            environments: pack.risk.environments.clone(),
            data_classes: pack.risk.data_classes.clone(),
            per_hop: pack.risk.delegation_per_hop,
            step_up_at: pack.risk.step_up_at,
            block_at: pack.risk.block_at,
        }
    }

    /// Scores a request and its findings.
    pub fn score(&self, req: &EnforcementRequest, raised: &[Raised<'_>]) -> Score {
        let mut components = Vec::new();
        let mut add = |name: String, value: f64| {
            if value != 0.0 && value.is_finite() {
                components.push(ScoreComponent { name, value });
            }
        };
        if let Some((_, v)) = glob::longest_match(&self.tools, &req.tool_name) {
            add("tool_sensitivity".into(), *v);
        }
        for r in raised {
            add(format!("finding:{}", r.finding.id), r.finding.risk);
        }
        add(
            "environment".into(),
            self.environments
                .get(req.environment())
                .copied()
                .unwrap_or(0.0),
        );
        add(
            "delegation_depth".into(),
            self.per_hop * chain_depth(req) as f64,
        );
        if let Some(class) = &req.data_classification {
            add(
                "data_classification".into(),
                self.data_classes.get(class).copied().unwrap_or(0.0),
            );
        }
        let sum: f64 = components.iter().map(|c| c.value).sum();
        Score {
            total: sum.clamp(0.0, 100.0),
            components,
        }
    }

    /// The finding a threshold adds when `total` reaches it and it is stricter than every
    /// finding so far: DENY `risk_threshold_block` (high) or STEP_UP `risk_threshold_step_up`
    /// (medium), with the classification of the riskiest finding (`policy_violation` if none).
    pub fn threshold(&self, total: f64, raised: &[Raised<'_>]) -> Option<Finding> {
        let (effect, code, severity, at, word) = self.reached(total)?;
        let strictest = raised.iter().map(|r| r.finding.effect).max();
        if strictest.is_some_and(|s| effect <= s) {
            return None;
        }
        let classification = raised
            .iter()
            .max_by(|a, b| a.finding.risk.total_cmp(&b.finding.risk))
            .map_or(ActionClassification::PolicyViolation, |r| {
                r.finding.classification
            });
        Some(Finding {
            id: format!("risk:{word}"),
            effect,
            reason_code: code,
            severity,
            classification,
            risk: 0.0,
            reason: format!(
                "The call's risk score of {total} reached the pack's {word} threshold of {at}."
            ),
            always: false,
            step_up_timeout_seconds: None,
        })
    }

    /// The highest threshold `total` reaches: (effect, code, severity, threshold, word).
    fn reached(
        &self,
        total: f64,
    ) -> Option<(
        AuthorizationDecision,
        ReasonCode,
        Severity,
        f64,
        &'static str,
    )> {
        if let Some(at) = self.block_at.filter(|b| total >= *b) {
            return Some((
                AuthorizationDecision::Deny,
                ReasonCode::RiskThresholdBlock,
                Severity::High,
                at,
                "block",
            ));
        }
        let at = self.step_up_at.filter(|s| total >= *s)?;
        Some((
            AuthorizationDecision::StepUp,
            ReasonCode::RiskThresholdStepUp,
            Severity::Medium,
            at,
            "step-up",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::{finding, request};
    use serde_json::json;

    fn model() -> RiskModel {
        let pack: PackFile = toml::from_str(
            "name = \"p\"\nversion = \"1\"\n[tools]\n\"shell.*\" = 30\n\"shell.exec\" = 40\n\
             [risk]\nstep_up_at = 50\nblock_at = 85\ndelegation_per_hop = 5\n\
             [risk.environments]\nprod = 10\ndev = 0\n[risk.data_classes]\npii = 15\n",
        )
        .unwrap();
        RiskModel::new(&pack)
    }

    #[test]
    fn score_components_and_bounds() {
        let m = model();
        let mut req = request("shell.exec");
        req.delegation_context = json!({"chain": ["a", "b"]}).as_object().cloned();
        req.data_classification = Some("pii".into());
        let raised = [finding("r1", AuthorizationDecision::Deny, 20.0)];
        let s = m.score(&req, &raised);
        let names: Vec<(&str, f64)> = s
            .components
            .iter()
            .map(|c| (c.name.as_str(), c.value))
            .collect();
        assert_eq!(
            names,
            [
                ("tool_sensitivity", 40.0),
                ("finding:r1", 20.0),
                ("environment", 10.0),
                ("delegation_depth", 10.0),
                ("data_classification", 15.0)
            ]
        );
        assert_eq!(s.total, 95.0);
        let top: Vec<String> = s.top_contributors().into_iter().map(|c| c.name).collect();
        assert_eq!(
            top,
            ["tool_sensitivity", "finding:r1", "data_classification"]
        );

        let many: Vec<Raised<'static>> = (0..5)
            .map(|i| finding(&format!("f{i}"), AuthorizationDecision::Allow, 100.0))
            .collect();
        assert_eq!(m.score(&req, &many).total, 100.0, "bounded above");
        let mut dev = request("crm.lookup");
        dev.environment = Some("dev".into());
        let clean = m.score(&dev, &[]);
        assert_eq!(
            (clean.total, clean.components.len()),
            (0.0, 0),
            "zero components omitted"
        );
    }

    #[test]
    fn thresholds_only_raise() {
        let m = model();
        let allow = [finding("a", AuthorizationDecision::Allow, 10.0)];
        let deny = [finding("d", AuthorizationDecision::Deny, 10.0)];
        let cases: [(f64, &[Raised<'static>], Option<ReasonCode>); 6] = [
            (49.0, &[], None),
            (50.0, &[], Some(ReasonCode::RiskThresholdStepUp)),
            (84.9, &allow, Some(ReasonCode::RiskThresholdStepUp)),
            (85.0, &allow, Some(ReasonCode::RiskThresholdBlock)),
            (100.0, &deny, None),
            (60.0, &deny, None),
        ];
        for (total, raised, want) in cases {
            assert_eq!(
                m.threshold(total, raised).map(|f| f.reason_code),
                want,
                "{total}"
            );
        }
    }
}
