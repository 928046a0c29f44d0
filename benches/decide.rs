//! Criterion benchmark of `PolicySnapshot::decide` on the default pack (`policy/`): a clean
//! allow, a DLP redaction, a scope block and a CEL-rule step-up. Target: at most 20 µs median
//! per decision. Run: `cargo bench --bench decide -- --warm-up-time 1 --measurement-time 3`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use std::path::Path;
use toolgate::policy::{DecideContext, EnforcementRequest, PolicySnapshot};
use toolgate::vocab::{AuthorizationDecision, ReasonCode};

/// A request for `tool` with `args`, in block mode, with `scope` as approved_scope.
fn request(tool: &str, scope: &[&str], args: Value) -> EnforcementRequest {
    let body = json!({
        "agent_id": "bench-agent", "tenant_id": "acme", "tool_name": tool,
        "session_id": "sess-1", "user_id": "user-1", "approved_scope": scope,
        "session_tool_calls": ["crm.lookup"], "enforcement_mode": "block",
        "environment": "prod", "tool_args": args,
    });
    match serde_json::from_value(body) {
        Ok(req) => req,
        Err(e) => panic!("bench request does not parse: {e}"),
    }
}

/// (name, request, expected authorization decision, expected reason code)
fn scenarios() -> Vec<(
    &'static str,
    EnforcementRequest,
    AuthorizationDecision,
    ReasonCode,
)> {
    vec![
        (
            "clean_allow",
            request(
                "crm.lookup",
                &["crm.*"],
                json!({"customer_id": "c-42", "fields": ["name", "tier"]}),
            ),
            AuthorizationDecision::Allow,
            ReasonCode::PolicyAllow,
        ),
        (
            "dlp_redaction",
            request(
                "email.send",
                &["email.send"],
                json!({"to": "billing@example.com", "subject": "Refund",
                       "body": "Card 4111 1111 1111 1111 belongs to jane@corp.io"}),
            ),
            AuthorizationDecision::Modify,
            ReasonCode::OutboundDlpRedaction,
        ),
        (
            "scope_block",
            request("shell.exec", &["crm.*"], json!({"command": "ls -la"})),
            AuthorizationDecision::Deny,
            ReasonCode::ScopeViolation,
        ),
        (
            "cel_step_up",
            request(
                "shell.exec",
                &["shell.exec"],
                json!({"command": "echo '1.1.1.1 db' >> /etc/hosts"}),
            ),
            AuthorizationDecision::StepUp,
            ReasonCode::RuleStepUp,
        ),
    ]
}

fn bench_decide(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    let snapshot = match PolicySnapshot::load(&dir) {
        Ok(s) => s,
        Err(e) => panic!("default pack does not load: {e}"),
    };
    let ctx = DecideContext::fresh(chrono::Utc::now());
    let mut group = c.benchmark_group("decide");
    for (name, req, authz, code) in scenarios() {
        let v = snapshot.decide(&req, &ctx);
        assert_eq!(
            (v.authorization_decision, v.decision_reason_code),
            (authz, code),
            "{name}: {}",
            v.reason
        );
        group.bench_function(name, |b| {
            b.iter(|| snapshot.decide(black_box(&req), black_box(&ctx)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
