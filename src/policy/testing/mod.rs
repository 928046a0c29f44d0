//! `toolgate policy check` and `toolgate policy test`: [`check`] loads a pack and lists
//! warnings; [`run_tests`] runs the pack's `tests/*.toml` policy unit tests (format in
//! docs/policy.md, "Policy tests"). Both reports print like `opa test`.

mod runner;

pub use runner::{run_tests, TestReport, TestResult};

use super::lint;
use super::{PolicyError, PolicySnapshot, PolicyVersion};
use crate::policy::rules::RuleEffect;
use std::fmt;
use std::path::Path;

/// The result of [`check`]: the pack loaded; these are its warnings.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// The loaded pack's version.
    pub version: PolicyVersion,
    /// Number of CEL rules.
    pub rules: usize,
    /// One line each: file, rule id, problem.
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// True when there are no warnings (a pack that fails to load never gets a report).
    pub fn ok(&self) -> bool {
        self.warnings.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pack {} {} (digest {}): {} rules",
            self.version.name,
            self.version.version,
            self.version
                .digest
                .get(..12)
                .unwrap_or(&self.version.digest),
            self.rules
        )?;
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        write!(f, "{} warnings", self.warnings.len())
    }
}

/// Loads the pack in `dir` (any load error is returned as is) and lists warnings:
/// * a rule reads an optional request field (tool_args, environment, purpose, ...) without a
///   `has()` guard, so it errors (and does not match) whenever the field is absent;
/// * a rule references an identifier that is no request field (it can never match);
/// * a rule sets `step_up_timeout_seconds` but its effect is neither step_up nor defer.
pub fn check(dir: &Path) -> Result<CheckReport, PolicyError> {
    let snapshot = PolicySnapshot::load(dir)?;
    // `serve` refuses a pack whose explanation templates do not load; so does `check`.
    let explanations = dir.join("explanations");
    crate::explain::check_templates(&explanations).map_err(|e| PolicyError::Invalid {
        path: explanations.display().to_string(),
        message: e.to_string(),
    })?;
    let mut warnings = Vec::new();
    for rule in snapshot.rules.iter() {
        let prefix = format!("{}: rule `{}`", rule.file, rule.def.id);
        for w in lint::warnings(&rule.usage) {
            warnings.push(format!("{prefix}: {w}"));
        }
        let holds = matches!(rule.def.effect, RuleEffect::StepUp | RuleEffect::Defer);
        if rule.def.step_up_timeout_seconds.is_some() && !holds {
            warnings.push(format!(
                "{prefix}: step_up_timeout_seconds has no effect on a rule that does not step up or defer"
            ));
        }
    }
    Ok(CheckReport {
        version: snapshot.version().clone(),
        rules: snapshot.rules.iter().count(),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::{pack_dir, MINIMAL_PACK};

    /// `pack_dir` plus the default pack's explanation templates.
    fn pack_with_explanations(pack: &str, rules: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = pack_dir(pack, rules);
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/explanations");
        let to = dir.path().join("explanations");
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&from).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
        dir
    }

    #[test]
    fn a_pack_whose_explanations_do_not_load_fails_the_check() {
        let missing = check(pack_dir(MINIMAL_PACK, &[]).path()).unwrap_err();
        assert!(missing.to_string().contains("explanations"), "{missing}");
        let dir = pack_with_explanations(MINIMAL_PACK, &[]);
        std::fs::write(dir.path().join("explanations/default.j2"), "{% if %}").unwrap();
        let broken = check(dir.path()).unwrap_err();
        assert!(broken.to_string().contains("default.j2"), "{broken}");
    }

    #[test]
    fn check_lists_warnings_per_rule() {
        let rules = "[[rule]]\nid = \"env\"\ndescription = \"d\"\nwhen = 'purpose == \"billing\"'\neffect = \"block\"\n\
                     [[rule]]\nid = \"ok\"\ndescription = \"d\"\nwhen = 'has(tool_args.x) && tool_args.x == 1'\neffect = \"step_up\"\n\
                     step_up_timeout_seconds = 60\n\
                     [[rule]]\nid = \"late\"\ndescription = \"d\"\nwhen = 'tool_name == \"x\"'\neffect = \"block\"\n\
                     step_up_timeout_seconds = 60\n";
        let dir = pack_with_explanations(MINIMAL_PACK, &[("r.toml", rules)]);
        let report = check(dir.path()).unwrap();
        assert_eq!(report.rules, 3);
        assert_eq!(report.warnings.len(), 2, "{report}");
        assert!(report.warnings[0].contains("rule `env`: uses optional field `purpose`"));
        assert!(report.warnings[1].contains("rule `late`: step_up_timeout_seconds"));
        assert!(!report.ok());
        let text = report.to_string();
        assert!(text.starts_with("pack test 1 (digest "), "{text}");
        assert!(text.ends_with("2 warnings"), "{text}");

        let clean = check(pack_with_explanations(MINIMAL_PACK, &[]).path()).unwrap();
        assert!(clean.ok());
        assert!(check(pack_dir("name = 1", &[]).path()).is_err());
    }

    #[test]
    fn the_default_pack_checks_clean_and_passes_its_tests() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
        let report = check(&dir).unwrap();
        assert!(report.ok(), "{report}");
        assert!(report.rules >= 15, "{report}");
        let tests = run_tests(&dir).unwrap();
        assert!(tests.ok(), "{tests}");
        assert!(tests.results.len() >= 25, "{tests}");
    }
}
