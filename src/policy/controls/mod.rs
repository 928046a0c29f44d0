//! The built-in controls (one file each) and what they share: the common keys of every
//! `[controls.<name>]` table ([`ControlMeta`]), the [`Objection`] a control raises, and
//! [`Controls`], the armed set a snapshot evaluates in a fixed order.
//!
//! Every control is on by default with the defaults of its own file; `enabled = false` turns
//! it off. Each control raises at most one finding per call (its most severe one), with id
//! `control:<name>`.

pub(crate) mod budget;
pub(crate) mod delegation;
pub(crate) mod detectors;
pub(crate) mod dlp;
pub(crate) mod identity;
pub(crate) mod intent;
pub(crate) mod models;
pub(crate) mod purpose;
pub(crate) mod scope;

use super::decide::Raised;
use super::pack::{points_in_range, PackFile};
use super::{DecideContext, EnforcementRequest, Finding};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// Names of the built-in controls, in evaluation order.
pub const CONTROL_NAMES: &[&str] = &[
    "scope",
    "dlp",
    "budget",
    "models",
    "intent",
    "purpose",
    "delegation",
    "identity",
];

/// Keys every `[controls.<name>]` table accepts besides its own.
const COMMON_KEYS: &[&str] = &[
    "enabled",
    "risk",
    "severity",
    "always",
    "controls",
    "references",
];

/// The common keys of a `[controls.<name>]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ControlMeta {
    /// Default true; false turns the control off.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Risk points of the control's finding (0..=100); each control has its own default.
    #[serde(default)]
    pub risk: Option<f64>,
    /// Overrides the severity of the control's findings.
    #[serde(default)]
    pub severity: Option<Severity>,
    /// True: the control's findings keep their verdict in every enforcement mode.
    #[serde(default)]
    pub always: bool,
    /// Control ids (e.g. `CC6.1`) reported in matched_control_ids when the control fires.
    #[serde(default)]
    pub controls: Vec<String>,
    /// References (e.g. `SOC2 CC6.1`) reported in policy_references when the control fires.
    #[serde(default)]
    pub references: Vec<String>,
}

fn yes() -> bool {
    true
}

/// What a control objects to, before [`ControlMeta`] turns it into a [`Finding`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Objection {
    /// What the control asks for.
    pub effect: AuthorizationDecision,
    /// Reason code when this finding decides.
    pub code: ReasonCode,
    /// Default severity (the meta may override it).
    pub severity: Severity,
    /// Classification.
    pub classification: ActionClassification,
    /// Default risk points (the meta may override them).
    pub risk: f64,
    /// Plain-language reason; never contains secret values.
    pub reason: String,
}

/// One control with its common keys.
#[derive(Debug)]
pub(crate) struct Armed<C> {
    /// Common keys.
    pub meta: ControlMeta,
    /// The control itself.
    pub control: C,
}

impl<C> Armed<C> {
    /// Turns an objection into a raised finding carrying this control's lists.
    fn raise(&self, name: &str, o: Objection) -> Raised<'_> {
        let finding = Finding {
            id: format!("control:{name}"),
            effect: o.effect,
            reason_code: o.code,
            severity: self.meta.severity.unwrap_or(o.severity),
            classification: o.classification,
            risk: self.meta.risk.unwrap_or(o.risk),
            reason: o.reason,
            always: self.meta.always,
            step_up_timeout_seconds: None,
        };
        Raised {
            finding,
            controls: &self.meta.controls,
            references: &self.meta.references,
        }
    }
}

/// Every enabled control of a snapshot.
#[derive(Debug)]
pub(crate) struct Controls {
    scope: Option<Armed<scope::Scope>>,
    dlp: Option<Armed<dlp::Dlp>>,
    budget: Option<Armed<budget::Budget>>,
    models: Option<Armed<models::Models>>,
    intent: Option<Armed<intent::Intents>>,
    purpose: Option<Armed<purpose::Purposes>>,
    delegation: Option<Armed<delegation::Delegation>>,
    identity: Option<Armed<identity::Identity>>,
}

impl Controls {
    /// Parses and compiles the `[controls.*]` tables (plus `[intents]` and `[data_classes]`).
    /// Errors name the field, e.g. `controls.dlp.action: unknown variant ...`.
    pub fn build(pack: &PackFile) -> Result<Controls, String> {
        if let Some(name) = pack
            .controls
            .keys()
            .find(|k| !CONTROL_NAMES.contains(&k.as_str()))
        {
            return Err(format!(
                "controls.{name}: unknown control; expected one of: {}",
                CONTROL_NAMES.join(", ")
            ));
        }
        Ok(Controls {
            scope: arm(pack, "scope", |_: scope::ScopeConfig| Ok(scope::Scope))?,
            dlp: arm(pack, "dlp", dlp::Dlp::new)?,
            budget: arm(pack, "budget", budget::Budget::new)?,
            models: arm(pack, "models", models::Models::new)?,
            intent: arm(pack, "intent", |_: intent::IntentConfigKeys| {
                Ok(intent::Intents::new(&pack.intents))
            })?,
            purpose: arm(pack, "purpose", |_: purpose::PurposeConfigKeys| {
                Ok(purpose::Purposes::new(&pack.data_classes))
            })?,
            delegation: arm(pack, "delegation", delegation::Delegation::new)?,
            identity: arm(pack, "identity", identity::Identity::new)?,
        })
    }

    /// Runs every enabled control in [`CONTROL_NAMES`] order, pushing findings to `out`.
    /// Returns the DLP redaction (redacted tool_args and the modification reason) when DLP
    /// found anything, whatever its action.
    pub fn evaluate<'s>(
        &'s self,
        req: &EnforcementRequest,
        ctx: &DecideContext,
        out: &mut Vec<Raised<'s>>,
    ) -> Option<dlp::Redaction> {
        fire(out, &self.scope, "scope", |c| c.check(req));
        let redaction = self.dlp.as_ref().and_then(|a| a.control.scan(req));
        if let (Some(armed), Some(r)) = (&self.dlp, &redaction) {
            out.push(armed.raise("dlp", armed.control.objection(r)));
        }
        fire(out, &self.budget, "budget", |c| c.check(req, ctx));
        fire(out, &self.models, "models", |c| c.check(req));
        fire(out, &self.intent, "intent", |c| c.check(req));
        fire(out, &self.purpose, "purpose", |c| c.check(req));
        fire(out, &self.delegation, "delegation", |c| c.check(req));
        fire(out, &self.identity, "identity", |c| c.check(req, ctx));
        redaction
    }
}

/// Runs one armed control and pushes its finding, if any.
fn fire<'s, C>(
    out: &mut Vec<Raised<'s>>,
    armed: &'s Option<Armed<C>>,
    name: &str,
    check: impl FnOnce(&C) -> Option<Objection>,
) {
    if let Some(armed) = armed {
        if let Some(objection) = check(&armed.control) {
            out.push(armed.raise(name, objection));
        }
    }
}

/// Reads `[controls.<name>]` (absent: all defaults), splits the common keys from the
/// control's own, and builds the control unless it is disabled.
fn arm<K, C>(
    pack: &PackFile,
    name: &str,
    build: impl FnOnce(K) -> Result<C, String>,
) -> Result<Option<Armed<C>>, String>
where
    K: DeserializeOwned,
{
    let mut own = pack.controls.get(name).cloned().unwrap_or_default();
    let mut common = toml::Table::new();
    for key in COMMON_KEYS {
        if let Some(v) = own.remove(*key) {
            common.insert((*key).to_string(), v);
        }
    }
    let field = |e: toml::de::Error| format!("controls.{name}: {}", e.message().trim());
    let meta: ControlMeta = toml::Value::Table(common).try_into().map_err(field)?;
    let keys: K = toml::Value::Table(own).try_into().map_err(field)?;
    if let Some(risk) = meta.risk {
        points_in_range(&format!("controls.{name}.risk"), risk)?;
    }
    if !meta.enabled {
        return Ok(None);
    }
    let control = build(keys).map_err(|e| format!("controls.{name}.{e}"))?;
    Ok(Some(Armed { meta, control }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::{ctx, request};

    fn controls(extra: &str) -> Controls {
        let pack: PackFile =
            toml::from_str(&format!("name = \"p\"\nversion = \"1\"\n{extra}")).unwrap();
        Controls::build(&pack).unwrap()
    }

    fn ids(c: &Controls, req: &EnforcementRequest) -> Vec<String> {
        let mut out = Vec::new();
        c.evaluate(req, &ctx(), &mut out);
        out.into_iter().map(|r| r.finding.id).collect()
    }

    #[test]
    fn controls_are_on_by_default_and_can_be_disabled() {
        let mut req = request("shell.exec");
        req.approved_scope.clear();
        assert_eq!(ids(&controls(""), &req), ["control:scope"]);
        assert!(ids(&controls("[controls.scope]\nenabled = false"), &req).is_empty());
    }

    #[test]
    fn common_keys_override_the_finding() {
        let c = controls(
            "[controls.scope]\nrisk = 5\nseverity = \"critical\"\nalways = true\n\
             controls = [\"CC6.1\"]\nreferences = [\"SOC2 CC6.1\"]",
        );
        let mut req = request("shell.exec");
        req.approved_scope.clear();
        let mut out = Vec::new();
        c.evaluate(&req, &ctx(), &mut out);
        let r = &out[0];
        assert_eq!(
            (r.finding.risk, r.finding.severity, r.finding.always),
            (5.0, Severity::Critical, true)
        );
        assert_eq!(
            (r.controls, r.references),
            (&["CC6.1".to_string()][..], &["SOC2 CC6.1".to_string()][..])
        );
    }

    #[test]
    fn dlp_returns_the_redaction_with_its_finding() {
        let c = controls("");
        let mut req = request("crm.note");
        req.tool_args = serde_json::json!({"note": "mail a@b.io"})
            .as_object()
            .cloned();
        let mut out = Vec::new();
        let redaction = c.evaluate(&req, &ctx(), &mut out).unwrap();
        assert_eq!(redaction.args["note"], "mail [REDACTED:email]");
        assert_eq!(out[0].finding.id, "control:dlp");
        assert_eq!(out[0].finding.reason_code, ReasonCode::OutboundDlpRedaction);
    }
}
