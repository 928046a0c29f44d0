//! CEL rules (`rules/*.toml`, `[[rule]]` tables; docs/policy.md, "Rules"): parsing, validation,
//! one-time compilation, and evaluation against a decision's CEL scope.
//!
//! A rule whose condition cannot be evaluated (an undeclared optional field, a type error, a
//! non-bool result, even a panic inside the interpreter) does not match; the error is
//! reported as `<rule id>: <message>` in the verdict's `evaluation_errors`.

use super::cel_env;
use super::cel_vars::{self, VarSet};
use super::decide::Raised;
use super::lint::Usage;
use super::pack::{non_empty, points_in_range, timeout_in_range};
use super::prefilter::ToolFilter;
use super::{EnforcementRequest, Finding, PolicyError};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use cel::{Context, Env, Program};
use serde::Deserialize;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// One `rules/*.toml` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<RuleDef>,
}

/// One `[[rule]]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleDef {
    /// Unique across the pack; letters, digits, `_`, `-`, `.`.
    pub id: String,
    /// Plain-language reason reported when the rule decides.
    pub description: String,
    /// CEL condition; must evaluate to a bool.
    pub when: String,
    /// What a match asks for.
    pub effect: RuleEffect,
    /// Hold lifetime for step_up/defer matches, seconds; pack default otherwise.
    #[serde(default)]
    pub step_up_timeout_seconds: Option<u64>,
    /// Keeps its verdict in every enforcement mode; default false.
    #[serde(default)]
    pub always: bool,
    /// Default `medium`.
    #[serde(default = "default_severity")]
    pub severity: Severity,
    /// Default `policy_violation`.
    #[serde(default = "default_classification")]
    pub classification: ActionClassification,
    /// Risk points when matched, 0..=100; default 0.
    #[serde(default)]
    pub risk: f64,
    /// Control ids reported in matched_control_ids.
    #[serde(default)]
    pub controls: Vec<String>,
    /// References reported in policy_references.
    #[serde(default)]
    pub references: Vec<String>,
}

fn default_severity() -> Severity {
    Severity::Medium
}

fn default_classification() -> ActionClassification {
    ActionClassification::PolicyViolation
}

/// `effect` of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RuleEffect {
    /// Records the match (ALLOW; it never overrides a stricter finding).
    Allow,
    /// DENY, `rule_block`.
    Block,
    /// STEP_UP, `rule_step_up`.
    StepUp,
    /// DEFER (returned as STEP_UP), `rule_defer`.
    Defer,
}

impl RuleEffect {
    fn verdict(self) -> (AuthorizationDecision, ReasonCode) {
        match self {
            RuleEffect::Allow => (AuthorizationDecision::Allow, ReasonCode::PolicyAllow),
            RuleEffect::Block => (AuthorizationDecision::Deny, ReasonCode::RuleBlock),
            RuleEffect::StepUp => (AuthorizationDecision::StepUp, ReasonCode::RuleStepUp),
            RuleEffect::Defer => (AuthorizationDecision::Defer, ReasonCode::RuleDefer),
        }
    }
}

/// A validated, compiled rule.
#[derive(Debug)]
pub(crate) struct Rule {
    /// As written.
    pub def: RuleDef,
    /// Pack-relative file it came from.
    pub file: String,
    /// What the condition reads.
    pub usage: Usage,
    /// Tool names the condition can match at all.
    filter: ToolFilter,
    program: Program,
}

/// Every rule of a snapshot, with the CEL environment and root context built once.
pub(crate) struct Rules {
    rules: Vec<Rule>,
    vars: VarSet,
    root: Context<'static, 'static>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Rules {
    /// Parses, validates and compiles `files` (pack-relative path, text), in the order given.
    /// Errors: bad TOML or unknown keys ([`PolicyError::Invalid`]), a condition that does not
    /// compile or a bad `matches` regex ([`PolicyError::Cel`]), a duplicate id.
    pub fn build(files: &[(String, String)]) -> Result<Rules, PolicyError> {
        let env = cel_env::environment()?;
        let mut rules: Vec<Rule> = Vec::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (path, text) in files {
            let file: RuleFile = super::loader::parse_toml(path, text)?;
            for (i, def) in file.rule.into_iter().enumerate() {
                let invalid = |message: String| PolicyError::Invalid {
                    path: path.clone(),
                    message: format!("rule[{i}] ({}): {message}", def.id),
                };
                validate(&def).map_err(invalid)?;
                if let Some(first) = seen.insert(def.id.clone(), path.clone()) {
                    return Err(invalid(format!(
                        "duplicate rule id, first defined in {first}"
                    )));
                }
                rules.push(compile(&env, path, def)?);
            }
        }
        let vars = rules
            .iter()
            .fold(VarSet::default(), |acc, r| acc.union(r.usage.vars()));
        let patterns: Vec<String> = rules
            .iter()
            .flat_map(|r| r.usage.regexes.iter().cloned())
            .collect();
        let root = cel_env::root_context(env, &patterns)?;
        Ok(Rules { rules, vars, root })
    }

    /// The compiled rules, in evaluation order.
    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter()
    }

    /// Evaluates every rule against `req` in one inner scope of the root context, pushing a
    /// finding per match to `out` and an error per failed evaluation to `errors`. Rules whose
    /// tool-name precondition rejects the call are skipped ([`ToolFilter`]: same result).
    pub fn evaluate<'s>(
        &'s self,
        req: &EnforcementRequest,
        out: &mut Vec<Raised<'s>>,
        errors: &mut Vec<String>,
    ) {
        let mut candidates = self
            .rules
            .iter()
            .filter(|r| r.filter.admits(&req.tool_name))
            .peekable();
        if candidates.peek().is_none() {
            return;
        }
        let mut scope = self.root.new_inner_scope();
        cel_vars::bind(&mut scope, req, self.vars);
        for rule in candidates {
            match run(&rule.program, &scope) {
                Ok(true) => out.push(rule.raise()),
                Ok(false) => {}
                Err(message) => errors.push(format!("{}: {message}", rule.def.id)),
            }
        }
    }
}

/// Runs one program; a non-bool result or a panic is an error.
fn run(program: &Program, scope: &Context<'_, '_>) -> Result<bool, String> {
    match catch_unwind(AssertUnwindSafe(|| program.execute(scope))) {
        Ok(Ok(cel::Value::Bool(b))) => Ok(b),
        Ok(Ok(other)) => Err(format!(
            "condition returned {}, not a bool",
            other.type_of()
        )),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the CEL interpreter failed on this input".into()),
    }
}

impl Rule {
    /// The finding of a match.
    fn raise(&self) -> Raised<'_> {
        let (effect, reason_code) = self.def.effect.verdict();
        Raised {
            finding: Finding {
                id: self.def.id.clone(),
                effect,
                reason_code,
                severity: self.def.severity,
                classification: self.def.classification,
                risk: self.def.risk,
                reason: self.def.description.clone(),
                always: self.def.always,
                step_up_timeout_seconds: self.def.step_up_timeout_seconds,
            },
            controls: &self.def.controls,
            references: &self.def.references,
        }
    }
}

/// Field checks serde cannot express; errors name the field.
fn validate(def: &RuleDef) -> Result<(), String> {
    non_empty("id", &def.id)?;
    if !def
        .id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return Err("id: only letters, digits, `_`, `-` and `.` are allowed".into());
    }
    non_empty("description", &def.description)?;
    non_empty("when", &def.when)?;
    points_in_range("risk", def.risk)?;
    if let Some(t) = def.step_up_timeout_seconds {
        timeout_in_range("step_up_timeout_seconds", t)?;
    }
    Ok(())
}

/// Compiles the condition and checks its literal regexes.
fn compile(env: &Env, path: &str, def: RuleDef) -> Result<Rule, PolicyError> {
    let cel_error = |message: String| PolicyError::Cel {
        path: path.to_string(),
        rule: def.id.clone(),
        message,
    };
    let program = env
        .compile(&def.when)
        .map_err(|e| cel_error(format!("when: {}", one_line(&e.to_string()))))?;
    let usage = Usage::of(program.expression());
    let filter = ToolFilter::of(program.expression());
    for pattern in &usage.regexes {
        regex::Regex::new(pattern).map_err(|e| {
            cel_error(format!(
                "when: bad regex {pattern:?}: {}",
                one_line(&e.to_string())
            ))
        })?;
    }
    Ok(Rule {
        def,
        file: path.to_string(),
        usage,
        filter,
        program,
    })
}

/// Multi-line parser messages folded into one line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::request;
    use serde_json::json;

    fn rules(text: &str) -> Result<Rules, PolicyError> {
        Rules::build(&[("rules/t.toml".to_string(), text.to_string())])
    }

    fn rule(id: &str, when: &str, effect: &str) -> String {
        format!("[[rule]]\nid = \"{id}\"\ndescription = \"d\"\nwhen = '{when}'\neffect = \"{effect}\"\n")
    }

    #[test]
    fn matches_errors_and_non_bools() {
        let text = [
            rule("hit", "tool_name == \"shell.exec\"", "block"),
            rule("miss", "tool_name == \"x\"", "step_up"),
            rule("absent", "purpose == \"x\"", "block"),
            rule(
                "guarded",
                "has(request.purpose) && purpose == \"x\"",
                "block",
            ),
            rule("number", "1 + 1", "block"),
            rule(
                "args",
                "has(tool_args.cmd) && tool_args.cmd.contains(\"rm\")",
                "defer",
            ),
        ]
        .concat();
        let rules = rules(&text).unwrap();
        let mut req = request("shell.exec");
        req.tool_args = json!({"cmd": "rm -rf /"}).as_object().cloned();
        let (mut out, mut errors) = (Vec::new(), Vec::new());
        rules.evaluate(&req, &mut out, &mut errors);
        let ids: Vec<&str> = out.iter().map(|r| r.finding.id.as_str()).collect();
        assert_eq!(ids, ["hit", "args"]);
        assert_eq!(out[0].finding.reason_code, ReasonCode::RuleBlock);
        assert_eq!(out[1].finding.effect, AuthorizationDecision::Defer);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("absent: ") && errors[0].contains("purpose"),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("number: ") && errors[1].contains("not a bool"),
            "{errors:?}"
        );
    }

    #[test]
    fn invalid_rules_are_load_errors() {
        let dup = [rule("a", "true", "block"), rule("a", "false", "block")].concat();
        let cases = [
            (rule("a", "tool_name ==", "block"), "when:"),
            (rule("a", "tool_name.matches(\"(\")", "block"), "bad regex"),
            (dup, "duplicate rule id"),
            (rule("a b", "true", "block"), "id:"),
            (rule("a", "true", "explode"), "unknown variant"),
            (
                format!("{}colour = 1\n", rule("a", "true", "block")),
                "unknown field `colour`",
            ),
            (
                format!("{}risk = 120\n", rule("a", "true", "block")),
                "risk:",
            ),
            (
                format!(
                    "{}step_up_timeout_seconds = 0\n",
                    rule("a", "true", "step_up")
                ),
                "step_up_timeout",
            ),
            ("[[rule]]\nid = \"a\"\n".to_string(), "missing field"),
        ];
        for (text, needle) in cases {
            let err = rules(&text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}\n=> {err}");
            assert!(err.contains("rules/t.toml"), "{err}");
        }
    }
}
