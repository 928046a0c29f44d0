//! Registration and check-ins: `POST /endpoints` once (and again whenever the control plane
//! answers a check-in with 404), then `POST /endpoints/<endpoint_id>/checkin` every
//! `checkin_interval_seconds` with the proxy version and today's activity. Failures are logged
//! (once per change of error) and retried at the next tick; they never stop the sidecar.

use super::client::{CpClient, LinkError};
use super::LinkStatus;
use crate::state::AppState;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::watch;

/// This build's version, reported as `proxy_version`.
pub const PROXY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs until shutdown.
pub async fn run(
    core: AppState,
    client: CpClient,
    status: std::sync::Arc<LinkStatus>,
    stop: watch::Receiver<bool>,
) {
    let every = Duration::from_secs(core.config.checkin_interval_seconds);
    let mut registered = false;
    let mut rounds = super::Rounds::new(every, stop);
    while rounds.next().await {
        let result = once(&core, &client, &mut registered).await;
        status.note("checkin", result.as_ref().err().map(|e| e.to_string()));
    }
}

async fn once(core: &AppState, client: &CpClient, registered: &mut bool) -> Result<(), LinkError> {
    if !*registered {
        register(core, client).await?;
        *registered = true;
    }
    match checkin(core, client).await {
        Err(LinkError::Status { status: 404, .. }) => {
            register(core, client).await?;
            checkin(core, client).await
        }
        other => other,
    }
}

fn endpoint_id(core: &AppState) -> String {
    core.config.endpoint_id.clone().unwrap_or_default()
}

async fn register(core: &AppState, client: &CpClient) -> Result<(), LinkError> {
    let activity = core.activity.summary();
    let body = json!({
        "endpoint_id": endpoint_id(core),
        "hostname": hostname(),
        "proxy_version": PROXY_VERSION,
        "agent_ids": activity.agent_ids,
    });
    let _: Value = client.post_json("/endpoints", &body).await?;
    tracing::info!(endpoint_id = %endpoint_id(core), "registered with the control plane");
    Ok(())
}

async fn checkin(core: &AppState, client: &CpClient) -> Result<(), LinkError> {
    let a = core.activity.summary();
    let body = json!({
        "proxy_version": PROXY_VERSION,
        "agent_ids": a.agent_ids,
        "risk_score": a.risk_score,
        "violations_today": a.violations_today,
        "sessions_today": a.sessions_today,
    });
    let path = format!("/endpoints/{}/checkin", endpoint_id(core));
    let _: Value = client.post_json(&path, &body).await?;
    Ok(())
}

/// The host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else empty).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}
