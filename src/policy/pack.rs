//! The schema of `pack.toml` (docs/policy.md, "pack.toml reference"): serde structs with
//! `deny_unknown_fields`, their defaults, and the value checks serde cannot express.
//!
//! `[controls.*]` tables are kept as raw TOML here and parsed by [`super::controls`], because
//! every control shares a few common keys (serde cannot combine `flatten` with
//! `deny_unknown_fields`).

use crate::vocab::{EnforcementMode, Severity};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Longest hold a pack may ask for: 7 days, in seconds.
pub const MAX_STEP_UP_TIMEOUT_SECONDS: u64 = 7 * 24 * 3600;

/// The whole of `pack.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PackFile {
    /// Pack name (non-empty), reported in [`super::PolicyVersion::name`].
    pub name: String,
    /// Declared version (non-empty), reported in [`super::PolicyVersion::version`].
    pub version: String,
    /// Free text for people.
    #[serde(default)]
    #[allow(dead_code)] // documentation only; accepted so packs can describe themselves
    pub description: Option<String>,
    /// `[risk]`: thresholds and score weights.
    #[serde(default)]
    pub risk: RiskConfig,
    /// `[tools]`: tool-name glob → sensitivity points (0..=100); the longest match wins.
    #[serde(default)]
    pub tools: BTreeMap<String, f64>,
    /// `[controls.<name>]`: raw tables, parsed by the controls module.
    #[serde(default)]
    pub controls: BTreeMap<String, toml::Table>,
    /// `[intents.<name>]`: minimum-necessary tool sets per session_intent.
    #[serde(default)]
    pub intents: BTreeMap<String, IntentConfig>,
    /// `[data_classes.<class>]`: purposes allowed per data_classification.
    #[serde(default)]
    pub data_classes: BTreeMap<String, DataClassConfig>,
    /// `[agents.<id>]`: defaults for calls the proxy intercepts from an agent.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentDefaults>,
    /// `[holds]`: hold defaults.
    #[serde(default)]
    pub holds: HoldsConfig,
    /// `[proxy]`: the forward proxy's settings (validated and compiled by [`super::proxy`]).
    #[serde(default)]
    pub proxy: super::proxy::ProxyConfig,
}

/// `[risk]`: risk thresholds (0..=100, optional) and the weights of score components.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RiskConfig {
    /// A score at or above this raises the verdict to at least STEP_UP. None: no threshold.
    pub step_up_at: Option<f64>,
    /// A score at or above this raises the verdict to BLOCK. None: no threshold.
    pub block_at: Option<f64>,
    /// `[risk.environments]`: environment tag → points (the request's environment, `prod` when absent).
    #[serde(default)]
    pub environments: BTreeMap<String, f64>,
    /// `[risk.data_classes]`: data_classification → points.
    #[serde(default)]
    pub data_classes: BTreeMap<String, f64>,
    /// Points per delegation hop (length of `delegation_context.chain`); default 5.
    #[serde(default = "default_per_hop")]
    pub delegation_per_hop: f64,
}

fn default_per_hop() -> f64 {
    5.0
}

impl Default for RiskConfig {
    fn default() -> Self {
        RiskConfig {
            step_up_at: None,
            block_at: None,
            environments: BTreeMap::new(),
            data_classes: BTreeMap::new(),
            delegation_per_hop: default_per_hop(),
        }
    }
}

/// `[intents.<name>]`: the tools a session with this `session_intent` needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentConfig {
    /// Tool-name globs (`crm.*`) this intent may call.
    pub tools: Vec<String>,
    /// What a call outside `tools` gets; default `step_up`.
    #[serde(default)]
    pub effect: IntentEffect,
    /// Free text for people.
    #[serde(default)]
    #[allow(dead_code)] // documentation only
    pub description: Option<String>,
}

/// The effect of an intent mismatch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum IntentEffect {
    /// Hold for a person (the default).
    #[default]
    StepUp,
    /// Refuse.
    Block,
}

/// `[data_classes.<class>]`: purpose limitation for one data classification.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DataClassConfig {
    /// Purposes a call touching this class may declare.
    pub allowed_purposes: Vec<String>,
    /// Severity of a `purpose_not_permitted` finding; default `high`.
    #[serde(default)]
    pub severity: Option<Severity>,
    /// Free text for people.
    #[serde(default)]
    #[allow(dead_code)] // documentation only
    pub description: Option<String>,
}

/// `[agents.<id>]`: what the forward proxy fills into the EnforcementRequests it builds for
/// calls it intercepts from this agent (the agent does not send them itself).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDefaults {
    /// Tool names (entries may end in `*`) the agent's sessions are scoped to. Default: empty,
    /// so nothing is in scope.
    #[serde(default)]
    pub approved_scope: Vec<String>,
    /// Enforcement mode for the agent's calls. Default: `block`.
    #[serde(default = "default_mode")]
    pub enforcement_mode: EnforcementMode,
    /// User the agent acts for, when the proxy cannot tell.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Declared workflow intent (a key of `[intents]`).
    #[serde(default)]
    pub session_intent: Option<String>,
    /// Declared purpose (checked against `[data_classes]`).
    #[serde(default)]
    pub purpose: Option<String>,
}

fn default_mode() -> EnforcementMode {
    EnforcementMode::Block
}

/// `[holds]`: hold defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HoldsConfig {
    /// Hold lifetime when the deciding finding names none, seconds; default 300,
    /// 1..=604800.
    #[serde(default = "default_timeout")]
    pub default_step_up_timeout_seconds: u64,
}

impl Default for HoldsConfig {
    fn default() -> Self {
        HoldsConfig {
            default_step_up_timeout_seconds: default_timeout(),
        }
    }
}

fn default_timeout() -> u64 {
    300
}

impl PackFile {
    /// Checks values serde accepted but the pack does not allow. Errors name the field,
    /// e.g. `risk.step_up_at: must be a number in 0..=100`.
    pub fn validate(&self) -> Result<(), String> {
        non_empty("name", &self.name)?;
        non_empty("version", &self.version)?;
        self.risk.validate()?;
        for (glob, points) in &self.tools {
            non_empty("tools: a tool pattern", glob)?;
            points_in_range(&format!("tools.\"{glob}\""), *points)?;
        }
        for (name, intent) in &self.intents {
            for (i, tool) in intent.tools.iter().enumerate() {
                non_empty(&format!("intents.{name}.tools[{i}]"), tool)?;
            }
        }
        for (id, agent) in &self.agents {
            for (i, tool) in agent.approved_scope.iter().enumerate() {
                non_empty(&format!("agents.{id}.approved_scope[{i}]"), tool)?;
            }
        }
        timeout_in_range(
            "holds.default_step_up_timeout_seconds",
            self.holds.default_step_up_timeout_seconds,
        )?;
        self.proxy.validate()
    }
}

impl RiskConfig {
    fn validate(&self) -> Result<(), String> {
        if let Some(v) = self.step_up_at {
            points_in_range("risk.step_up_at", v)?;
        }
        if let Some(v) = self.block_at {
            points_in_range("risk.block_at", v)?;
        }
        if let (Some(s), Some(b)) = (self.step_up_at, self.block_at) {
            if s > b {
                return Err("risk.step_up_at: must not be above risk.block_at".into());
            }
        }
        for (env, v) in &self.environments {
            points_in_range(&format!("risk.environments.{env}"), *v)?;
        }
        for (class, v) in &self.data_classes {
            points_in_range(&format!("risk.data_classes.{class}"), *v)?;
        }
        points_in_range("risk.delegation_per_hop", self.delegation_per_hop)
    }
}

/// `Err("<field>: must not be empty")` for an empty or blank string.
pub(crate) fn non_empty(field: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("{field}: must not be empty"));
    }
    Ok(())
}

/// Risk points and thresholds are finite numbers in 0..=100.
pub(crate) fn points_in_range(field: &str, value: f64) -> Result<(), String> {
    if !(0.0..=100.0).contains(&value) {
        return Err(format!("{field}: must be a number in 0..=100, got {value}"));
    }
    Ok(())
}

/// Hold lifetimes are 1..=[`MAX_STEP_UP_TIMEOUT_SECONDS`] seconds.
pub(crate) fn timeout_in_range(field: &str, value: u64) -> Result<(), String> {
    if value == 0 || value > MAX_STEP_UP_TIMEOUT_SECONDS {
        return Err(format!(
            "{field}: must be 1..={MAX_STEP_UP_TIMEOUT_SECONDS} seconds, got {value}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PackFile, String> {
        let pack: PackFile = toml::from_str(text).map_err(|e| e.message().to_string())?;
        pack.validate()?;
        Ok(pack)
    }

    #[test]
    fn minimal_pack_gets_defaults() {
        let pack = parse("name = \"p\"\nversion = \"1\"").unwrap();
        assert_eq!(pack.holds.default_step_up_timeout_seconds, 300);
        assert_eq!(pack.risk.delegation_per_hop, 5.0);
        assert!(pack.risk.step_up_at.is_none());
        let agent: AgentDefaults = toml::from_str("approved_scope = [\"crm.*\"]").unwrap();
        assert_eq!(agent.enforcement_mode, EnforcementMode::Block);
    }

    #[test]
    fn invalid_packs_name_the_field() {
        let base = "name = \"p\"\nversion = \"1\"\n";
        let cases = [
            ("[risk]\nstep_up_at = 150", "risk.step_up_at"),
            ("[risk]\nstep_up_at = 60\nblock_at = 50", "risk.step_up_at"),
            ("[risk.environments]\nprod = -1", "risk.environments.prod"),
            ("[tools]\n\"shell.*\" = 101", "tools.\"shell.*\""),
            (
                "[holds]\ndefault_step_up_timeout_seconds = 0",
                "holds.default",
            ),
            ("[intents.x]\ntools = [\"\"]", "intents.x.tools[0]"),
            ("[risk]\nstep_up = 5", "unknown field `step_up`"),
            (
                "[intents.x]\ntools = []\neffect = \"maybe\"",
                "unknown variant",
            ),
            ("colour = 1", "unknown field `colour`"),
        ];
        for (extra, needle) in cases {
            let err = parse(&format!("{base}{extra}")).unwrap_err();
            assert!(err.contains(needle), "{extra}: {err}");
        }
        assert!(parse("name = \"\"\nversion = \"1\"")
            .unwrap_err()
            .contains("name"));
    }
}
