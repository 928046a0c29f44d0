//! Routes sidecars use to stay in sync with their control plane (`/{tenant_id}/service/sync/...`).
pub mod bundle;
pub mod events;
pub mod holds;
pub mod relay;

use crate::state::AppState;
use axum::routing::{get, post};
use axum::Router;

/// The sidecar-facing routes of the lead's link (policy and key sync, hold relay):
///
/// | method | path | handler |
/// |---|---|---|
/// | GET | /{tenant_id}/service/sync/policy | [`bundle::policy`] |
/// | GET | /{tenant_id}/service/sync/keys | [`bundle::keys`] |
/// | POST | /{tenant_id}/service/sync/holds | [`holds::report`] |
/// | GET | /{tenant_id}/service/sync/holds/resolutions | [`holds::resolutions`] |
/// | POST | /{tenant_id}/service/sync/holds/ack | [`holds::ack`] |
pub fn link_routes(router: Router<AppState>) -> Router<AppState> {
    router
        .route("/{tenant_id}/service/sync/policy", get(bundle::policy))
        .route("/{tenant_id}/service/sync/keys", get(bundle::keys))
        .route("/{tenant_id}/service/sync/holds", post(holds::report))
        .route(
            "/{tenant_id}/service/sync/holds/resolutions",
            get(holds::resolutions),
        )
        .route("/{tenant_id}/service/sync/holds/ack", post(holds::ack))
}
