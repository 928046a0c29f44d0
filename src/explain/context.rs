//! The variables a template sees, derived deterministically from an [`ExplainRequest`], the
//! [`Organization`] settings and the creation time; plus the derived fields of the explanation
//! that do not come from a template (`severity`, `request_url`). docs/explanations.md lists them.

use super::regimes::{self, Regime};
use super::request::{ExplainDecision, ExplainRequest};
use super::Organization;
use crate::vocab::Severity;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Everything a template can use. Request values are passed as data, never spliced into
/// template source, and are validated free of control characters before they get here.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateContext {
    /// Request echoes: the value sent, or `none`.
    pub tenant_id: Option<String>,
    /// See `tenant_id`.
    pub violation_id: Option<String>,
    /// See `tenant_id`.
    pub session_id: Option<String>,
    /// See `tenant_id`.
    pub agent_id: Option<String>,
    /// See `tenant_id`.
    pub user_id: Option<String>,
    /// See `tenant_id`.
    pub tool_name: Option<String>,
    /// See `tenant_id`.
    pub decision_reason_code: Option<String>,
    /// Effective decision: `ALLOW`, `STEP_UP`, `MODIFY`, `DEFER` or `BLOCK`.
    pub decision: &'static str,
    /// Classification wire string, or `none`.
    pub action_classification: Option<&'static str>,
    /// Risk score as sent, or `none`.
    pub risk_score: Option<f64>,
    /// Risk score as text (`87`, `62.5`), or `none`.
    pub risk_text: Option<String>,
    /// Effective severity (see [`effective_severity`]).
    pub severity: &'static str,
    /// Lists as sent (empty when absent).
    pub matched_rule_ids: Vec<String>,
    /// See `matched_rule_ids`.
    pub matched_control_ids: Vec<String>,
    /// See `matched_rule_ids`.
    pub policy_references: Vec<String>,
    /// See `matched_rule_ids`.
    pub approved_scope: Vec<String>,
    /// Regimes resolved for display (empty when none apply).
    pub regimes: Vec<Regime>,
    /// Hold lifetime in seconds, or `none`.
    pub step_up_timeout_seconds: Option<u64>,
    /// Hold lifetime as text (`300 seconds (5 minutes)`), or `none`.
    pub timeout_text: Option<String>,
    /// When the call happened: `YYYY-MM-DD HH:MM:SS UTC` (occurred_at, else creation time).
    pub when: String,
    /// `the agent "<agent_id>"`, or `an agent`.
    pub agent_label: String,
    /// `the tool "<tool_name>"`, or `a tool`.
    pub tool_label: String,
    /// `the user "<user_id>"`, or `a user`.
    pub user_label: String,
    /// Organization name, or `none`.
    pub org_name: Option<String>,
    /// `the <org> security policy`, or `your organization's security policy`.
    pub policy_label: String,
    /// `the <org> security team`, or `your security team`.
    pub security_team: String,
    /// True when a dashboard is configured (then `request_url` is non-empty).
    pub has_dashboard: bool,
    /// The exception link (see [`request_url`]); `""` without a dashboard.
    pub request_url: String,
}

impl TemplateContext {
    /// Builds the context. `now` stands in for a missing `occurred_at`.
    ///
    /// Errors: `occurred_at` does not parse (callers validate first, so this is defensive).
    pub fn new(
        req: &ExplainRequest,
        org: &Organization,
        now: DateTime<Utc>,
    ) -> Result<TemplateContext, String> {
        let when = match &req.occurred_at {
            Some(t) => crate::ids::parse_rfc3339(t).map_err(|e| format!("occurred_at: {e}"))?,
            None => now,
        };
        Ok(TemplateContext::at(req, org, when))
    }

    /// Builds the context for a call that happened at `when` (ignores `req.occurred_at`).
    fn at(req: &ExplainRequest, org: &Organization, when: DateTime<Utc>) -> TemplateContext {
        TemplateContext {
            tenant_id: req.tenant_id.clone(),
            violation_id: req.violation_id.clone(),
            session_id: req.session_id.clone(),
            agent_id: req.agent_id.clone(),
            user_id: req.user_id.clone(),
            tool_name: req.tool_name.clone(),
            decision_reason_code: req.decision_reason_code.clone(),
            decision: req.decision.as_str(),
            action_classification: req.action_classification.map(|c| c.as_str()),
            risk_score: req.risk_score,
            risk_text: req.risk_score.map(risk_text),
            severity: effective_severity(req).as_str(),
            matched_rule_ids: req.matched_rule_ids.clone(),
            matched_control_ids: req.matched_control_ids.clone(),
            policy_references: req.policy_references.clone(),
            approved_scope: req.approved_scope.clone(),
            regimes: regimes::resolve(&req.regulatory_regimes),
            step_up_timeout_seconds: req.step_up_timeout_seconds,
            timeout_text: req.step_up_timeout_seconds.map(duration_text),
            when: format_when(when),
            agent_label: label("the agent", &req.agent_id, "an agent"),
            tool_label: label("the tool", &req.tool_name, "a tool"),
            user_label: label("the user", &req.user_id, "a user"),
            org_name: org.name.clone(),
            policy_label: org_phrase(
                org,
                "security policy",
                "your organization's security policy",
            ),
            security_team: org_phrase(org, "security team", "your security team"),
            has_dashboard: org.dashboard_url.is_some(),
            request_url: request_url(org, req),
        }
    }

    /// A representative context for checking templates at load time: every field set (or
    /// every field empty when `full` is false), with the given decision.
    pub fn sample(org: &Organization, decision: ExplainDecision, full: bool) -> TemplateContext {
        let mut req = ExplainRequest {
            decision,
            ..Default::default()
        };
        if full {
            let some = |s: &str| Some(s.to_string());
            req.violation_id = some("vio_sample");
            req.tenant_id = some("tenant_sample");
            req.session_id = some("session_sample");
            req.agent_id = some("agent_sample");
            req.user_id = some("user_sample");
            req.tool_name = some("tool.sample");
            req.decision_reason_code = some("rule_block");
            req.risk_score = Some(62.5);
            req.regulatory_regimes = vec!["GDPR".into(), "Sample Regime".into()];
            req.matched_rule_ids = vec!["rule-sample".into()];
            req.matched_control_ids = vec!["CC6.1".into()];
            req.policy_references = vec!["SOC2 CC6.1".into()];
            req.approved_scope = vec!["tool.other".into()];
            req.step_up_timeout_seconds = Some(300);
        }
        TemplateContext::at(&req, org, DateTime::<Utc>::UNIX_EPOCH)
    }
}

/// The reported severity: the request's, else from `risk_score` (≥ 85 critical, ≥ 50 high,
/// ≥ 25 medium, else low), else `medium`.
pub fn effective_severity(req: &ExplainRequest) -> Severity {
    match (req.severity, req.risk_score) {
        (Some(s), _) => s,
        (None, Some(r)) if r >= 85.0 => Severity::Critical,
        (None, Some(r)) if r >= 50.0 => Severity::High,
        (None, Some(r)) if r >= 25.0 => Severity::Medium,
        (None, Some(_)) => Severity::Low,
        (None, None) => Severity::Medium,
    }
}

/// The exception link: `<dashboard_url>/exceptions/new?tenant_id=..&violation_id=..&tool_name=..`
/// with only the parameters present (percent-encoded, RFC 3986 unreserved characters kept), no
/// `?` when none is; `""` when the organization has no dashboard.
pub fn request_url(org: &Organization, req: &ExplainRequest) -> String {
    let Some(base) = &org.dashboard_url else {
        return String::new();
    };
    let params = [
        ("tenant_id", &req.tenant_id),
        ("violation_id", &req.violation_id),
        ("tool_name", &req.tool_name),
    ];
    let query: Vec<String> = params
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", percent_encode(v))))
        .collect();
    let mut url = format!("{}/exceptions/new", base.trim_end_matches('/'));
    if !query.is_empty() {
        url.push('?');
        url.push_str(&query.join("&"));
    }
    url
}

/// Percent-encodes everything but RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Trims the organization settings: empty strings become unset, control characters become
/// spaces, and trailing slashes leave the dashboard URL.
pub fn normalize_org(org: Organization) -> Organization {
    let clean = |v: Option<String>| {
        v.map(|s| s.replace(|c: char| c.is_control(), " ").trim().to_string())
            .filter(|s| !s.is_empty())
    };
    Organization {
        name: clean(org.name),
        dashboard_url: clean(org.dashboard_url)
            .map(|u| u.trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty()),
    }
}

fn format_when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn risk_text(r: f64) -> String {
    let s = format!("{r:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

fn duration_text(secs: u64) -> String {
    let plural = |n: u64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    let base = plural(secs, "second");
    if secs >= 3600 && secs % 3600 == 0 {
        format!("{base} ({})", plural(secs / 3600, "hour"))
    } else if secs >= 60 && secs % 60 == 0 {
        format!("{base} ({})", plural(secs / 60, "minute"))
    } else {
        base
    }
}

fn label(prefix: &str, value: &Option<String>, fallback: &str) -> String {
    match value {
        Some(v) => format!("{prefix} \"{v}\""),
        None => fallback.to_string(),
    }
}

fn org_phrase(org: &Organization, noun: &str, fallback: &str) -> String {
    match &org.name {
        Some(name) => format!("the {name} {noun}"),
        None => fallback.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dashboard(url: &str) -> Organization {
        normalize_org(Organization {
            name: None,
            dashboard_url: Some(url.into()),
        })
    }

    #[test]
    fn request_url_needs_a_dashboard_and_encodes_present_params_only() {
        let req = ExplainRequest {
            tenant_id: Some("acme corp".into()),
            violation_id: Some("vio_1/2?&=".into()),
            ..Default::default()
        };
        assert_eq!(request_url(&Organization::default(), &req), "");
        assert_eq!(
            request_url(&dashboard("https://dash.example.com/"), &req),
            "https://dash.example.com/exceptions/new?tenant_id=acme%20corp&violation_id=vio_1%2F2%3F%26%3D"
        );
        assert_eq!(
            request_url(
                &dashboard("https://d.example//"),
                &ExplainRequest::default()
            ),
            "https://d.example/exceptions/new"
        );
        let tool = ExplainRequest {
            tool_name: Some("crm.lookup~é".into()),
            ..Default::default()
        };
        assert_eq!(
            request_url(&dashboard("https://d.example"), &tool),
            "https://d.example/exceptions/new?tool_name=crm.lookup~%C3%A9"
        );
    }

    #[test]
    fn severity_comes_from_the_request_then_risk_then_medium() {
        let with = |severity, risk_score| ExplainRequest {
            severity,
            risk_score,
            ..Default::default()
        };
        let table = [
            (with(Some(Severity::Low), Some(99.0)), Severity::Low),
            (with(None, Some(85.0)), Severity::Critical),
            (with(None, Some(84.9)), Severity::High),
            (with(None, Some(50.0)), Severity::High),
            (with(None, Some(25.0)), Severity::Medium),
            (with(None, Some(24.9)), Severity::Low),
            (with(None, None), Severity::Medium),
        ];
        for (req, want) in table {
            assert_eq!(effective_severity(&req), want, "{:?}", req.risk_score);
        }
    }

    #[test]
    fn texts_are_formatted_deterministically() {
        assert_eq!(risk_text(87.0), "87");
        assert_eq!(risk_text(62.5), "62.5");
        assert_eq!(duration_text(1), "1 second");
        assert_eq!(duration_text(90), "90 seconds");
        assert_eq!(duration_text(300), "300 seconds (5 minutes)");
        assert_eq!(duration_text(7200), "7200 seconds (2 hours)");
        let t = crate::ids::parse_rfc3339("2026-11-21T11:00:00.250+01:00").unwrap();
        assert_eq!(format_when(t), "2026-11-21 10:00:00 UTC");
    }

    #[test]
    fn missing_values_fall_back_to_neutral_words() {
        let ctx = TemplateContext::new(
            &ExplainRequest::default(),
            &Organization::default(),
            DateTime::<Utc>::UNIX_EPOCH,
        )
        .unwrap();
        assert_eq!(ctx.agent_label, "an agent");
        assert_eq!(ctx.tool_label, "a tool");
        assert_eq!(ctx.user_label, "a user");
        assert_eq!(ctx.security_team, "your security team");
        assert_eq!(ctx.when, "1970-01-01 00:00:00 UTC");
        assert_eq!(ctx.decision, "BLOCK");
        assert!(!ctx.has_dashboard && ctx.request_url.is_empty());
    }

    #[test]
    fn organization_settings_are_normalized() {
        let org = normalize_org(Organization {
            name: Some("  Acme\nCorp ".into()),
            dashboard_url: Some("  ".into()),
        });
        assert_eq!(org.name.as_deref(), Some("Acme Corp"));
        assert_eq!(org.dashboard_url, None);
        let ctx = TemplateContext::sample(&org, ExplainDecision::Block, true);
        assert_eq!(ctx.security_team, "the Acme Corp security team");
        assert_eq!(ctx.policy_label, "the Acme Corp security policy");
        assert_eq!(ctx.agent_label, "the agent \"agent_sample\"");
    }
}
