//! The sidecar's side of the hold relay: every hold created or resolved here is reported to the
//! control plane (`POST /sync/holds`; all pending holds once at start and after a lag), and a
//! long-poll (`GET /sync/holds/resolutions?wait_seconds=25`) brings back decisions made there,
//! which are applied locally (terminal receipt, waiters woken) and acknowledged. A decision
//! made on the control plane reaches the held call within the long-poll's round trip.

use super::client::{CpClient, LinkError};
use super::LinkStatus;
use crate::control_plane::sync::relay::RelayResolution;
use crate::holds::{HoldError, HoldEvent, HoldRecord, Resolution};
use crate::state::AppState;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

/// Long-poll time asked of the control plane, seconds.
const LONG_POLL_SECONDS: u64 = 25;
/// Backoff after a failed call.
const RETRY: Duration = Duration::from_secs(1);

/// Reports local holds. Runs until shutdown.
pub async fn report(
    core: AppState,
    client: CpClient,
    status: Arc<LinkStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let mut events = core.holds.subscribe();
    let mut backlog: Vec<HoldRecord> = pending(&core, &client);
    loop {
        if !backlog.is_empty() {
            match send(&core, &client, &backlog).await {
                Ok(()) => backlog.clear(),
                Err(e) => {
                    status.note("relay", Some(e.to_string()));
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY) => continue,
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }
            status.note("relay", None);
        }
        let event = tokio::select! {
            e = events.recv() => e,
            _ = stop.wait_for(|s| *s) => return,
        };
        match event {
            Ok(HoldEvent::Created(h)) | Ok(HoldEvent::Resolved(h)) => backlog.push(h),
            Err(RecvError::Lagged(_)) => backlog = pending(&core, &client),
            Err(RecvError::Closed) => return,
        }
    }
}

fn pending(core: &AppState, client: &CpClient) -> Vec<HoldRecord> {
    core.holds.pending_for(client.tenant()).unwrap_or_default()
}

async fn send(core: &AppState, client: &CpClient, holds: &[HoldRecord]) -> Result<(), LinkError> {
    let body = json!({ "endpoint_id": core.config.endpoint_id, "holds": holds });
    let _: Value = client.post_json("/sync/holds", &body).await?;
    Ok(())
}

#[derive(Deserialize)]
struct Resolutions {
    resolutions: Vec<RelayResolution>,
}

/// Applies decisions made on the control plane. Runs until shutdown.
pub async fn apply(
    core: AppState,
    client: CpClient,
    status: Arc<LinkStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let endpoint = core.config.endpoint_id.clone().unwrap_or_default();
    let path = format!(
        "/sync/holds/resolutions?endpoint_id={}&wait_seconds={LONG_POLL_SECONDS}",
        urlencode(&endpoint)
    );
    let timeout = Duration::from_secs(LONG_POLL_SECONDS + 10);
    loop {
        let polled = tokio::select! {
            r = client.get_json::<Resolutions>(&path, Some(timeout)) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        let result = match polled {
            Ok(r) => settle(&core, &client, &endpoint, r.resolutions).await,
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            status.note("relay", Some(e.to_string()));
            tokio::select! {
                _ = tokio::time::sleep(RETRY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

async fn settle(
    core: &AppState,
    client: &CpClient,
    endpoint: &str,
    found: Vec<RelayResolution>,
) -> Result<(), LinkError> {
    if found.is_empty() {
        return Ok(());
    }
    let mut applied = Vec::new();
    for r in found {
        let how = if r.decision == "approve" {
            Resolution::Approve {
                approver: r.approver,
                reason: r.reason,
            }
        } else {
            Resolution::Deny {
                approver: r.approver,
                reason: r.reason,
            }
        };
        match core
            .holds
            .resolve(&r.hold_token, Some(client.tenant()), how)
            .await
        {
            Ok(_) | Err(HoldError::AlreadyResolved { .. }) | Err(HoldError::NotFound) => {
                applied.push(r.hold_token)
            }
            Err(e) => {
                tracing::error!(hold = %r.hold_token, error = %e, "could not apply a control-plane decision")
            }
        }
    }
    let body = json!({ "endpoint_id": endpoint, "hold_tokens": applied });
    let _: Value = client.post_json("/sync/holds/ack", &body).await?;
    Ok(())
}

/// Percent-encodes a query value (unreserved characters pass).
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
