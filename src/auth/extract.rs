//! axum extractors that authenticate callers.
//!
//! * [`Caller`]: a runtime caller — `X-API-Key: <key>` or `Authorization: Bearer <key>` (the
//!   bearer form carries the same API key; SPEC.md Authentication 2), authenticated, then rate
//!   limited per key. Permission and scope are checked by the handler.
//! * [`Operator`]: a control-plane caller — the administrator bearer token (constant-time
//!   compare) or an API key (same headers).
//! * [`IngestAuth`]: POST /v1/events/batch — the `X-Service-Event-Ingest-Token` header when an
//!   ingest token is configured, else a runtime key.

use super::scope::{check_runtime, RuntimeTarget, ScopeNote};
use super::{ApiKeyRecord, AuthError, Permission};
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Header carrying an API key.
pub const API_KEY_HEADER: &str = "x-api-key";
/// Header carrying the dedicated ingest token.
pub const INGEST_TOKEN_HEADER: &str = "x-service-event-ingest-token";

/// The presented credential: X-API-Key first, then `Authorization: Bearer`.
pub fn presented_credential(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(API_KEY_HEADER) {
        return v.to_str().ok();
    }
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, rest) = auth.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// Constant-time string equality.
pub fn ct_eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// Authenticates a presented API key and spends one request of its rate limit.
///
/// Errors: `Invalid`, `Revoked`, `Expired` (401); `RateLimited` (429).
pub fn admit_key(core: &AppState, presented: &str) -> Result<Arc<ApiKeyRecord>, AuthError> {
    let key = core.keys.authenticate(presented, crate::ids::now())?;
    core.limits.check(&key.key_id)?;
    Ok(key)
}

/// An authenticated, rate-limited runtime caller.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key's record.
    pub key: Arc<ApiKeyRecord>,
}

impl Caller {
    /// Errors: `PermissionDenied` (403) when the key lacks `p`.
    pub fn require(&self, p: Permission) -> Result<(), AuthError> {
        if self.key.has(p) {
            Ok(())
        } else {
            Err(AuthError::PermissionDenied(p.as_str()))
        }
    }

    /// The key's tenant.
    pub fn tenant(&self) -> &str {
        &self.key.tenant_id
    }

    /// Checks a runtime target against the key's scope; logs the allowed endpoint mismatch.
    pub fn check_scope(&self, target: RuntimeTarget<'_>) -> Result<(), AuthError> {
        if let ScopeNote::EndpointMismatch {
            key_endpoint,
            runtime_endpoint,
        } = check_runtime(&self.key, target)?
        {
            tracing::warn!(
                key_id = %self.key.key_id, key_endpoint = %key_endpoint,
                runtime_endpoint = runtime_endpoint.as_deref().unwrap_or("(unknown)"),
                "endpoint-scoped API key used on another endpoint; allowed (SPEC.md Authentication 10)"
            );
        }
        Ok(())
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = crate::api::ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        core: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let presented = presented_credential(&parts.headers).ok_or(AuthError::Missing)?;
        Ok(Caller {
            key: admit_key(core, presented)?,
        })
    }
}

/// A control-plane caller.
#[derive(Debug, Clone)]
pub enum Operator {
    /// The administrator bearer token: every tenant, every permission.
    Admin,
    /// An API key.
    Key(Arc<ApiKeyRecord>),
}

impl Operator {
    /// Checks access to `tenant_id` with permission `p`; `org_only` demands an organization key.
    ///
    /// Errors: `TenantMismatch`, `PermissionDenied`, `ScopeDenied` (all 403).
    pub fn authorize(
        &self,
        tenant_id: &str,
        p: Permission,
        org_only: bool,
    ) -> Result<(), AuthError> {
        let Operator::Key(key) = self else {
            return Ok(());
        };
        if key.tenant_id != tenant_id {
            return Err(AuthError::TenantMismatch);
        }
        if !key.has(p) {
            return Err(AuthError::PermissionDenied(p.as_str()));
        }
        if org_only && key.scope_level != super::ScopeLevel::Organization {
            return Err(AuthError::ScopeDenied(
                "this call needs an organization-level API key".into(),
            ));
        }
        Ok(())
    }

    /// The identity recorded for this operator's actions.
    pub fn identity(&self) -> String {
        match self {
            Operator::Admin => "admin".to_string(),
            Operator::Key(k) => k.key_id.clone(),
        }
    }
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = crate::api::ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        core: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let presented = presented_credential(&parts.headers).ok_or(AuthError::Missing)?;
        if ct_eq(presented, &core.admin_token) {
            return Ok(Operator::Admin);
        }
        Ok(Operator::Key(admit_key(core, presented)?))
    }
}

/// How an event batch was authenticated.
#[derive(Debug, Clone)]
pub enum IngestAuth {
    /// The dedicated ingest token: any one tenant per batch.
    Token,
    /// A runtime key with `execute`: its own tenant only.
    Key(Caller),
}

impl IngestAuth {
    /// The tenant the batch must belong to; `None` for the ingest token.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            IngestAuth::Token => None,
            IngestAuth::Key(c) => Some(c.tenant()),
        }
    }
}

impl FromRequestParts<AppState> for IngestAuth {
    type Rejection = crate::api::ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        core: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let (Some(expected), Some(given)) = (
            &core.config.event_ingest_token,
            parts.headers.get(INGEST_TOKEN_HEADER),
        ) {
            let given = given.to_str().unwrap_or("");
            return if ct_eq(given, expected) {
                Ok(IngestAuth::Token)
            } else {
                Err(AuthError::Invalid.into())
            };
        }
        let caller = Caller::from_request_parts(parts, core).await?;
        caller.require(Permission::Execute)?;
        Ok(IngestAuth::Key(caller))
    }
}
