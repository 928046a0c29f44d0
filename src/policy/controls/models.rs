//! The model-governance control (`[controls.models]`): provider and model allowlists and a
//! model denylist. Classification `model_governance`, severity high, risk 25 by default.
//!
//! Keys: `allowed_providers` (exact names, case-insensitive), `allowed_models` and
//! `blocked_models` (globs with `*`, case-insensitive). An absent list is not checked; a
//! present empty allowlist allows nothing. Checks run only when the request carries
//! model_provider / model_name; the provider is checked first.

use super::Objection;
use crate::policy::{glob, EnforcementRequest};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::Deserialize;

/// The own keys of `[controls.models]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelsConfig {
    allowed_providers: Option<Vec<String>>,
    allowed_models: Option<Vec<String>>,
    #[serde(default)]
    blocked_models: Vec<String>,
}

/// The armed control; every list is lower-cased once here.
#[derive(Debug)]
pub(crate) struct Models {
    allowed_providers: Option<Vec<String>>,
    allowed_models: Option<Vec<String>>,
    blocked_models: Vec<String>,
}

fn lower(list: Vec<String>) -> Vec<String> {
    list.into_iter().map(|s| s.to_lowercase()).collect()
}

impl Models {
    /// Normalizes the lists.
    pub fn new(config: ModelsConfig) -> Result<Models, String> {
        Ok(Models {
            allowed_providers: config.allowed_providers.map(lower),
            allowed_models: config.allowed_models.map(lower),
            blocked_models: lower(config.blocked_models),
        })
    }

    /// Objects to a provider or model outside the lists.
    pub fn check(&self, req: &EnforcementRequest) -> Option<Objection> {
        if let (Some(provider), Some(allowed)) = (&req.model_provider, &self.allowed_providers) {
            if !allowed.contains(&provider.to_lowercase()) {
                return Some(refuse(
                    ReasonCode::ModelProviderNotAllowed,
                    format!("Model provider `{provider}` is not on the pack's provider allowlist."),
                ));
            }
        }
        let model = req.model_name.as_ref()?;
        let name = model.to_lowercase();
        if glob::any_matches(&self.blocked_models, &name) {
            return Some(refuse(
                ReasonCode::ModelNotAllowed,
                format!("Model `{model}` is on the pack's model denylist."),
            ));
        }
        let allowed = self.allowed_models.as_ref()?;
        (!glob::any_matches(allowed, &name)).then(|| {
            refuse(
                ReasonCode::ModelNotAllowed,
                format!("Model `{model}` is not on the pack's model allowlist."),
            )
        })
    }
}

fn refuse(code: ReasonCode, reason: String) -> Objection {
    Objection {
        effect: AuthorizationDecision::Deny,
        code,
        severity: Severity::High,
        classification: ActionClassification::ModelGovernance,
        risk: 25.0,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;

    #[test]
    fn models_table() {
        let models = Models::new(
            toml::from_str(
                "allowed_providers = [\"OpenAI\", \"anthropic\"]\n\
                 allowed_models = [\"gpt-4o*\", \"claude-*\"]\nblocked_models = [\"*-preview\"]",
            )
            .unwrap(),
        )
        .unwrap();
        let cases = [
            (None, None, None),
            (Some("openai"), Some("gpt-4o-mini"), None),
            (Some("Anthropic"), Some("Claude-3-5-Sonnet"), None),
            (
                Some("acme"),
                Some("gpt-4o"),
                Some(ReasonCode::ModelProviderNotAllowed),
            ),
            (
                Some("openai"),
                Some("gpt-3.5-turbo"),
                Some(ReasonCode::ModelNotAllowed),
            ),
            (
                None,
                Some("claude-next-preview"),
                Some(ReasonCode::ModelNotAllowed),
            ),
            (
                Some("acme"),
                None,
                Some(ReasonCode::ModelProviderNotAllowed),
            ),
        ];
        for (provider, model, want) in cases {
            let mut req = request("llm.complete");
            req.model_provider = provider.map(String::from);
            req.model_name = model.map(String::from);
            let got = models.check(&req);
            assert_eq!(got.as_ref().map(|o| o.code), want, "{provider:?} {model:?}");
        }
    }

    #[test]
    fn absent_lists_allow_anything_and_empty_allowlists_allow_nothing() {
        let mut req = request("llm.complete");
        req.model_provider = Some("acme".into());
        req.model_name = Some("anything".into());
        let open = Models::new(ModelsConfig::default()).unwrap();
        assert!(open.check(&req).is_none());
        let closed = Models::new(toml::from_str("allowed_models = []").unwrap()).unwrap();
        assert_eq!(
            closed.check(&req).map(|o| o.code),
            Some(ReasonCode::ModelNotAllowed)
        );
    }
}
