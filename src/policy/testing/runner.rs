//! The policy test runner: reads `tests/*.toml` (sorted by path), builds each test's request
//! from the file's `[defaults]` and the test's `request`, decides it against the pack, and
//! compares the verdict with the expectations.
//!
//! ```toml
//! [defaults]                      # merged under every request (request keys win)
//! agent_id = "support-bot"
//! [context]                       # optional DecideContext for the file; a test may override it
//! now = "2026-11-20T12:00:00Z"    # RFC 3339; default: the current time
//! session_spent_usd = 0.0
//! session_tokens = 0.0
//! [[test]]
//! name = "rm -rf is blocked"
//! request = { tool_name = "shell.exec", tool_args = { command = "rm -rf /" } }
//! decision = "BLOCK"                      # ALLOW | STEP_UP | BLOCK
//! authorization_decision = "DENY"         # optional
//! decision_reason_code = "rule_block"     # optional
//! matched_rule_ids = ["shell-rm-rf-root"] # optional; each must be among the matched ids
//! ```

use crate::policy::{DecideContext, EnforcementRequest, PolicyError, PolicySnapshot, Verdict};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::fmt;
use std::path::Path;

/// One `tests/*.toml` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    #[serde(default)]
    defaults: toml::Table,
    #[serde(default)]
    context: Option<ContextSpec>,
    #[serde(default)]
    test: Vec<TestCase>,
}

/// The DecideContext of a test; `now` defaults to the current time.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextSpec {
    now: Option<toml::Value>,
    #[serde(default)]
    session_spent_usd: f64,
    #[serde(default)]
    session_tokens: f64,
}

/// One `[[test]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestCase {
    name: String,
    #[serde(default)]
    request: toml::Table,
    #[serde(default)]
    context: Option<ContextSpec>,
    decision: Decision,
    authorization_decision: Option<AuthorizationDecision>,
    decision_reason_code: Option<ReasonCode>,
    #[serde(default)]
    matched_rule_ids: Vec<String>,
}

/// The outcome of one test.
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    /// Test file (as opened).
    pub file: String,
    /// The test's `name`.
    pub name: String,
    /// None when it passed; else `expected X, got Y (reason_code)`.
    pub failure: Option<String>,
}

/// Every test result, in file then test order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestReport {
    /// One per `[[test]]`.
    pub results: Vec<TestResult>,
}

impl TestReport {
    /// Number of passing tests.
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.failure.is_none()).count()
    }

    /// Number of failing tests.
    pub fn failed(&self) -> usize {
        self.results.len() - self.passed()
    }

    /// True when no test failed.
    pub fn ok(&self) -> bool {
        self.failed() == 0
    }
}

impl fmt::Display for TestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            match &r.failure {
                None => writeln!(f, "PASS {}", r.name)?,
                Some(why) => writeln!(f, "FAIL {}: {why}", r.name)?,
            }
        }
        write!(f, "{} passed, {} failed", self.passed(), self.failed())
    }
}

/// Loads the pack in `dir` and runs `dir/tests/*.toml`. A pack that does not load, or a
/// test file that is not valid (bad TOML, unknown keys, a request that is no
/// EnforcementRequest, a bad `now`), is an error naming the file and test; a verdict that
/// differs from the expectations is a failed test in the report.
pub fn run_tests(dir: &Path) -> Result<TestReport, PolicyError> {
    let snapshot = PolicySnapshot::load(dir)?;
    let mut report = TestReport::default();
    for path in test_files(&dir.join("tests"))? {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| PolicyError::Io {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let file: TestFile = crate::policy::loader::parse_toml(&shown, &text)?;
        for (i, case) in file.test.iter().enumerate() {
            let invalid = |message: String| PolicyError::Invalid {
                path: shown.clone(),
                message: format!("test[{i}] ({}): {message}", case.name),
            };
            let req = build_request(&file.defaults, &case.request).map_err(invalid)?;
            let spec = case.context.as_ref().or(file.context.as_ref());
            let ctx = build_context(spec).map_err(invalid)?;
            let verdict = snapshot.decide(&req, &ctx);
            report.results.push(TestResult {
                file: shown.clone(),
                name: case.name.clone(),
                failure: compare(case, &verdict),
            });
        }
    }
    Ok(report)
}

/// `dir/*.toml`, sorted; none when the directory does not exist.
fn test_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, PolicyError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let io = |e: std::io::Error| PolicyError::Io {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "toml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `defaults` overlaid with `request` (request keys win), as an EnforcementRequest.
fn build_request(
    defaults: &toml::Table,
    request: &toml::Table,
) -> Result<EnforcementRequest, String> {
    let mut merged = defaults.clone();
    merged.extend(request.iter().map(|(k, v)| (k.clone(), v.clone())));
    let json = to_json(&toml::Value::Table(merged));
    serde_json::from_value(json).map_err(|e| format!("request: {e}"))
}

/// TOML as JSON; TOML datetimes become RFC 3339 strings.
fn to_json(v: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(items) => J::Array(items.iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            J::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

fn build_context(spec: Option<&ContextSpec>) -> Result<DecideContext, String> {
    let spec = spec.cloned().unwrap_or_default();
    let now = match &spec.now {
        None => Utc::now(),
        Some(v) => {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Datetime(d) => d.to_string(),
                other => {
                    return Err(format!(
                        "context.now: expected an RFC 3339 time, got {other}"
                    ))
                }
            };
            DateTime::parse_from_rfc3339(&text)
                .map_err(|e| format!("context.now: {e}"))?
                .with_timezone(&Utc)
        }
    };
    Ok(DecideContext {
        now,
        session_spent_usd: spec.session_spent_usd,
        session_tokens: spec.session_tokens,
    })
}

/// The first expectation the verdict misses, as `expected X, got Y (reason_code)`.
fn compare(case: &TestCase, v: &Verdict) -> Option<String> {
    let code = v.decision_reason_code;
    let mut failure = if case.decision != v.decision {
        Some(format!(
            "expected {}, got {} ({code})",
            case.decision, v.decision
        ))
    } else if let Some(want) = case
        .authorization_decision
        .filter(|w| *w != v.authorization_decision)
    {
        Some(format!(
            "expected authorization_decision {want}, got {} ({code})",
            v.authorization_decision
        ))
    } else if let Some(want) = case.decision_reason_code.filter(|w| *w != code) {
        Some(format!(
            "expected decision_reason_code {want}, got {code} ({code})"
        ))
    } else {
        case.matched_rule_ids
            .iter()
            .find(|id| !v.matched_rule_ids.contains(id))
            .map(|id| {
                format!(
                    "expected matched_rule_ids to contain {id}, got [{}] ({code})",
                    v.matched_rule_ids.join(", ")
                )
            })
    }?;
    if !v.evaluation_errors.is_empty() {
        failure.push_str(&format!(
            "; evaluation errors: {}",
            v.evaluation_errors.join("; ")
        ));
    }
    Some(failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::{pack_dir, MINIMAL_PACK};

    const RULES: &str = "[[rule]]\nid = \"no-shell\"\ndescription = \"No shell.\"\n\
                         when = 'tool_name == \"shell.exec\"'\neffect = \"block\"\n";

    fn run(tests: &str) -> Result<TestReport, PolicyError> {
        let dir = pack_dir(MINIMAL_PACK, &[("r.toml", RULES)]);
        std::fs::create_dir_all(dir.path().join("tests")).unwrap();
        std::fs::write(dir.path().join("tests/t.toml"), tests).unwrap();
        run_tests(dir.path())
    }

    const DEFAULTS: &str = "[defaults]\nagent_id = \"a\"\ntenant_id = \"t\"\nsession_id = \"s\"\nuser_id = \"u\"\n\
                            approved_scope = [\"*\"]\nsession_tool_calls = []\nenforcement_mode = \"block\"\n";

    #[test]
    fn passing_and_failing_tests_are_reported_like_opa() {
        let tests = format!(
            "{DEFAULTS}[[test]]\nname = \"shell blocked\"\nrequest = {{ tool_name = \"shell.exec\" }}\n\
             decision = \"BLOCK\"\ndecision_reason_code = \"rule_block\"\nmatched_rule_ids = [\"no-shell\"]\n\
             [[test]]\nname = \"wrong\"\nrequest = {{ tool_name = \"crm.lookup\" }}\ndecision = \"BLOCK\"\n\
             [[test]]\nname = \"wrong code\"\nrequest = {{ tool_name = \"shell.exec\" }}\ndecision = \"BLOCK\"\n\
             decision_reason_code = \"scope_violation\"\n\
             [[test]]\nname = \"observe\"\nrequest = {{ tool_name = \"shell.exec\", enforcement_mode = \"observe\" }}\n\
             decision = \"ALLOW\"\ncontext = {{ now = 2026-11-20T12:00:00Z }}\n"
        );
        let report = run(&tests).unwrap();
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "PASS shell blocked");
        assert_eq!(
            lines[1],
            "FAIL wrong: expected BLOCK, got ALLOW (policy_allow)"
        );
        assert_eq!(
            lines[2],
            "FAIL wrong code: expected decision_reason_code scope_violation, got rule_block (rule_block)"
        );
        assert_eq!(lines[3], "PASS observe");
        assert_eq!(lines[4], "2 passed, 2 failed");
        assert!(!report.ok());
    }

    #[test]
    fn invalid_test_files_are_errors_naming_the_test() {
        let cases = [
            ("[[test]]\nname = \"x\"\nrequest = { tool_name = \"a\" }\ndecision = \"BLOCK\"\n", "test[0] (x): request: missing field"),
            (&format!("{DEFAULTS}[[test]]\nname = \"y\"\ndecision = \"MAYBE\"\n"), "unknown variant"),
            (&format!("{DEFAULTS}[[test]]\nname = \"z\"\nrequest = {{ tool_name = \"a\" }}\ndecision = \"ALLOW\"\ncontext = {{ now = \"soon\" }}\n"), "context.now"),
            (&format!("{DEFAULTS}[[test]]\nname = \"w\"\nexpect = 1\ndecision = \"ALLOW\"\n"), "unknown field `expect`"),
        ];
        for (text, needle) in cases {
            let err = run(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
            assert!(err.contains("t.toml"), "{err}");
        }
        let empty = pack_dir(MINIMAL_PACK, &[]);
        let report = run_tests(empty.path()).unwrap();
        assert_eq!(
            (report.to_string().as_str(), report.ok()),
            ("0 passed, 0 failed", true)
        );
    }
}
