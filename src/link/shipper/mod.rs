//! Ledger shipping, sidecar side (DESIGN.md "Evidence"; docs/ledger.md "Shipping"): the durable
//! outbox is the local hash-chained ledger plus a cursor. Entries with seq > cursor are
//! unshipped; the cursor only moves after the control plane answered 2xx to a shipment holding
//! them, and is flushed then. Delivery is at least once; the control plane stores each event
//! once (`control_plane::sync::events`, dedupe by `event_id`).
//!
//! The task (spawned by `app::build` for `serve` with a control plane configured):
//!
//! 1. reads up to `ship_batch_size` entries after the cursor (and at most [`MAX_BODY_BYTES`] of
//!    JSON) on a blocking thread;
//! 2. POSTs them to `/{tenant}/service/sync/events`, keeping [`IN_FLIGHT`] shipments on their
//!    way (the next batch is read and sent while the previous one is being stored);
//! 3. takes the answers in order; on 2xx stores and flushes the cursor (`Meta` key
//!    [`CURSOR_KEY`]); when caught up it sleeps on
//!    [`Ledger::appended`](crate::ledger::Ledger::appended) and the shutdown watch, never on a
//!    timer;
//! 4. on failure records `last_error` and backs off: retryable failures (unreachable, 5xx, 429)
//!    with full jitter, uniformly in `[0, min(30 s, 0.5 s · 2^(failures-1))]`; other answers
//!    (4xx) log an error and wait the maximum (30 s) — nothing is skipped. A 413 halves the batch
//!    (down to one entry) and retries at once; it doubles back after each success. After any
//!    failure the shipments still on their way are dropped and shipping resumes at the cursor
//!    (the control plane counts what it already had as duplicates).
//!
//! Entries of a tenant other than the link's cannot be stored by this control plane (it would
//! refuse the whole shipment): they are not sent, the cursor passes them, and they are counted in
//! `skipped` (stored with the cursor, shown on /v1/health) and logged.

mod send;
mod status;
#[cfg(test)]
mod tests;

pub use status::{Cursor, ShipStatus};

use crate::link::CpClient;
use crate::state::AppState;
use send::Shipper;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `Meta` key of the cursor ([`Cursor`] as JSON).
pub const CURSOR_KEY: &[u8] = b"link/shipped_seq";
/// Control-plane path of shipments.
pub const SHIP_PATH: &str = "/sync/events";
/// A shipment stops growing past this many bytes of entry JSON (it always holds one entry).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Shipments on their way at once (the next one is read and sent while one is answered).
pub const IN_FLIGHT: usize = 3;
/// First retry delay bound.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Largest retry delay (and the wait after a non-retryable answer).
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Starts the shipper when the link is configured (`Core::shipping` is set and the client can
/// be built). The task ends soon after `shutdown` turns true; join it before releasing storage.
pub fn spawn(core: &AppState, shutdown: watch::Receiver<bool>) -> Option<JoinHandle<()>> {
    let status = core.shipping.clone()?;
    let endpoint = core.config.endpoint_id.clone()?;
    let client = match CpClient::new(&core.config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "ledger shipping disabled: no control-plane client");
            status.failed(e.to_string());
            return None;
        }
    };
    let shipper = Shipper {
        core: core.clone(),
        status,
        client,
        endpoint: endpoint.into(),
    };
    Some(tokio::spawn(shipper.run(shutdown)))
}
