//! The minimum-necessary intent control: a session that declares a `session_intent` known to
//! the pack (`[intents.<name>]`) may call only that intent's `tools` (globs). A call outside
//! them is an `intent_mismatch` (classification `scope_violation`, severity medium, risk 20),
//! STEP_UP by default or DENY with `effect = "block"`. An unknown or absent intent raises
//! nothing. `[controls.intent]` takes only the common keys.

use super::Objection;
use crate::policy::pack::{IntentConfig, IntentEffect};
use crate::policy::{glob, EnforcementRequest};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[controls.intent]` has no keys of its own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentConfigKeys {}

/// The armed control: the pack's intents.
#[derive(Debug)]
pub(crate) struct Intents {
    intents: BTreeMap<String, IntentConfig>,
}

impl Intents {
    /// Takes the pack's `[intents]`.
    pub fn new(intents: &BTreeMap<String, IntentConfig>) -> Intents {
        Intents {
            intents: intents.clone(),
        }
    }

    /// Objects when tool_name is outside the declared intent's tools.
    pub fn check(&self, req: &EnforcementRequest) -> Option<Objection> {
        let name = req.session_intent.as_deref()?;
        let intent = self.intents.get(name)?;
        if glob::any_matches(&intent.tools, &req.tool_name) {
            return None;
        }
        let effect = match intent.effect {
            IntentEffect::StepUp => AuthorizationDecision::StepUp,
            IntentEffect::Block => AuthorizationDecision::Deny,
        };
        Some(Objection {
            effect,
            code: ReasonCode::IntentMismatch,
            severity: Severity::Medium,
            classification: ActionClassification::ScopeViolation,
            risk: 20.0,
            reason: format!(
                "Tool `{}` is not among the tools the `{name}` intent needs ({}).",
                req.tool_name,
                intent.tools.join(", ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;

    #[test]
    fn intent_table() {
        let intents: BTreeMap<String, IntentConfig> = toml::from_str(
            "[support]\ntools = [\"crm.*\", \"email.send\"]\n\
             [billing]\ntools = [\"payments.refund\"]\neffect = \"block\"",
        )
        .unwrap();
        let control = Intents::new(&intents);
        let cases = [
            (None, "shell.exec", None),
            (Some("unknown"), "shell.exec", None),
            (Some("support"), "crm.lookup", None),
            (Some("support"), "email.send", None),
            (
                Some("support"),
                "shell.exec",
                Some(AuthorizationDecision::StepUp),
            ),
            (
                Some("billing"),
                "payments.charge",
                Some(AuthorizationDecision::Deny),
            ),
        ];
        for (intent, tool, want) in cases {
            let mut req = request(tool);
            req.session_intent = intent.map(String::from);
            let got = control.check(&req);
            assert_eq!(got.as_ref().map(|o| o.effect), want, "{intent:?} {tool}");
            if let Some(o) = got {
                assert_eq!(o.code, ReasonCode::IntentMismatch);
                assert_eq!(o.classification, ActionClassification::ScopeViolation);
            }
        }
    }
}
