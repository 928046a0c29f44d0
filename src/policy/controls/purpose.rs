//! The purpose-limitation control: a call that declares a `data_classification` known to the
//! pack (`[data_classes.<class>]`) must declare a `purpose` among that class's
//! `allowed_purposes`; otherwise DENY `purpose_not_permitted` (classification
//! `policy_violation`, severity from the class, `high` by default, risk 25). An unknown or
//! absent classification raises nothing. `[controls.purpose]` takes only the common keys.

use super::Objection;
use crate::policy::pack::DataClassConfig;
use crate::policy::EnforcementRequest;
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[controls.purpose]` has no keys of its own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PurposeConfigKeys {}

/// The armed control: the pack's data classes.
#[derive(Debug)]
pub(crate) struct Purposes {
    classes: BTreeMap<String, DataClassConfig>,
}

impl Purposes {
    /// Takes the pack's `[data_classes]`.
    pub fn new(classes: &BTreeMap<String, DataClassConfig>) -> Purposes {
        Purposes {
            classes: classes.clone(),
        }
    }

    /// Objects when the purpose is absent or not allowed for the data class.
    pub fn check(&self, req: &EnforcementRequest) -> Option<Objection> {
        let class_name = req.data_classification.as_deref()?;
        let class = self.classes.get(class_name)?;
        let reason = match req.purpose.as_deref() {
            Some(p) if class.allowed_purposes.iter().any(|a| a == p) => return None,
            Some(p) => format!(
                "Purpose `{p}` is not permitted for `{class_name}` data (allowed: {}).",
                class.allowed_purposes.join(", ")
            ),
            None => format!("`{class_name}` data needs a declared purpose, and none was given."),
        };
        Some(Objection {
            effect: AuthorizationDecision::Deny,
            code: ReasonCode::PurposeNotPermitted,
            severity: class.severity.unwrap_or(Severity::High),
            classification: ActionClassification::PolicyViolation,
            risk: 25.0,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;

    #[test]
    fn purpose_table() {
        let classes: BTreeMap<String, DataClassConfig> = toml::from_str(
            "[phi]\nallowed_purposes = [\"treatment\"]\n\
             [pii]\nallowed_purposes = [\"support\", \"billing\"]\nseverity = \"medium\"",
        )
        .unwrap();
        let control = Purposes::new(&classes);
        let cases = [
            (None, None, None),
            (Some("public"), None, None),
            (Some("phi"), Some("treatment"), None),
            (Some("phi"), Some("marketing"), Some(Severity::High)),
            (Some("phi"), None, Some(Severity::High)),
            (Some("pii"), Some("billing"), None),
            (Some("pii"), Some("ads"), Some(Severity::Medium)),
        ];
        for (class, purpose, want) in cases {
            let mut req = request("crm.lookup");
            req.data_classification = class.map(String::from);
            req.purpose = purpose.map(String::from);
            let got = control.check(&req);
            assert_eq!(
                got.as_ref().map(|o| o.severity),
                want,
                "{class:?} {purpose:?}"
            );
            if let Some(o) = got {
                assert_eq!(o.code, ReasonCode::PurposeNotPermitted);
                assert_eq!(o.effect, AuthorizationDecision::Deny);
            }
        }
    }
}
