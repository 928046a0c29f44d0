//! Tests of the [`Explainer`] over the shipped templates (`policy/explanations/`) and a real
//! sled store in a tempdir.

use super::*;
use crate::vocab::Severity;
use std::collections::HashSet;

fn pack() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/explanations")
}

fn fixed_now() -> DateTime<Utc> {
    crate::ids::parse_rfc3339("2026-11-21T12:30:00.123Z").unwrap()
}

fn acme() -> Organization {
    Organization {
        name: Some("Acme".into()),
        dashboard_url: Some("https://dash.acme.example/".into()),
    }
}

/// An explainer over the shipped pack, with its store's tempdir (kept alive by the caller).
fn explainer(org: Organization) -> (Explainer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (Explainer::load(&pack(), org, &store).unwrap(), dir)
}

fn full_request(decision: ExplainDecision) -> ExplainRequest {
    ExplainRequest {
        tenant_id: Some("acme-prod".into()),
        violation_id: Some("vio_0193abc".into()),
        session_id: Some("sess-42".into()),
        agent_id: Some("support-bot".into()),
        user_id: Some("alice@acme.example".into()),
        tool_name: Some("shell.exec".into()),
        decision,
        decision_reason_code: Some("rule_block".into()),
        action_classification: Some(ActionClassification::DestructiveAction),
        risk_score: Some(91.0),
        matched_rule_ids: vec!["shell-etc-write".into()],
        step_up_timeout_seconds: Some(300),
        occurred_at: Some("2026-11-21T11:00:00+01:00".into()),
        ..Default::default()
    }
}

#[test]
fn equal_input_gives_equal_text_twice_and_across_instances() {
    let (a, _d1) = explainer(acme());
    let (b, _d2) = explainer(acme());
    let mut req = full_request(ExplainDecision::Block);
    req.regulatory_regimes = vec!["GDPR".into(), "Internal-7".into()];
    let first = a.build(&req, fixed_now()).unwrap();
    let again = a.build(&req, fixed_now()).unwrap();
    let other = b.build(&req, fixed_now()).unwrap();
    assert_eq!(first, again);
    assert_eq!(first, other);
    assert_eq!(
        serde_json::to_string(&first).unwrap(),
        serde_json::to_string(&other).unwrap()
    );
    // Without occurred_at the text depends on `now`, and only on it.
    req.occurred_at = None;
    let later = crate::ids::parse_rfc3339("2026-11-22T08:00:00Z").unwrap();
    assert_eq!(a.build(&req, later).unwrap(), b.build(&req, later).unwrap());
    assert_ne!(
        a.build(&req, later).unwrap(),
        a.build(&req, fixed_now()).unwrap()
    );
}

#[test]
fn what_happened_names_who_what_and_when() {
    let (ex, _d) = explainer(Organization::default());
    let e = ex
        .build(&full_request(ExplainDecision::Block), fixed_now())
        .unwrap();
    assert!(
        e.what_happened.starts_with(
            "On 2026-11-21 10:00:00 UTC, the agent \"support-bot\", acting for the user \
             \"alice@acme.example\", tried to call the tool \"shell.exec\" in session \"sess-42\""
        ),
        "{}",
        e.what_happened
    );
    let bare = ex.build(&ExplainRequest::default(), fixed_now()).unwrap();
    assert!(
        bare.what_happened
            .starts_with("On 2026-11-21 12:30:00 UTC, an agent tried to call a tool."),
        "{}",
        bare.what_happened
    );
    assert_eq!(bare.timestamp, "2026-11-21T12:30:00.123Z");
}

#[test]
fn wording_differs_by_decision() {
    let (ex, _d) = explainer(Organization::default());
    let build = |d| ex.build(&full_request(d), fixed_now()).unwrap();
    let expected = [
        (ExplainDecision::Block, "It was blocked, so the tool did not run."),
        (ExplainDecision::StepUp, "held for approval: the tool has not run yet, and the hold times out after 300 seconds (5 minutes)"),
        (ExplainDecision::Defer, "held for approval: the tool has not run yet, and the hold times out after 300 seconds (5 minutes)"),
        (ExplainDecision::Modify, "It ran with redacted arguments"),
        (ExplainDecision::Allow, "It was allowed and ran normally."),
    ];
    let mut seen = HashSet::new();
    for (decision, phrase) in expected {
        let e = build(decision);
        assert_eq!(e.decision, decision);
        assert!(
            e.what_happened.contains(phrase),
            "{decision:?}: {}",
            e.what_happened
        );
        assert!(
            seen.insert((e.why_it_was_blocked.clone(), e.what_to_do_next.clone())),
            "{decision:?}"
        );
    }
    assert!(build(ExplainDecision::Defer)
        .why_it_was_blocked
        .contains("deferred the decision to a person"));
    assert!(build(ExplainDecision::Block)
        .what_to_do_next
        .contains("Do not retry the same call unchanged"));
    assert!(build(ExplainDecision::StepUp)
        .what_to_do_next
        .contains("within 300 seconds (5 minutes)"));
}

#[test]
fn wording_differs_by_classification_and_policy_violation_uses_default() {
    let (ex, _d) = explainer(Organization::default());
    let mut whys = HashSet::new();
    let mut impacts = HashSet::new();
    for c in ActionClassification::ALL {
        let expected_file = match c {
            ActionClassification::PolicyViolation => "default.j2".to_string(),
            other => format!("{}.j2", other.as_str()),
        };
        assert_eq!(ex.template_name(Some(*c)), expected_file);
        let req = ExplainRequest {
            action_classification: Some(*c),
            ..full_request(ExplainDecision::Block)
        };
        let e = ex.build(&req, fixed_now()).unwrap();
        assert!(
            whys.insert(e.why_it_was_blocked.clone()),
            "{c}: why repeats another file's"
        );
        assert!(
            impacts.insert(e.business_impact.clone()),
            "{c}: impact repeats another file's"
        );
    }
    let none = ex.build(&ExplainRequest::default(), fixed_now()).unwrap();
    let pv = ExplainRequest {
        action_classification: Some(ActionClassification::PolicyViolation),
        ..Default::default()
    };
    assert_eq!(
        ex.build(&pv, fixed_now()).unwrap().business_impact,
        none.business_impact
    );
}

#[test]
fn organization_settings_change_the_wording_and_the_request_url() {
    let (plain, _d1) = explainer(Organization::default());
    let (org, _d2) = explainer(acme());
    let req = full_request(ExplainDecision::Block);
    let a = plain.build(&req, fixed_now()).unwrap();
    let b = org.build(&req, fixed_now()).unwrap();
    assert_eq!(a.request_url, "");
    assert!(a
        .what_to_do_next
        .contains("ask your security team for an exception, quoting violation ID \"vio_0193abc\""));
    assert!(a
        .why_it_was_blocked
        .contains("Your organization's security policy"));
    let url = "https://dash.acme.example/exceptions/new?tenant_id=acme-prod&violation_id=vio_0193abc&tool_name=shell.exec";
    assert_eq!(b.request_url, url);
    assert!(b.what_to_do_next.ends_with(url), "{}", b.what_to_do_next);
    assert!(b.why_it_was_blocked.contains("The Acme security policy"));
    let held = org
        .build(&full_request(ExplainDecision::StepUp), fixed_now())
        .unwrap();
    assert!(held.what_to_do_next.contains("the Acme security team"));
}

#[test]
fn regulatory_context_is_null_without_regimes_and_names_each_one_with() {
    let (ex, _d) = explainer(Organization::default());
    let mut req = full_request(ExplainDecision::Block);
    assert_eq!(
        ex.build(&req, fixed_now()).unwrap().regulatory_context,
        None
    );
    req.regulatory_regimes = vec!["pci-dss".into(), "HIPAA".into(), "Acme Rulebook".into()];
    let e = ex.build(&req, fixed_now()).unwrap();
    let text = e.regulatory_context.unwrap();
    assert!(
        text.contains("PCI DSS (the payment card industry standard"),
        "{text}"
    );
    assert!(text.contains("HIPAA (the US law"), "{text}");
    assert!(text.contains("; Acme Rulebook."), "{text}");
    assert_eq!(
        e.regulatory_regimes, req.regulatory_regimes,
        "echoed as sent"
    );
}

#[test]
fn serialized_explanation_has_empty_lists_and_null_scalars() {
    let (ex, _d) = explainer(Organization::default());
    let v =
        serde_json::to_value(ex.build(&ExplainRequest::default(), fixed_now()).unwrap()).unwrap();
    for key in [
        "violation_id",
        "tenant_id",
        "agent_id",
        "tool_name",
        "risk_score",
        "regulatory_context",
    ] {
        assert_eq!(v[key], serde_json::Value::Null, "{key}");
    }
    for key in [
        "regulatory_regimes",
        "matched_rule_ids",
        "matched_control_ids",
        "policy_references",
    ] {
        assert_eq!(v[key], serde_json::json!([]), "{key}");
    }
    assert_eq!(
        (v["decision"].as_str(), v["severity"].as_str()),
        (Some("BLOCK"), Some("medium"))
    );
}

#[test]
fn severity_is_the_requests_else_derived_from_risk() {
    let (ex, _d) = explainer(Organization::default());
    let req = full_request(ExplainDecision::Block);
    assert_eq!(
        ex.build(&req, fixed_now()).unwrap().severity,
        Severity::Critical
    );
    let low = ExplainRequest {
        severity: Some(Severity::Low),
        ..req
    };
    let e = ex.build(&low, fixed_now()).unwrap();
    assert_eq!(e.severity, Severity::Low);
    assert!(e
        .why_it_was_blocked
        .contains("severity low; risk score 91 out of 100"));
}

#[test]
fn reason_codes_for_hold_outcomes_and_observe_mode_are_worded() {
    let (ex, _d) = explainer(Organization::default());
    let with_code = |decision, code: &str| {
        let req = ExplainRequest {
            decision_reason_code: Some(code.into()),
            ..full_request(decision)
        };
        ex.build(&req, fixed_now()).unwrap().why_it_was_blocked
    };
    assert!(with_code(ExplainDecision::Block, "hold_timeout")
        .contains("nobody approved it before the hold timed out"));
    assert!(with_code(ExplainDecision::Block, "hold_denied").contains("denied it"));
    assert!(with_code(ExplainDecision::Allow, "observe_mode").contains("running in observe mode"));
}

#[test]
fn invalid_input_is_rejected_naming_the_field() {
    let (ex, _d) = explainer(Organization::default());
    let req = ExplainRequest {
        occurred_at: Some("21/11/2026".into()),
        ..Default::default()
    };
    match ex.build(&req, fixed_now()) {
        Err(ExplainError::Invalid(msg)) => assert!(msg.starts_with("occurred_at: "), "{msg}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    let req = ExplainRequest {
        tool_name: Some("x".repeat(300)),
        ..Default::default()
    };
    assert!(
        matches!(ex.build(&req, fixed_now()), Err(ExplainError::Invalid(m)) if m.starts_with("tool_name: "))
    );
}

#[test]
fn not_found_has_the_spec_text() {
    assert_eq!(
        ExplainError::NotFound.to_string(),
        "human explanation not found"
    );
}

#[test]
fn loading_a_pack_without_default_fails_naming_the_file() {
    let templates = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).unwrap();
    let own = std::fs::read_to_string(pack().join("routine.j2")).unwrap();
    std::fs::write(templates.path().join("routine.j2"), own).unwrap();
    match Explainer::load(templates.path(), Organization::default(), &store) {
        Err(ExplainError::Template(msg)) => assert!(msg.contains("default.j2"), "{msg}"),
        Err(other) => panic!("expected Template, got {other}"),
        Ok(_) => panic!("loaded without default.j2"),
    }
}

#[tokio::test]
async fn created_explanations_are_stored_per_tenant_and_read_back_unchanged() {
    let data = tempfile::tempdir().unwrap();
    // One unit in the last place above 0.11: serde_json reads its text back as 0.11.
    let awkward = f64::from_bits(0.11f64.to_bits() + 1);
    let req = ExplainRequest {
        risk_score: Some(awkward),
        ..full_request(ExplainDecision::Block)
    };
    let created = {
        let store = Store::open(data.path()).unwrap();
        let ex = Explainer::load(&pack(), acme(), &store).unwrap();
        let created = ex.create(req.clone(), "acme-prod").await.unwrap();
        assert_eq!(ex.get("acme-prod", "vio_0193abc").unwrap(), created);
        assert!(matches!(
            ex.get("other-tenant", "vio_0193abc"),
            Err(ExplainError::NotFound)
        ));
        assert!(matches!(
            ex.get("acme-prod", "vio_other"),
            Err(ExplainError::NotFound)
        ));
        created
    };
    // A reopened store (a restart) still has it: create flushed before returning.
    let store = Store::open(data.path()).unwrap();
    let ex = Explainer::load(&pack(), acme(), &store).unwrap();
    let read = ex.get("acme-prod", "vio_0193abc").unwrap();
    assert_eq!(read, created);
    assert_eq!(
        serde_json::to_string(&read).unwrap(),
        serde_json::to_string(&created).unwrap()
    );
}

#[tokio::test]
async fn requests_without_violation_id_are_returned_but_not_stored() {
    let (ex, _d) = explainer(Organization::default());
    let req = ExplainRequest {
        violation_id: None,
        ..full_request(ExplainDecision::Block)
    };
    let e = ex.create(req, "acme-prod").await.unwrap();
    assert_eq!(e.violation_id, None);
    assert!(ex.store.tree(TreeName::Explanations).is_empty());
}

#[tokio::test]
async fn storing_needs_a_valid_storage_tenant() {
    let (ex, _d) = explainer(Organization::default());
    let err = ex
        .create(full_request(ExplainDecision::Block), "")
        .await
        .unwrap_err();
    assert!(
        matches!(err, ExplainError::Invalid(ref m) if m.starts_with("tenant_id: ")),
        "{err}"
    );
    assert!(matches!(
        ex.get("a\u{1f}b", "c"),
        Err(ExplainError::NotFound)
    ));
}

#[test]
fn the_explainer_can_be_shared_across_tasks() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Explainer>();
}
