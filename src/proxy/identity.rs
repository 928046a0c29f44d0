//! Who is calling through the proxy, and the call context of each request.
//!
//! * Identity: `Proxy-Authorization: Basic base64(<agent_id>:<API key>)`, so
//!   `HTTPS_PROXY=http://agent-id:KEY@127.0.0.1:8180` works in every HTTP client. The key must be
//!   valid, unrevoked, unexpired, carry `execute`, and its scope must cover the agent; its tenant
//!   is the call's tenant_id. Without credentials the answer is 407, unless the pack sets
//!   `[proxy] require_auth = false`, which attributes such calls to `default_agent` in
//!   `default_tenant`.
//! * Context: `X-Toolgate-User-Id`, `X-Toolgate-Session-Id`, `X-Toolgate-Session-Intent`,
//!   `X-Toolgate-Purpose` request headers (stripped before forwarding), then MCP's
//!   `Mcp-Session-Id`, then the pack's `[agents.<id>]` defaults (which also give
//!   `approved_scope` and `enforcement_mode`). An agent without defaults has an empty
//!   approved_scope, so the scope control refuses its calls: fail closed.

use super::Proxy;
use crate::api::ApiError;
use crate::auth::scope::{check_runtime, RuntimeTarget};
use crate::auth::{ApiKeyRecord, AuthError, Permission};
use crate::policy::PolicySnapshot;
use crate::vocab::EnforcementMode;
use base64::Engine;
use http::HeaderMap;
use std::sync::Arc;

/// Request headers that carry call context; all `x-toolgate-*` headers are removed upstream.
pub const USER_HEADER: &str = "x-toolgate-user-id";
/// See [`USER_HEADER`].
pub const SESSION_HEADER: &str = "x-toolgate-session-id";
/// See [`USER_HEADER`].
pub const INTENT_HEADER: &str = "x-toolgate-session-intent";
/// See [`USER_HEADER`].
pub const PURPOSE_HEADER: &str = "x-toolgate-purpose";
/// MCP's streamable-HTTP session header.
pub const MCP_SESSION_HEADER: &str = "mcp-session-id";

/// The authenticated caller of a proxied request (no `Debug`: it holds the presented key).
#[derive(Clone)]
pub struct Identity {
    /// Tenant: the key's (or the pack's default tenant).
    pub tenant_id: String,
    /// Agent: the Basic user name (or the pack's default agent).
    pub agent_id: String,
    /// The presented key, kept to re-check revocation for each request of a long tunnel.
    presented: Option<Arc<str>>,
}

/// Authenticates the `Proxy-Authorization` header of a CONNECT or plain request.
///
/// Errors: 407 (missing, malformed, invalid, revoked or expired credentials), 403 (key without
/// `execute`, or a scope that does not cover the agent), 429 (rate limit).
pub fn authenticate(proxy: &Proxy, headers: &HeaderMap) -> Result<Identity, ApiError> {
    let Some(raw) = headers.get(http::header::PROXY_AUTHORIZATION) else {
        return default_identity(proxy);
    };
    let (agent_id, key) = parse_basic(raw.as_bytes()).ok_or_else(|| {
        ApiError::ProxyAuthRequired(
            "malformed Proxy-Authorization: expected Basic base64(<agent_id>:<API key>)".into(),
        )
    })?;
    let record = admit(proxy, &key)?;
    check_agent(proxy, &record, &agent_id)?;
    Ok(Identity {
        tenant_id: record.tenant_id.clone(),
        agent_id,
        presented: Some(key.into()),
    })
}

/// Re-checks the key of a tunnel's identity for one more request (revocation, expiry, rate
/// limit). Errors as [`authenticate`].
pub fn recheck(proxy: &Proxy, identity: &Identity) -> Result<(), ApiError> {
    match &identity.presented {
        Some(key) => admit(proxy, key).map(|_| ()),
        None => Ok(()),
    }
}

fn default_identity(proxy: &Proxy) -> Result<Identity, ApiError> {
    let snapshot = proxy.core.policy.current();
    match snapshot.proxy().default_identity() {
        Some((tenant, agent)) if !snapshot.proxy().require_auth() => Ok(Identity {
            tenant_id: tenant.to_string(),
            agent_id: agent.to_string(),
            presented: None,
        }),
        _ => Err(ApiError::ProxyAuthRequired(
            "proxy authentication required: use http://<agent_id>:<API key>@<proxy address> as \
             the proxy URL (an API key with the execute permission)"
                .into(),
        )),
    }
}

fn admit(proxy: &Proxy, key: &str) -> Result<Arc<ApiKeyRecord>, ApiError> {
    let record = crate::auth::extract::admit_key(&proxy.core, key).map_err(|e| match e {
        AuthError::Missing | AuthError::Invalid | AuthError::Revoked | AuthError::Expired => {
            ApiError::ProxyAuthRequired(format!("proxy authentication failed: {e}"))
        }
        other => other.into(),
    })?;
    if !record.has(Permission::Execute) {
        return Err(AuthError::PermissionDenied(Permission::Execute.as_str()).into());
    }
    Ok(record)
}

fn check_agent(proxy: &Proxy, record: &ApiKeyRecord, agent_id: &str) -> Result<(), ApiError> {
    let cfg = &proxy.core.config;
    check_runtime(
        record,
        RuntimeTarget {
            tenant_id: &record.tenant_id,
            agent_id,
            fleet_id: cfg.fleet_id.as_deref(),
            endpoint_id: cfg.endpoint_id.as_deref(),
        },
    )?;
    Ok(())
}

/// `Basic base64(user:password)` → (user, password); the user (agent id) must not be empty.
fn parse_basic(raw: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(raw).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    let user = percent_decode(user)?;
    let password = percent_decode(password)?;
    (!user.is_empty() && !password.is_empty()).then_some((user, password))
}

/// Clients percent-encode proxy URL credentials inconsistently; decode `%XX` when present.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The per-request context of a call (everything an EnforcementRequest needs besides the tool).
#[derive(Debug, Clone)]
pub struct CallContext {
    /// User on whose behalf the agent acts.
    pub user_id: String,
    /// Session correlation id.
    pub session_id: String,
    /// Declared intent, if any.
    pub session_intent: Option<String>,
    /// Declared purpose, if any.
    pub purpose: Option<String>,
    /// The agent's approved scope (pack defaults; empty without them).
    pub approved_scope: Vec<String>,
    /// The agent's enforcement mode (pack defaults; `block` without them).
    pub enforcement_mode: EnforcementMode,
}

/// Builds the context from the request headers and the pack's agent defaults.
pub fn call_context(
    identity: &Identity,
    headers: &HeaderMap,
    snapshot: &PolicySnapshot,
) -> CallContext {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(String::from)
    };
    let defaults = snapshot.agent_defaults(&identity.agent_id);
    let session_id = header(SESSION_HEADER)
        .or_else(|| header(MCP_SESSION_HEADER))
        .unwrap_or_else(|| format!("proxy:{}", identity.agent_id));
    CallContext {
        user_id: header(USER_HEADER)
            .or_else(|| defaults.and_then(|d| d.user_id.clone()))
            .unwrap_or_else(|| identity.agent_id.clone()),
        session_id,
        session_intent: header(INTENT_HEADER)
            .or_else(|| defaults.and_then(|d| d.session_intent.clone())),
        purpose: header(PURPOSE_HEADER).or_else(|| defaults.and_then(|d| d.purpose.clone())),
        approved_scope: defaults
            .map(|d| d.approved_scope.clone())
            .unwrap_or_default(),
        enforcement_mode: defaults
            .map(|d| d.enforcement_mode)
            .unwrap_or(EnforcementMode::Block),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_parse_and_bad_ones_do_not() {
        let enc = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert_eq!(
            parse_basic(enc("bot:tgk.a.b").as_bytes()),
            Some(("bot".into(), "tgk.a.b".into()))
        );
        assert_eq!(
            parse_basic(enc("my%20bot:k%2Ey").as_bytes()),
            Some(("my bot".into(), "k.y".into()))
        );
        for bad in [
            enc(":key"),
            enc("bot:"),
            enc("nocolon"),
            "Bearer x".into(),
            "Basic !!!".into(),
            enc("a:%zz"),
        ] {
            assert_eq!(parse_basic(bad.as_bytes()), None, "{bad}");
        }
    }
}
