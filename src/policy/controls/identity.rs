//! The identity control (`[controls.identity]`): binding and freshness of the caller's identity
//! tuple. Classification `identity_risk`; risk 30 (mismatch, expired) or 15 (stale) by default.
//!
//! Accepted `identity_binding` shape (every key optional, other keys ignored):
//! ```json
//! {"user_id": "u-1", "agent_id": "support-bot", "session_id": "s-1",
//!  "issued_at": "2026-11-20T10:00:00Z", "expires_at": "2026-11-20T11:00:00Z"}
//! ```
//! Checks, first failing one decides:
//! 1. user_id / agent_id / session_id present and different from the request's → DENY
//!    `identity_mismatch` (high). A present key that is not a string, or a timestamp that is not
//!    RFC 3339 / ISO 8601, is refused the same way (fail closed), with a reason naming the key.
//! 2. expires_at at or before now → DENY `identity_expired` (high).
//! 3. issued_at more than `max_age_seconds` (key, default 3600) before now → STEP_UP
//!    `identity_stale` (medium). issued_at more than 5 minutes in the future → `identity_mismatch`.
//!
//! No `identity_binding` raises nothing.

use super::Objection;
use crate::policy::{DecideContext, EnforcementRequest};
use crate::vocab::{ActionClassification, AuthorizationDecision, ReasonCode, Severity};
use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Clock skew tolerated for an issued_at in the future, seconds.
const MAX_SKEW_SECONDS: i64 = 300;

/// The own keys of `[controls.identity]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Identity {
    /// Oldest acceptable issued_at, seconds; default 3600.
    #[serde(default = "default_max_age")]
    max_age_seconds: u64,
}

fn default_max_age() -> u64 {
    3600
}

impl Identity {
    /// Validates max_age_seconds (at least 1).
    pub fn new(config: Identity) -> Result<Identity, String> {
        if config.max_age_seconds == 0 || config.max_age_seconds > i64::MAX as u64 / 1000 {
            return Err(format!(
                "max_age_seconds: must be a positive number of seconds, got {}",
                config.max_age_seconds
            ));
        }
        Ok(config)
    }

    /// Objects to a mismatched, malformed, expired or stale binding (first failing check).
    pub fn check(&self, req: &EnforcementRequest, ctx: &DecideContext) -> Option<Objection> {
        let binding = req.identity_binding.as_ref()?;
        bound_to(binding, req)
            .and_then(|()| unexpired(binding, ctx))
            .and_then(|()| self.fresh(binding, ctx))
            .err()
    }

    /// issued_at neither in the future (beyond the skew) nor older than max_age_seconds.
    fn fresh(&self, binding: &Map<String, Value>, ctx: &DecideContext) -> Result<(), Objection> {
        let Some(issued) = timestamp(binding, "issued_at")? else {
            return Ok(());
        };
        let latest = ctx
            .now
            .checked_add_signed(Duration::seconds(MAX_SKEW_SECONDS))
            .unwrap_or(ctx.now);
        if issued > latest {
            return Err(mismatch(format!(
                "The identity binding's issued_at {} is in the future.",
                issued.to_rfc3339()
            )));
        }
        // max_age_seconds is validated in `new` to fit a Duration.
        let max_age = Duration::try_seconds(self.max_age_seconds as i64).unwrap_or(Duration::MAX);
        if ctx.now.signed_duration_since(issued) > max_age {
            return Err(stale(format!(
                "The identity binding was issued at {}, more than {} seconds ago.",
                issued.to_rfc3339(),
                self.max_age_seconds
            )));
        }
        Ok(())
    }
}

/// The binding's user_id, agent_id and session_id, where present, equal the request's.
fn bound_to(binding: &Map<String, Value>, req: &EnforcementRequest) -> Result<(), Objection> {
    let pairs = [
        ("user_id", &req.user_id),
        ("agent_id", &req.agent_id),
        ("session_id", &req.session_id),
    ];
    for (key, actual) in pairs {
        if let Some(bound) = text(binding, key)? {
            if bound != actual {
                return Err(mismatch(format!(
                    "The identity binding's {key} `{bound}` does not match the request's `{actual}`."
                )));
            }
        }
    }
    Ok(())
}

/// expires_at, where present, is after now.
fn unexpired(binding: &Map<String, Value>, ctx: &DecideContext) -> Result<(), Objection> {
    match timestamp(binding, "expires_at")? {
        Some(expires) if expires <= ctx.now => Err(refuse(
            ReasonCode::IdentityExpired,
            format!("The identity binding expired at {}.", expires.to_rfc3339()),
        )),
        _ => Ok(()),
    }
}

/// A string value of the binding; a present non-string is a mismatch (fail closed).
fn text<'a>(binding: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, Objection> {
    match binding.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(mismatch(format!(
            "The identity binding's {key} is not a string, so it cannot be verified."
        ))),
    }
}

/// A timestamp value of the binding; an unparseable one is a mismatch (fail closed).
fn timestamp(binding: &Map<String, Value>, key: &str) -> Result<Option<DateTime<Utc>>, Objection> {
    let Some(raw) = text(binding, key)? else {
        return Ok(None);
    };
    DateTime::parse_from_rfc3339(raw)
        .map(|t| Some(t.with_timezone(&Utc)))
        .map_err(|_| {
            mismatch(format!(
                "The identity binding's {key} is not an ISO 8601 timestamp, so it cannot be verified."
            ))
        })
}

fn mismatch(reason: String) -> Objection {
    refuse(ReasonCode::IdentityMismatch, reason)
}

fn refuse(code: ReasonCode, reason: String) -> Objection {
    Objection {
        effect: AuthorizationDecision::Deny,
        code,
        severity: Severity::High,
        classification: ActionClassification::IdentityRisk,
        risk: 30.0,
        reason,
    }
}

fn stale(reason: String) -> Objection {
    Objection {
        effect: AuthorizationDecision::StepUp,
        code: ReasonCode::IdentityStale,
        severity: Severity::Medium,
        classification: ActionClassification::IdentityRisk,
        risk: 15.0,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::{ctx, request};
    use serde_json::json;

    #[test]
    fn identity_table() {
        let control = Identity::new(toml::from_str("max_age_seconds = 600").unwrap()).unwrap();
        // test_support::ctx() is at 2026-11-20T12:00:00Z; request() is user u-1, agent bot-1, session s-1.
        let cases = [
            (json!({}), None),
            (
                json!({"user_id": "u-1", "agent_id": "bot-1", "session_id": "s-1"}),
                None,
            ),
            (
                json!({"user_id": "u-2"}),
                Some(ReasonCode::IdentityMismatch),
            ),
            (json!({"session_id": 5}), Some(ReasonCode::IdentityMismatch)),
            (
                json!({"expires_at": "2026-11-20T12:00:00Z"}),
                Some(ReasonCode::IdentityExpired),
            ),
            (
                json!({"expires_at": "2026-11-20T13:00:00+01:00"}),
                Some(ReasonCode::IdentityExpired),
            ),
            (json!({"expires_at": "2026-11-20T12:00:01Z"}), None),
            (
                json!({"expires_at": "tomorrow"}),
                Some(ReasonCode::IdentityMismatch),
            ),
            (json!({"issued_at": "2026-11-20T11:55:00Z"}), None),
            (
                json!({"issued_at": "2026-11-20T11:49:59Z"}),
                Some(ReasonCode::IdentityStale),
            ),
            (
                json!({"issued_at": "2026-11-20T12:10:00Z"}),
                Some(ReasonCode::IdentityMismatch),
            ),
            (
                json!({"user_id": "u-2", "expires_at": "2020-01-01T00:00:00Z"}),
                Some(ReasonCode::IdentityMismatch),
            ),
        ];
        for (binding, want) in cases {
            let mut req = request("crm.lookup");
            req.identity_binding = binding.as_object().cloned();
            let got = control.check(&req, &ctx());
            assert_eq!(got.as_ref().map(|o| o.code), want, "{binding}");
            if let Some(o) = got {
                let effect = if o.code == ReasonCode::IdentityStale {
                    AuthorizationDecision::StepUp
                } else {
                    AuthorizationDecision::Deny
                };
                assert_eq!(o.effect, effect, "{binding}");
            }
        }
        assert!(Identity::new(toml::from_str("max_age_seconds = 0").unwrap()).is_err());
    }
}
