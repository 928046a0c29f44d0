//! The outbound DLP control (`[controls.dlp]`): scans every string value of tool_args,
//! recursively, with the configured [`Detector`]s and either redacts (MODIFY,
//! `outbound_dlp_redaction`) or refuses (DENY, `outbound_dlp_block`).
//!
//! Keys (defaults): `action = "redact"` (or `"block"`), `detectors` = all six,
//! `exempt_args = []` (argument paths not scanned, e.g. `"to"` also covers `to[0]` and `to.name`),
//! `exempt_tools = []` (tool globs not scanned). The redacted arguments are computed in both
//! actions, so approvers of a held call see them. Reasons name detectors and argument paths,
//! never the values.

use super::detectors::{redact, Detector, DetectorSet};
use super::Objection;
use crate::policy::{glob, EnforcementRequest};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Nesting deeper than this is not scanned (serde_json refuses deeper input anyway).
const MAX_DEPTH: usize = 128;
/// Argument paths named in a reason before it says "and N more".
const PATHS_SHOWN: usize = 8;

/// What DLP does with a finding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DlpAction {
    /// Replace matches with `[REDACTED:<detector>]` and allow (MODIFY).
    #[default]
    Redact,
    /// Refuse the call (DENY).
    Block,
}

/// The own keys of `[controls.dlp]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DlpConfig {
    #[serde(default)]
    action: DlpAction,
    #[serde(default = "all_detectors")]
    detectors: Vec<Detector>,
    #[serde(default)]
    exempt_args: Vec<String>,
    #[serde(default)]
    exempt_tools: Vec<String>,
}

fn all_detectors() -> Vec<Detector> {
    Detector::ALL.to_vec()
}

/// The armed DLP control.
#[derive(Debug)]
pub(crate) struct Dlp {
    action: DlpAction,
    set: DetectorSet,
    exempt_args: Vec<String>,
    exempt_tools: Vec<String>,
}

/// What DLP found in one call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Redaction {
    /// tool_args with every match replaced by `[REDACTED:<detector>]`.
    pub args: Map<String, Value>,
    /// Which detectors fired at which argument paths (no values).
    pub reason: String,
}

/// One string that needs redaction: where it is and its redacted text.
struct Found {
    pointer: Vec<Step>,
    path: String,
    redacted: String,
    detectors: BTreeSet<Detector>,
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

impl Dlp {
    /// Compiles the detectors. Errors: an empty detector list.
    pub fn new(config: DlpConfig) -> Result<Dlp, String> {
        if config.detectors.is_empty() {
            return Err(
                "detectors: must name at least one detector (or set enabled = false)".into(),
            );
        }
        Ok(Dlp {
            action: config.action,
            set: DetectorSet::new(&config.detectors).map_err(|e| format!("detectors: {e}"))?,
            exempt_args: config.exempt_args,
            exempt_tools: config.exempt_tools,
        })
    }

    /// Scans tool_args; `None` when nothing was found (or the tool is exempt).
    pub fn scan(&self, req: &EnforcementRequest) -> Option<Redaction> {
        let args = req.tool_args.as_ref()?;
        if glob::any_matches(&self.exempt_tools, &req.tool_name) {
            return None;
        }
        let mut found = Vec::new();
        let mut pointer = Vec::new();
        for (key, value) in args {
            pointer.push(Step::Key(key.clone()));
            self.walk(value, &mut pointer, key.clone(), &mut found);
            pointer.pop();
        }
        if found.is_empty() {
            return None;
        }
        let mut redacted = args.clone();
        for f in &found {
            apply(&mut redacted, &f.pointer, &f.redacted);
        }
        Some(Redaction {
            args: redacted,
            reason: describe(&found),
        })
    }

    /// The finding for a redaction, by action.
    pub fn objection(&self, r: &Redaction) -> Objection {
        let (effect, code, severity, risk, verb) = match self.action {
            DlpAction::Redact => (
                AuthorizationDecision::Modify,
                ReasonCode::OutboundDlpRedaction,
                Severity::Medium,
                15.0,
                "redacted",
            ),
            DlpAction::Block => (
                AuthorizationDecision::Deny,
                ReasonCode::OutboundDlpBlock,
                Severity::High,
                30.0,
                "blocked",
            ),
        };
        Objection {
            effect,
            code,
            severity,
            classification: ActionClassification::SensitiveDataExposure,
            risk,
            reason: format!(
                "Sensitive data in the tool arguments was {verb}: {}",
                r.reason
            ),
        }
    }

    fn walk(&self, value: &Value, pointer: &mut Vec<Step>, path: String, found: &mut Vec<Found>) {
        if pointer.len() > MAX_DEPTH || self.exempt(&path) {
            return;
        }
        match value {
            Value::String(text) => {
                let hits = self.set.find(text);
                if !hits.is_empty() {
                    found.push(Found {
                        pointer: pointer.clone(),
                        redacted: redact(text, &hits),
                        detectors: hits.iter().map(|h| h.detector).collect(),
                        path,
                    });
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    pointer.push(Step::Index(i));
                    self.walk(item, pointer, format!("{path}[{i}]"), found);
                    pointer.pop();
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    pointer.push(Step::Key(key.clone()));
                    self.walk(item, pointer, format!("{path}.{key}"), found);
                    pointer.pop();
                }
            }
            _ => {}
        }
    }

    /// True when `path` is an exempt argument or inside one.
    fn exempt(&self, path: &str) -> bool {
        self.exempt_args.iter().any(|e| {
            path.strip_prefix(e.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
    }
}

/// Writes `text` at `pointer` inside `args` (the pointer was taken from the same shape).
fn apply(args: &mut Map<String, Value>, pointer: &[Step], text: &str) {
    let Some((Step::Key(first), rest)) = pointer.split_first() else {
        return;
    };
    let mut slot = args.get_mut(first);
    for step in rest {
        slot = match (slot, step) {
            (Some(Value::Object(m)), Step::Key(k)) => m.get_mut(k),
            (Some(Value::Array(a)), Step::Index(i)) => a.get_mut(*i),
            _ => None,
        };
    }
    if let Some(v) = slot {
        *v = Value::String(text.to_string());
    }
}

/// `email at body, cc[0]; credit_card at note`, detectors in name order.
fn describe(found: &[Found]) -> String {
    let detectors: BTreeSet<Detector> = found
        .iter()
        .flat_map(|f| f.detectors.iter().copied())
        .collect();
    let parts: Vec<String> = detectors
        .iter()
        .map(|d| {
            let paths: Vec<&str> = found
                .iter()
                .filter(|f| f.detectors.contains(d))
                .map(|f| f.path.as_str())
                .collect();
            let mut listed = paths
                .iter()
                .take(PATHS_SHOWN)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            if paths.len() > PATHS_SHOWN {
                listed.push_str(&format!(" and {} more", paths.len() - PATHS_SHOWN));
            }
            format!("{} at {listed}", d.name())
        })
        .collect();
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;
    use serde_json::json;

    fn dlp(toml_text: &str) -> Dlp {
        Dlp::new(toml::from_str(toml_text).unwrap()).unwrap()
    }

    fn with_args(tool: &str, args: Value) -> EnforcementRequest {
        let mut req = request(tool);
        req.tool_args = args.as_object().cloned();
        req
    }

    #[test]
    fn redacts_nested_values_and_names_paths_not_values() {
        let d = dlp("");
        let req = with_args(
            "email.send",
            json!({"body": "card 4111111111111111", "cc": ["x@y.io"], "meta": {"n": 1, "k": "AKIAIOSFODNN7EXAMPLE"}}),
        );
        let r = d.scan(&req).unwrap();
        assert_eq!(r.args["body"], json!("card [REDACTED:credit_card]"));
        assert_eq!(r.args["cc"], json!(["[REDACTED:email]"]));
        assert_eq!(
            r.args["meta"],
            json!({"n": 1, "k": "[REDACTED:aws_access_key]"})
        );
        assert_eq!(
            r.reason,
            "email at cc[0]; credit_card at body; aws_access_key at meta.k"
        );
        assert!(!r.reason.contains("4111"));
        let o = d.objection(&r);
        assert_eq!(
            (o.effect, o.code),
            (
                AuthorizationDecision::Modify,
                ReasonCode::OutboundDlpRedaction
            )
        );
    }

    #[test]
    fn config_table() {
        let req = with_args("email.send", json!({"to": ["a@b.io"], "body": "hi c@d.io"}));
        let cases = [
            ("", Some("email at body, to[0]")),
            ("exempt_args = [\"to\"]", Some("email at body")),
            ("exempt_args = [\"to\", \"body\"]", None),
            ("exempt_tools = [\"email.*\"]", None),
            ("detectors = [\"jwt\"]", None),
        ];
        for (config, want) in cases {
            let got = dlp(config).scan(&req).map(|r| r.reason);
            assert_eq!(got.as_deref(), want, "{config}");
        }
        let block = dlp("action = \"block\"");
        let o = block.objection(&block.scan(&req).unwrap());
        assert_eq!(
            (o.effect, o.code),
            (AuthorizationDecision::Deny, ReasonCode::OutboundDlpBlock)
        );
        assert!(Dlp::new(toml::from_str("detectors = []").unwrap()).is_err());
        assert!(toml::from_str::<DlpConfig>("detectors = [\"dna\"]").is_err());
    }

    #[test]
    fn nothing_to_scan_is_no_finding() {
        let d = dlp("");
        assert!(d.scan(&request("crm.lookup")).is_none());
        assert!(d
            .scan(&with_args("x", json!({"q": "plain text", "n": 5})))
            .is_none());
    }
}
