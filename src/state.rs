//! `Core`: the shared state every listener's handlers read (`Arc<Core>` is the axum state).

use crate::auth::{KeyStore, RateLimits};
use crate::config::Config;
use crate::explain::Explainer;
use crate::holds::HoldBook;
use crate::ledger::{Ingestor, Ledger, ReceiptLog};
use crate::policy::PolicyHandle;
use crate::sessions::SessionUsage;
use crate::store::Store;
use std::sync::Arc;

/// Everything a request may need. Built once by `app::build`.
pub struct Core {
    /// Resolved configuration.
    pub config: Config,
    /// The database.
    pub store: Store,
    /// The current policy snapshot.
    pub policy: PolicyHandle,
    /// API keys.
    pub keys: KeyStore,
    /// Per-key rate limits.
    pub limits: RateLimits,
    /// STEP_UP holds.
    pub holds: Arc<HoldBook>,
    /// Signed, hash-chained receipts.
    pub receipts: Arc<ReceiptLog>,
    /// The event ledger.
    pub ledger: Ledger,
    /// Event batch validation and replay protection.
    pub ingestor: Ingestor,
    /// Explanations.
    pub explainer: Explainer,
    /// Per-session spend.
    pub sessions: SessionUsage,
    /// Control-plane administrator token (from env, or generated into the data dir).
    pub admin_token: String,
    /// Control plane: registered endpoints and their check-ins.
    pub endpoints: crate::control_plane::endpoints::Endpoints,
    /// Control plane: tenant webhooks and the durable delivery queue (approval callbacks).
    pub webhooks: Arc<crate::control_plane::webhooks::Webhooks>,
    /// Ledger shipping status (sidecar with a control plane configured; None otherwise).
    pub shipping: Option<Arc<crate::link::shipper::ShipStatus>>,
    /// Control plane: holds relayed by remote sidecars.
    pub relay: crate::control_plane::sync::relay::Relay,
    /// False while a linked sidecar has never received a policy bundle: decisions then fail
    /// closed (503 / refused calls) instead of using a pack the control plane never sent.
    pub policy_ready: std::sync::atomic::AtomicBool,
    /// Link task outcomes (a sidecar with a control plane configured; None otherwise).
    pub link: Option<Arc<crate::link::LinkStatus>>,
    /// Today's agents, sessions, violations and risk (check-ins report them).
    pub activity: crate::link::activity::Activity,
}

/// The axum state type.
pub type AppState = Arc<Core>;
