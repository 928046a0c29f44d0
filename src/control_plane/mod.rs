//! The control plane ({control_plane_url}/<tenant_id>/service/...): API keys and approvals.
//!
//! | method | path | handler |
//! |---|---|---|
//! | POST | /{tenant_id}/service/api-keys | [`keys::create`] |
//! | GET | /{tenant_id}/service/api-keys | [`keys::list`] |
//! | DELETE | /{tenant_id}/service/api-keys/{key_id} | [`keys::revoke`] |
//! | POST | /{tenant_id}/service/api-keys/{key_id}/authorize | [`keys::authorize`] |
//! | GET | /{tenant_id}/service/approvals?status=pending | [`approvals::list`] |
//! | POST | /{tenant_id}/service/approvals/{hold_token}/approve | [`approvals::approve`] |
//! | POST | /{tenant_id}/service/approvals/{hold_token}/deny | [`approvals::deny`] |
//! | POST | /{tenant_id}/service/endpoints | [`endpoints::register`] |
//! | GET | /{tenant_id}/service/endpoints | [`endpoints::list`] |
//! | POST | /{tenant_id}/service/endpoints/{endpoint_id}/checkin | [`endpoints::check_in`] |
//! | GET | /{tenant_id}/service/alerts | [`alerts::list`] |
//! | GET | /{tenant_id}/service/governance/feed | [`feed::feed`] |
//! | PUT, GET, DELETE | /{tenant_id}/service/settings/webhook | [`settings`] |
//! | POST | /{tenant_id}/service/settings/webhook/test | [`settings::test_webhook`] |
//! | GET, POST | /{tenant_id}/service/sync/... | sidecar link: [`sync::link_routes`] |
//! | POST, GET | /{tenant_id}/service/sync/events | ledger shipping: [`sync::events`] |
//!
//! Authentication: `Authorization: Bearer <admin token>`, or an API key (`X-API-Key` or bearer)
//! of the path's tenant — organization-level for key management, any scope for approvals.

pub mod alerts;
pub mod approvals;
pub mod endpoints;
pub mod feed;
pub mod keys;
pub mod settings;
pub mod sync;
pub mod webhooks;

use crate::api::{method_not_allowed, not_found, BodyLimit};
use crate::state::AppState;
use axum::routing::{delete, get, post, put};
use axum::{Extension, Router};

/// The control-plane router over `core`.
pub fn router(core: AppState) -> Router {
    let limit = BodyLimit(core.config.max_body_bytes);
    sync::link_routes(Router::new())
        .route("/{tenant_id}/service/sync/events", sync::events::route())
        .route(
            "/{tenant_id}/service/api-keys",
            post(keys::create).get(keys::list),
        )
        .route(
            "/{tenant_id}/service/api-keys/{key_id}",
            delete(keys::revoke),
        )
        .route(
            "/{tenant_id}/service/api-keys/{key_id}/authorize",
            post(keys::authorize),
        )
        .route("/{tenant_id}/service/approvals", get(approvals::list))
        .route(
            "/{tenant_id}/service/endpoints",
            post(endpoints::register).get(endpoints::list),
        )
        .route(
            "/{tenant_id}/service/endpoints/{endpoint_id}/checkin",
            post(endpoints::check_in),
        )
        .route("/{tenant_id}/service/alerts", get(alerts::list))
        .route("/{tenant_id}/service/governance/feed", get(feed::feed))
        .route(
            "/{tenant_id}/service/settings/webhook",
            put(settings::put_webhook)
                .get(settings::get_webhook)
                .delete(settings::delete_webhook),
        )
        .route(
            "/{tenant_id}/service/settings/webhook/test",
            post(settings::test_webhook),
        )
        .route(
            "/{tenant_id}/service/approvals/{hold_token}/approve",
            post(approvals::approve),
        )
        .route(
            "/{tenant_id}/service/approvals/{hold_token}/deny",
            post(approvals::deny),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(Extension(limit))
        .with_state(core)
}
