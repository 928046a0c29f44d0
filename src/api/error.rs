//! The one place that maps errors to HTTP responses: every error body is `{"detail": "..."}`
//! (SPEC.md, "Errors"), with the status SPEC.md's error table gives.
//!
//! | variant | status |
//! |---|---|
//! | BadRequest (malformed JSON, wrong Content-Type, malformed event) | 400 |
//! | Unauthorized (missing / invalid / revoked / expired key) | 401 |
//! | Forbidden (valid key, insufficient permission or scope; another caller's hold) | 403 |
//! | NotFound | 404 |
//! | Conflict (a hold resolved twice) | 409 |
//! | PayloadTooLarge | 413 |
//! | Unprocessable (schema validation, naming the field) | 422 |
//! | RateLimited (with `Retry-After: <seconds>`) | 429 |
//! | Internal (storage failure; details logged, not returned) | 500 |
//! | Unavailable (dependency or configuration failure) | 503 |
//! | ProxyAuthRequired (forward proxy: missing or bad `Proxy-Authorization`; with `Proxy-Authenticate`) | 407 |
//! | BadGateway (forward proxy: the upstream cannot be reached or failed) | 502 |
//! | GatewayTimeout (forward proxy: no upstream response in time) | 504 |

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// An error answered to an HTTP client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400.
    #[error("{0}")]
    BadRequest(String),
    /// 401.
    #[error("{0}")]
    Unauthorized(String),
    /// 403.
    #[error("{0}")]
    Forbidden(String),
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 409.
    #[error("{0}")]
    Conflict(String),
    /// 413.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 422.
    #[error("{0}")]
    Unprocessable(String),
    /// 429; `retry_after_secs` goes into the Retry-After header.
    #[error("rate limit exceeded; retry after {retry_after_secs} s")]
    RateLimited {
        /// Whole seconds until a request would be admitted (at least 1).
        retry_after_secs: u64,
    },
    /// 500. The message is logged; the client sees a generic text.
    #[error("{0}")]
    Internal(String),
    /// 503.
    #[error("{0}")]
    Unavailable(String),
    /// 407 with `Proxy-Authenticate: Basic realm="toolgate"` (forward proxy only).
    #[error("{0}")]
    ProxyAuthRequired(String),
    /// 502 (forward proxy only).
    #[error("{0}")]
    BadGateway(String),
    /// 504 (forward proxy only).
    #[error("{0}")]
    GatewayTimeout(String),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::ProxyAuthRequired(_) => StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let detail = match &self {
            ApiError::Internal(msg) => {
                tracing::error!(error = %msg, "internal error");
                "internal server error; retry with exponential backoff".to_string()
            }
            other => other.to_string(),
        };
        let mut resp = (status, Json(json!({ "detail": detail }))).into_response();
        if let ApiError::RateLimited { retry_after_secs } = self {
            resp.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs.max(1)),
            );
        }
        if status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
            resp.headers_mut().insert(
                header::PROXY_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"toolgate\""),
            );
        }
        resp
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

impl From<crate::auth::AuthError> for ApiError {
    fn from(e: crate::auth::AuthError) -> Self {
        use crate::auth::AuthError as E;
        match e {
            E::Missing | E::Invalid | E::Revoked | E::Expired => {
                ApiError::Unauthorized(e.to_string())
            }
            E::PermissionDenied(_) | E::ScopeDenied(_) | E::TenantMismatch => {
                ApiError::Forbidden(e.to_string())
            }
            E::BadKeyRequest(_) => ApiError::Unprocessable(e.to_string()),
            E::UnknownKey => ApiError::NotFound(e.to_string()),
            E::RateLimited { retry_after_secs } => ApiError::RateLimited { retry_after_secs },
            E::Store(s) => s.into(),
        }
    }
}

impl From<crate::holds::HoldError> for ApiError {
    fn from(e: crate::holds::HoldError) -> Self {
        use crate::holds::HoldError as E;
        match e {
            E::NotFound => ApiError::NotFound(e.to_string()),
            E::OtherCaller => ApiError::Forbidden(e.to_string()),
            E::AlreadyResolved { .. } => ApiError::Conflict(e.to_string()),
            E::TooManyPending(_) => ApiError::Unavailable(e.to_string()),
            E::BadApproval(_) => ApiError::Unprocessable(e.to_string()),
            E::Store(s) => s.into(),
            E::Ledger(l) => l.into(),
        }
    }
}

impl From<crate::ledger::LedgerError> for ApiError {
    fn from(e: crate::ledger::LedgerError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

impl From<crate::ledger::IngestError> for ApiError {
    fn from(e: crate::ledger::IngestError) -> Self {
        use crate::ledger::IngestError as E;
        match e {
            E::Forbidden(_) => ApiError::Forbidden(e.to_string()),
            E::Ledger(l) => l.into(),
            other => ApiError::BadRequest(other.to_string()),
        }
    }
}

impl From<crate::explain::ExplainError> for ApiError {
    fn from(e: crate::explain::ExplainError) -> Self {
        use crate::explain::ExplainError as E;
        match e {
            E::NotFound => ApiError::NotFound(e.to_string()),
            E::Invalid(_) => ApiError::Unprocessable(e.to_string()),
            E::Store(s) => s.into(),
            E::Template(_) => ApiError::Internal(e.to_string()),
        }
    }
}
