//! Scope rules: which tenant, fleet, endpoint and agent a key may act for (SPEC.md,
//! Authentication 6 and 10; the authorize call of the control plane).

use super::keys::{ApiKeyRecord, ScopeLevel};
use super::AuthError;

/// The identity a runtime call claims.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeTarget<'a> {
    /// Request tenant_id.
    pub tenant_id: &'a str,
    /// Request agent_id.
    pub agent_id: &'a str,
    /// Request fleet_id, else the sidecar's configured fleet.
    pub fleet_id: Option<&'a str>,
    /// Request endpoint_id, else the sidecar's configured endpoint.
    pub endpoint_id: Option<&'a str>,
}

/// A scope difference that is allowed but logged (SPEC.md, Authentication 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeNote {
    /// Everything matches.
    Clean,
    /// An endpoint-scoped key used on another (or an unknown) endpoint.
    EndpointMismatch {
        /// The key's endpoint.
        key_endpoint: String,
        /// The endpoint of the call, if known.
        runtime_endpoint: Option<String>,
    },
}

/// Checks a runtime call against the key's tenant and scope.
///
/// Errors: `TenantMismatch` (another tenant), `ScopeDenied` (agent scope for another agent, fleet
/// scope for another or no fleet). An endpoint mismatch is not an error: it returns
/// [`ScopeNote::EndpointMismatch`] so the caller logs a warning.
pub fn check_runtime(key: &ApiKeyRecord, t: RuntimeTarget<'_>) -> Result<ScopeNote, AuthError> {
    if key.tenant_id != t.tenant_id {
        return Err(AuthError::TenantMismatch);
    }
    let target = key.scope_target_id.as_deref().unwrap_or("");
    match key.scope_level {
        ScopeLevel::Organization => Ok(ScopeNote::Clean),
        ScopeLevel::Agent if t.agent_id == target => Ok(ScopeNote::Clean),
        ScopeLevel::Agent => Err(AuthError::ScopeDenied(format!(
            "API key is scoped to agent `{target}`, not `{}`",
            t.agent_id
        ))),
        ScopeLevel::Fleet if t.fleet_id == Some(target) => Ok(ScopeNote::Clean),
        ScopeLevel::Fleet => Err(AuthError::ScopeDenied(format!(
            "API key is scoped to fleet `{target}`; the call names fleet `{}`",
            t.fleet_id.unwrap_or("(none)")
        ))),
        ScopeLevel::Endpoint if t.endpoint_id == Some(target) => Ok(ScopeNote::Clean),
        ScopeLevel::Endpoint => Ok(ScopeNote::EndpointMismatch {
            key_endpoint: target.to_string(),
            runtime_endpoint: t.endpoint_id.map(String::from),
        }),
    }
}

/// The authorize call's `scope_allowed`: does the key's scope cover (resource_type, resource_id)?
/// Organization keys cover everything of their tenant; the others cover exactly their target
/// (`fleet`, `endpoint` or `agent` resource of the same id).
pub fn covers(key: &ApiKeyRecord, resource_type: &str, resource_id: &str) -> bool {
    let target = key.scope_target_id.as_deref();
    match key.scope_level {
        ScopeLevel::Organization => true,
        ScopeLevel::Fleet => resource_type == "fleet" && target == Some(resource_id),
        ScopeLevel::Endpoint => resource_type == "endpoint" && target == Some(resource_id),
        ScopeLevel::Agent => resource_type == "agent" && target == Some(resource_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::keys::Permission;

    fn key(level: ScopeLevel, target: Option<&str>) -> ApiKeyRecord {
        ApiKeyRecord {
            key_id: "key_1".into(),
            tenant_id: "t".into(),
            name: None,
            scope_level: level,
            scope_target_id: target.map(String::from),
            permissions: vec![Permission::Execute],
            created_at: chrono::Utc::now(),
            expires_at: chrono::Utc::now(),
            revoked_at: None,
            secret_hash: String::new(),
        }
    }

    fn target<'a>(
        agent: &'a str,
        fleet: Option<&'a str>,
        endpoint: Option<&'a str>,
    ) -> RuntimeTarget<'a> {
        RuntimeTarget {
            tenant_id: "t",
            agent_id: agent,
            fleet_id: fleet,
            endpoint_id: endpoint,
        }
    }

    #[test]
    fn runtime_scope_table() {
        use ScopeLevel::*;
        let ok = |k: &ApiKeyRecord, t| check_runtime(k, t).is_ok();
        assert!(ok(&key(Organization, None), target("a", None, None)));
        assert!(ok(&key(Agent, Some("a")), target("a", None, None)));
        assert!(!ok(&key(Agent, Some("a")), target("b", None, None)));
        assert!(ok(&key(Fleet, Some("f")), target("a", Some("f"), None)));
        assert!(!ok(&key(Fleet, Some("f")), target("a", Some("g"), None)));
        assert!(!ok(&key(Fleet, Some("f")), target("a", None, None)));
        let note =
            check_runtime(&key(Endpoint, Some("e1")), target("a", None, Some("e2"))).unwrap();
        assert!(matches!(note, ScopeNote::EndpointMismatch { .. }));
        let mut other = key(Organization, None);
        other.tenant_id = "u".into();
        assert!(matches!(
            check_runtime(&other, target("a", None, None)),
            Err(AuthError::TenantMismatch)
        ));
    }

    #[test]
    fn authorize_coverage_table() {
        use ScopeLevel::*;
        assert!(covers(&key(Organization, None), "fleet", "x"));
        assert!(covers(&key(Endpoint, Some("e1")), "endpoint", "e1"));
        assert!(!covers(&key(Endpoint, Some("e1")), "endpoint", "e2"));
        assert!(!covers(&key(Endpoint, Some("e1")), "fleet", "e1"));
        assert!(covers(&key(Agent, Some("a")), "agent", "a"));
        assert!(!covers(&key(Fleet, Some("f")), "fleet", "g"));
    }
}
