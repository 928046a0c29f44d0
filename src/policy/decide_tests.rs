//! Unit tests of the decision algorithm (`decide.rs`), end to end through a small pack.

use crate::policy::test_support::{ctx, pack_dir, request};
use crate::policy::{EnforcementRequest, PolicySnapshot, Verdict};
use crate::vocab::{ActionClassification, Severity};
use crate::vocab::{
    AuthorizationDecision as A, Decision as D, EnforcementMode as M, ReasonCode as R,
};
use serde_json::json;

const PACK: &str = r#"
name = "t"
version = "1"
[risk]
step_up_at = 60
block_at = 90
[risk.environments]
prod = 10
[risk.data_classes]
pii = 30
[tools]
"payments.*" = 30
"payments.transfer" = 55
[holds]
default_step_up_timeout_seconds = 200
[controls.scope]
controls = ["CC6.1"]
references = ["SOC2 CC6.1"]
[controls.dlp]
controls = ["CC6.7"]
references = ["SOC2 CC6.7"]
"#;

const RULES: &str = r#"
[[rule]]
id = "shell-any"
description = "Shell needs approval."
when = 'tool_name == "shell.exec"'
effect = "step_up"
step_up_timeout_seconds = 60
controls = ["CC6.1", "CC8.1"]
references = ["SOC2 CC6.1"]

[[rule]]
id = "rm-rf"
description = "Recursive deletes are never allowed."
when = 'has(tool_args.command) && tool_args.command.contains("rm -rf")'
effect = "block"
severity = "critical"
classification = "destructive_action"
always = true
risk = 50

[[rule]]
id = "deploy-defer"
description = "Deploys wait for the release window."
when = 'tool_name == "deploy.run"'
effect = "defer"

[[rule]]
id = "delete-medium"
description = "Deletes are refused."
when = 'tool_name == "fs.delete"'
effect = "block"

[[rule]]
id = "crm-audit"
description = "CRM reads are fine."
when = 'tool_name == "crm.lookup"'
effect = "allow"
controls = ["CC7.2"]

[[rule]]
id = "needs-purpose"
description = "Marketing is never a purpose."
when = 'purpose == "marketing"'
effect = "block"
"#;

fn snapshot() -> PolicySnapshot {
    let dir = pack_dir(PACK, &[("r.toml", RULES)]);
    PolicySnapshot::load(dir.path()).unwrap()
}

fn decide(
    snap: &PolicySnapshot,
    tool: &str,
    mode: M,
    edit: impl FnOnce(&mut EnforcementRequest),
) -> Verdict {
    let mut req = request(tool);
    req.enforcement_mode = mode;
    edit(&mut req);
    let v = snap.decide(&req, &ctx());
    assert_eq!(
        v.decision,
        v.authorization_decision.decision(),
        "decision follows authorization"
    );
    v
}

fn args(v: serde_json::Value) -> Option<serde_json::Map<String, serde_json::Value>> {
    v.as_object().cloned()
}

#[test]
fn verdict_table() {
    let snap = snapshot();
    type Edit = fn(&mut EnforcementRequest);
    let none: Edit = |_| {};
    let out_of_scope: Edit = |r| r.approved_scope = vec!["crm.*".into()];
    let rm: Edit = |r| r.tool_args = args(json!({"command": "rm -rf /tmp/x"}));
    let card: Edit = |r| r.tool_args = args(json!({"note": "card 4111111111111111"}));
    let cases: [(&str, &str, M, Edit, D, A, R); 16] = [
        (
            "clean allow",
            "crm.lookup",
            M::Block,
            none,
            D::Allow,
            A::Allow,
            R::PolicyAllow,
        ),
        (
            "dlp redacts",
            "email.send",
            M::Block,
            card,
            D::Allow,
            A::Modify,
            R::OutboundDlpRedaction,
        ),
        (
            "scope blocks",
            "shell.exec",
            M::Block,
            out_of_scope,
            D::Block,
            A::Deny,
            R::ScopeViolation,
        ),
        (
            "rule steps up",
            "shell.exec",
            M::Block,
            none,
            D::StepUp,
            A::StepUp,
            R::RuleStepUp,
        ),
        (
            "defer is step_up",
            "deploy.run",
            M::Block,
            none,
            D::StepUp,
            A::Defer,
            R::RuleDefer,
        ),
        (
            "observe allows",
            "shell.exec",
            M::Observe,
            out_of_scope,
            D::Allow,
            A::Allow,
            R::ObserveMode,
        ),
        (
            "observe drops modify",
            "email.send",
            M::Observe,
            card,
            D::Allow,
            A::Allow,
            R::ObserveMode,
        ),
        (
            "observe keeps always",
            "shell.exec",
            M::Observe,
            rm,
            D::Block,
            A::Deny,
            R::RuleBlock,
        ),
        (
            "step_up mode softens",
            "shell.exec",
            M::StepUp,
            out_of_scope,
            D::StepUp,
            A::StepUp,
            R::ScopeViolation,
        ),
        (
            "step_up keeps always",
            "shell.exec",
            M::StepUp,
            rm,
            D::Block,
            A::Deny,
            R::RuleBlock,
        ),
        (
            "progressive keeps high",
            "fs.read",
            M::Progressive,
            out_of_scope,
            D::Block,
            A::Deny,
            R::ScopeViolation,
        ),
        (
            "progressive softens medium",
            "fs.delete",
            M::Progressive,
            none,
            D::StepUp,
            A::StepUp,
            R::RuleBlock,
        ),
        (
            "block keeps medium",
            "fs.delete",
            M::Block,
            none,
            D::Block,
            A::Deny,
            R::RuleBlock,
        ),
        (
            "risk steps up",
            "payments.transfer",
            M::Block,
            none,
            D::StepUp,
            A::StepUp,
            R::RiskThresholdStepUp,
        ),
        (
            "risk blocks",
            "payments.transfer",
            M::Block,
            |r| r.data_classification = Some("pii".into()),
            D::Block,
            A::Deny,
            R::RiskThresholdBlock,
        ),
        (
            "observe hides risk",
            "payments.transfer",
            M::Observe,
            none,
            D::Allow,
            A::Allow,
            R::ObserveMode,
        ),
    ];
    for (name, tool, mode, edit, decision, authz, code) in cases {
        let v = decide(&snap, tool, mode, edit);
        assert_eq!(
            (v.decision, v.authorization_decision, v.decision_reason_code),
            (decision, authz, code),
            "{name}: {}",
            v.reason
        );
    }
}

#[test]
fn clean_allow_and_evaluation_errors() {
    let v = decide(&snapshot(), "crm.lookup", M::Block, |_| {});
    assert_eq!(v.reason, "No policy objected to this call.");
    assert_eq!(
        (v.severity, v.action_classification),
        (Severity::Low, ActionClassification::Routine)
    );
    assert_eq!(
        v.matched_rule_ids,
        ["crm-audit"],
        "allow rules are recorded"
    );
    assert_eq!(v.matched_control_ids, ["CC7.2"]);
    assert!(v.step_up_timeout_seconds.is_none() && v.modified_tool_args.is_none());
    // `needs-purpose` reads an absent optional field: no match, one evaluation error.
    assert_eq!(v.evaluation_errors.len(), 1, "{:?}", v.evaluation_errors);
    assert!(
        v.evaluation_errors[0].starts_with("needs-purpose: "),
        "{:?}",
        v.evaluation_errors
    );
    let with_purpose = decide(&snapshot(), "crm.lookup", M::Block, |r| {
        r.purpose = Some("marketing".into())
    });
    assert!(with_purpose.evaluation_errors.is_empty());
    assert_eq!(with_purpose.decision_reason_code, R::RuleBlock);
}

#[test]
fn evidence_lists_are_deduplicated_in_first_seen_order() {
    let v = decide(&snapshot(), "shell.exec", M::Block, |r| {
        r.approved_scope = vec![]
    });
    assert_eq!(v.matched_rule_ids, ["shell-any"]);
    assert_eq!(v.matched_control_ids, ["CC6.1", "CC8.1"]);
    assert_eq!(v.policy_references, ["SOC2 CC6.1"]);
    let ids: Vec<&str> = v.findings.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["control:scope", "shell-any"]);
    assert_eq!(v.raw_authorization_decision, A::Deny);
}

#[test]
fn step_up_timeouts_come_from_the_deciding_finding_or_the_pack() {
    let snap = snapshot();
    let rule = decide(&snap, "shell.exec", M::Block, |_| {});
    assert_eq!(rule.step_up_timeout_seconds, Some(60));
    let default = decide(&snap, "deploy.run", M::Block, |_| {});
    assert_eq!(default.step_up_timeout_seconds, Some(200));
    let softened = decide(&snap, "x", M::StepUp, |r| r.approved_scope = vec![]);
    assert_eq!(softened.step_up_timeout_seconds, Some(200));
    let block = decide(&snap, "x", M::Block, |r| r.approved_scope = vec![]);
    assert_eq!(block.step_up_timeout_seconds, None);
}

#[test]
fn redacted_args_go_with_modify_step_up_and_block_but_not_allow() {
    let snap = snapshot();
    let card = || args(json!({"note": "card 4111111111111111", "command": "ls"}));
    let cases = [
        (M::Block, "email.send", true), // MODIFY
        (M::Block, "shell.exec", true), // STEP_UP from a rule
        (M::Observe, "email.send", false),
    ];
    for (mode, tool, present) in cases {
        let v = decide(&snap, tool, mode, |r| r.tool_args = card());
        assert_eq!(v.modified_tool_args.is_some(), present, "{mode} {tool}");
        assert_eq!(v.modification_reason.is_some(), present, "{mode} {tool}");
        if let Some(a) = v.modified_tool_args {
            assert_eq!(a["note"], json!("card [REDACTED:credit_card]"));
            assert!(v
                .modification_reason
                .unwrap()
                .contains("credit_card at note"));
        }
    }
}

#[test]
fn observe_reason_says_what_would_have_happened() {
    let v = decide(&snapshot(), "fs.delete", M::Observe, |_| {});
    assert!(
        v.reason.contains("would have returned DENY (rule_block)"),
        "{}",
        v.reason
    );
    assert_eq!(v.raw_authorization_decision, A::Deny);
    assert_eq!(v.severity, Severity::Medium);
}

#[test]
fn risk_score_is_bounded_and_explained() {
    let v = decide(&snapshot(), "payments.transfer", M::Block, |r| {
        r.tool_args = args(json!({"command": "rm -rf /"}));
        r.approved_scope = vec![];
    });
    assert_eq!(v.risk_score, 100.0);
    let top: Vec<&str> = v.top_contributors.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        top,
        ["tool_sensitivity", "finding:rm-rf", "finding:control:scope"]
    );
    assert_eq!(v.score_components.len(), 4);
}

#[test]
fn hostile_inputs_do_not_panic() {
    let snap = snapshot();
    let mut deep = json!("leaf");
    for _ in 0..300 {
        deep = json!({ "k": deep });
    }
    type Edit = Box<dyn Fn(&mut EnforcementRequest)>;
    let edits: [Edit; 4] = [
        Box::new(move |r| r.tool_args = args(json!({"command": deep.clone()}))),
        Box::new(|r| r.token_count = Some(f64::NAN)),
        Box::new(|r| r.tool_args = args(json!({"command": 5}))),
        Box::new(|r| r.tool_args = args(json!({"command": "x".repeat(100_000)}))),
    ];
    for edit in edits {
        let v = decide(&snap, "shell.exec", M::Progressive, |r| edit(r));
        assert!((0.0..=100.0).contains(&v.risk_score));
    }
}

#[test]
fn an_absent_environment_is_evaluated_as_prod() {
    let rules = "[[rule]]\nid = \"prod-only\"\ndescription = \"d\"\nwhen = 'environment == \"prod\"'\neffect = \"step_up\"\n";
    let dir = pack_dir(PACK, &[("r.toml", rules)]);
    let snap = PolicySnapshot::load(dir.path()).unwrap();
    let absent = decide(&snap, "crm.lookup", M::Block, |_| {});
    assert_eq!(absent.matched_rule_ids, vec!["prod-only".to_string()]);
    assert!(
        absent.evaluation_errors.is_empty(),
        "{:?}",
        absent.evaluation_errors
    );
    let dev = decide(&snap, "crm.lookup", M::Block, |r| {
        r.environment = Some("dev".into())
    });
    assert!(dev.matched_rule_ids.is_empty());
}
