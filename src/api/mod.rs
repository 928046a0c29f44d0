//! The admin HTTP API ({base_url}, SPEC.md "Endpoints"), one file per resource:
//!
//! | method | path | handler |
//! |---|---|---|
//! | POST | /v1/enforce | [`enforce::enforce`] |
//! | GET | /v1/enforce/hold/{hold_token} | [`holds::poll`] |
//! | POST | /v1/explain | [`explain::create`] |
//! | GET | /v1/explain/{violation_id}?tenant_id= | [`explain::get`] |
//! | POST | /v1/events/batch | [`events::batch`] |
//! | GET | /v1/health | [`health::health`] |
//!
//! Unknown paths answer 404 and wrong methods 405, both with a `{"detail": ...}` body.

pub mod enforce;
pub mod error;
pub mod events;
pub mod explain;
pub mod health;
pub mod holds;
pub mod json;

pub use error::ApiError;
pub use json::{ApiJson, BodyLimit, JsonBytes};

use crate::state::AppState;
use axum::routing::{get, post};
use axum::{Extension, Router};

/// The /v1 router over `core`; testable without a socket (`tower::ServiceExt::oneshot`).
pub fn router(core: AppState) -> Router {
    let limit = BodyLimit(core.config.max_body_bytes);
    Router::new()
        .route("/v1/enforce", post(enforce::enforce))
        .route("/v1/enforce/hold/{hold_token}", get(holds::poll))
        .route("/v1/explain", post(explain::create))
        .route("/v1/explain/{violation_id}", get(explain::get))
        .route("/v1/events/batch", post(events::batch))
        .route("/v1/health", get(health::health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(Extension(limit))
        .with_state(core)
}

/// 404 for unknown paths, in the `{"detail": ...}` shape.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such endpoint".into())
}

/// 405 for a known path with the wrong method, in the `{"detail": ...}` shape.
pub async fn method_not_allowed() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(serde_json::json!({"detail": "method not allowed for this endpoint"})),
    )
        .into_response()
}
